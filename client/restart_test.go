package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/internal/testsupport/fixedport"
	"github.com/idemhq/idem/internal/testsupport/testbin"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// idemdBinary is cmd/idemd, built once for the tests that restart a real
// idemd process.
var idemdBinary string

func TestMain(m *testing.M) { testbin.MainOf(m, "../cmd/idemd", "idemd", &idemdBinary) }

// restarts are the restarts of idemd Do must ride out, as a rolling deploy
// causes them: the time from idemd's exit to the start of its successor.
var restarts = []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second}

// TestDoRidesOutARestartOfIdemd stops a real idemd process and starts it
// again on the same address, with the default client options and retry
// policy: while a job's Complete is in flight (its handler stops idemd after
// the side effect, then returns), while its Fail is in flight, and while its
// Claim is. The side effect happens once and the record ends COMPLETED (or
// FAILED), on both stores.
func TestDoRidesOutARestartOfIdemd(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"postgres", "sqlite"} {
		for _, during := range []string{"complete", "claim", "fail"} {
			for _, down := range restarts {
				if during == "fail" && down != restarts[1] {
					continue // Fail takes the same path as Complete; one restart shows it
				}
				t.Run(fmt.Sprintf("%s/%s/%s", store, during, down), func(t *testing.T) {
					t.Parallel()
					testDoAcrossRestart(t, store, during, down)
				})
			}
		}
	}
}

func testDoAcrossRestart(t *testing.T, store, during string, down time.Duration) {
	d := startRestartable(t, store)
	c, err := client.New(d.addr, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// A worker that has been talking to idemd: its channel is connected
	// when the restart begins.
	if _, err := c.Do(ctx, client.Job{Namespace: "restart", Key: "warm-up"}, value("ok")); err != nil {
		t.Fatalf("Do before the restart: %v", err)
	}

	restarted := make(chan error, 1)
	var servingAgain time.Time // written before restarted is sent on
	restart := func() error {
		if err := d.stop(); err != nil {
			return err
		}
		go func() {
			time.Sleep(down) // the downtime under test, not a wait for something
			err := d.start()
			servingAgain = time.Now()
			restarted <- err
		}()
		return nil
	}
	job := client.Job{Namespace: "restart", Key: "charge-1", LeaseTTL: 30 * time.Second}
	var effects atomic.Int64
	fn := func(context.Context, client.Attempt) ([]byte, error) {
		effects.Add(1)
		if during == "complete" || during == "fail" {
			if err := restart(); err != nil {
				return nil, fmt.Errorf("stopping idemd: %w", err)
			}
		}
		if during == "fail" {
			return nil, client.Permanent(errors.New("card declined"))
		}
		return []byte("charged"), nil
	}
	if during == "claim" {
		if err := restart(); err != nil {
			t.Fatalf("stopping idemd: %v", err)
		}
	}

	res, err := c.Do(ctx, job, fn)
	returned := time.Now()
	if rerr := <-restarted; rerr != nil {
		t.Fatalf("restarting idemd: %v", rerr)
	}
	t.Logf("Do returned %v after idemd served again", returned.Sub(servingAgain).Round(time.Millisecond))
	want := client.StateCompleted
	if during == "fail" {
		want = client.StateFailed
		if err == nil || err.Error() != "card declined" || res.Record.State != client.StateFailed {
			t.Errorf("Do = %+v, %v; want fn's error, recorded as FAILED", res, err)
		}
	} else if err != nil || string(res.Value) != "charged" || res.Record.State != client.StateCompleted {
		t.Errorf("Do = %+v, %v; want the value, recorded as COMPLETED", res, err)
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("the side effect ran %d times, want 1", n)
	}
	rec, err := c.Lookup(ctx, client.LookupRequest{Namespace: job.Namespace, Key: job.Key})
	if err != nil || rec.State != want {
		t.Errorf("Lookup after the restart = %v, %v; want %v", rec.State, err, want)
	}
	// The next delivery of the job replays it instead of running it again.
	again, err := c.Do(ctx, job, fn)
	if n := effects.Load(); n != 1 || (during != "fail" && (err != nil || !again.Replayed)) {
		t.Errorf("the next delivery: %+v, %v, %d side effects; want the stored outcome without a run", again, err, n)
	}
	if t.Failed() {
		t.Logf("idemd's log:\n%s", d.logText())
	}
}

// restartable is an idemd process that a test stops (SIGTERM, as a deploy
// does) and starts again on the same address and store.
type restartable struct {
	t    *testing.T
	addr string
	args []string
	env  []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited and its log is read
	lines  []string
}

// startRestartable starts idemd on store ("postgres" or "sqlite") on a port
// of fixedport's, outside the range the system hands out for port 0, so
// that no other socket on the machine takes it while idemd is down.
func startRestartable(t *testing.T, store string) *restartable {
	t.Helper()
	d := &restartable{t: t, env: environWithoutIdem()}
	switch store {
	case "postgres":
		db := testdb.New(t, testdb.MaxConns(1))
		d.env = append(d.env, "IDEM_DATABASE_URL="+db.URL+"&pool_max_conns=2")
	case "sqlite":
		d.args = []string{"--data-dir", t.TempDir()}
	}
	t.Cleanup(d.kill)
	var err error
	for range 5 {
		if d.addr, err = fixedport.Addr(); err != nil {
			t.Fatal(err)
		}
		if err = d.start(); err == nil {
			return d
		}
	}
	t.Fatalf("idemd did not start: %v", err)
	return nil
}

// start runs idemd and returns once it serves, or with its log if it ends
// first.
func (d *restartable) start() error {
	cmd := exec.Command(idemdBinary, append([]string{"serve", "--listen", d.addr, "--http-listen", "", "--json-listen", "",
		"--log-format", "json", "--sweep-interval", "0"}, d.args...)...)
	cmd.Env = d.env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited, serving := make(chan struct{}), make(chan struct{})
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			d.mu.Unlock()
			if !seen && strings.Contains(sc.Text(), `"msg":"idemd serving"`) {
				seen = true
				close(serving)
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-serving:
		return nil
	case <-exited:
		return fmt.Errorf("idemd on %s exited before it served; its log:\n%s", d.addr, d.logText())
	}
}

// stop sends SIGTERM and returns once idemd has exited.
func (d *restartable) stop() error {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("idemd did not exit within a minute of SIGTERM")
	}
}

func (d *restartable) kill() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (d *restartable) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.lines, "\n")
}

// environWithoutIdem is the environment less every IDEM_ variable, so that
// only what the test sets reaches idemd.
func environWithoutIdem() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	return env
}
