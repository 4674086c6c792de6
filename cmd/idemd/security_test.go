package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/internal/testsupport/testcerts"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// securityEnv are the env twins of the security flags, kept out of the
// tests' idemd so that a developer's own settings cannot change them.
var securityEnv = []string{"IDEM_CONFIG", "IDEM_TLS_CERT", "IDEM_TLS_KEY", "IDEM_CLIENT_CA", "IDEM_INSECURE_ALLOW_UNAUTHENTICATED"}

// writeConfig writes a config file into a fresh directory and returns its
// path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestConfigErrorsAreOneLineAndNonZero: a bad config file, or flags that do
// not fit it, stop idemd before it touches the database, with one line that
// names the file and the field.
func TestConfigErrorsAreOneLineAndNonZero(t *testing.T) {
	t.Parallel()
	hash := config.HashToken("idem_x")
	good := "tenants:\n  - name: payments\n    tokens: [\"" + hash + "\"]\n    max_result_bytes: 70000\n"
	cases := []struct {
		name string
		body string // written to the file passed as --config; none when empty
		args []string
		env  []string
		want string
	}{
		{"unknown field", "tenants:\n  - name: a\n    tokens: [\"" + hash + "\"]\n    rate_limt: {per_second: 1}\n", nil, nil,
			"tenants[0].rate_limt: unknown field (line 4)"},
		{"plaintext token", "tenants:\n  - name: a\n    tokens: [\"" + hash + "\"]\n  - name: b\n    tokens: [\"idem_oops\"]\n", nil, nil,
			`tenants[1].tokens[0]: want "sha256:<64 hex digits>"`},
		{"bad glob", "tenants:\n  - name: a\n    tokens: [\"" + hash + "\"]\n    namespaces: [\"[\"]\n", nil, nil,
			`tenants[0].namespaces[0]: "[" is not a valid glob`},
		{"tenant limit above the server's", good, []string{"--max-result-bytes", "65536"}, nil,
			"tenants[0].max_result_bytes: 70000 is above the server's --max-result-bytes (65536)"},
		{"client subjects without a client CA", "tenants:\n  - name: a\n    client_cert_subjects: [\"CN=a\"]\n", nil, nil,
			"client_cert_subjects need --client-ca"},
		{"config from IDEM_CONFIG", "tenants: []\n", nil, []string{"IDEM_CONFIG=<file>"},
			"tenants: empty"},
		{"missing config file", "", []string{"--config", "/nonexistent/idem.yaml"}, nil,
			"/nonexistent/idem.yaml"},
		{"missing TLS files", good, []string{"--max-result-bytes", "70000", "--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, nil,
			"--tls-cert /nonexistent/c.pem"},
		{"TLS key without certificate", "", []string{"--tls-key", "k.pem"}, nil,
			"--tls-cert and --tls-key go together"},
		{"client CA without TLS", "", []string{"--client-ca", "ca.pem"}, nil,
			"--client-ca needs TLS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"serve", "--database-url", "postgres://postgres@127.0.0.1:1/never?connect_timeout=1"}
			env := []string{}
			if tc.body != "" {
				file := writeConfig(t, tc.body)
				if len(tc.env) > 0 {
					env = append(env, strings.ReplaceAll(tc.env[0], "<file>", file))
				} else {
					args = append(args, "--config", file)
				}
			}
			args = append(args, tc.args...)
			out, code := run(t, env, args...)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; output:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("output does not mention %q:\n%s", tc.want, out)
			}
			if strings.Contains(out, "cannot reach the database") {
				t.Fatalf("idemd went on to the database; want the config checked first:\n%s", out)
			}
			if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != 1 {
				t.Fatalf("output has %d lines, want one:\n%s", lines, out)
			}
		})
	}
}

// TestInsecureFlagAllowsANonLoopbackAddress: with the flag the address check
// passes (and the start fails later, at the unreachable database).
func TestInsecureFlagAllowsANonLoopbackAddress(t *testing.T) {
	t.Parallel()
	out, code := run(t, nil, "serve", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=1",
		"--listen", "0.0.0.0:7070", "--insecure-allow-unauthenticated")
	if code == 0 || !strings.Contains(out, "cannot reach the database") {
		t.Fatalf("exit %d, output %q; want it past the address check, stopped by the database", code, out)
	}
	out, code = run(t, []string{"IDEM_INSECURE_ALLOW_UNAUTHENTICATED=true"}, "serve", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=1",
		"--listen", "0.0.0.0:7070")
	if code == 0 || !strings.Contains(out, "cannot reach the database") {
		t.Fatalf("with the env twin: exit %d, output %q", code, out)
	}
}

var tokenLine = regexp.MustCompile(`(?m)^(idem_[A-Za-z0-9_-]{43})$`)
var hashLine = regexp.MustCompile(`(?m)^tokens: \["(sha256:[0-9a-f]{64})"\]$`)

// TestTokenNew: `idemd token new` prints a fresh token and the hash line to
// paste, which is the token's SHA-256 and which a config file accepts.
func TestTokenNew(t *testing.T) {
	t.Parallel()
	out, code := run(t, nil, "token", "new", "--tenant", "payments")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	tok, hash := tokenLine.FindStringSubmatch(out), hashLine.FindStringSubmatch(out)
	if tok == nil || hash == nil {
		t.Fatalf("output lacks a token line or a tokens line:\n%s", out)
	}
	if config.HashToken(tok[1]) != hash[1] {
		t.Fatalf("printed hash %s is not the SHA-256 of the printed token", hash[1])
	}
	if !strings.Contains(out, `"payments"`) {
		t.Errorf("output does not name the tenant:\n%s", out)
	}
	if _, err := config.Parse([]byte("tenants:\n  - name: payments\n    " + hashLine.FindString(out) + "\n")); err != nil {
		t.Errorf("the printed line does not paste into a config: %v", err)
	}
	again, _ := run(t, nil, "token", "new", "--tenant", "payments")
	if m := tokenLine.FindStringSubmatch(again); m == nil || m[1] == tok[1] {
		t.Errorf("a second token new printed the same token (or none)")
	}

	// -o json: stdout is one object and nothing else, for a script.
	out, code = run(t, nil, "token", "new", "--tenant", "payments", "-o", "json")
	var js struct{ Tenant, Token, Hash string }
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&js); code != 0 || err != nil || dec.More() {
		t.Fatalf("token new -o json: exit %d, %v; want one JSON object:\n%s", code, err, out)
	}
	if js.Tenant != "payments" || !tokenLine.MatchString(js.Token) || js.Hash != config.HashToken(js.Token) {
		t.Errorf("token new -o json printed %+v; want the tenant, a token and its hash", js)
	}
	if _, err := config.Parse([]byte(fmt.Sprintf("tenants:\n  - name: payments\n    tokens: [%q]\n", js.Hash))); err != nil {
		t.Errorf("the hash of -o json does not go into a config: %v", err)
	}

	out, code = run(t, nil, "token", "new", "--tenant", "Payments!")
	if code == 0 || !strings.Contains(out, "--tenant") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("bad tenant name: exit %d, output %q; want one line naming --tenant", code, out)
	}
}

// TestTokenNewNamed: `idemd token new --name` prints a token and the
// named_tokens entry to paste, which a config file accepts with its name;
// a name a config would refuse is refused at once.
func TestTokenNewNamed(t *testing.T) {
	t.Parallel()
	out, code := run(t, nil, "token", "new", "--tenant", "ops", "--name", "alice@example.com")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	tok := tokenLine.FindStringSubmatch(out)
	entry := regexp.MustCompile(`(?m)^named_tokens: \[.*\]$`).FindString(out)
	if tok == nil || entry == "" {
		t.Fatalf("output lacks a token line or a named_tokens line:\n%s", out)
	}
	f, err := config.Parse([]byte("tenants:\n  - name: ops\n    " + entry + "\n"))
	if err != nil {
		t.Fatalf("the printed line does not paste into a config: %v", err)
	}
	if nt := f.Tenants[0].NamedTokens; len(nt) != 1 || nt[0].Name != "alice@example.com" || nt[0].Token != config.HashToken(tok[1]) {
		t.Fatalf("the pasted entry is %+v; want alice's name and the token's hash", nt)
	}
	out, code = run(t, nil, "token", "new", "--tenant", "ops", "--name", "al\tice")
	if code == 0 || !strings.Contains(out, "--name") {
		t.Errorf("a name with a control character: exit %d, %q; want a refusal naming --name", code, out)
	}
}

// startIdemd runs `idemd serve` with args against a fresh schema until the
// test ends, and returns its addresses once it serves. It listens on
// 127.0.0.1:0 for gRPC; args may turn the JSON API on (--json-listen
// 127.0.0.1:0 for a port of the system's choosing).
func startIdemd(t *testing.T, args ...string) servedAddrs {
	t.Helper()
	addrs, _ := startIdemdOn(t, testdb.New(t, testdb.Unmigrated()).URL, args...)
	return addrs
}

// startIdemdOn is startIdemd on the database at url; logs returns what idemd
// has logged so far.
func startIdemdOn(t *testing.T, url string, args ...string) (addrs servedAddrs, logs func() []string) {
	t.Helper()
	cmd := exec.Command(idemdBinary, append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", "", "--log-format", "json", "--sweep-interval", "0"}, args...)...)
	cmd.Env = append(environWithout(append([]string{"IDEM_DATABASE_URL"}, securityEnv...)...), "IDEM_DATABASE_URL="+url)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Read the log to the end so idemd never blocks on a full pipe; keep
	// it for the failure message.
	serving, ended := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var lines []string
	var servingLine string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if servingLine == "" && strings.Contains(sc.Text(), servingMsg) {
				servingLine = sc.Text()
				close(serving)
			}
		}
		close(ended)
	}()
	logs = func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
	select {
	case <-serving:
		return parseServing(t, servingLine), logs
	case <-ended:
	case <-time.After(30 * time.Second):
	}
	t.Fatalf("idemd did not serve; its log:\n%s", strings.Join(logs(), "\n"))
	return servedAddrs{}, nil
}

// TestSDKAgainstServeWithConfig: the Go SDK's WithToken and WithTLS work
// against the real binary with a config file: plaintext on loopback, TLS
// with a token, and mutual TLS where the certificate names the tenant.
func TestSDKAgainstServeWithConfig(t *testing.T) {
	t.Parallel()
	token, err := config.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ca := testcerts.NewCA(t, "idemd test CA")
	dir := t.TempDir()
	certFile, keyFile := testcerts.WritePEM(t, dir, "server", ca.Server(t))
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tokenConfig := writeConfig(t, `tenants:
  - name: payments
    tokens: ["`+config.HashToken(token)+`"]
    namespaces: ["process_payment"]
`)
	// Subjects need --client-ca, so mutual TLS has a file of its own.
	certConfig := writeConfig(t, `tenants:
  - name: payments
    tokens: ["`+config.HashToken(token)+`"]
    client_cert_subjects: ["CN=payments-worker"]
    namespaces: ["process_payment"]
`)

	roundTrip := func(t *testing.T, c *client.Client) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := c.Claim(ctx, client.ClaimRequest{Namespace: "process_payment", Key: "order-1"})
		if err != nil || res.Outcome != client.OutcomeAcquired {
			t.Fatalf("Claim: %+v, %v", res, err)
		}
		if _, err := c.Complete(ctx, client.CompleteRequest{Namespace: "process_payment", Key: "order-1", Token: res.Record.Token, Result: []byte("ok")}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		_, err = c.Claim(ctx, client.ClaimRequest{Namespace: "send_email", Key: "order-1"})
		if status.Code(err) != codes.PermissionDenied || client.Reason(err) != "NAMESPACE_NOT_ALLOWED" {
			t.Fatalf("Claim outside the allow-list: %v (reason %q); want PERMISSION_DENIED / NAMESPACE_NOT_ALLOWED", err, client.Reason(err))
		}
	}
	newClient := func(t *testing.T, addr string, opts ...client.Option) *client.Client {
		t.Helper()
		c, err := client.New(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	t.Run("token on loopback", func(t *testing.T) {
		t.Parallel()
		addr := startIdemd(t, "--config", tokenConfig).Listen
		roundTrip(t, newClient(t, addr, client.WithInsecure(), client.WithToken(token)))

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := newClient(t, addr, client.WithInsecure(), client.WithToken(token+"x")).Lookup(ctx, client.LookupRequest{Namespace: "process_payment", Key: "order-1"})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Lookup with a wrong token: %v; want UNAUTHENTICATED", err)
		}
		_, err = newClient(t, addr, client.WithInsecure()).Lookup(ctx, client.LookupRequest{Namespace: "process_payment", Key: "order-1"})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Lookup without a token: %v; want UNAUTHENTICATED", err)
		}
	})
	t.Run("TLS with a token", func(t *testing.T) {
		t.Parallel()
		addr := startIdemd(t, "--config", tokenConfig, "--tls-cert", certFile, "--tls-key", keyFile).Listen
		roundTrip(t, newClient(t, addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}), client.WithToken(token)))
	})
	t.Run("mutual TLS, the certificate names the tenant", func(t *testing.T) {
		t.Parallel()
		addr := startIdemd(t, "--config", certConfig, "--tls-cert", certFile, "--tls-key", keyFile, "--client-ca", caFile).Listen
		cert := ca.Client(t, pkix.Name{CommonName: "payments-worker"})
		roundTrip(t, newClient(t, addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))

		// Without a client certificate the handshake fails, token or not.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := newClient(t, addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}), client.WithToken(token)).
			Lookup(ctx, client.LookupRequest{Namespace: "process_payment", Key: "order-1"})
		if err == nil || errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.Unavailable {
			t.Fatalf("Lookup without a client certificate: %v; want UNAVAILABLE (handshake refused)", err)
		}
	})
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "127.0.0.2:7070": true, "localhost:7070": true, "LOCALHOST:1": true, "[::1]:7070": true,
		"0.0.0.0:7070": false, ":7070": false, "[::]:7070": false, "10.0.0.1:7070": false,
		"idem.internal:7070": false, "127.0.0.1": false, "": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v; want %v", addr, got, want)
		}
	}
}

// TestWarningSaysWhatIsServed: the warning about serving without
// authentication names what idemd does serve: without --config, nothing
// but the tenant default; with a config of policies alone, that file and its
// policies, never "no --config".
func TestWarningSaysWhatIsServed(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policies.yaml")
	policies := "policies:\n  - namespaces: [\"payments.*\"]\n    lease_ttl: 30s\n  - namespaces: [\"mail\"]\n    max_lease_ttl: 1m\n"
	if err := os.WriteFile(file, []byte(policies), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags securityFlags
		want  string
	}{
		{"no config", securityFlags{}, `no --config: serving without authentication; every caller is tenant "default"`},
		{"policies only", securityFlags{Config: file}, "config " + file + ` has no tenants, only 2 policies for the tenant "default": serving without authentication; every caller is tenant "default"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec, err := tc.flags.load("127.0.0.1:7070", 65536)
			if err != nil {
				t.Fatal(err)
			}
			if len(sec.warnings) != 1 || !strings.HasPrefix(sec.warnings[0], tc.want) {
				t.Errorf("warnings %q; want one that starts %q", sec.warnings, tc.want)
			}
		})
	}
}
