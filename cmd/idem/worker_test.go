package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// TestShellWorkerRunsEachSideEffectOnce runs examples/shell-worker/worker.sh
// twice at once on the same jobs against a real server, with the idem binary
// on PATH: every side effect happens exactly once, and every key is reported
// by both workers, once as done and once as a replay.
func TestShellWorkerRunsEachSideEffectOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	script, err := filepath.Abs("../../examples/shell-worker/worker.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sideEffects := filepath.Join(dir, "side-effects.log")
	var keys []string
	for i := 1; i <= 12; i++ {
		keys = append(keys, fmt.Sprintf("order-%02d", i))
	}
	jobs := []byte(strings.Join(keys, "\n") + "\n")
	env := append(environWithoutIdem(),
		"PATH="+filepath.Dir(idemBinary)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"IDEM_ADDR="+f.srv.Addr,
		"NAMESPACE=shell_test",
		"OUT="+sideEffects,
		"WORK_SECONDS=0.05", // long enough for the other worker to find jobs in progress
		"RETRY_DELAY=0.1",
	)

	type run struct {
		stdout, stderr bytes.Buffer
		err            error
	}
	worker := func(r *run, done chan<- struct{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", script)
		cmd.Env = env
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(jobs)
		cmd.Stdout, cmd.Stderr = &r.stdout, &r.stderr
		cmd.WaitDelay = 5 * time.Second // a stray child holding the pipes must not hang the test
		r.err = cmd.Run()
		done <- struct{}{}
	}
	runs := []*run{{}, {}}
	done := make(chan struct{})
	for _, r := range runs {
		go worker(r, done)
	}
	for range runs {
		<-done
	}
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("worker %d: %v\nstdout:\n%s\nstderr:\n%s", i, r.err, r.stdout.String(), r.stderr.String())
		}
		t.Logf("worker %d stderr:\n%s", i, r.stderr.String())
	}

	log, err := os.ReadFile(sideEffects)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		counts[line]++
	}
	for _, key := range keys {
		if n := counts["charged "+key]; n != 1 {
			t.Errorf("%s was charged %d times; want exactly once", key, n)
		}
		delete(counts, "charged "+key)
	}
	if len(counts) != 0 {
		t.Errorf("unexpected side effects: %v", counts)
	}

	// Each worker reports each key once: one of them did it, the other
	// replayed the stored result, which is the same receipt.
	for _, key := range keys {
		var done, replayed []string
		for _, r := range runs {
			for _, line := range strings.Split(r.stdout.String(), "\n") {
				if rest, ok := strings.CutPrefix(line, key+": "); ok {
					if receipt, ok := strings.CutSuffix(rest, " (replayed)"); ok {
						replayed = append(replayed, receipt)
					} else {
						done = append(done, rest)
					}
				}
			}
		}
		if len(done) != 1 || len(replayed) != 1 || done[0] != replayed[0] || !strings.HasPrefix(done[0], "receipt-"+key+"-token-") {
			t.Errorf("%s: done %q, replayed %q; want one of each with the same receipt", key, done, replayed)
		}
	}

	// A third run, later, replays everything and charges nothing.
	cmd := exec.Command("bash", script, keys[0], keys[1])
	cmd.Env = env
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("third run: %v", err)
	}
	if want := fmt.Sprintf("%s: receipt-%s-token-", keys[0], keys[0]); !strings.HasPrefix(string(out), want) || strings.Count(string(out), "(replayed)") != 2 {
		t.Errorf("third run printed %q; want both keys replayed", out)
	}
	if after, _ := os.ReadFile(sideEffects); !bytes.Equal(after, log) {
		t.Errorf("the third run added side effects:\n%s", after)
	}
}

// workerProc is worker.sh running in the background.
type workerProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// startWorker starts worker.sh on keys against f's server, with the idem
// binary on PATH and settings added to its environment.
func startWorker(t *testing.T, f *fixture, settings []string, keys ...string) *workerProc {
	t.Helper()
	script, err := filepath.Abs("../../examples/shell-worker/worker.sh")
	if err != nil {
		t.Fatal(err)
	}
	w := &workerProc{cmd: exec.Command("bash", append([]string{script}, keys...)...)}
	w.cmd.Env = append(append(environWithoutIdem(),
		"PATH="+filepath.Dir(idemBinary)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"IDEM_ADDR="+f.srv.Addr,
		"NAMESPACE=shell_test",
	), settings...)
	w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
	w.cmd.WaitDelay = 5 * time.Second
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cmd.Process.Kill() })
	return w
}

func (w *workerProc) wait(t *testing.T, name string) {
	t.Helper()
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", name, err, w.stdout.String(), w.stderr.String())
	}
}

// waitForClaim polls idem lookup until key has been claimed.
func waitForClaim(t *testing.T, f *fixture, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for f.idem("lookup", "-n", "shell_test", "-k", key).code != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nobody claimed %s within 20s", key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestShellWorkerHeartbeatKeepsTheLease: worker.sh heartbeats while a job
// runs longer than its lease, so the lease is still its own after the first
// one ran out, and a second worker does not run the job again but replays
// its result. The timings leave seconds of slack for a loaded machine.
func TestShellWorkerHeartbeatKeepsTheLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	out := filepath.Join(t.TempDir(), "side-effects.log")
	slow := startWorker(t, f, []string{"OUT=" + out, "LEASE_TTL=4s", "HEARTBEAT_EVERY=0.5", "WORK_SECONDS=6"}, "slow-job")
	waitForClaim(t, f, "slow-job")
	time.Sleep(4500 * time.Millisecond) // past the first lease

	// Straight to the server: this check must not wait for a process.
	look, err := f.srv.Client.Lookup(t.Context(), &idemv1.LookupRequest{Namespace: "shell_test", Key: "slow-job"})
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	rec := look.GetRecord()
	if rec.GetState() != idemv1.State_STATE_PROCESSING || rec.GetAttempt() != 1 ||
		!rec.GetLeaseExpiresAt().AsTime().After(rec.GetCreatedAt().AsTime().Add(4*time.Second)) {
		t.Fatalf("after the first lease: %v; want the first attempt still PROCESSING with a lease its heartbeats extended", rec)
	}

	second := startWorker(t, f, []string{"OUT=" + out, "RETRY_DELAY=0.2", "MAX_ROUNDS=200"}, "slow-job")
	slow.wait(t, "slow worker")
	second.wait(t, "second worker")
	if log, _ := os.ReadFile(out); string(log) != "charged slow-job\n" {
		t.Errorf("side effects %q; want one charge", log)
	}
	if want := strings.TrimSuffix(slow.stdout.String(), "\n") + " (replayed)\n"; second.stdout.String() != want {
		t.Errorf("second worker printed %q; want the slow worker's result replayed, %q", second.stdout.String(), want)
	}
}

// TestShellWorkerLeaseLost: a worker that stops heartbeating loses the job
// to another; its complete is refused (exit 14), it says so, and the other
// worker's result stands.
func TestShellWorkerLeaseLost(t *testing.T) {
	t.Parallel()
	f := setup(t)
	out := filepath.Join(t.TempDir(), "side-effects.log")
	stalled := startWorker(t, f, []string{"OUT=" + out, "LEASE_TTL=1s", "HEARTBEAT_EVERY=600", "WORK_SECONDS=6"}, "stalled-job")
	waitForClaim(t, f, "stalled-job")
	time.Sleep(1500 * time.Millisecond) // the lease has run out
	taker := startWorker(t, f, []string{"OUT=" + out}, "stalled-job")
	taker.wait(t, "worker that takes over")
	stalled.wait(t, "stalled worker")
	if !strings.Contains(stalled.stderr.String(), "stalled-job: lost the lease before completing") || stalled.stdout.String() != "" {
		t.Errorf("stalled worker: stdout %q, stderr %q; want it to report the lost lease and no result",
			stalled.stdout.String(), stalled.stderr.String())
	}
	r := f.idem("lookup", "-n", "shell_test", "-k", "stalled-job", "--result-out", "-").must(t, 0, "lookup")
	if want := strings.TrimSuffix(taker.stdout.String(), "\n"); want != "stalled-job: "+r.stdout {
		t.Errorf("stored result %q; want the taker's, from %q", r.stdout, want)
	}
}
