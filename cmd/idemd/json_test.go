package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/internal/testsupport/testcerts"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// TestJSONListenIsProtected: the JSON listener follows the gRPC listener's
// rule: no address off this machine without authentication.
func TestJSONListenIsProtected(t *testing.T) {
	t.Parallel()
	out, code := run(t, nil, "serve", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=1", "--json-listen", "0.0.0.0:7072")
	if code == 0 || !strings.Contains(out, "--json-listen") || !strings.Contains(out, "pass --config") {
		t.Fatalf("exit %d, output %q; want a refusal naming --json-listen", code, out)
	}
}

// TestJSONListenerWithMutualTLS: with --tls-cert and --client-ca the JSON
// listener serves HTTPS, requires a client certificate, and the certificate
// names the tenant, as on the gRPC listener.
func TestJSONListenerWithMutualTLS(t *testing.T) {
	t.Parallel()
	token, err := config.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ca := testcerts.NewCA(t, "idemd JSON test CA")
	dir := t.TempDir()
	certFile, keyFile := testcerts.WritePEM(t, dir, "server", ca.Server(t))
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `tenants:
  - name: payments
    client_cert_subjects: ["CN=payments-worker"]
    namespaces: ["process_payment"]
  - name: billing
    tokens: ["`+config.HashToken(token)+`"]
`)
	jsonAddr := startIdemd(t, "--config", cfg, "--tls-cert", certFile, "--tls-key", keyFile, "--client-ca", caFile, "--json-listen", "127.0.0.1:0").JSONListen

	httpsClient := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12},
		}}
	}
	claim := func(c *http.Client, key, bearer string) (int, map[string]any, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://"+jsonAddr+"/v1/namespaces/process_payment/records/"+key+":claim", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		return resp.StatusCode, body, nil
	}

	worker := httpsClient(ca.Client(t, pkix.Name{CommonName: "payments-worker"}))
	if code, body, err := claim(worker, "order-1", ""); err != nil || code != http.StatusOK || body["outcome"] != "OUTCOME_ACQUIRED" {
		t.Fatalf("Claim with the tenant's certificate: %d %v %v; want 200 ACQUIRED", code, body, err)
	}
	// A token of another tenant next to the certificate is refused.
	if code, body, err := claim(worker, "order-2", token); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("Claim with a certificate and another tenant's token: %d %v %v; want 401", code, body, err)
	}
	// Without a client certificate the handshake fails, token or not.
	if code, _, err := claim(httpsClient(), "order-3", token); err == nil {
		t.Fatalf("Claim without a client certificate answered %d; want a refused handshake", code)
	}
}

// jsonIdemd is a real idemd serving the JSON API on Postgres, its log kept.
type jsonIdemd struct {
	cmd   *exec.Cmd
	addrs servedAddrs
	mu    sync.Mutex
	lines []string
	ended chan struct{} // closed when the log ends: idemd exited
}

// startJSONIdemd starts idemd on the database at dbURL with every listener
// on a port of its own, and args.
func startJSONIdemd(t *testing.T, dbURL string, args ...string) *jsonIdemd {
	t.Helper()
	cmd := exec.Command(idemdBinary, append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--json-listen", "127.0.0.1:0", "--log-format", "json", "--sweep-interval", "0"}, args...)...)
	cmd.Env = append(environWithout(append([]string{"IDEM_DATABASE_URL"}, securityEnv...)...), "IDEM_DATABASE_URL="+dbURL)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &jsonIdemd{cmd: cmd, ended: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.ended
		_ = cmd.Wait()
	})
	go func() {
		defer close(p.ended)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	}()
	p.addrs = parseServing(t, p.waitLog(t, servingMsg))
	return p
}

// waitLog waits for a log line with want and returns it.
func (p *jsonIdemd) waitLog(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-p.ended:
		case <-deadline:
		case <-time.After(20 * time.Millisecond):
			if l, ok := p.find(want); ok {
				return l
			}
			continue
		}
		if l, ok := p.find(want); ok {
			return l
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("no log line with %s; the log:\n%s", want, strings.Join(p.lines, "\n"))
		return ""
	}
}

func (p *jsonIdemd) find(want string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if strings.Contains(l, want) {
			return l, true
		}
	}
	return "", false
}

// jsonAnswer is an answer of the JSON API.
type jsonAnswer struct {
	status int
	proto  int // the HTTP major version
	body   map[string]any
	raw    string
	err    error
}

// postJSON sends body to path on the JSON API with c.
func postJSON(c *http.Client, base, path, body string) jsonAnswer {
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return jsonAnswer{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	a := jsonAnswer{status: resp.StatusCode, proto: resp.ProtoMajor, raw: string(raw), err: err}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

// TestJSONDrainsOnShutdown: on SIGTERM the JSON API drains as the gRPC one
// does: a Complete in flight (here blocked on a row lock) gets its real
// answer once it can run, and a Claim waiting for a holder answers
// IN_PROGRESS at once; then idemd exits 0.
func TestJSONDrainsOnShutdown(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	p := startJSONIdemd(t, db.URL, "--shutdown-timeout", "60s")
	base := "http://" + p.addrs.JSONListen
	c := &http.Client{Timeout: 60 * time.Second}
	const claimPath = "/idem.v1.IdempotencyService/Claim"

	held := postJSON(c, base, claimPath, `{"namespace":"jobs","key":"locked","leaseTtl":"120s"}`)
	token, _ := held.body["record"].(map[string]any)["token"].(string)
	if held.status != http.StatusOK || token == "" {
		t.Fatalf("Claim: %d %s %v", held.status, held.raw, held.err)
	}
	if a := postJSON(c, base, claimPath, `{"namespace":"jobs","key":"waited","leaseTtl":"120s"}`); a.status != http.StatusOK {
		t.Fatalf("Claim: %d %s %v", a.status, a.raw, a.err)
	}

	// The test's transaction holds the record's row, so the Complete waits
	// for it inside idemd.
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var lockerPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&lockerPID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idem_records WHERE key = 'locked' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	completed := make(chan jsonAnswer, 1)
	go func() {
		completed <- postJSON(c, base, "/idem.v1.IdempotencyService/Complete",
			`{"namespace":"jobs","key":"locked","token":"`+token+`","result":"b2s="}`)
	}()
	waited := make(chan jsonAnswer, 1)
	go func() {
		waited <- postJSON(c, base, claimPath, `{"namespace":"jobs","key":"waited","wait":"50s"}`)
	}()
	eventually(t, "the Complete waits for the row lock", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, lockerPID).Scan(&n)
		return err == nil && n > 0
	})
	metrics := &opsServer{httpAddr: p.addrs.HTTPListen}
	eventually(t, "the Claim waits", func() bool { return metrics.metric(t, "idem_waiting_claims") == 1 })

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "shutting down: draining")
	w := <-waited
	if w.status != http.StatusOK || w.body["outcome"] != "OUTCOME_IN_PROGRESS" {
		t.Fatalf("the waiting Claim during the drain: %d %s %v; want 200 IN_PROGRESS", w.status, w.raw, w.err)
	}
	select {
	case a := <-completed:
		t.Fatalf("the Complete answered while its row was still locked: %d %s %v", a.status, a.raw, a.err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-completed
	if state, _ := a.body["record"].(map[string]any)["state"].(string); a.status != http.StatusOK || state != "STATE_COMPLETED" {
		t.Fatalf("the Complete in flight at SIGTERM: %d %s %v; want 200 COMPLETED", a.status, a.raw, a.err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("idemd exited with %v after SIGTERM, want 0", err)
	}
	var state string
	if err := db.Pool.QueryRow(ctx, `SELECT state FROM idem_records WHERE key = 'locked'`).Scan(&state); err != nil || state != "completed" {
		t.Fatalf("the record: %q, %v; want completed", state, err)
	}
}

// closedWithin30s reads conn until the server closes it. The bound is a
// safety net, far above the server's timeouts the tests set: it fails the
// test only when the server never closes the connection.
func closedWithin30s(t *testing.T, conn net.Conn, r io.Reader, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: idemd did not close the connection", what)
	}
}

// TestJSONConnectionTimeouts: a request that trickles its body is cut off at
// --json-read-timeout, and a keep-alive connection left idle is closed at
// --json-idle-timeout; a Claim that waits longer than the read timeout
// after sending its body is not.
func TestJSONConnectionTimeouts(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	p := startJSONIdemd(t, db.URL, "--json-read-timeout", "1s", "--json-idle-timeout", "1s")

	t.Run("trickling body", func(t *testing.T) {
		conn, err := net.Dial("tcp", p.addrs.JSONListen)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "POST /idem.v1.IdempotencyService/Claim HTTP/1.1\r\nHost: idem\r\n"+
			"Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		closedWithin30s(t, conn, conn, "a body trickling one byte every 50ms")
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", p.addrs.JSONListen)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /v1/namespaces/jobs/records/none HTTP/1.1\r\nHost: idem\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Close {
			t.Fatalf("Lookup: %d, close %v; want 404 on a connection kept alive", resp.StatusCode, resp.Close)
		}
		closedWithin30s(t, conn, br, "an idle keep-alive connection")
	})
	t.Run("a wait outlasts the read timeout", func(t *testing.T) {
		base := "http://" + p.addrs.JSONListen
		var protocols http.Protocols
		protocols.SetUnencryptedHTTP2(true)
		for name, c := range map[string]*http.Client{
			"HTTP/1.1": {Timeout: 30 * time.Second},
			"h2c":      {Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &protocols}},
		} {
			key := "waited-" + strings.ReplaceAll(name, "/", "")
			if a := postJSON(c, base, "/idem.v1.IdempotencyService/Claim", `{"namespace":"jobs","key":"`+key+`","leaseTtl":"60s"}`); a.status != http.StatusOK {
				t.Fatalf("%s: Claim: %d %s %v", name, a.status, a.raw, a.err)
			}
			a := postJSON(c, base, "/idem.v1.IdempotencyService/Claim", `{"namespace":"jobs","key":"`+key+`","wait":"3s"}`)
			if a.status != http.StatusOK || a.body["outcome"] != "OUTCOME_IN_PROGRESS" {
				t.Fatalf("%s: a Claim waiting 3s with a read timeout of 1s: %d %s %v; want 200 IN_PROGRESS", name, a.status, a.raw, a.err)
			}
		}
	})
}

// TestJSONMaxConnections: past --json-max-connections a new connection is
// not served until one of those held closes.
func TestJSONMaxConnections(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	p := startJSONIdemd(t, db.URL, "--json-max-connections", "2", "--json-read-timeout", "1m")
	const lookup = "GET /v1/namespaces/jobs/records/none HTTP/1.1\r\nHost: idem\r\n\r\n"
	open := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := net.Dial("tcp", p.addrs.JSONListen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := io.WriteString(conn, lookup); err != nil {
			t.Fatal(err)
		}
		return conn, bufio.NewReader(conn)
	}
	answered := func(r *bufio.Reader) error {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	}
	// Two connections served and kept alive hold the limit.
	first, r1 := open()
	if err := answered(r1); err != nil {
		t.Fatal(err)
	}
	_, r2 := open()
	if err := answered(r2); err != nil {
		t.Fatal(err)
	}
	third, r3 := open()
	_ = third.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if err := answered(r3); err == nil {
		t.Fatal("a third connection was served while two were held; want it to wait")
	}
	first.Close()
	_ = third.SetReadDeadline(time.Now().Add(30 * time.Second))
	if err := answered(r3); err != nil {
		t.Fatalf("the third connection once the first closed: %v", err)
	}
}

// TestJSONOverH2C: the JSON listener speaks HTTP/2 without TLS to a client
// with prior knowledge (h2c), as Connect clients with httpVersion "2" do.
func TestJSONOverH2C(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	p := startJSONIdemd(t, db.URL)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Protocols: &protocols}}
	base := "http://" + p.addrs.JSONListen
	a := postJSON(c, base, "/idem.v1.IdempotencyService/Claim", `{"namespace":"jobs","key":"h2c"}`)
	if a.err != nil || a.proto != 2 || a.status != http.StatusOK || a.body["outcome"] != "OUTCOME_ACQUIRED" {
		t.Fatalf("Connect Claim over h2c: HTTP/%d %d %s %v; want HTTP/2 200 ACQUIRED", a.proto, a.status, a.raw, a.err)
	}
	a = postJSON(c, base, "/v1/namespaces/jobs/records/h2c:claim", `{}`)
	if a.err != nil || a.proto != 2 || a.status != http.StatusOK || a.body["outcome"] != "OUTCOME_IN_PROGRESS" {
		t.Fatalf("REST Claim over h2c: HTTP/%d %d %s %v; want HTTP/2 200 IN_PROGRESS", a.proto, a.status, a.raw, a.err)
	}
	// A refusal with its own status, and the connection serves on.
	a = postJSON(c, base, "/v1/namespaces/jobs/records/h2c:complete", `{"token":"1","result":"`+strings.Repeat("A", 8<<20)+`"}`) // past the largest batch too
	if a.err != nil || a.proto != 2 || a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("a Complete over the body limit over h2c: HTTP/%d %d %s %v; want HTTP/2 413", a.proto, a.status, a.raw, a.err)
	}
	a = postJSON(c, base, "/v1/namespaces/jobs/records/h2c:claim", `{}`)
	if a.err != nil || a.proto != 2 || a.status != http.StatusOK {
		t.Fatalf("REST Claim over h2c after the 413: HTTP/%d %d %s %v; want HTTP/2 200", a.proto, a.status, a.raw, a.err)
	}
}

// TestJSONLimitFlags: the JSON listener's bounds are checked, from flags and
// from their environment variables.
func TestJSONLimitFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--json-read-timeout", "0s"}, "--json-read-timeout is 0s; it must be positive"},
		{[]string{"IDEM_JSON_IDLE_TIMEOUT=-1s"}, nil, "--json-idle-timeout is -1s; it must be positive"},
		{nil, []string{"--json-write-timeout", "0s"}, "--json-write-timeout is 0s; it must be positive"},
		{[]string{"IDEM_JSON_WRITE_TIMEOUT=-2s"}, nil, "--json-write-timeout is -2s; it must be positive"},
		{[]string{"IDEM_JSON_MAX_CONNECTIONS=0"}, nil, "--json-max-connections is 0; it must be between 1 and 1000000"},
		{nil, []string{"--json-max-connections", "1000001"}, "--json-max-connections is 1000001"},
	} {
		out, code := run(t, tc.env, append([]string{"serve", "--database-url", "postgres://x"}, tc.args...)...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%v %v: exit %d, output %q; want a refusal with %q", tc.env, tc.args, code, out, tc.want)
		}
	}
}
