package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
)

// paymentsToken authenticates the tenant "payments" of tenantServer, which
// may use the namespace process_payment only.
const paymentsToken = "idem_cli-test-payments-token"

// tenantServer starts a server that requires a bearer token.
func tenantServer(t *testing.T) *testserver.Server {
	t.Helper()
	tenants, err := services.NewTenants(&config.File{Tenants: []config.Tenant{{
		Name:       "payments",
		Tokens:     []string{config.HashToken(paymentsToken)},
		Namespaces: []string{"process_payment"},
	}}})
	if err != nil {
		t.Fatalf("NewTenants: %v", err)
	}
	return testserver.StartWith(t, testserver.Options{Config: server.Config{Tenants: tenants}})
}

// TestEveryExitCode makes every documented exit code happen with a real
// server, and checks that none is left untested.
func TestEveryExitCode(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var (
		mu   sync.Mutex
		seen = map[exitCode]bool{}
	)
	cases := []struct {
		name string
		want exitCode
		// do runs idem (after any setup it needs) and returns the run whose
		// exit code is checked, and a text its stderr must hold.
		do func(t *testing.T, f *fixture) (result, string)
	}{
		{"acquired", exitOK, func(t *testing.T, f *fixture) (result, string) {
			return f.idem("claim", "-n", "codes", "-k", "ok"), "acquired codes/ok"
		}},
		{"usage", exitError, func(t *testing.T, f *fixture) (result, string) {
			return f.idem("claim", "-n", "codes", "-k", "x", "--no-such-flag"), "unknown flag --no-such-flag"
		}},
		{"in progress", exitInProgress, func(t *testing.T, f *fixture) (result, string) {
			f.claim("codes", "busy")
			return f.idem("claim", "-n", "codes", "-k", "busy"), "in progress in another worker"
		}},
		{"completed", exitCompleted, func(t *testing.T, f *fixture) (result, string) {
			tok := f.claim("codes", "done")
			f.idem("complete", "-n", "codes", "-k", "done", "--lease-token", tok).must(t, 0, "complete")
			return f.idem("claim", "-n", "codes", "-k", "done"), "completed earlier (replay)"
		}},
		{"failed", exitFailed, func(t *testing.T, f *fixture) (result, string) {
			tok := f.claim("codes", "broken")
			f.idem("fail", "-n", "codes", "-k", "broken", "--lease-token", tok, "--error", "card declined").must(t, 0, "fail")
			return f.idem("claim", "-n", "codes", "-k", "broken"), "card declined"
		}},
		{"not found", exitNotFound, func(t *testing.T, f *fixture) (result, string) {
			return f.idem("lookup", "-n", "codes", "-k", "never"), "(NOT_FOUND/NOT_FOUND)"
		}},
		{"lease lost", exitLeaseLost, func(t *testing.T, f *fixture) (result, string) {
			tok := f.claim("codes", "taken")
			stale, _ := strconv.ParseInt(tok, 10, 64)
			return f.idem("complete", "-n", "codes", "-k", "taken", "--lease-token", strconv.FormatInt(stale+1000, 10)),
				"(ABORTED/LEASE_LOST)"
		}},
		{"fingerprint mismatch", exitFingerprintMismatch, func(t *testing.T, f *fixture) (result, string) {
			f.claim("codes", "fp", "--fingerprint", "aa")
			return f.idem("claim", "-n", "codes", "-k", "fp", "--fingerprint", "bb"), "(FAILED_PRECONDITION/FINGERPRINT_MISMATCH)"
		}},
		{"already terminal", exitAlreadyTerminal, func(t *testing.T, f *fixture) (result, string) {
			tok := f.claim("codes", "ended")
			f.idem("complete", "-n", "codes", "-k", "ended", "--lease-token", tok).must(t, 0, "complete")
			return f.idem("heartbeat", "-n", "codes", "-k", "ended", "--lease-token", tok), "(FAILED_PRECONDITION/ALREADY_TERMINAL)"
		}},
		{"invalid argument", exitInvalidArgument, func(t *testing.T, f *fixture) (result, string) {
			return f.idem("claim", "-n", "Not A Namespace", "-k", "x"), "INVALID_ARGUMENT/INVALID_NAMESPACE"
		}},
		{"unauthenticated", exitDenied, func(t *testing.T, f *fixture) (result, string) {
			srv := tenantServer(t)
			return runIdem(t, runOpts{}, "--addr", srv.Addr, "claim", "-n", "process_payment", "-k", "x"), "pass your tenant's token with --token (IDEM_TOKEN)"
		}},
		{"permission denied", exitDenied, func(t *testing.T, f *fixture) (result, string) {
			srv := tenantServer(t)
			return runIdem(t, runOpts{}, "--addr", srv.Addr, "--token", paymentsToken, "claim", "-n", "refunds", "-k", "x"),
				"(PERMISSION_DENIED/NAMESPACE_NOT_ALLOWED)"
		}},
		{"unavailable", exitUnavailable, func(t *testing.T, f *fixture) (result, string) {
			addr := closedAddr(t)
			return runIdem(t, runOpts{}, "--addr", addr, "lookup", "-n", "codes", "-k", "x"), "cannot reach idemd at " + addr
		}},
		{"unresolved", exitUnresolved, func(t *testing.T, f *fixture) (result, string) {
			srv := testserver.StartWith(t, testserver.Options{Config: server.Config{Policies: []config.Policy{
				{Namespaces: []string{"held"}, OnLeaseExpiry: config.OnLeaseExpiryHold},
			}}})
			runIdem(t, runOpts{}, "--addr", srv.Addr, "claim", "-n", "held", "-k", "x", "--lease-ttl", "1s").must(t, 0, "claim")
			time.Sleep(1100 * time.Millisecond)
			return runIdem(t, runOpts{}, "--addr", srv.Addr, "claim", "-n", "held", "-k", "x"), "is unresolved"
		}},
		{"not unresolved", exitNotUnresolved, func(t *testing.T, f *fixture) (result, string) {
			f.claim("codes", "live")
			return f.idem("resolve", "-n", "codes", "-k", "live", "--release"), "(FAILED_PRECONDITION/NOT_UNRESOLVED)"
		}},
		{"mixed", exitMixed, func(t *testing.T, f *fixture) (result, string) {
			f.claim("codes", "mixed-busy")
			return f.idem("claim", "-n", "codes", "mixed-busy", "mixed-new"), "claim of 2 keys in codes: 1 in_progress, 1 acquired"
		}},
		{"interrupted", exitInterrupted, func(t *testing.T, f *fixture) (result, string) {
			return interruptedRun(t), "interrupted before idemd answered"
		}},
	}
	t.Run("codes", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r, wantStderr := tc.do(t, f.with(t))
				r.must(t, int(tc.want), tc.name)
				if !strings.Contains(r.stderr, wantStderr) {
					t.Errorf("stderr %q does not say %q", r.stderr, wantStderr)
				}
				if tc.want != exitOK {
					oneLine(t, r.stderr)
				}
				mu.Lock()
				seen[tc.want] = true
				mu.Unlock()
			})
		}
	})
	for _, e := range exitCodes {
		if !seen[e.code] {
			t.Errorf("exit code %d (%s) has no case in this test", e.code, e.name)
		}
	}
}

// interruptedRun runs a lookup that idemd holds until idem gets SIGINT.
func interruptedRun(t *testing.T) result {
	t.Helper()
	entered := make(chan struct{}, 1)
	srv := testserver.StartWith(t, testserver.Options{ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if r, ok := req.(*idemv1.LookupRequest); ok && r.GetKey() == "hang" {
				entered <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return handler(ctx, req)
		})}})
	cmd := exec.Command(idemBinary, "--addr", srv.Addr, "lookup", "-n", "codes", "-k", "hang")
	cmd.Env = environWithoutIdem()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the lookup never reached the server")
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	code := -1
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Exited() {
		code = ws.ExitStatus()
	}
	return result{stdout.String(), stderr.String(), code}
}

// TestExitCodesAreDocumented: idem --help and docs/cli.md list every exit
// code of the table in exit.go, with the same number.
func TestExitCodesAreDocumented(t *testing.T) {
	t.Parallel()
	help := runIdem(t, runOpts{}, "--help").must(t, 0, "idem --help").stdout
	page, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, cliSection, ok := strings.Cut(string(page), "\n## Exit codes\n")
	if !ok {
		t.Fatal(`docs/cli.md has no "## Exit codes" section`)
	}
	cliSection, _, _ = strings.Cut(cliSection, "\n## ")
	readmeRow := regexp.MustCompile("(?m)^\\| `?(\\d+)`? \\| ([^|]+?) \\|")
	documented := map[string]string{}
	for _, m := range readmeRow.FindAllStringSubmatch(cliSection, -1) {
		documented[m[1]] = strings.TrimSpace(m[2])
	}
	if len(documented) != len(exitCodes) {
		t.Errorf("docs/cli.md's exit codes have %d rows; exit.go has %d", len(documented), len(exitCodes))
	}
	for _, e := range exitCodes {
		n := strconv.Itoa(int(e.code))
		if !regexp.MustCompile(`(?m)^\s+` + n + `\s+` + regexp.QuoteMeta(e.name) + `\s`).MatchString(help) {
			t.Errorf("idem --help does not list exit code %s (%s)", n, e.name)
		}
		if documented[n] != e.name {
			t.Errorf("docs/cli.md lists exit code %s as %q; exit.go calls it %q", n, documented[n], e.name)
		}
	}
}
