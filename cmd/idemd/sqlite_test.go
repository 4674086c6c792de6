package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/client"
)

// idemdProc is an `idemd serve` on the embedded store, run in a directory of
// the test's.
type idemdProc struct {
	cmd            *exec.Cmd
	addr, httpAddr string
	jsonAddr       string
	mu             sync.Mutex
	lines          []string
	ended          chan struct{}
}

// environWithoutIdem is the environment less every IDEM_ variable, so that
// only what a test sets reaches idemd.
func environWithoutIdem() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	return env
}

// startServe runs `idemd serve args...` in dir until the test ends, its
// addresses (127.0.0.1:0, ports of the system's choosing) given through the
// environment so that args can be empty, and returns once it serves, with
// the addresses it logged.
func startServe(t *testing.T, dir string, args ...string) *idemdProc {
	t.Helper()
	return startServeEnv(t, dir, nil, args...)
}

// startServeEnv is startServe with env added to idemd's environment.
func startServeEnv(t *testing.T, dir string, env []string, args ...string) *idemdProc {
	t.Helper()
	p := &idemdProc{ended: make(chan struct{})}
	p.cmd = exec.Command(idemdBinary, append([]string{"serve"}, args...)...)
	p.cmd.Dir = dir
	p.cmd.Env = append(append(environWithoutIdem(), "IDEM_LISTEN=127.0.0.1:0", "IDEM_HTTP_LISTEN=127.0.0.1:0", "IDEM_JSON_LISTEN=", "IDEM_LOG_FORMAT=json"), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	serving := make(chan struct{})
	var servingLine string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			if servingLine == "" && strings.Contains(sc.Text(), servingMsg) {
				servingLine = sc.Text()
				close(serving)
			}
		}
		close(p.ended)
	}()
	select {
	case <-serving:
		addrs := parseServing(t, servingLine)
		p.addr, p.httpAddr, p.jsonAddr = addrs.Listen, addrs.HTTPListen, addrs.JSONListen
		return p
	case <-p.ended:
	case <-time.After(30 * time.Second):
	}
	t.Fatalf("idemd did not serve; its log:\n%s", p.log())
	return nil
}

func (p *idemdProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// kill ends idemd with SIGKILL: nothing is flushed or closed on the way out.
func (p *idemdProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

func (p *idemdProc) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(p.addr, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (p *idemdProc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.httpAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestServeWithNoFlagsRunsOnSQLiteAndKeepsCompletesAcrossKill9: `idemd
// serve` alone, in an empty directory, stores records in ./idem-data, says
// so, and an acknowledged Complete survives kill -9; tokens keep growing
// after the restart.
func TestServeWithNoFlagsRunsOnSQLiteAndKeepsCompletesAcrossKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startServe(t, dir)
	if log := first.log(); !strings.Contains(log, "no --database-url: running on the embedded SQLite store") ||
		!strings.Contains(log, "PostgreSQL is the production store") || !strings.Contains(log, filepath.Join("idem-data", "idem.db")) {
		t.Errorf("the log does not say that idemd runs on SQLite in ./idem-data and that Postgres is for production:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(dir, "idem-data", "idem.db")); err != nil {
		t.Fatalf("no database in ./idem-data: %v", err)
	}
	if code, body := first.get(t, "/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ready" {
		t.Errorf("/readyz = %d %q, want 200 ready", code, body)
	}
	if _, body := first.get(t, "/metrics"); strings.Contains(body, "idem_db_pool_") || !strings.Contains(body, "grpc_server_handled_total") {
		t.Errorf("/metrics on SQLite: want the gRPC metrics and no Postgres pool gauges")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := first.client(t)
	claim, err := c.Claim(ctx, client.ClaimRequest{Namespace: "process_payment", Key: "order-1"})
	if err != nil || claim.Outcome != client.OutcomeAcquired {
		t.Fatalf("Claim: %+v, %v", claim, err)
	}
	if _, err := c.Complete(ctx, client.CompleteRequest{Namespace: "process_payment", Key: "order-1", Token: claim.Record.Token, Result: []byte("ch_1")}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	first.kill()

	second := startServe(t, dir)
	c = second.client(t)
	rec, err := c.Lookup(ctx, client.LookupRequest{Namespace: "process_payment", Key: "order-1"})
	if err != nil || rec.State != client.StateCompleted || string(rec.Result) != "ch_1" || rec.Token != claim.Record.Token {
		t.Fatalf("after kill -9 and a restart, Lookup = %+v, %v; want COMPLETED with result ch_1 and token %d", rec, err, claim.Record.Token)
	}
	replay, err := c.Claim(ctx, client.ClaimRequest{Namespace: "process_payment", Key: "order-1"})
	if err != nil || replay.Outcome != client.OutcomeCompleted || string(replay.Record.Result) != "ch_1" {
		t.Fatalf("a redelivery after the restart: %+v, %v; want the COMPLETED replay", replay, err)
	}
	next, err := c.Claim(ctx, client.ClaimRequest{Namespace: "process_payment", Key: "order-2"})
	if err != nil || next.Outcome != client.OutcomeAcquired {
		t.Fatalf("Claim of a new key: %+v, %v", next, err)
	}
	if next.Record.Token <= claim.Record.Token {
		t.Fatalf("the first token after the restart is %d, not greater than %d from before it", next.Record.Token, claim.Record.Token)
	}
}

// TestSecondIdemdOnOneSQLiteFileIsRefused: one SQLite file serves one idemd;
// a second one (serve, sweep or migrate) stops with one line that says why,
// and once the first is gone, even by kill -9, the file is free again.
func TestSecondIdemdOnOneSQLiteFileIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startServe(t, dir, "--data-dir", "shared")
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", ""},
		{"sweep", "--once"},
		{"migrate"},
	} {
		cmd := exec.Command(idemdBinary, append(args, "--data-dir", filepath.Join(dir, "shared"))...)
		cmd.Env = environWithoutIdem()
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("a second idemd %s on the same data dir started:\n%s", args[0], out)
		}
		text := strings.TrimSpace(string(out))
		if !strings.Contains(text, "is in use by another idemd (pid ") || !strings.Contains(text, "PostgreSQL") {
			t.Errorf("idemd %s: the refusal does not say the file is in use by which idemd and what to do instead:\n%s", args[0], text)
		}
		if strings.Count(text, "\n") != 0 {
			t.Errorf("idemd %s: the refusal is not one line:\n%s", args[0], text)
		}
	}
	first.kill()
	startServe(t, dir, "--data-dir", "shared")
}

// TestSecondIdemdThroughAnotherPathIsRefused: the lock belongs to the file,
// not to the path that names it: a second idemd that reaches the same
// SQLite file through a symbolic link to the file, a link to its directory
// or a sqlite: URL through such a link is refused as one on the same path
// is; and so is one on the file itself when the first reached it through a
// link that it created the file through.
func TestSecondIdemdThroughAnotherPathIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	mkdir := func(name string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(args ...string) {
		t.Helper()
		// One that is let in serves until it is killed.
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, idemdBinary, append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", ""}, args...)...)
		cmd.Env = environWithoutIdem()
		out, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil {
			t.Fatalf("a second idemd %v on the same file started:\n%s", args, out)
		}
		if text := strings.TrimSpace(string(out)); !strings.Contains(text, "is in use by another idemd (pid ") {
			t.Errorf("idemd %v: exited without saying the file is in use by another idemd:\n%s", args, text)
		}
	}

	first := startServe(t, dir, "--data-dir", "shared")
	mkdir("elsewhere")
	link(filepath.Join(dir, "shared", "idem.db"), "elsewhere/idem.db")
	link("shared", "alias")
	refused("--data-dir", filepath.Join(dir, "elsewhere"))
	refused("--data-dir", filepath.Join(dir, "alias"))
	refused("--database-url", "sqlite://"+filepath.Join(dir, "elsewhere", "idem.db"))
	first.kill()
	// The file is free again, through the link as through its own path.
	startServe(t, dir, "--data-dir", "elsewhere").kill()

	// A relative link to a file that does not exist yet: the first idemd
	// creates the file through it.
	mkdir("real")
	mkdir("via")
	link("../real/idem.db", "via/idem.db")
	startServe(t, dir, "--data-dir", "via")
	if _, err := os.Stat(filepath.Join(dir, "real", "idem.db")); err != nil {
		t.Fatalf("the first idemd did not create the file through the link: %v", err)
	}
	refused("--data-dir", filepath.Join(dir, "real"))
}

// TestSQLiteURL: sqlite:///path chooses the embedded store explicitly, for
// serve, migrate and sweep; a lapsed lease is expired by `sweep --once`.
func TestSQLiteURL(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "nested", "idem.db")
	url := "sqlite://" + file
	out, code := run(t, nil, "migrate", "--database-url", url)
	if code != 0 || !strings.Contains(out, "schema is up to date") {
		t.Fatalf("migrate on SQLite: exit %d, output %q", code, out)
	}
	p := startServe(t, t.TempDir(), "--database-url", url, "--sweep-interval", "0")
	if log := p.log(); strings.Contains(log, "no --database-url") || !strings.Contains(log, `"database":"`+file+`"`) {
		t.Errorf("the log does not name the file %s (or says there was no URL):\n%s", file, log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.client(t).Claim(ctx, client.ClaimRequest{Namespace: "jobs", Key: "lapses", LeaseTTL: time.Second})
	if err != nil || res.Outcome != client.OutcomeAcquired {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("idemd on SQLite exited with %v after SIGTERM, want 0:\n%s", err, p.log())
	}
	time.Sleep(time.Until(res.Record.LeaseExpiresAt) + 100*time.Millisecond)
	out, code = run(t, nil, "sweep", "--once", "--database-url", url)
	if code != 0 || !strings.Contains(out, "expired 1, purged 0") {
		t.Fatalf("sweep --once on SQLite: exit %d, output %q", code, out)
	}
}
