package main

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// TestVersionCommandAndFlag: `idemd version` and `idemd --version` print the
// same one line: the version, the commit and the Go version that built it.
func TestVersionCommandAndFlag(t *testing.T) {
	t.Parallel()
	cmdOut, code := run(t, nil, "version")
	if code != 0 {
		t.Fatalf("idemd version: exit %d, output %q", code, cmdOut)
	}
	flagOut, code := run(t, nil, "--version")
	if code != 0 {
		t.Fatalf("idemd --version: exit %d, output %q", code, flagOut)
	}
	if cmdOut != flagOut {
		t.Errorf("idemd version printed %q, idemd --version %q; want the same", cmdOut, flagOut)
	}
	line := strings.TrimSuffix(cmdOut, "\n")
	if strings.Contains(line, "\n") || !strings.HasPrefix(line, "idemd ") {
		t.Fatalf("idemd version = %q; want one line that starts with idemd", cmdOut)
	}
	for _, want := range []string{"commit ", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(line, want) {
			t.Errorf("idemd version = %q; want it to name %q", line, want)
		}
	}
}

// TestVersionIsStampedAtBuildTime: the Makefile's -X main.version=… is
// what version prints.
func TestVersionIsStampedAtBuildTime(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "idemd")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7-test -X main.commit=0123456789abcdef0123", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "idemd v9.8.7-test (commit 0123456789ab, ") {
		t.Fatalf("idemd --version = %q, %v; want the stamped version and commit", out, err)
	}
}

// TestFlagErrorsAreOneLineWithAHint: a mistake on idemd's command line is one
// line in idem's format, with exit code 1 and where to read the flags.
func TestFlagErrorsAreOneLineWithAHint(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--nope"}, `idemd: unknown flag --nope; run "idemd serve --help" for its flags`},
		{[]string{"serve", "--log-format", "xml"}, `run "idemd serve --help" for its flags`},
		{[]string{"nope"}, `; run "idemd --help" for the commands`},
		// A flag of a command before any command: say which, and how.
		{[]string{"--listen", "127.0.0.1:7999"}, `idemd: unknown flag --listen: it is a flag of "idemd serve"; the command goes first: idemd serve --listen 127.0.0.1:7999`},
		{[]string{"--database-url=postgres://x", "--log-level", "debug"}, `it is a flag of "idemd serve", "idemd migrate" and "idemd sweep"; the command goes first: idemd serve --database-url=postgres://x --log-level debug`},
		{[]string{"--no-migrate", "--data-dir", "my dir"}, `it is a flag of "idemd serve"; the command goes first: idemd serve --no-migrate --data-dir 'my dir'`},
	}
	for _, tc := range cases {
		out, code := run(t, nil, tc.args...)
		if code != 1 {
			t.Errorf("idemd %v: exit %d, want 1; output %q", tc.args, code, out)
		}
		if !strings.HasPrefix(out, "idemd: ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("idemd %v printed %q; want one line with %q", tc.args, out, tc.want)
		}
		if strings.Contains(out, "error:") {
			t.Errorf("idemd %v printed %q; want idem's format, without kong's \"error:\"", tc.args, out)
		}
	}
}

// TestStartupLogSaysWhatWasAskedFor: the serving line shows the listen
// address as given (0.0.0.0, not the [::] Go reports) with the port idemd
// bound (the system's choice for port 0), and a config file is logged with
// its number of tenants.
func TestStartupLogSaysWhatWasAskedFor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token, err := config.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "idem.yaml")
	body := "tenants:\n  - name: payments\n    tokens: [\"" + config.HashToken(token) + "\"]\n" +
		"  - name: billing\n    tokens: [\"" + config.HashToken(token+"2") + "\"]\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, "--listen", "0.0.0.0:0", "--config", cfg)

	var serving, loaded map[string]any
	for _, line := range strings.Split(p.log(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "idemd serving":
			serving = m
		case "config loaded":
			loaded = m
		}
	}
	listen, _ := serving["listen"].(string)
	host, port, err := net.SplitHostPort(listen)
	if serving == nil || err != nil || host != "0.0.0.0" || port == "0" {
		t.Errorf("serving line %v; want listen=0.0.0.0:<the port bound>", serving)
	} else if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 10*time.Second); err != nil {
		t.Errorf("serving line says listen=%s, but idemd does not answer on port %s: %v", listen, port, err)
	} else {
		conn.Close() // the port logged is the one idemd listens on
	}
	if loaded == nil || loaded["file"] != cfg || loaded["tenants"] != float64(2) {
		t.Errorf("config line %v; want file=%s tenants=2\n%s", loaded, cfg, p.log())
	}
}

// TestMigrateCreatesTheSchemaOfSearchPath: `idemd migrate` on a URL whose
// search_path names a schema that does not exist creates it and migrates
// into it.
func TestMigrateCreatesTheSchemaOfSearchPath(t *testing.T) {
	t.Parallel()
	base := testdb.BaseURL(t)
	schema := "idemd_new_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	out, code := run(t, nil, "migrate", "--database-url", u.String())
	if code != 0 || !strings.Contains(out, "applied migrations") || !strings.Contains(out, `schema=`+schema) {
		t.Fatalf("idemd migrate with search_path=%s: exit %d, output %q; want the schema created and migrated", schema, code, out)
	}
}

// TestBusyPortNamesTheFlag: an address another program listens on stops
// idemd with a message that names the flag and the variable that move it.
func TestBusyPortNamesTheFlag(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	for _, tc := range []struct{ flag, env string }{
		{"--listen", "IDEM_LISTEN"},
		{"--http-listen", "IDEM_HTTP_LISTEN"},
		{"--json-listen", "IDEM_JSON_LISTEN"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			t.Parallel()
			args := []string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--json-listen", "127.0.0.1:0"}
			out, code := run(t, nil, append(args, tc.flag, busy.Addr().String())...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if code == 0 || !strings.Contains(last, busy.Addr().String()) || !strings.Contains(last, "in use") ||
				!strings.Contains(last, tc.flag+" ") || !strings.Contains(last, tc.env) {
				t.Fatalf("exit %d, output:\n%s\nwant a last line that says %s is in use and names %s and %s", code, out, busy.Addr(), tc.flag, tc.env)
			}
		})
	}
}
