package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem/internal/testsupport/testbin"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// idemBinary is built once by TestMain, so that the tests run the real
// binary as a script would.
var idemBinary string

func TestMain(m *testing.M) { testbin.Main(m, "idem", &idemBinary) }

// result is what one run of idem did.
type result struct {
	stdout string
	stderr string
	code   int
}

// runOpts change how idem runs.
type runOpts struct {
	env   []string // added to the environment, which holds no IDEM_* of the developer's
	stdin []byte
	dir   string
}

// runIdem runs the idem binary with args.
func runIdem(t *testing.T, opts runOpts, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemBinary, args...)
	cmd.Env = append(environWithoutIdem(), opts.env...)
	cmd.Dir = opts.dir
	cmd.Stdin = bytes.NewReader(opts.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return result{stdout.String(), stderr.String(), 0}
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		return result{stdout.String(), stderr.String(), exitErr.ExitCode()}
	}
	t.Fatalf("run idem %v: %v\nstderr: %s", args, err, stderr.String())
	return result{}
}

// environWithoutIdem is the environment less every IDEM_* variable, so that
// a developer's own settings cannot leak into a test.
func environWithoutIdem() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	return env
}

// fixture is a real server over a fresh schema and a way to run idem
// against it.
type fixture struct {
	t   *testing.T
	srv *testserver.Server
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return &fixture{t: t, srv: testserver.Start(t)}
}

// with is the fixture for a subtest t, so that failures stop t.
func (f *fixture) with(t *testing.T) *fixture { return &fixture{t: t, srv: f.srv} }

// idem runs idem against the fixture's server.
func (f *fixture) idem(args ...string) result {
	f.t.Helper()
	return runIdem(f.t, runOpts{}, append([]string{"--addr", f.srv.Addr}, args...)...)
}

// idemWith runs idem against the fixture's server with opts.
func (f *fixture) idemWith(opts runOpts, args ...string) result {
	f.t.Helper()
	return runIdem(f.t, opts, append([]string{"--addr", f.srv.Addr}, args...)...)
}

// claim claims a fresh key and returns its lease token.
func (f *fixture) claim(ns, key string, args ...string) string {
	f.t.Helper()
	r := f.idem(append([]string{"claim", "-n", ns, "-k", key}, args...)...)
	if r.code != 0 {
		f.t.Fatalf("claim %s/%s: exit %d, stderr %q; want 0", ns, key, r.code, r.stderr)
	}
	token := strings.TrimSpace(r.stdout)
	if _, err := strconv.ParseInt(token, 10, 64); err != nil || r.stdout != token+"\n" {
		f.t.Fatalf("claim %s/%s printed %q on stdout; want the lease token alone on a line", ns, key, r.stdout)
	}
	return token
}

// must fails the test unless r exited with code.
func (r result) must(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %q\nstderr: %q", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// parseJSON reads idem's -o json output into m with protojson, so that the
// field names are checked against the proto's, and checks its layout: two
// spaces of indent a level, one space after each colon.
func parseJSON(t *testing.T, out string, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("stdout is not a %T in protobuf JSON: %v\n%s", m, err, out)
	}
	var compact, indented bytes.Buffer
	if err := json.Compact(&compact, []byte(out)); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&indented, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	if indented.String()+"\n" != out {
		t.Errorf("-o json is not laid out evenly (two spaces a level, one after a colon):\n%s", out)
	}
}

// closedAddr is a loopback address that nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// oneLine fails the test unless s is one line starting with "idem: ".
func oneLine(t *testing.T, s string) {
	t.Helper()
	if !strings.HasPrefix(s, "idem: ") || strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("stderr is not one line starting with \"idem: \": %q", s)
	}
}
