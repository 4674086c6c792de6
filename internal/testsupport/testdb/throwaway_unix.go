//go:build unix

package testdb

// The shared throwaway cluster.
//
// Its state lives in one directory per user (EnvStateDir, by default
// $TMPDIR/idem-testpg-<uid>):
//
//	control.lock   held exclusively, briefly, by whoever reads or changes the state
//	inuse.lock     held shared by every process that uses the cluster, until it exits;
//	               the kernel drops a flock when its process dies, kill -9 included
//	state.json     the running cluster: its URL and directory
//	cluster-N/     one cluster: data/, postgres.log, bindir, supervisor.{lock,pid,log}
//
// The first test binary to find no running cluster starts one under
// control.lock, takes inuse.lock shared, and starts a supervisor: the test
// binary itself run again with IDEM_TESTDB_SUPERVISE set, in a session of its
// own, so that it outlives the test binary and a Ctrl-C of `go test`. The
// supervisor holds cluster-N/supervisor.lock while it lives and four times a
// second takes control.lock and tries inuse.lock exclusively without waiting.
// When that succeeds for the linger time (EnvLinger) in a row, nobody has used
// the cluster for that long: it stops the cluster, removes its directory and
// state.json, and exits.
//
// A test binary that finds state.json reuses the cluster while it answers.
// If its supervisor is dead (its lock is free), killed along with an earlier
// run say, the binary starts a new supervisor for it: the cluster may be in
// use, and it is removed once it is not. A cluster that does not answer is
// reaped (stopped, removed) and a new one started; so is any cluster-N that
// state.json does not name, the remains of a crash.
//
// initdb and pg_ctl refuse to run as root: when the tests run as root, the
// cluster belongs to the postgres user (its directory is chowned to it, the
// state directory is 0711 so that it can reach it), and the tools run with
// its credentials. The cluster listens on a free loopback port only (no Unix
// socket, whose path could be too long), with scram-sha-256 and a random
// password, and with fsync off: it is thrown away.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const superviseEnv = "IDEM_TESTDB_SUPERVISE"

// defaultLinger keeps the cluster across the gaps between the packages of one
// `go test ./...`, which build and start one after another.
const defaultLinger = 15 * time.Second

func init() {
	if dir := os.Getenv(superviseEnv); dir != "" {
		os.Exit(supervise(dir))
	}
}

type clusterState struct {
	URL    string `json:"url"`
	Dir    string `json:"dir"`
	BinDir string `json:"bin_dir"`
}

// inUse is this process's shared lock on inuse.lock, held until it exits:
// never read, only kept open.
var inUse *os.File //nolint:unused // written to keep the lock's file open

func throwaway() (string, error) {
	dir, err := stateDir()
	if err != nil {
		return "", err
	}
	ctl, err := lockFile(filepath.Join(dir, "control.lock"), syscall.LOCK_EX)
	if err != nil {
		return "", err
	}
	defer ctl.Close()

	if st, _ := readState(dir); st != nil && ping(st.URL, 5*time.Second) == nil {
		if err := holdInUse(dir); err != nil {
			return "", err
		}
		if held(filepath.Join(st.Dir, "supervisor.lock")) {
			return st.URL, nil
		}
		// Its supervisor died (killed with an earlier run, say), and other
		// test binaries may still be using it: adopt it.
		return st.URL, startSupervisor(st)
	}
	reapAll(dir)
	st, err := startCluster(dir)
	if err != nil {
		return "", err
	}
	if err := holdInUse(dir); err != nil {
		reapAll(dir)
		return "", err
	}
	if err := startSupervisor(st); err != nil {
		reapAll(dir)
		return "", err
	}
	return st.URL, nil
}

// stateDir returns the per-user state directory, creating it, and refuses
// one that another user made (a shared TMPDIR).
func stateDir() (string, error) {
	dir := os.Getenv(EnvStateDir)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("idem-testpg-%d", os.Geteuid()))
	}
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o711 // the postgres user must reach its cluster inside
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return "", fmt.Errorf("state directory for the throwaway cluster: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("%s is not a directory of this user: remove it or set %s", dir, EnvStateDir)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return "", err
	}
	return dir, nil
}

func holdInUse(dir string) error {
	f, err := lockFile(filepath.Join(dir, "inuse.lock"), syscall.LOCK_SH)
	if err != nil {
		return err
	}
	inUse = f
	return nil
}

// startCluster runs initdb and pg_ctl start in a new cluster-N directory and
// records it in state.json.
func startCluster(dir string) (*clusterState, error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	owner, err := clusterOwner()
	if err != nil {
		return nil, err
	}
	cdir, err := os.MkdirTemp(dir, "cluster-")
	if err != nil {
		return nil, err
	}
	st, err := initCluster(cdir, bin, owner)
	if err != nil {
		reapCluster(cdir)
		return nil, err
	}
	if err := writeState(dir, st); err != nil {
		reapCluster(cdir)
		return nil, err
	}
	return st, nil
}

func initCluster(cdir, bin string, owner *syscall.Credential) (*clusterState, error) {
	if err := os.WriteFile(filepath.Join(cdir, "bindir"), []byte(bin), 0o600); err != nil {
		return nil, err
	}
	var pw [16]byte
	_, _ = rand.Read(pw[:])
	password := hex.EncodeToString(pw[:])
	pwfile := filepath.Join(cdir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if owner != nil {
		for _, p := range []string{cdir, pwfile} {
			if err := os.Chown(p, int(owner.Uid), int(owner.Gid)); err != nil {
				return nil, err
			}
		}
	}
	data := filepath.Join(cdir, "data")
	if err := runAs(owner, cdir, "initdb.log", filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile="+pwfile, "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	_ = os.Remove(pwfile)
	conf, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = conf.WriteString("\n# idem's throwaway test cluster\n" +
		"listen_addresses = '127.0.0.1'\n" +
		"unix_socket_directories = ''\n" +
		"max_connections = 200\n" +
		"fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
	if cerr := conf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}

	// A free port can be taken between choosing it and the postmaster's
	// bind: try a few.
	var port int
	for attempt := 0; ; attempt++ {
		if port, err = freePort(); err != nil {
			return nil, err
		}
		err = runAs(owner, cdir, "pg_ctl.log", filepath.Join(bin, "pg_ctl"), "-D", data, "-l", filepath.Join(cdir, "postgres.log"),
			"-w", "-t", "60", "-o", "-p "+strconv.Itoa(port), "start")
		if err == nil {
			break
		}
		if attempt == 4 {
			return nil, fmt.Errorf("%w; postgres.log: %s", err, tail(filepath.Join(cdir, "postgres.log")))
		}
	}
	st := &clusterState{
		URL:    fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", password, port),
		Dir:    cdir,
		BinDir: bin,
	}
	if err := ping(st.URL, 10*time.Second); err != nil {
		return nil, fmt.Errorf("the throwaway cluster started but does not answer: %v", err)
	}
	return st, nil
}

// startSupervisor runs this binary again as the cluster's supervisor and
// waits until it holds its lock.
func startSupervisor(st *clusterState) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(st.Dir, "supervisor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), superviseEnv+"="+st.Dir)
	cmd.Dir = filepath.Dir(st.Dir)
	// Not the test's stdout: `go test` waits for it to close.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the throwaway cluster's supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(10 * time.Second)
	for !held(filepath.Join(st.Dir, "supervisor.lock")) {
		select {
		case err := <-exited:
			return fmt.Errorf("the throwaway cluster's supervisor exited at once (%v): %s", err, tail(filepath.Join(st.Dir, "supervisor.log")))
		case <-deadline:
			return errors.New("the throwaway cluster's supervisor did not start within 10s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// supervise is the supervisor's life: see the comment at the top of the file.
func supervise(cdir string) int {
	dir := filepath.Dir(cdir)
	lock, err := lockFile(filepath.Join(cdir, "supervisor.lock"), syscall.LOCK_EX|syscall.LOCK_NB)
	if err != nil {
		fmt.Fprintln(os.Stderr, "supervisor lock:", err)
		return 1
	}
	defer lock.Close()
	_ = os.WriteFile(filepath.Join(cdir, "supervisor.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600)
	linger := defaultLinger
	if v := os.Getenv(EnvLinger); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			linger = d
		}
	}
	var idleSince time.Time
	for {
		time.Sleep(250 * time.Millisecond)
		ctl, err := lockFile(filepath.Join(dir, "control.lock"), syscall.LOCK_EX)
		if err != nil {
			fmt.Fprintln(os.Stderr, "control lock:", err)
			return 1
		}
		if st, _ := readState(dir); st == nil || st.Dir != cdir {
			ctl.Close() // reaped by a test binary that found this cluster dead
			return 0
		}
		idle, err := lockFile(filepath.Join(dir, "inuse.lock"), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			idleSince = time.Time{}
		} else {
			if idleSince.IsZero() {
				idleSince = time.Now()
			}
			if time.Since(idleSince) >= linger {
				_ = os.Remove(filepath.Join(dir, "state.json"))
				reapCluster(cdir)
				idle.Close()
				ctl.Close()
				return 0
			}
			idle.Close()
		}
		ctl.Close()
	}
}

// reapAll removes state.json and stops and removes every cluster in dir.
// The caller holds control.lock.
func reapAll(dir string) {
	_ = os.Remove(filepath.Join(dir, "state.json"))
	clusters, _ := filepath.Glob(filepath.Join(dir, "cluster-*"))
	for _, c := range clusters {
		reapCluster(c)
	}
}

// reapCluster stops the cluster in cdir, if it runs, and removes cdir. Should
// the stop fail, the postmaster still shuts itself down within a minute once
// its postmaster.pid is gone.
func reapCluster(cdir string) {
	data := filepath.Join(cdir, "data")
	if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
		bin, err := os.ReadFile(filepath.Join(cdir, "bindir"))
		if err != nil || len(bin) == 0 {
			b, ferr := findBinDir()
			bin = []byte(b)
			err = ferr
		}
		if err == nil {
			var owner *syscall.Credential
			if fi, err := os.Stat(data); err == nil && os.Geteuid() == 0 {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
					owner = &syscall.Credential{Uid: st.Uid, Gid: st.Gid}
				}
			}
			_ = runAs(owner, cdir, "pg_ctl.log", filepath.Join(string(bin), "pg_ctl"), "-D", data, "-m", "immediate", "-w", "-t", "20", "stop")
		}
	}
	_ = os.RemoveAll(cdir)
}

// runAs runs a PostgreSQL tool as owner (nil: this process's user) in dir,
// appending its output to dir/logName.
func runAs(owner *syscall.Credential, dir, logName, name string, args ...string) error {
	logf, err := os.OpenFile(filepath.Join(dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: owner}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", filepath.Base(name), args[len(args)-1], err, tail(logf.Name()))
	}
	return nil
}

// clusterOwner is the user the cluster runs as: nil for this process's own
// user, the postgres user when this process is root.
func clusterOwner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("the tests run as root, initdb refuses to, and there is no postgres user to run it as: " +
			"create one (useradd --system postgres) or run the tests as another user")
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("the postgres user's ids %q/%q are not numbers", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// binDirGlobs are where PostgreSQL's server binaries usually are when they
// are not on PATH, newest version first after sorting.
var binDirGlobs = []string{
	"/usr/lib/postgresql/*/bin",          // Debian, Ubuntu
	"/usr/pgsql-*/bin",                   // RHEL, Fedora (PGDG)
	"/usr/local/pgsql/bin",               // built from source
	"/opt/homebrew/opt/postgresql@*/bin", // Homebrew on Apple silicon
	"/usr/local/opt/postgresql@*/bin",    // Homebrew on Intel
	"/Applications/Postgres.app/Contents/Versions/*/bin",
}

// findBinDir returns a directory holding initdb and pg_ctl.
func findBinDir() (string, error) {
	usable := func(d string) bool {
		for _, tool := range []string{"initdb", "pg_ctl"} {
			fi, err := os.Stat(filepath.Join(d, tool))
			if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if d := os.Getenv(EnvPGBinDir); d != "" {
		if usable(d) {
			return d, nil
		}
		return "", fmt.Errorf("%s=%s holds no initdb and pg_ctl", EnvPGBinDir, d)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		// Debian links them into PATH from the versioned directory, where
		// the postgres binary they start lives too.
		if real, err := filepath.EvalSymlinks(p); err == nil && usable(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if usable(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	var found []string
	for _, g := range binDirGlobs {
		m, _ := filepath.Glob(g)
		found = append(found, m...)
	}
	sort.SliceStable(found, func(i, j int) bool { return versionOf(found[i]) > versionOf(found[j]) })
	for _, d := range found {
		if usable(d) {
			return d, nil
		}
	}
	return "", errors.New("initdb and pg_ctl are neither on PATH nor under " + strings.Join(binDirGlobs, ", "))
}

// versionOf returns the first number in path, so that 15 sorts above 9.6.
func versionOf(path string) int {
	start := strings.IndexAny(path, "0123456789")
	if start < 0 {
		return 0
	}
	end := start
	for end < len(path) && path[end] >= '0' && path[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(path[start:end])
	return n
}

func freePort() (int, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port, nil
}

// lockFile opens path, creating it, and flocks it with how.
func lockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// held reports whether some process holds a lock on path.
func held(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK)
}

func readState(dir string) (*clusterState, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var st clusterState
	if err := json.Unmarshal(b, &st); err != nil || st.URL == "" || st.Dir == "" {
		return nil, fmt.Errorf("state.json does not parse: %v", err)
	}
	return &st, nil
}

func writeState(dir string, st *clusterState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}

// tail returns the last lines of a log file, on one line, for an error.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "(no log)"
		}
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
