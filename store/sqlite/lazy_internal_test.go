package sqlite

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// Calls of inWriteTxLazy take their savepoint only before a second writing
// statement (writer.go). These tests hold them to the guarantees of a
// savepoint per call: a call's failure undoes what it wrote and nothing
// else, and a call whose writes cannot be undone alone fails its batch
// rather than commit half of itself.

const badInsertSQL = `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, retention_us, created_at, updated_at)
	VALUES ('acme', 'process_payment', ?1, ?2, 1, 1, 1, 1, 1) RETURNING key`

// lazyInsert runs badInsertSQL in a lazy call: state 'bogus' breaks the
// table's CHECK constraint, 'completed' does not.
func lazyInsert(tx *writeTx, key, state string) error {
	var got string
	return tx.QueryRow(badInsertSQL, key, state).Scan(&got)
}

// TestLazyCallsRunOneStatement: in a batch, a Claim of a new key and a
// Complete run one statement each, with no savepoint; the batch adds the
// counter's read and write. A takeover takes its savepoint.
func TestLazyCallsRunOneStatement(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	const n = 8
	res := make([]claimAnswer, n)
	var calls []func()
	for i := range n {
		p := batchClaim(string(rune('a'+i)), "w")
		calls = append(calls, func() { res[i].res, res[i].err = f.s.RecordClaim(f.ctx, p) })
	}
	const holding = 2 // the holding call's own batch: its SAVEPOINT and RELEASE
	before := f.s.w.statementsRun()
	f.oneBatch(t, calls...)
	if got := f.s.w.statementsRun() - before - holding; got != n+2 {
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
	if got := f.s.w.statementsRun() - before - holding; got != n {
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
	// The insert that inserts nothing, the read, SAVEPOINT, the counter's
	// read, the update, RELEASE, the counter's write.
	if got := f.s.w.statementsRun() - before - holding; got != 7 {
		t.Fatalf("a takeover ran %d statements, want 7", got)
	}
}

// TestLazyCallFailsAlone: a lazy call whose one write fails, or whose
// second write fails after a first that changed nothing, is answered its
// own error; what it wrote is gone, and the other calls of the batch
// commit.
func TestLazyCallFailsAlone(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	var a, b claimAnswer
	var oneErr, twoErr error
	f.oneBatch(t,
		func() { a.res, a.err = f.s.RecordClaim(f.ctx, batchClaim("a", "w")) },
		func() {
			oneErr = f.s.inWriteTxLazy(f.ctx, func(tx *writeTx, _ time.Time) error { return lazyInsert(tx, "one", "bogus") })
		},
		func() {
			twoErr = f.s.inWriteTxLazy(f.ctx, func(tx *writeTx, _ time.Time) error {
				if _, err := tx.Exec(`UPDATE idem_records SET claimant = 'x' WHERE key = 'none'`); err != nil {
					return err
				}
				if err := lazyInsert(tx, "two", "completed"); err != nil {
					return err
				}
				return lazyInsert(tx, "two-bad", "bogus")
			})
		},
		func() { b.res, b.err = f.s.RecordClaim(f.ctx, batchClaim("b", "w")) },
	)
	for name, err := range map[string]error{"one write": oneErr, "second write": twoErr} {
		if err == nil || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("the lazy call that failed on its %s: %v; want its own error", name, err)
		}
	}
	if a.err != nil || b.err != nil || a.res.Outcome != store.OutcomeAcquired || b.res.Outcome != store.OutcomeAcquired {
		t.Fatalf("the claims around the failed calls: %+v, %v; %+v, %v", a.res, a.err, b.res, b.err)
	}
	f.get(t, "a")
	f.get(t, "b")
	for _, key := range []string{"one", "two", "two-bad"} {
		f.requireGone(t, key)
	}
}

// TestLazyCallThatCannotBeUndoneFailsItsBatch: a lazy call that changed
// rows without a savepoint and then fails, or writes again, breaks the
// rule of inWriteTxLazy. It cannot be undone alone, so its batch fails
// whole, store.ErrUnavailable, and nothing of it is written.
func TestLazyCallThatCannotBeUndoneFailsItsBatch(t *testing.T) {
	t.Parallel()
	for name, fn := range map[string]writeFunc{
		"an error after a change": func(tx *writeTx, _ time.Time) error {
			if err := lazyInsert(tx, "bad", "completed"); err != nil {
				return err
			}
			return errors.New("gave up")
		},
		"an error after an Exec that changed rows": func(tx *writeTx, _ time.Time) error {
			if _, err := tx.Exec(`UPDATE idem_records SET claimant = 'bad'`); err != nil {
				return err
			}
			return errors.New("gave up")
		},
		"a second write after a change": func(tx *writeTx, _ time.Time) error {
			if err := lazyInsert(tx, "bad", "completed"); err != nil {
				return err
			}
			err := lazyInsert(tx, "bad2", "completed")
			if !errors.Is(err, errUnprotected) {
				t.Errorf("the second write: %v, want errUnprotected", err)
			}
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newBatchFixture(t)
			f.acquire(t, "existing")
			var claim claimAnswer
			var callErr error
			f.oneBatch(t,
				func() { claim.res, claim.err = f.s.RecordClaim(f.ctx, batchClaim("a", "w")) },
				func() { callErr = f.s.inWriteTxLazy(f.ctx, fn) },
			)
			if !errors.Is(claim.err, store.ErrUnavailable) || !errors.Is(callErr, store.ErrUnavailable) {
				t.Fatalf("the batch: claim %v, the call %v; want both ErrUnavailable", claim.err, callErr)
			}
			for _, key := range []string{"a", "bad", "bad2"} {
				f.requireGone(t, key)
			}
			if rec := f.get(t, "existing"); rec.Claimant != "setup" {
				t.Fatalf("existing after the failed batch: claimant %q", rec.Claimant)
			}
			// The writer goes on.
			f.acquire(t, "a")
		})
	}
}
