package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testbin"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// idemdBinary is built once by TestMain so that the tests run the real binary.
var idemdBinary string

func TestMain(m *testing.M) { testbin.Main(m, "idemd", &idemdBinary) }

// run runs idemd with args and returns its combined output and exit code.
func run(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemdBinary, args...)
	// Not the package's directory: an idemd without --database-url puts its
	// SQLite store in ./idem-data.
	cmd.Dir = t.TempDir()
	cmd.Env = append(environWithout(append([]string{"IDEM_DATABASE_URL", "IDEM_DATA_DIR"}, securityEnv...)...), env...)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exitErr):
		return string(out), exitErr.ExitCode()
	}
	t.Fatalf("run idemd %v: %v", args, err)
	return "", 0
}

func TestStartupErrorsAreOneLineAndNonZero(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"empty database url", []string{"serve", "--database-url", ""}, "--database-url is empty"},
		{"unknown database scheme", []string{"serve", "--database-url", "mysql://x/idem"}, `--database-url has the scheme "mysql"`},
		{"sqlite url with a host", []string{"migrate", "--database-url", "sqlite://host/idem.db"}, "a SQLite file is local"},
		{"sqlite url without a file", []string{"serve", "--database-url", "sqlite:///"}, "does not name a file"},
		{"empty data dir", []string{"sweep", "--once", "--data-dir", ""}, "--data-dir is empty"},
		// A boolean variable set but empty is as if unset: the error is the one after it.
		{"empty boolean variables", []string{"serve", "--database-url", "mysql://x/idem"}, `--database-url has the scheme "mysql"`},
		{"unknown flag", []string{"serve", "--database-url", "postgres://x", "--nope"}, "--nope"},
		{"lease out of bounds", []string{"serve", "--database-url", "postgres://x", "--default-lease-ttl", "500ms"}, "--default-lease-ttl is 500ms; it must be between 1s and 24h0m0s"},
		{"retention out of bounds", []string{"serve", "--database-url", "postgres://x", "--default-retention", "91h", "--default-retention", "2160h1s"}, "--default-retention"},
		{"result limit", []string{"serve", "--database-url", "postgres://x", "--max-result-bytes", "0"}, "--max-result-bytes is 0"},
		{"no batch items", []string{"serve", "--database-url", "postgres://x", "--batch-max-items", "0"}, "--batch-max-items is 0; it must be between 1 and 10000"},
		{"batch bytes too small", []string{"serve", "--database-url", "postgres://x", "--batch-max-bytes", "1000"}, "--batch-max-bytes is 1000; it must be between 65536 and 67108864"},
		{"batch bytes too large", []string{"serve", "--database-url", "postgres://x", "--batch-max-bytes", "67108865"}, "--batch-max-bytes is 67108865; it must be between 65536 and 67108864"},
		{"coalescer in flight", []string{"serve", "--database-url", "postgres://x", "--coalesce-max-in-flight=-1"}, "--coalesce-max-in-flight is -1; it must be between 0 (off) and 256"},
		{"coalescer rows", []string{"serve", "--database-url", "postgres://x", "--coalesce-max-rows", "0"}, "--coalesce-max-rows is 0; it must be between 1 and 10000"},
		{"sweep duty zero", []string{"serve", "--database-url", "postgres://x", "--sweep-duty", "0"}, "--sweep-duty is 0; it must be between 0.01 and 1"},
		{"sweep duty above one", []string{"serve", "--database-url", "postgres://x", "--sweep-duty", "1.5"}, "--sweep-duty is 1.5; it must be between 0.01 and 1"},
		{"sweep command duty", []string{"sweep", "--once", "--database-url", "postgres://x", "--duty=-1"}, "--duty is -1; it must be between 0.01 and 1"},
		{"sweep duty too small", []string{"serve", "--database-url", "postgres://x", "--sweep-duty", "0.001"}, "--sweep-duty is 0.001; it must be between 0.01 and 1"},
		{"unreachable database", []string{"serve", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"}, "cannot reach the database at postgres://postgres@127.0.0.1:1/x"},
		{"unreachable database on migrate", []string{"migrate", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"}, "cannot reach the database"},
		{"unauthenticated on a non-loopback address", []string{"serve", "--database-url", "postgres://x", "--listen", "0.0.0.0:7070"}, "pass --config with tenants and tokens, or --insecure-allow-unauthenticated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var env []string
			if tc.name == "empty boolean variables" {
				env = []string{"IDEM_MIGRATE=", "IDEM_CONSOLE=", "IDEM_PPROF="}
			}
			out, code := run(t, env, tc.args...)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; output:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("output does not mention %q:\n%s", tc.want, out)
			}
			if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != 1 {
				t.Fatalf("output has %d lines, want one:\n%s", lines, out)
			}
		})
	}
}

func TestDatabaseURLFromEnv(t *testing.T) {
	t.Parallel()
	out, code := run(t, []string{"IDEM_DATABASE_URL=postgres://postgres@127.0.0.1:1/fromenv?connect_timeout=2"}, "migrate")
	if code == 0 || !strings.Contains(out, "/fromenv") {
		t.Fatalf("exit %d, output %q: want the URL from IDEM_DATABASE_URL to be used", code, out)
	}
	// Set but empty (a missing secret) is refused, not taken for "no URL":
	// idemd must not quietly serve from a fresh SQLite file instead.
	out, code = run(t, []string{"IDEM_DATABASE_URL="}, "migrate")
	if code == 0 || !strings.Contains(out, "--database-url is empty") {
		t.Fatalf("IDEM_DATABASE_URL set to nothing: exit %d, output %q; want a refusal", code, out)
	}
	// idemd sweep reads serve's duty variable: one environment for both.
	out, code = run(t, []string{"IDEM_SWEEP_DUTY=5"}, "sweep", "--once", "--database-url", "postgres://x")
	if code == 0 || !strings.Contains(out, "--duty is 5; it must be between 0.01 and 1") {
		t.Fatalf("IDEM_SWEEP_DUTY=5 for sweep: exit %d, output %q; want --duty refused", code, out)
	}
	out, code = run(t, []string{"IDEM_DATA_DIR=" + filepath.Join(t.TempDir(), "fromenv")}, "migrate")
	if code != 0 || !strings.Contains(out, filepath.Join("fromenv", "idem.db")) {
		t.Fatalf("IDEM_DATA_DIR: exit %d, output %q; want the SQLite file in it", code, out)
	}
}

func TestMigrateTwiceAndSweepOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	out, code := run(t, nil, "migrate", "--database-url", db.URL)
	if code != 0 || !strings.Contains(out, "applied migrations [1 ") {
		t.Fatalf("first migrate: exit %d, output %q", code, out)
	}
	out, code = run(t, nil, "migrate", "--database-url", db.URL)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: exit %d, output %q", code, out)
	}

	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, lease_expires_at, retention, created_at, updated_at)
		VALUES ('default', 'ns', 'lapsed', 'processing', nextval('idem_token_seq'), 1, now() - interval '1 minute', interval '1 hour', now(), now()),
		       ('default', 'ns', 'old', 'completed', nextval('idem_token_seq'), 1, NULL, interval '1 hour', now(), now())`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE key = 'old'`); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, nil, "sweep", "--once", "--database-url", db.URL)
	if code != 0 || !strings.Contains(out, "expired 1, purged 1") {
		t.Fatalf("sweep --once: exit %d, output %q", code, out)
	}
	var state string
	if err := db.Pool.QueryRow(ctx, `SELECT state FROM idem_records WHERE key = 'lapsed'`).Scan(&state); err != nil || state != "expired" {
		t.Fatalf("lapsed record: state %q, err %v; want expired", state, err)
	}
}

func TestServeRefusesAnUnmigratedSchemaWithMigrateOff(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	out, code := run(t, nil, "serve", "--database-url", db.URL, "--no-migrate", "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(out, "idemd migrate") {
		t.Fatalf("exit %d, output %q: want a refusal that says to run idemd migrate", code, out)
	}
}

func TestServeClaimsAndShutsDownGracefully(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	cmd := exec.Command(idemdBinary, "serve", "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", "", "--sweep-interval", "50ms", "--log-format", "json")
	cmd.Env = append(environWithout("IDEM_DATABASE_URL"), "IDEM_DATABASE_URL="+db.URL)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	logs := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs <- sc.Text()
		}
		close(logs)
	}()
	addr := parseServing(t, waitFor(t, logs, servingMsg)).Listen

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := idemv1.NewIdempotencyServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	claim, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: "k1"})
	if err != nil || claim.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim: %v, %v", claim, err)
	}
	if _, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "jobs", Key: "k1", Token: claim.GetRecord().GetToken(), Result: []byte("ok")}); err != nil {
		t.Fatalf("Complete: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, logs, `"msg":"idemd stopped"`)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("idemd exited with %v after SIGTERM, want 0", err)
	}
}

// servingMsg marks idemd's "idemd serving" line in a JSON log.
const servingMsg = `"msg":"idemd serving"`

// servedAddrs is what idemd's "idemd serving" line (--log-format json) says of
// its listeners: the addresses it bound, with the port the system chose where
// the flag asked for port 0; "" for a listener that is off.
//
// Tests start idemd on 127.0.0.1:0 and take its addresses from this line.
// A port picked beforehand (listen on :0, read the port, close, pass it to
// idemd) can be taken by any other socket on the machine before idemd binds
// it, and idemd then fails with "address already in use".
type servedAddrs struct {
	Listen     string `json:"listen"`
	HTTPListen string `json:"http_listen"`
	JSONListen string `json:"json_listen"`
}

// parseServing reads the addresses from idemd's serving line.
func parseServing(t *testing.T, line string) servedAddrs {
	t.Helper()
	var m struct {
		Msg string `json:"msg"`
		servedAddrs
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil || m.Msg != "idemd serving" {
		t.Fatalf("not idemd's serving line in the JSON log format (%v): %s", err, line)
	}
	for _, addr := range []string{m.Listen, m.HTTPListen, m.JSONListen} {
		if addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" || port == "0" {
			t.Fatalf("serving line has the address %q; want host:port with the port bound: %s", addr, line)
		}
	}
	return m.servedAddrs
}

// waitFor reads logs until a line contains want, and returns that line.
func waitFor(t *testing.T, logs <-chan string, want string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-logs:
			if !ok {
				t.Fatalf("idemd's log ended before %s", want)
			}
			if strings.Contains(line, want) {
				return line
			}
		case <-timeout:
			t.Fatalf("no log line with %s within 30s", want)
		}
	}
}

// environWithout returns the environment less the named variables, so that a
// developer's own IDEM_* settings cannot leak into a test.
func environWithout(names ...string) []string {
	var env []string
outer:
	for _, kv := range os.Environ() {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue outer
			}
		}
		env = append(env, kv)
	}
	return env
}
