//go:build unix

package robustness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testsupport/faultproxy"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// Patroni is a Patroni cluster of the suite's own: one etcd and Members
// PostgreSQL servers, each run by a Patroni of its own, all on loopback
// ports chosen when it starts.
//
// Every member is reached by the others only through fault proxies of its
// own: its PostgreSQL (streaming replication and the other members' checks)
// through PGProxy, its REST API through RESTProxy, and etcd, for that
// member's Patroni, through EtcdProxy. Cutting the three cuts the member
// off from etcd and from the other members, while a client that connects to
// its PostgreSQL directly (PGPort), as idemd does, still reaches it: a
// network partition with the client on the member's side.
type Patroni struct {
	Dir      string
	Scope    string
	Password string // of the postgres superuser
	Sync     bool   // synchronous_mode at bootstrap
	Members  []*PatroniMember

	owner    *syscall.Credential
	etcd     *exec.Cmd
	etcdDone chan struct{}
	etcdAddr string
	proxies  []*faultproxy.Proxy
}

// PatroniMember is one member: a Patroni process and the PostgreSQL it runs.
type PatroniMember struct {
	Name string
	Dir  string
	// PGPort is where its PostgreSQL listens; RESTAddr its REST API.
	PGPort   int
	RESTAddr string
	// The proxies through which the rest of the cluster reaches it.
	PGProxy, RESTProxy, EtcdProxy *faultproxy.Proxy

	conf   string
	owner  *syscall.Credential
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Patroni's timing: the leader key lives ttl seconds unless renewed, every
// loop_wait; retry_timeout bounds a DCS or PostgreSQL operation before the
// leader demotes itself. Patroni wants ttl >= loop_wait + 2*retry_timeout.
const (
	patroniTTL          = 10
	patroniLoopWait     = 1
	patroniRetryTimeout = 4
)

// StartPatroni starts etcd and n members in a new directory under dir, with
// synchronous_mode set to sync, and waits until the cluster is healthy
// (HealthyWithin). Patroni and etcd are installed from Debian's packages
// (patroni, etcd-server) when they are missing and this process may.
func StartPatroni(dir string, n int, sync bool) (*Patroni, error) {
	patroniBin, err := testdb.NeedCommand("patroni", "patroni")
	if err != nil {
		return nil, fmt.Errorf("the Patroni scenarios need Patroni: %w", err)
	}
	if _, err := testdb.NeedCommand("patronictl", "patroni"); err != nil {
		return nil, fmt.Errorf("the Patroni scenarios need patronictl: %w", err)
	}
	etcdBin, err := testdb.NeedCommand("etcd", "etcd-server")
	if err != nil {
		return nil, fmt.Errorf("the Patroni scenarios need etcd: %w", err)
	}
	pgBin, err := testdb.ServerBinDir()
	if err != nil {
		return nil, err
	}
	owner, err := testdb.ClusterOwner()
	if err != nil {
		return nil, err
	}
	reapStalePatroni(dir)
	root, err := os.MkdirTemp(dir, patroniDirPrefix)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	var pw [12]byte
	_, _ = rand.Read(pw[:])
	p := &Patroni{Dir: root, Scope: "idem-robustness", Password: hex.EncodeToString(pw[:]), Sync: sync, owner: owner}
	if err := p.chown(root); err != nil {
		return nil, err
	}
	if err := p.startEtcd(etcdBin); err != nil {
		p.Remove()
		return nil, err
	}
	for i := range n {
		m, err := p.newMember(fmt.Sprintf("m%d", i), pgBin)
		if err != nil {
			p.Remove()
			return nil, err
		}
		p.Members = append(p.Members, m)
	}
	for _, m := range p.Members {
		if err := m.start(patroniBin); err != nil {
			p.Remove()
			return nil, err
		}
	}
	if err := p.HealthyWithin(3 * time.Minute); err != nil {
		p.Remove()
		return nil, err
	}
	return p, nil
}

func (p *Patroni) chown(path string) error {
	if p.owner == nil {
		return nil
	}
	return os.Chown(path, int(p.owner.Uid), int(p.owner.Gid))
}

func (p *Patroni) proxy(target string) (*faultproxy.Proxy, error) {
	px, err := faultproxy.Start(target)
	if err != nil {
		return nil, err
	}
	p.proxies = append(p.proxies, px)
	return px, nil
}

func (p *Patroni) startEtcd(bin string) error {
	client, err := freeAddr()
	if err != nil {
		return err
	}
	peer, err := freeAddr()
	if err != nil {
		return err
	}
	dir := filepath.Join(p.Dir, "etcd")
	logf, err := os.Create(filepath.Join(p.Dir, "etcd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--name", "e0", "--data-dir", dir,
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "e0=http://"+peer, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	p.etcd, p.etcdAddr, p.etcdDone = cmd, client, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.etcdDone) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + client + "/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.etcdDone:
			return fmt.Errorf("etcd exited at start: %s", tailFile(logf.Name()))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd did not answer on %s within 60s: %s", client, tailFile(logf.Name()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *Patroni) newMember(name, pgBin string) (*PatroniMember, error) {
	m := &PatroniMember{Name: name, Dir: filepath.Join(p.Dir, name), owner: p.owner}
	if err := os.Mkdir(m.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := p.chown(m.Dir); err != nil {
		return nil, err
	}
	pgAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(pgAddr)
	m.PGPort, _ = strconv.Atoi(port)
	if m.RESTAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if m.PGProxy, err = p.proxy(pgAddr); err != nil {
		return nil, err
	}
	if m.RESTProxy, err = p.proxy(m.RESTAddr); err != nil {
		return nil, err
	}
	if m.EtcdProxy, err = p.proxy(p.etcdAddr); err != nil {
		return nil, err
	}
	m.conf = filepath.Join(m.Dir, "patroni.yml")
	if err := os.WriteFile(m.conf, []byte(p.memberConf(m, pgAddr, pgBin)), 0o600); err != nil {
		return nil, err
	}
	return m, p.chown(m.conf)
}

// memberConf is a member's patroni.yml. Streaming replication and the
// other members' checks go through the member's proxies (the connect
// addresses); the member reaches etcd through its own proxy alone
// (use_proxies: Patroni would otherwise learn etcd's own address from etcd
// and go around it).
func (p *Patroni) memberConf(m *PatroniMember, pgAddr, pgBin string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`scope: %s
name: %s
log:
  dir: %s
  level: INFO
restapi:
  listen: %s
  connect_address: %s
etcd3:
  hosts: %s
  use_proxies: true
bootstrap:
  dcs:
    ttl: %d
    loop_wait: %d
    retry_timeout: %d
    maximum_lag_on_failover: 16777216
    synchronous_mode: %t
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
        wal_keep_size: 256MB
        max_connections: 60
        shared_buffers: 16MB
        synchronous_commit: "on"
        fsync: "on"
        full_page_writes: "on"
  initdb:
    - encoding: UTF8
    - locale: C
    - data-checksums
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 scram-sha-256
    - host all all 127.0.0.1/32 scram-sha-256
postgresql:
  listen: %s
  connect_address: %s
  data_dir: %s
  bin_dir: %s
  pgpass: %s
  authentication:
    superuser: {username: postgres, password: %s}
    replication: {username: replicator, password: %s}
    rewind: {username: rewinder, password: %s}
  parameters:
    unix_socket_directories: %s
`, p.Scope, m.Name, q(m.Dir), m.RESTAddr, m.RESTProxy.Addr(), m.EtcdProxy.Addr(),
		patroniTTL, patroniLoopWait, patroniRetryTimeout, p.Sync,
		pgAddr, m.PGProxy.Addr(), q(filepath.Join(m.Dir, "data")), q(pgBin), q(filepath.Join(m.Dir, "pgpass")),
		p.Password, p.Password, p.Password, q(m.Dir))
}

// start starts the member's Patroni, which starts (and, the first time,
// creates) its PostgreSQL.
func (m *PatroniMember) start(bin string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("patroni %s runs", m.Name)
	}
	logf, err := os.OpenFile(filepath.Join(m.Dir, "patroni.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, m.conf)
	cmd.Dir = m.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "HOME="+m.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: m.owner, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start patroni %s: %w", m.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.cmd, m.exited = cmd, exited
	return nil
}

// Restart starts the member's Patroni again after Kill.
func (m *PatroniMember) Restart() error {
	bin, err := exec.LookPath("patroni")
	if err != nil {
		return err
	}
	return m.start(bin)
}

// Kill sends SIGKILL to the member's Patroni and then to its PostgreSQL
// and every process that one started, as a machine that dies would.
func (m *PatroniMember) Kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.exited
		m.cmd = nil
	}
	err := testdb.KillPostmaster(filepath.Join(m.Dir, "data"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // no postmaster runs
	}
	return err
}

// Running reports whether the member's Patroni runs.
func (m *PatroniMember) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// Isolate cuts the member off from etcd and from the other members; its
// PostgreSQL stays reachable on PGPort.
func (m *PatroniMember) Isolate() {
	m.EtcdProxy.Cut()
	m.RESTProxy.Cut()
	m.PGProxy.Cut()
}

// Rejoin undoes Isolate.
func (m *PatroniMember) Rejoin() {
	m.EtcdProxy.Restore()
	m.RESTProxy.Restore()
	m.PGProxy.Restore()
}

// Log is the end of the member's Patroni log, for a failure message.
func (m *PatroniMember) Log() string { return tailFile(filepath.Join(m.Dir, "patroni.log")) }

// PatroniState is one member as Patroni's REST API reports it (GET /cluster).
type PatroniState struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, sync_standby, replica
	State    string `json:"state"` // running, streaming, starting, stopped, …
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"` // a number of bytes, or "unknown"
}

// State asks the members' REST APIs (directly, past the proxies) for the
// cluster's members, from the first that answers with a leader and
// otherwise from the first that answers at all.
func (p *Patroni) State() ([]PatroniState, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	var last []PatroniState
	lastErr := errors.New("no member's REST API answered")
	for _, m := range p.Members {
		resp, err := client.Get("http://" + m.RESTAddr + "/cluster")
		if err != nil {
			lastErr = err
			continue
		}
		var body struct {
			Members []PatroniState `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		for _, s := range body.Members {
			if s.Role == "leader" && s.State == "running" {
				return body.Members, nil
			}
		}
		last, lastErr = body.Members, nil
	}
	return last, lastErr
}

// Leader returns the member that leads now, as its own PostgreSQL says:
// the one that is not in recovery, among those Patroni lists as leader.
func (p *Patroni) Leader() (*PatroniMember, error) {
	states, err := p.State()
	if err != nil {
		return nil, err
	}
	for _, s := range states {
		if s.Role == "leader" && s.State == "running" {
			return p.member(s.Name), nil
		}
	}
	return nil, fmt.Errorf("no leader: %s", describeStates(states))
}

// SyncStandby returns the member Patroni lists as the synchronous standby,
// nil when there is none.
func (p *Patroni) SyncStandby() *PatroniMember {
	states, _ := p.State()
	for _, s := range states {
		if s.Role == "sync_standby" && (s.State == "running" || s.State == "streaming") {
			return p.member(s.Name)
		}
	}
	return nil
}

func (p *Patroni) member(name string) *PatroniMember {
	for _, m := range p.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

func describeStates(states []PatroniState) string {
	var parts []string
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%s %s %s tl=%d lag=%v", s.Name, s.Role, s.State, s.Timeline, s.Lag))
	}
	if len(parts) == 0 {
		return "no members"
	}
	return strings.Join(parts, "; ")
}

// HealthyWithin waits until every member runs: one leader, every other one
// a replica with no lag on the leader's timeline, and with synchronous_mode
// a synchronous standby among them.
func (p *Patroni) HealthyWithin(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var why string
	for {
		states, err := p.State()
		why = describeStates(states)
		if err != nil {
			why = err.Error()
		}
		if err == nil && p.healthy(states) {
			return nil
		}
		if time.Now().After(deadline) {
			var logs []string
			for _, m := range p.Members {
				logs = append(logs, m.Name+": "+m.Log())
			}
			return fmt.Errorf("the Patroni cluster is not healthy after %s (%s); logs: %s", timeout, why, strings.Join(logs, " || "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (p *Patroni) healthy(states []PatroniState) bool {
	if len(states) != len(p.Members) {
		return false
	}
	leaders, syncs, timeline := 0, 0, -1
	for _, s := range states {
		if s.Role == "leader" && s.State == "running" {
			leaders++
			timeline = s.Timeline
		}
	}
	if leaders != 1 {
		return false
	}
	for _, s := range states {
		if s.Role == "leader" {
			continue
		}
		if s.State != "running" && s.State != "streaming" {
			return false
		}
		if lag, ok := s.Lag.(float64); !ok || lag != 0 || s.Timeline != timeline {
			return false
		}
		if s.Role == "sync_standby" {
			syncs++
		}
	}
	return !p.Sync || syncs == 1
}

// patronictl runs patronictl with a member's configuration.
func (p *Patroni) patronictl(m *PatroniMember, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "patronictl", append([]string{"-c", m.conf}, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "HOME="+m.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("patronictl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Switchover asks Patroni for a planned switchover from the leader to
// candidate (patronictl switchover --force), and returns once patronictl
// does: Patroni has stopped the old leader and promoted the candidate.
func (p *Patroni) Switchover(leader, candidate *PatroniMember) error {
	out, err := p.patronictl(leader, "switchover", p.Scope, "--leader", leader.Name, "--candidate", candidate.Name, "--force")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Successfully switched over") {
		return fmt.Errorf("patronictl switchover: %s", strings.TrimSpace(out))
	}
	return nil
}

// SetSynchronousMode changes synchronous_mode in the cluster's dynamic
// configuration (patronictl edit-config) and waits until the cluster is
// healthy in that mode.
func (p *Patroni) SetSynchronousMode(sync bool) error {
	if _, err := p.patronictl(p.Members[0], "edit-config", p.Scope, "--force", "--quiet",
		"--set", fmt.Sprintf("synchronous_mode=%t", sync)); err != nil {
		return err
	}
	p.Sync = sync
	deadline := time.Now().Add(60 * time.Second)
	for {
		states, err := p.State()
		syncs := 0
		for _, s := range states {
			if s.Role == "sync_standby" {
				syncs++
			}
		}
		if err == nil && (syncs > 0) == sync {
			return p.HealthyWithin(2 * time.Minute)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("synchronous_mode=%t: the cluster still reports %d synchronous standbys after 60s (%s)", sync, syncs, describeStates(states))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// URL is a multi-host URL of database db on every member's PostgreSQL,
// directly, for a client that must find the leader by itself:
// target_session_attrs=read-write.
func (p *Patroni) URL(db string) string {
	hosts := make([]string, len(p.Members))
	for i, m := range p.Members {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(m.PGPort)
	}
	return fmt.Sprintf("postgres://postgres:%s@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		url.QueryEscape(p.Password), strings.Join(hosts, ","), db)
}

// CreateDatabase creates database db on the leader.
func (p *Patroni) CreateDatabase(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the Patroni cluster's leader: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()); err != nil {
		return err
	}
	if _, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return err
	}
	// pgx stops trying the hosts of a multi-host URL at the first that says
	// the database does not exist: wait until every replica has replayed it.
	for _, m := range p.Members {
		u := fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", url.QueryEscape(p.Password), m.PGPort)
		for {
			var found bool
			c, err := pgx.Connect(ctx, u)
			if err == nil {
				err = c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&found)
				c.Close(context.WithoutCancel(ctx))
			}
			if err == nil && found {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("database %s is not on member %s: %v", db, m.Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// Remove kills every member and etcd, stops the proxies and deletes the
// cluster's directory.
func (p *Patroni) Remove() {
	for _, m := range p.Members {
		_ = m.Kill()
	}
	if p.etcd != nil {
		_ = p.etcd.Process.Signal(syscall.SIGKILL)
		<-p.etcdDone
	}
	for _, px := range p.proxies {
		px.Close()
	}
	_ = os.RemoveAll(p.Dir)
}

// patroniDirPrefix names the directories of the suite's Patroni clusters.
const patroniDirPrefix = "idem-patroni-"

// reapStalePatroni removes the clusters that a test binary which died
// without its cleanup (a timeout's panic, a kill) left under dir: its
// Patroni and etcd died with it, but not the PostgreSQL servers Patroni
// started.
func reapStalePatroni(dir string) {
	if dir == "" {
		dir = os.TempDir()
	}
	roots, _ := filepath.Glob(filepath.Join(dir, patroniDirPrefix+"*"))
	for _, root := range roots {
		b, err := os.ReadFile(filepath.Join(root, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		datas, _ := filepath.Glob(filepath.Join(root, "m*", "data"))
		for _, data := range datas {
			_ = testdb.KillPostmaster(data)
		}
		_ = os.RemoveAll(root)
	}
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}
