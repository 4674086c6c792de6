//go:build unix

package testdb

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cluster is a PostgreSQL cluster that one test owns outright: unlike the
// shared database of BaseURL, it may be restarted, killed and failed over.
// It is started the way the throwaway cluster is (initdb and pg_ctl, loopback
// only, a random password), but with synchronous_commit on, so that a commit
// it acknowledges survives a crash of its processes.
type Cluster struct {
	// URL connects to its postgres database.
	URL string
	// Port is the loopback port it listens on; it keeps it across restarts.
	Port int
	// Dir holds data/ and postgres.log.
	Dir      string
	password string
	bin      string
	owner    *syscall.Credential
}

// clusterConf is appended to every Cluster's postgresql.conf. The shared
// throwaway cluster turns synchronous_commit and full_page_writes off for
// speed; a cluster that is crashed on purpose needs them.
const clusterConf = "\n# idem's test cluster for faults\n" +
	"synchronous_commit = on\nfull_page_writes = on\n"

// NewCluster starts a cluster of its own in a new temporary directory, with
// conf (postgresql.conf lines) added. Remove stops and deletes it.
func NewCluster(conf ...string) (*Cluster, error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	owner, err := clusterOwner()
	if err != nil {
		return nil, err
	}
	cdir, err := newClusterDir(owner)
	if err != nil {
		return nil, err
	}
	st, err := initCluster(cdir, bin, owner)
	if err != nil {
		reapCluster(cdir)
		return nil, err
	}
	c := &Cluster{URL: st.URL, Dir: cdir, bin: bin, owner: owner}
	u, err := url.Parse(st.URL)
	if err == nil {
		c.password, _ = u.User.Password()
		c.Port, err = strconv.Atoi(u.Port())
	}
	if err != nil {
		reapCluster(cdir)
		return nil, err
	}
	if err := c.appendConf(clusterConf + strings.Join(conf, "\n") + "\n"); err != nil {
		reapCluster(cdir)
		return nil, err
	}
	if err := c.pgCtl("reload"); err != nil {
		reapCluster(cdir)
		return nil, err
	}
	return c, nil
}

// newClusterDir makes a directory for one cluster, reachable by its owner.
func newClusterDir(owner *syscall.Credential) (string, error) {
	cdir, err := os.MkdirTemp("", "idem-pgcluster-")
	if err != nil {
		return "", err
	}
	if owner != nil {
		if err := os.Chown(cdir, int(owner.Uid), int(owner.Gid)); err != nil {
			os.RemoveAll(cdir)
			return "", err
		}
	}
	return cdir, nil
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

func (c *Cluster) appendConf(lines string) error {
	f, err := os.OpenFile(filepath.Join(c.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(lines)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (c *Cluster) pgCtl(args ...string) error {
	return runAs(c.owner, c.Dir, "pg_ctl.log", filepath.Join(c.bin, "pg_ctl"), append([]string{"-D", c.data()}, args...)...)
}

// Start starts the stopped or killed cluster on its port and waits until it
// accepts connections (a standby's read-only ones count).
func (c *Cluster) Start() error {
	if err := c.pgCtl("-l", filepath.Join(c.Dir, "postgres.log"), "-w", "-t", "60", "-o", "-p "+strconv.Itoa(c.Port), "start"); err != nil {
		return fmt.Errorf("%w; postgres.log: %s", err, tail(filepath.Join(c.Dir, "postgres.log")))
	}
	return nil
}

// Stop stops the cluster with pg_ctl's mode: "immediate" is a crash without
// the crash (no checkpoint; recovery replays WAL on the next start).
func (c *Cluster) Stop(mode string) error {
	return c.pgCtl("-m", mode, "-w", "-t", "60", "stop")
}

// Kill sends SIGKILL to the postmaster and every process it started, as a
// machine that dies would, and waits until they are gone.
func (c *Cluster) Kill() error { return KillPostmaster(c.data()) }

// KillPostmaster sends SIGKILL to the postmaster of the data directory data
// and to every process it started, and waits until they are gone: for
// clusters that a test did not start through Cluster (Patroni's).
func KillPostmaster(data string) error {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("kill: postmaster.pid: %w", err)
	}
	victims := append([]int{pid}, childrenOf(pid)...)
	for _, p := range victims {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range victims {
		for syscall.Kill(p, 0) == nil && !zombie(p) {
			if time.Now().After(deadline) {
				return fmt.Errorf("kill: process %d still runs after SIGKILL", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(p); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// parentOf reads a process's parent from /proc/PID/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// Standby makes a streaming standby of c with pg_basebackup, named name
// (its application_name, for synchronous_standby_names), with conf added,
// and starts it on a port of its own. It streams from upstream (host:port;
// empty: c's own address), so that a test can put a proxy in between and
// cut replication.
func (c *Cluster) Standby(name, upstream string, conf ...string) (*Cluster, error) {
	sdir, err := newClusterDir(c.owner)
	if err != nil {
		return nil, err
	}
	s := &Cluster{Dir: sdir, password: c.password, bin: c.bin, owner: c.owner}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s", c.Port, c.password)
	if err := runAs(c.owner, sdir, "pg_basebackup.log", filepath.Join(c.bin, "pg_basebackup"),
		"-D", s.data(), "-d", conninfo, "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		reapCluster(sdir)
		return nil, err
	}
	if upstream != "" {
		host, port, err := net.SplitHostPort(upstream)
		if err != nil {
			reapCluster(sdir)
			return nil, err
		}
		conninfo = fmt.Sprintf("host=%s port=%s user=postgres password=%s", host, port, c.password)
	}
	// A standby promoted with the primary's synchronous_standby_names would
	// wait forever for a standby of its own: it has none.
	lines := fmt.Sprintf("\n# standby of port %d\nprimary_conninfo = '%s application_name=%s'\nsynchronous_standby_names = ''\n%s\n",
		c.Port, conninfo, name, strings.Join(conf, "\n"))
	if err := s.appendConf(lines); err != nil {
		reapCluster(sdir)
		return nil, err
	}
	signal := filepath.Join(s.data(), "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		reapCluster(sdir)
		return nil, err
	}
	if c.owner != nil {
		if err := os.Chown(signal, int(c.owner.Uid), int(c.owner.Gid)); err != nil {
			reapCluster(sdir)
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		if s.Port, err = freePort(); err != nil {
			reapCluster(sdir)
			return nil, err
		}
		if err = s.Start(); err == nil {
			break
		}
		if attempt == 4 {
			reapCluster(sdir)
			return nil, err
		}
	}
	s.URL = fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", c.password, s.Port)
	return s, nil
}

// Promote makes a standby the primary and waits until it accepts writes.
func (c *Cluster) Promote() error {
	return c.pgCtl("-w", "-t", "60", "promote")
}

// Log returns the last lines of the cluster's postgres.log, for a failure
// message.
func (c *Cluster) Log() string { return tail(filepath.Join(c.Dir, "postgres.log")) }

// Remove stops the cluster, if it runs, and deletes its directory.
func (c *Cluster) Remove() {
	reapCluster(c.Dir)
}

// MultiHostURL is a URL naming several clusters, for a client that must find
// the one that accepts writes: target_session_attrs=read-write.
func MultiHostURL(password string, ports ...int) string {
	hosts := make([]string, len(ports))
	for i, p := range ports {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable&target_session_attrs=read-write",
		url.QueryEscape(password), strings.Join(hosts, ","))
}

// Password is the postgres user's password of the cluster (and of its
// standbys).
func (c *Cluster) Password() string { return c.password }

// ServerBinDir returns the directory of PostgreSQL's server binaries
// (postgres, initdb, pg_ctl, pg_rewind), found as for the throwaway cluster.
func ServerBinDir() (string, error) { return findBinDir() }

// ClusterOwner is the user PostgreSQL's processes must run as: nil for this
// process's own user, the postgres user when this process is root (the
// server refuses to run as root).
func ClusterOwner() (*syscall.Credential, error) { return clusterOwner() }
