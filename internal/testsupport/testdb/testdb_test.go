//go:build unix

package testdb

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The throwaway tests run this test binary again as children, each a test
// binary that calls New the way every package's tests do, with its own state
// directory so that they never touch the cluster the rest of the run shares.
const (
	childOutEnv  = "IDEM_TESTDB_CHILD_OUT"  // where the child writes its cluster's data directory
	childHoldEnv = "IDEM_TESTDB_CHILD_HOLD" // the child waits until this file exists
)

// TestThrowawayChild is the child: it runs only when a test below starts it.
func TestThrowawayChild(t *testing.T) {
	out := os.Getenv(childOutEnv)
	if out == "" {
		t.Skip("runs only as the child of the throwaway tests")
	}
	db := New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, lease_expires_at, retention, created_at, updated_at)
		VALUES ('default', 'ns', 'k', 'processing', nextval('idem_token_seq'), 1, now(), interval '1 hour', now(), now())`); err != nil {
		t.Fatalf("the migrated schema does not take a record: %v", err)
	}
	var dataDir string
	if err := db.Pool.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out+".tmp", []byte(dataDir), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		t.Fatal(err)
	}
	if hold := os.Getenv(childHoldEnv); hold != "" {
		waitUntil(t, 2*time.Minute, "the parent releases the child", func() bool { _, err := os.Stat(hold); return err == nil })
	}
}

type child struct {
	cmd    *exec.Cmd
	out    string
	output strings.Builder
	done   chan error
}

// startChild starts the child test with a private state directory, a database
// URL that points nowhere and the throwaway cluster forced.
func startChild(t *testing.T, stateDir, linger, hold string, extraEnv ...string) *child {
	t.Helper()
	c := &child{out: filepath.Join(t.TempDir(), "data_directory"), done: make(chan error, 1)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestThrowawayChild$", "-test.count=1", "-test.v")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_TEST") {
			env = append(env, kv)
		}
	}
	c.cmd.Env = append(env,
		EnvForceThrowaway+"=1",
		EnvDatabaseURL+"=postgres://nobody@127.0.0.1:1/nowhere?connect_timeout=1",
		EnvStateDir+"="+stateDir,
		EnvLinger+"="+linger,
		childOutEnv+"="+c.out,
		childHoldEnv+"="+hold,
	)
	c.cmd.Env = append(c.cmd.Env, extraEnv...)
	c.cmd.Stdout, c.cmd.Stderr = &c.output, &c.output
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	return c
}

// dataDir waits for the child to report its cluster's data directory.
func (c *child) dataDir(t *testing.T) string {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		if b, err := os.ReadFile(c.out); err == nil {
			return string(b)
		}
		select {
		case err := <-c.done:
			if b, rerr := os.ReadFile(c.out); rerr == nil {
				c.done <- err
				return string(b)
			}
			t.Fatalf("the child exited (%v) without a cluster:\n%s", err, c.output.String())
		case <-deadline:
			t.Fatalf("the child did not get a cluster within 2 minutes:\n%s", c.output.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *child) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("the child failed: %v\n%s", err, c.output.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the child did not finish:\n%s", c.output.String())
	}
}

// newStateDir returns a state directory for one test's clusters, and stops
// whatever is left in it when the test ends.
func newStateDir(t *testing.T) string {
	t.Helper()
	// Not t.TempDir: its parent is 0700, and the cluster's owner (the
	// postgres user, when the tests run as root) must reach inside.
	base, err := os.MkdirTemp("", "idem-testdb-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "state")
	t.Cleanup(func() {
		reapAll(dir)
		_ = os.RemoveAll(base)
	})
	return dir
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func gone(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, os.ErrNotExist)
}

// TestThrowawayClusterIsSharedAndRemovedAfterItsLastUser: with the database
// URL pointing nowhere, two test binaries at once get one cluster between
// them, and it is stopped and removed once the last has exited.
func TestThrowawayClusterIsSharedAndRemovedAfterItsLastUser(t *testing.T) {
	t.Parallel()
	if _, err := findBinDir(); err != nil {
		t.Fatalf("this machine has no PostgreSQL server binaries to test the throwaway cluster with: %v", err)
	}
	stateDir := newStateDir(t)
	hold := filepath.Join(t.TempDir(), "release")
	first := startChild(t, stateDir, "500ms", hold)
	firstData := first.dataDir(t)

	second := startChild(t, stateDir, "500ms", "")
	secondData := second.dataDir(t)
	second.wait(t)
	if secondData != firstData {
		t.Fatalf("the second test binary got its own cluster (%s) instead of sharing %s", secondData, firstData)
	}
	st, err := readState(stateDir)
	if err != nil {
		t.Fatalf("no state.json while the cluster runs: %v", err)
	}
	if !strings.HasPrefix(firstData, st.Dir) {
		t.Fatalf("state.json names %s; the children used %s", st.Dir, firstData)
	}
	// The second has exited; the first still uses it: the cluster stays.
	time.Sleep(1500 * time.Millisecond)
	if err := ping(st.URL, 5*time.Second); err != nil {
		t.Fatalf("the cluster went away while a test binary still used it: %v", err)
	}

	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	first.wait(t)
	waitUntil(t, 30*time.Second, "the cluster is removed", func() bool {
		return gone(st.Dir) && gone(filepath.Join(stateDir, "state.json"))
	})
	if err := ping(st.URL, 2*time.Second); err == nil {
		t.Fatal("the cluster still answers after its directory was removed")
	}
}

// TestThrowawayClusterOfADeadSupervisorIsAdopted: a cluster whose
// supervisor was killed (with the rest of an interrupted run) is reused by
// the next test binary, which gives it a new supervisor, and is removed after
// its last user all the same.
func TestThrowawayClusterOfADeadSupervisorIsAdopted(t *testing.T) {
	t.Parallel()
	if _, err := findBinDir(); err != nil {
		t.Fatalf("this machine has no PostgreSQL server binaries to test the throwaway cluster with: %v", err)
	}
	stateDir := newStateDir(t)
	hold := filepath.Join(t.TempDir(), "release")
	first := startChild(t, stateDir, "10m", hold)
	firstData := first.dataDir(t)
	st, err := readState(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	killSupervisor(t, st.Dir)
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	first.wait(t)
	if gone(st.Dir) {
		t.Fatal("the cluster was removed without its supervisor; this test needs it left behind")
	}

	next := startChild(t, stateDir, "500ms", "")
	if nextData := next.dataDir(t); nextData != firstData {
		t.Fatalf("the next test binary started %s instead of adopting %s", nextData, firstData)
	}
	next.wait(t)
	waitUntil(t, 30*time.Second, "the adopted cluster is removed after its last user", func() bool {
		return gone(st.Dir) && gone(filepath.Join(stateDir, "state.json"))
	})
	if err := ping(st.URL, 2*time.Second); err == nil {
		t.Fatal("the adopted cluster still answers after its directory was removed")
	}
}

// TestThrowawayClusterThatDiedIsReplaced: a cluster whose postmaster died is
// reaped by the next test binary, which starts a fresh one; the dead
// cluster's supervisor leaves.
func TestThrowawayClusterThatDiedIsReplaced(t *testing.T) {
	t.Parallel()
	if _, err := findBinDir(); err != nil {
		t.Fatalf("this machine has no PostgreSQL server binaries to test the throwaway cluster with: %v", err)
	}
	stateDir := newStateDir(t)
	first := startChild(t, stateDir, "10m", "")
	firstData := first.dataDir(t)
	first.wait(t)
	old, err := readState(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	// Kept open, so that the supervisor's lock can be probed after the
	// cluster's directory, the lock file with it, is removed.
	supervisorLock, err := os.Open(filepath.Join(old.Dir, "supervisor.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer supervisorLock.Close()
	pidFile, err := os.ReadFile(filepath.Join(firstData, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the postmaster %d: %v", pid, err)
	}
	waitUntil(t, 10*time.Second, "the killed cluster stops answering", func() bool { return ping(old.URL, time.Second) != nil })

	next := startChild(t, stateDir, "500ms", "")
	nextData := next.dataDir(t)
	next.wait(t)
	if nextData == firstData {
		t.Fatalf("the next test binary used %s, whose postmaster was dead", firstData)
	}
	if !gone(old.Dir) {
		t.Fatalf("the dead cluster %s is still there", old.Dir)
	}
	waitUntil(t, 10*time.Second, "the dead cluster's supervisor leaves", func() bool {
		return syscall.Flock(int(supervisorLock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
	})
	waitUntil(t, 30*time.Second, "the fresh cluster is removed after its user", func() bool {
		return gone(filepath.Join(stateDir, "state.json")) && gone(filepath.Dir(nextData))
	})
}

// killSupervisor kills the supervisor of the cluster in cdir with SIGKILL and
// waits until its lock is free.
func killSupervisor(t *testing.T, cdir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cdir, "supervisor.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the supervisor %d: %v", pid, err)
	}
	waitUntil(t, 10*time.Second, "the supervisor's lock is free", func() bool { return !held(filepath.Join(cdir, "supervisor.lock")) })
}

// TestNoPostgresSaysHowToGetOne: with no Postgres answering and no server
// binaries, the test fails (never skips) and says what to install or set.
func TestNoPostgresSaysHowToGetOne(t *testing.T) {
	t.Parallel()
	stateDir := newStateDir(t)
	c := startChild(t, stateDir, "500ms", "", EnvPGBinDir+"=/nonexistent/bin")
	select {
	case err := <-c.done:
		if err == nil {
			t.Fatalf("the child passed without a Postgres:\n%s", c.output.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the child did not finish")
	}
	out := c.output.String()
	for _, want := range []string{"idem's tests need PostgreSQL", "IDEM_TEST_PG_BINDIR=/nonexistent/bin holds no initdb and pg_ctl",
		"apt-get install postgresql", "set IDEM_TEST_DATABASE_URL"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "--- SKIP") {
		t.Errorf("the child skipped instead of failing:\n%s", out)
	}
}

// TestNewGivesEachTestItsOwnMigratedSchema, on whatever Postgres this run
// found, and drops it afterwards.
func TestNewGivesEachTestItsOwnMigratedSchema(t *testing.T) {
	t.Parallel()
	var schemas []string
	t.Run("a", func(t *testing.T) { schemas = append(schemas, New(t).Schema) })
	t.Run("b", func(t *testing.T) { schemas = append(schemas, New(t).Schema) })
	if len(schemas) != 2 || schemas[0] == schemas[1] {
		t.Fatalf("schemas %v: want two different ones", schemas)
	}
	db := New(t, Unmigrated())
	var n int
	err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM information_schema.schemata WHERE schema_name = ANY($1)`, schemas).Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("%d of the finished tests' schemas remain (err %v); want them dropped", n, err)
	}
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM idem_records`).Scan(&n); err == nil {
		t.Fatal("an Unmigrated schema has idem_records")
	}
}
