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
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
)

// crashChildEnv, when set, makes the test binary the child of
// TestCompletedRecordSurvivesKill: it names the database file.
const crashChildEnv = "IDEM_SQLITE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
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
