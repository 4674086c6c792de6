package sqlite

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// TestCallsRunTheirOwnStatementsOnly: in a batch, a Claim of a new key and a
// Complete run one statement each; the batch adds the counter's read and
// write. No call takes a savepoint.
func TestCallsRunTheirOwnStatementsOnly(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	const n = 8
	res := make([]claimAnswer, n)
	var calls []func()
	for i := range n {
		p := batchClaim(string(rune('a'+i)), "w")
		calls = append(calls, func() { res[i].res, res[i].err = f.s.RecordClaim(f.ctx, p) })
	}
	before := f.s.w.statementsRun()
	f.oneBatch(t, calls...)
	if got := f.s.w.statementsRun() - before; got != n+2 {
		t.Fatalf("a batch of %d new-key Claims ran %d statements, want %d: an insert each, the counter read and written", n, got, n+2)
	}

	calls = calls[:0]
	for i := range n {
		calls = append(calls, func() {
			if _, err := f.s.RecordComplete(f.ctx, &store.CompleteParams{RecordID: res[i].res.Record.RecordID,
				Token: res[i].res.Record.Token}); err != nil {
				t.Error(err)
			}
		})
	}
	before = f.s.w.statementsRun()
	f.oneBatch(t, calls...)
	if got := f.s.w.statementsRun() - before; got != n {
		t.Fatalf("a batch of %d Completes ran %d statements, want %d", n, got, n)
	}

	f.acquire(t, "lapsed")
	f.lapse(t, "lapsed")
	var takeover claimAnswer
	before = f.s.w.statementsRun()
	f.oneBatch(t, func() { takeover.res, takeover.err = f.s.RecordClaim(f.ctx, batchClaim("lapsed", "w2")) })
	if takeover.err != nil || !takeover.res.Takeover {
		t.Fatalf("takeover: %+v, %v", takeover.res, takeover.err)
	}
	// The insert that inserts nothing, the read, the counter's read, the
	// update, its timeline entry, the counter's write.
	if got := f.s.w.statementsRun() - before; got != 6 {
		t.Fatalf("a takeover ran %d statements, want 6", got)
	}
}

// TestFailedStatementGivesUpItsBatch: a call whose statement fails, after
// it wrote, gets its own error; the batch is rolled back whole, so the calls
// before and after it in the batch are UNAVAILABLE, nothing of the batch is
// written, and the store writes again.
func TestFailedStatementGivesUpItsBatch(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	counter := f.tokenCounter(t)
	// state 'bogus' breaks the table's CHECK constraint.
	const badInsertSQL = `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, retention_us, created_at, updated_at)
		VALUES ('acme', 'process_payment', 'bad', 'bogus', 1, 1, 1, 1, 1)`
	var beforeErr, badErr, afterErr error
	f.oneBatch(t,
		func() { _, beforeErr = f.s.RecordClaim(f.ctx, batchClaim("before", "w")) },
		func() {
			badErr = f.s.inWriteTx(f.ctx, func(tx *writeTx, _ time.Time) error {
				if _, err := tx.Exec(`UPDATE idem_token SET value = value + 1000 WHERE id = 1`); err != nil {
					return err
				}
				_, err := tx.Exec(badInsertSQL)
				return err
			})
		},
		func() { _, afterErr = f.s.RecordClaim(f.ctx, batchClaim("after", "w")) },
	)
	if badErr == nil || errors.Is(badErr, store.ErrUnavailable) {
		t.Errorf("the call whose statement failed: %v; want its own error", badErr)
	}
	for name, err := range map[string]error{"before": beforeErr, "after": afterErr} {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("the Claim %s it in the batch: %v; want ErrUnavailable", name, err)
		}
	}
	f.requireGone(t, "before")
	f.requireGone(t, "after")
	if got := f.tokenCounter(t); got != counter {
		t.Fatalf("token counter %d after the failed batch, want %d", got, counter)
	}
	if res, err := f.s.RecordClaim(f.ctx, batchClaim("before", "w")); err != nil || res.Outcome != store.OutcomeAcquired {
		t.Fatalf("claim after the failed batch: %+v, %v", res, err)
	}
}
