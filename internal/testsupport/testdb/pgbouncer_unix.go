//go:build unix

package testdb

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PgBouncer is a PgBouncer process of a test's own, in front of a
// PostgreSQL, on a free loopback port that it keeps across restarts. Its
// databases are aliases, each logging in to the server as a user of its
// own (AddDatabase): the settings a pooler keeps for its clients are that
// user's (ALTER ROLE … SET), as in production. Clients may log in as
// anybody (auth_type = any).
type PgBouncer struct {
	// Addr is where it listens, host:port.
	Addr string
	// Mode is its pool_mode: session or transaction.
	Mode string
	Dir  string

	bin        string
	owner      *syscall.Credential
	host, port string
	mu         sync.Mutex
	databases  map[string]string // alias → its connection string
	cmd        *exec.Cmd
	exited     chan struct{}
}

// StartPgBouncer starts PgBouncer (installing Debian's pgbouncer where it is
// missing and this process may) in pool_mode mode in front of the server
// that serverURL names, with no databases yet. Close stops it and deletes
// its directory.
func StartPgBouncer(serverURL, mode string) (*PgBouncer, error) {
	if mode != "session" && mode != "transaction" {
		return nil, fmt.Errorf("pgbouncer: pool_mode %q: want session or transaction", mode)
	}
	bin, err := NeedCommand("pgbouncer", "pgbouncer")
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: server URL: %w", err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	if strings.Contains(host, ",") || strings.Contains(u.Host, ",") {
		return nil, errors.New("pgbouncer: the server URL must name one host")
	}
	// PgBouncer refuses to run as root.
	owner, err := clusterOwner()
	if err != nil {
		return nil, err
	}
	dir, err := newClusterDir(owner)
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{Mode: mode, Dir: dir, bin: bin, owner: owner, host: host, port: port, databases: map[string]string{}}
	for attempt := 0; ; attempt++ {
		p, err := freePort()
		if err != nil {
			b.Close()
			return nil, err
		}
		b.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		if err = b.writeConfig(); err == nil {
			err = b.Start()
		}
		if err == nil {
			return b, nil
		}
		if attempt == 4 {
			b.Close()
			return nil, err
		}
	}
}

// AddDatabase adds the alias name for database dbname on the server,
// logging in as user with password, with at most poolSize server
// connections, and reloads PgBouncer's configuration.
func (b *PgBouncer) AddDatabase(name, dbname, user, password string, poolSize int) error {
	b.mu.Lock()
	b.databases[name] = fmt.Sprintf("host=%s port=%s dbname=%s user=%s password=%s pool_size=%d",
		b.host, b.port, dbname, user, password, poolSize)
	err := b.writeConfigLocked()
	cmd := b.cmd
	b.mu.Unlock()
	if err != nil {
		return err
	}
	if cmd == nil {
		return nil // read when it starts
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("pgbouncer: reload: %w", err)
	}
	// A client that comes before PgBouncer has read the new configuration
	// is refused: wait until one gets through.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(b.URL(name), 5*time.Second)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer did not take database %s within 10s: %v; its log: %s", name, err, b.Log(name))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL connects to the database alias name through PgBouncer.
func (b *PgBouncer) URL(name string) string {
	return fmt.Sprintf("postgres://idem@%s/%s?sslmode=disable", b.Addr, name)
}

func (b *PgBouncer) logPath() string { return filepath.Join(b.Dir, "pgbouncer.log") }

func (b *PgBouncer) writeConfig() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.writeConfigLocked()
}

// writeConfigLocked writes pgbouncer.ini. Idle server connections close
// after a few seconds, so that the test's share of the server's connection
// slots is given back soon after its clients leave.
func (b *PgBouncer) writeConfigLocked() error {
	var s strings.Builder
	s.WriteString("[databases]\n")
	names := make([]string, 0, len(b.databases))
	for n := range b.databases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&s, "%s = %s\n", n, b.databases[n])
	}
	host, port, _ := net.SplitHostPort(b.Addr)
	fmt.Fprintf(&s, `
[pgbouncer]
listen_addr = %s
listen_port = %s
unix_socket_dir =
auth_type = any
pool_mode = %s
max_client_conn = 500
default_pool_size = 4
server_idle_timeout = 3
server_connect_timeout = 3
server_login_retry = 1
query_wait_timeout = 30
logfile = %s
pidfile = %s
`, host, port, b.Mode, b.logPath(), filepath.Join(b.Dir, "pgbouncer.pid"))
	// A reload that read a half-written file would take it for the
	// configuration: write a new one and rename it into place.
	path := filepath.Join(b.Dir, "pgbouncer.ini")
	if err := os.WriteFile(path+".new", []byte(s.String()), 0o600); err != nil {
		return err
	}
	if b.owner != nil {
		if err := os.Chown(path+".new", int(b.owner.Uid), int(b.owner.Gid)); err != nil {
			return err
		}
	}
	return os.Rename(path+".new", path)
}

// Start starts PgBouncer (again, after Kill) and waits until it accepts
// connections.
func (b *PgBouncer) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		return errors.New("pgbouncer runs")
	}
	cmd := exec.Command(b.bin, "-q", filepath.Join(b.Dir, "pgbouncer.ini"))
	cmd.Dir = b.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: b.owner, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start pgbouncer: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.cmd, b.exited = cmd, exited
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			b.cmd = nil
			return fmt.Errorf("pgbouncer exited at start: %s", tail(b.logPath()))
		default:
		}
		if c, err := net.DialTimeout("tcp", b.Addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			b.cmd = nil
			return fmt.Errorf("pgbouncer did not listen on %s within 30s: %s", b.Addr, tail(b.logPath()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL to PgBouncer and waits until it is gone: every client
// connection through it breaks.
func (b *PgBouncer) Kill() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return nil
	}
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.exited
	b.cmd = nil
	return nil
}

// Running reports whether PgBouncer runs.
func (b *PgBouncer) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd != nil
}

// Log returns the end of PgBouncer's log, for a failure message: its last
// lines that mention database, or the last lines of all with "".
func (b *PgBouncer) Log(database string) string {
	if database == "" {
		return tail(b.logPath())
	}
	data, err := os.ReadFile(b.logPath())
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, database) {
			lines = append(lines, l)
		}
	}
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, " | ")
}

// Close stops PgBouncer and deletes its directory.
func (b *PgBouncer) Close() {
	_ = b.Kill()
	_ = os.RemoveAll(b.Dir)
}
