//go:build unix

package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
)

// crashChildEnv, when set, makes the test binary the child of
// TestCompletedRecordSurvivesKill: it names the database file. With
// crashWritersEnv set too, the child is that of
// TestAcknowledgedWritesSurviveKill instead.
const (
	crashChildEnv   = "IDEM_SQLITE_CRASH_CHILD"
	crashWritersEnv = "IDEM_SQLITE_CRASH_WRITERS"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		if os.Getenv(crashWritersEnv) != "" {
			crashWritersChild(path)
		} else {
			crashChild(path)
		}
		return
	}
	os.Exit(m.Run())
}

var crashID = store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: "charge-42"}

// crashChild claims and completes crashID, says "done <token>", and then
// keeps writing until it is killed, so that the kill lands in the middle of
// the store's work.
func crashChild(path string) {
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "crash child: %s: %v\n", what, err)
		os.Exit(2)
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		fail("open", err)
	}
	res, err := st.RecordClaim(ctx, &store.ClaimParams{RecordID: crashID, Claimant: "child", LeaseTTL: time.Minute, Retention: time.Hour})
	if err != nil || res.Outcome != store.OutcomeAcquired {
		fail("claim", fmt.Errorf("%+v, %w", res, err))
	}
	rec, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: crashID, Token: res.Record.Token, Result: []byte("charged ch_42")})
	if err != nil {
		fail("complete", err)
	}
	fmt.Printf("done %d\n", rec.Token)
	for i := 0; ; i++ {
		id := store.RecordID{Tenant: "acme", Namespace: "load", Key: fmt.Sprint(i)}
		res, err := st.RecordClaim(ctx, &store.ClaimParams{RecordID: id, LeaseTTL: time.Minute, Retention: time.Hour})
		if err != nil {
			fail("claim under load", err)
		}
		if _, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: id, Token: res.Record.Token, Result: []byte("r")}); err != nil {
			fail("complete under load", err)
		}
	}
}

// TestCompletedRecordSurvivesKill: a Complete that returned is on disk. A
// child process completes a record, says so, goes on writing and is killed
// with SIGKILL; the file opens again with the record COMPLETED and its result,
// and tokens go on increasing past every one the child handed out.
func TestCompletedRecordSurvivesKill(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "data", "idem.db")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the child: %v", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var token int64
	if _, scanErr := fmt.Sscanf(line, "done %d", &token); err != nil || scanErr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child said %q (%v); stderr: %s", line, err, stderr.String())
	}
	time.Sleep(50 * time.Millisecond) // let it write some more
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, want killed by SIGKILL; stderr: %s", err, stderr.String())
	}

	st, raw := open(t, path)
	rec, err := st.RecordGet(ctx, crashID)
	if err != nil {
		t.Fatalf("RecordGet after the kill: %v", err)
	}
	if rec.State != store.StateCompleted || string(rec.Result) != "charged ch_42" || rec.Token != token {
		t.Fatalf("after the kill: state %s result %q token %d; want completed, the child's result, token %d",
			rec.State, rec.Result, rec.Token, token)
	}
	res, err := st.RecordClaim(ctx, &store.ClaimParams{RecordID: crashID, Claimant: "parent", LeaseTTL: time.Minute, Retention: time.Hour})
	if err != nil || res.Outcome != store.OutcomeCompleted {
		t.Fatalf("claim of the completed record: %+v, %v; want a replay", res, err)
	}

	var maxToken int64
	var written int
	if err := raw.QueryRowContext(ctx, "SELECT max(token), count(*) FROM idem_records").Scan(&maxToken, &written); err != nil {
		t.Fatal(err)
	}
	t.Logf("the child committed %d records before the kill", written)
	next := store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: "after-the-kill"}
	res, err = st.RecordClaim(ctx, &store.ClaimParams{RecordID: next, LeaseTTL: time.Minute, Retention: time.Hour})
	if err != nil || res.Outcome != store.OutcomeAcquired {
		t.Fatalf("claim after the kill: %+v, %v; want acquired", res, err)
	}
	if res.Record.Token <= maxToken {
		t.Fatalf("token %d after the kill, want more than the child's greatest, %d", res.Record.Token, maxToken)
	}
	var check string
	if err := raw.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check after the kill: %q, %v", check, err)
	}
}

// crashWriters is how many goroutines of the child write at once, so that
// its writes go in batches of many calls.
const crashWriters = 32

// crashWritersChild runs crashWriters goroutines, each claiming and
// completing keys of its own, one after another, until the process is
// killed. Once a Complete has returned, the child prints "ack KEY TOKEN
// BATCHES CALLS" (the writer's counts so far), one line at a time.
func crashWritersChild(path string) {
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "crash child: %s: %v\n", what, err)
		os.Exit(2)
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		fail("open", err)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	for w := range crashWriters {
		go func() {
			for i := 0; ; i++ {
				id := store.RecordID{Tenant: "acme", Namespace: "load", Key: fmt.Sprintf("w%d-%d", w, i)}
				res, err := st.RecordClaim(ctx, &store.ClaimParams{RecordID: id, Claimant: "child", LeaseTTL: time.Minute, Retention: time.Hour})
				if err != nil || res.Outcome != store.OutcomeAcquired {
					fail("claim", fmt.Errorf("%+v, %w", res, err))
				}
				rec, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: id, Token: res.Record.Token, Result: []byte(id.Key)})
				if err != nil {
					fail("complete", err)
				}
				batches, calls := sqlite.BatchStats(st)
				mu.Lock()
				fmt.Fprintf(out, "ack %s %d %d %d\n", id.Key, rec.Token, batches, calls)
				err = out.Flush()
				mu.Unlock()
				if err != nil {
					fail("write to stdout", err)
				}
			}
		}()
	}
	select {}
}

// TestAcknowledgedWritesSurviveKill: with many writers whose calls share
// batches (group commit), every Complete that returned before a SIGKILL is
// on disk after it: COMPLETED, with its token and result.
func TestAcknowledgedWritesSurviveKill(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "data", "idem.db")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashWritersEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the child: %v", err)
	}

	// Kill the child once it has acknowledged enough Completes, in the
	// middle of its writing; then read what it acknowledged before it died.
	type ack struct {
		key   string
		token int64
	}
	var (
		acks           []ack
		batches, calls int64
	)
	const killAfter = 400
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		var a ack
		var b, c int64
		if _, err := fmt.Sscanf(lines.Text(), "ack %s %d %d %d", &a.key, &a.token, &b, &c); err != nil {
			break // the last line, cut by the kill
		}
		acks = append(acks, a)
		batches, calls = max(batches, b), max(calls, c)
		if len(acks) == killAfter {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("SIGKILL: %v", err)
			}
		}
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v after %d acks, want killed by SIGKILL; stderr: %s", err, len(acks), stderr.String())
	}
	t.Logf("the child acknowledged %d Completes; its writer had committed %d batches of %d calls by the last", len(acks), batches, calls)
	if calls <= batches {
		t.Fatalf("%d batches of %d calls: the writes never shared a batch, so this test did not test group commit", batches, calls)
	}

	st, raw := open(t, path)
	var maxToken int64
	for _, a := range acks {
		id := store.RecordID{Tenant: "acme", Namespace: "load", Key: a.key}
		rec, err := st.RecordGet(ctx, id)
		if err != nil {
			t.Fatalf("RecordGet(%s), acknowledged before the kill: %v", a.key, err)
		}
		if rec.State != store.StateCompleted || rec.Token != a.token || string(rec.Result) != a.key {
			t.Fatalf("%s after the kill: state %s token %d result %q; want completed, token %d, result %q",
				a.key, rec.State, rec.Token, rec.Result, a.token, a.key)
		}
		maxToken = max(maxToken, a.token)
	}
	res, err := st.RecordClaim(ctx, &store.ClaimParams{RecordID: store.RecordID{Tenant: "acme", Namespace: "load", Key: "after"},
		LeaseTTL: time.Minute, Retention: time.Hour})
	if err != nil || res.Outcome != store.OutcomeAcquired || res.Record.Token <= maxToken {
		t.Fatalf("claim after the kill: %+v, %v; want acquired with a token above %d", res, err, maxToken)
	}
	var check string
	if err := raw.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check after the kill: %q, %v", check, err)
	}
}
