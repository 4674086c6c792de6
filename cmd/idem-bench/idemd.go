package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// localIdemd is an `idemd serve` that idem-bench starts for --start-idemd, as
// a process of its own so that its CPU time is read apart from the load
// generator's: on loopback ports, with its defaults (no tenants, no TLS), its
// profiler on (--pprof, for --idemd-cpuprofile), over a Postgres schema of its
// own that close drops, or over SQLite in a temporary data directory.
type localIdemd struct {
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has been waited for
	waitErr  error
	addr     string // gRPC
	httpAddr string // /metrics, /readyz, /debug/pprof/
	// Postgres: the base URL, the schema and the application_name of
	// idemd's connections. SQLite: the data directory.
	baseURL, schema, appName string
	dataDir                  string
}

// idemdOptions is how --start-idemd runs idemd.
type idemdOptions struct {
	bin     string
	sqlite  bool // no database URL: SQLite in a temporary --data-dir
	baseURL string
	schema  string
	appName string
	// sharedSchema: another idemd created schema and drops it; this one
	// only uses it (a second replica).
	sharedSchema  bool
	poolMaxConns  int32
	sweepInterval time.Duration
	logLevel      string
	log           io.Writer // idemd's stderr
}

// startIdemd starts idemd and waits until /readyz answers.
func startIdemd(ctx context.Context, o idemdOptions) (_ *localIdemd, err error) {
	d := &localIdemd{baseURL: o.baseURL, schema: o.schema, appName: o.appName}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close(context.WithoutCancel(ctx)))
		}
	}()
	if d.addr, err = freeLoopbackAddr(); err != nil {
		return d, err
	}
	if d.httpAddr, err = freeLoopbackAddr(); err != nil {
		return d, err
	}
	args := []string{"serve", "--listen", d.addr, "--http-listen", d.httpAddr, "--json-listen", "", "--pprof",
		"--sweep-interval", o.sweepInterval.String(), "--log-level", o.logLevel}
	env := environWithoutIdem()
	if o.sqlite {
		if d.dataDir, err = os.MkdirTemp("", "idem-bench-sqlite-"); err != nil {
			return d, err
		}
		args = append(args, "--data-dir", d.dataDir)
	} else {
		if o.sharedSchema {
			d.schema = "" // not ours to drop
		} else if err := createSchema(ctx, o.baseURL, o.schema); err != nil {
			d.schema = "" // not ours to drop
			return d, err
		}
		u, err := withQuery(o.baseURL, "search_path", o.schema)
		if err == nil {
			u, err = withQuery(u, "application_name", o.appName)
		}
		if err == nil && o.poolMaxConns > 0 {
			u, err = withQuery(u, "pool_max_conns", strconv.Itoa(int(o.poolMaxConns)))
		}
		if err != nil {
			return d, fmt.Errorf("--database-url: %w", err)
		}
		// In the environment rather than argv, where ps would show a
		// password.
		env = append(env, "IDEM_DATABASE_URL="+u)
	}
	d.cmd = exec.Command(o.bin, args...)
	d.cmd.Env = env
	d.cmd.Stdout, d.cmd.Stderr = o.log, o.log
	if err := d.cmd.Start(); err != nil {
		d.cmd = nil
		return d, fmt.Errorf("start %s: %w", o.bin, err)
	}
	d.exited = make(chan struct{})
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	return d, d.waitReady(ctx, 60*time.Second)
}

// waitReady polls /readyz until it answers 200, idemd exits, or timeout.
func (d *localIdemd) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := d.get(ctx, "/readyz", io.Discard); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("idemd did not become ready within %s: %w (--idemd-log - shows its log)", timeout, err)
		}
		select {
		case <-d.exited:
			return fmt.Errorf("idemd exited while starting: %v (--idemd-log - shows its log)", d.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pid is idemd's process id, for its CPU time.
func (d *localIdemd) pid() uint32 { return uint32(d.cmd.Process.Pid) }

// get fetches one of idemd's HTTP endpoints into w.
func (d *localIdemd) get(ctx context.Context, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.httpAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// metrics reads the named unlabelled samples from idemd's /metrics; a
// sample that is absent is left out.
func (d *localIdemd) metrics(ctx context.Context, names ...string) (map[string]float64, error) {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := d.get(ctx, "/metrics", pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				if v, err := strconv.ParseFloat(value, 64); err == nil {
					out[n] = v
				}
			}
		}
	}
	_ = pr.Close()
	if err := <-errc; err != nil {
		return nil, err
	}
	return out, nil
}

// close stops idemd (SIGTERM, then SIGKILL after 15 s) and drops its schema
// or data directory.
func (d *localIdemd) close(ctx context.Context) error {
	var err error
	if d.cmd != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(15 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
			err = errors.New("idemd did not stop within 15 s of SIGTERM; killed")
		}
	}
	if d.dataDir != "" {
		err = errors.Join(err, os.RemoveAll(d.dataDir))
	}
	if d.schema != "" {
		err = errors.Join(err, dropSchema(ctx, d.baseURL, d.schema))
	}
	return err
}

// buildIdemd builds idemd into dir with the go command, from the module
// idem-bench runs in; --idemd-bin skips this.
func buildIdemd(ctx context.Context, dir string, stderr io.Writer) (string, error) {
	bin := filepath.Join(dir, "idemd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/idemhq/idem/cmd/idemd")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build idemd (run from the idem module, or pass --idemd-bin): %w", err)
	}
	return bin, nil
}

// freeLoopbackAddr returns a loopback address with a port that was free a
// moment ago.
func freeLoopbackAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := lis.Addr().String()
	return addr, lis.Close()
}

// environWithoutIdem is this process's environment without IDEM_*
// variables, which idemd would take for its flags' env twins.
func environWithoutIdem() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	return env
}

func createSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("cannot reach the database at %s: %w", redactURL(url), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	return nil
}

// withQuery returns raw with the query parameter key set to value.
func withQuery(raw, key, value string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redactURL hides a password in a database URL before it is printed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(a database URL that does not parse)"
	}
	return u.Redacted()
}
