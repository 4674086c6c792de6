package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store"
)

// The tests of group commit put a known set of calls into one batch: the
// writer is held inside a batch of its own (hold) while the calls queue
// behind it one at a time, in a known order; released, it takes them all as
// the next batch.

type batchFixture struct {
	ctx  context.Context
	s    *Store
	raw  *sql.DB // the test's own connection to the file, for backdoors
	path string
}

func newBatchFixture(t *testing.T) *batchFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	raw.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = raw.Close() })
	return &batchFixture{ctx: ctx, s: s, raw: raw, path: path}
}

// hold makes the writer run a call that waits, inside its batch, until
// release is called, and returns once the writer runs it. release returns
// once that batch has been answered.
func (f *batchFixture) hold(t *testing.T) (release func()) {
	t.Helper()
	inside, let := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- f.s.inWriteTx(f.ctx, func(*writeTx, time.Time) error {
			close(inside)
			<-let
			return nil
		})
	}()
	select {
	case <-inside:
	case <-f.ctx.Done():
		t.Fatal("the writer never ran the holding call")
	}
	return func() {
		close(let)
		if err := <-done; err != nil {
			t.Errorf("the holding call: %v", err)
		}
	}
}

// waitQueued waits until n calls are queued for the writer.
func (f *batchFixture) waitQueued(t *testing.T, n int) {
	t.Helper()
	for {
		f.s.w.mu.Lock()
		queued := len(f.s.w.queue)
		f.s.w.mu.Unlock()
		if queued >= n {
			return
		}
		select {
		case <-f.ctx.Done():
			t.Fatalf("%d calls queued, want %d: a call did not reach the writer", queued, n)
		case <-time.After(time.Millisecond):
		}
	}
}

// oneBatch runs calls concurrently, queued in the order given, so that the
// writer takes them as one batch, and waits for all of them.
func (f *batchFixture) oneBatch(t *testing.T, calls ...func()) {
	t.Helper()
	release := f.hold(t)
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(call)
		f.waitQueued(t, i+1)
	}
	release()
	wg.Wait()
}

// requireCommitted fails unless the writer committed exactly batches batches
// of calls calls in all since before.
func (f *batchFixture) requireCommitted(t *testing.T, before [2]int64, batches, calls int64) {
	t.Helper()
	b, c := f.s.w.stats()
	if b-before[0] != batches || c-before[1] != calls {
		t.Fatalf("the writer committed %d batches of %d calls, want %d of %d", b-before[0], c-before[1], batches, calls)
	}
}

func (f *batchFixture) stats() [2]int64 {
	b, c := f.s.w.stats()
	return [2]int64{b, c}
}

func batchID(key string) store.RecordID {
	return store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: key}
}

func batchClaim(key, claimant string, fingerprint ...byte) *store.ClaimParams {
	return &store.ClaimParams{RecordID: batchID(key), Claimant: claimant, Fingerprint: fingerprint,
		LeaseTTL: time.Minute, Retention: time.Hour}
}

func (f *batchFixture) acquire(t *testing.T, key string) *store.Record {
	t.Helper()
	res, err := f.s.RecordClaim(f.ctx, batchClaim(key, "setup"))
	if err != nil || res.Outcome != store.OutcomeAcquired {
		t.Fatalf("claim %s: %+v, %v", key, res, err)
	}
	return res.Record
}

// rawExec runs a backdoor statement through the test's own connection.
func (f *batchFixture) rawExec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := f.raw.ExecContext(f.ctx, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// lapse moves the lease of key into the past.
func (f *batchFixture) lapse(t *testing.T, key string) {
	t.Helper()
	f.rawExec(t, `UPDATE idem_records SET lease_expires_at = ?2 WHERE key = ?1`, key, now().Add(-time.Second).UnixMicro())
}

func (f *batchFixture) get(t *testing.T, key string) *store.Record {
	t.Helper()
	rec, err := f.s.RecordGet(f.ctx, batchID(key))
	if err != nil {
		t.Fatalf("RecordGet(%s): %v", key, err)
	}
	return rec
}

func (f *batchFixture) requireGone(t *testing.T, key string) {
	t.Helper()
	if rec, err := f.s.RecordGet(f.ctx, batchID(key)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RecordGet(%s): %+v, %v; want ErrNotFound", key, rec, err)
	}
}

func (f *batchFixture) tokenCounter(t *testing.T) int64 {
	t.Helper()
	var v int64
	if err := f.raw.QueryRowContext(f.ctx, "SELECT value FROM idem_token").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

type claimAnswer struct {
	res *store.ClaimResult
	err error
}

// TestBatchSameKeyInOrder: calls of one key in one batch are answered as if
// each had committed before the next began.
func TestBatchSameKeyInOrder(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	lapsed := f.acquire(t, "lapsed")
	f.lapse(t, "lapsed")

	var first, other, again, replay claimAnswer
	var done *store.Record
	var doneErr error
	claim := func(into *claimAnswer, p *store.ClaimParams) func() {
		return func() { into.res, into.err = f.s.RecordClaim(f.ctx, p) }
	}
	before := f.stats()
	f.oneBatch(t,
		claim(&first, batchClaim("k", "w1")),
		claim(&other, batchClaim("k", "w2")),
		claim(&again, batchClaim("k", "w1")),
		func() {
			done, doneErr = f.s.RecordComplete(f.ctx, &store.CompleteParams{RecordID: batchID("lapsed"),
				Token: lapsed.Token, Result: []byte("r")})
		},
		claim(&replay, batchClaim("lapsed", "w3")),
	)
	f.requireCommitted(t, before, 2, 6)

	if first.err != nil || first.res.Outcome != store.OutcomeAcquired || first.res.Takeover {
		t.Fatalf("first claim of k: %+v, %v; want acquired, no takeover", first.res, first.err)
	}
	token := first.res.Record.Token
	if token <= lapsed.Token {
		t.Fatalf("token %d, want above the earlier %d", token, lapsed.Token)
	}
	if other.err != nil || other.res.Outcome != store.OutcomeInProgress || other.res.Record.Token != token ||
		other.res.RetryAfter <= 0 {
		t.Fatalf("second claimant of k in the same batch: %+v, %v; want in progress under token %d", other.res, other.err, token)
	}
	if again.err != nil || again.res.Outcome != store.OutcomeAcquired || again.res.Record.Token != token {
		t.Fatalf("first claimant again in the same batch: %+v, %v; want acquired with token %d", again.res, again.err, token)
	}
	if doneErr != nil || done.State != store.StateCompleted {
		t.Fatalf("complete of the lapsed lease: %+v, %v", done, doneErr)
	}
	if replay.err != nil || replay.res.Outcome != store.OutcomeCompleted || string(replay.res.Record.Result) != "r" {
		t.Fatalf("claim after the complete in the same batch: %+v, %v; want the completed replay", replay.res, replay.err)
	}
	if rec := f.get(t, "k"); rec.Token != token || rec.Claimant != "w1" || rec.State != store.StateProcessing {
		t.Fatalf("k after the batch: %+v", rec)
	}
}

// TestBatchMixesEveryOutcome: one batch holds every kind of write and every
// answer, errors included; each call is answered as it would be alone, and
// a call's own error undoes only that call.
func TestBatchMixesEveryOutcome(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	held := f.acquire(t, "held")
	lapsed := f.acquire(t, "lapsed")
	f.lapse(t, "lapsed")
	failing := f.acquire(t, "failing")
	releasing := f.acquire(t, "releasing")
	beating := f.acquire(t, "beating")
	stale := f.acquire(t, "stale")
	f.lapse(t, "stale")
	if res, err := f.s.RecordClaim(f.ctx, batchClaim("stale", "successor")); err != nil || res.Outcome != store.OutcomeAcquired {
		t.Fatalf("take over stale: %+v, %v", res, err)
	}
	f.acquire(t, "to-expire")
	f.lapse(t, "to-expire")
	purged := f.acquire(t, "to-purge")
	if _, err := f.s.RecordComplete(f.ctx, &store.CompleteParams{RecordID: batchID("to-purge"), Token: purged.Token}); err != nil {
		t.Fatal(err)
	}
	f.rawExec(t, `UPDATE idem_records SET expires_at = ?1 WHERE key = 'to-purge'`, now().Add(-time.Second).UnixMicro())
	f.acquire(t, "to-delete")
	counterBefore := f.tokenCounter(t)

	type answer struct {
		rec *store.Record
		err error
	}
	var (
		fresh, mismatch, busy, takeover, fresh2 claimAnswer
		complete, completeAgain, beatDone       answer
		lost, failed, released, beat, unknown   answer
		deleted, deleteMissing                  answer
		expired, purgedN                        int
		expireErr, purgeErr                     error
	)
	claim := func(into *claimAnswer, p *store.ClaimParams) func() {
		return func() { into.res, into.err = f.s.RecordClaim(f.ctx, p) }
	}
	completeCall := func(into *answer, key string, token int64) func() {
		return func() {
			into.rec, into.err = f.s.RecordComplete(f.ctx, &store.CompleteParams{RecordID: batchID(key), Token: token, Result: []byte("ok")})
		}
	}
	calls := []func(){
		claim(&fresh, batchClaim("new", "w1", 'x')),
		claim(&mismatch, batchClaim("new", "w2", 'y')),
		claim(&busy, batchClaim("new", "w2")),
		claim(&takeover, batchClaim("lapsed", "w2")),
		completeCall(&complete, "held", held.Token),
		completeCall(&completeAgain, "held", held.Token),
		func() {
			beatDone.rec, beatDone.err = f.s.RecordHeartbeat(f.ctx, &store.HeartbeatParams{RecordID: batchID("held"),
				Token: held.Token, LeaseTTL: time.Minute})
		},
		completeCall(&lost, "stale", stale.Token),
		func() {
			failed.rec, failed.err = f.s.RecordFail(f.ctx, &store.FailParams{RecordID: batchID("failing"), Token: failing.Token, Error: "no"})
		},
		func() {
			released.rec, released.err = f.s.RecordFail(f.ctx, &store.FailParams{RecordID: batchID("releasing"),
				Token: releasing.Token, Error: "later", Retryable: true})
		},
		func() {
			beat.rec, beat.err = f.s.RecordHeartbeat(f.ctx, &store.HeartbeatParams{RecordID: batchID("beating"),
				Token: beating.Token, LeaseTTL: time.Hour})
		},
		completeCall(&unknown, "unknown", 1),
		func() { expired, expireErr = f.s.SweepExpire(f.ctx, 100) },
		func() { purgedN, purgeErr = f.s.SweepPurge(f.ctx, 100) },
		func() {
			deleted.rec, deleted.err = f.s.RecordDelete(f.ctx, &store.DeleteParams{RecordID: batchID("to-delete")})
		},
		func() {
			deleteMissing.rec, deleteMissing.err = f.s.RecordDelete(f.ctx, &store.DeleteParams{RecordID: batchID("never")})
		},
		claim(&fresh2, batchClaim("new2", "w1")),
	}
	before := f.stats()
	f.oneBatch(t, calls...)
	f.requireCommitted(t, before, 2, int64(len(calls))+1)

	if fresh.err != nil || fresh.res.Outcome != store.OutcomeAcquired {
		t.Errorf("claim of a new key: %+v, %v", fresh.res, fresh.err)
	}
	if !errors.Is(mismatch.err, store.ErrFingerprintMismatch) {
		t.Errorf("claim with another fingerprint: %+v, %v; want ErrFingerprintMismatch", mismatch.res, mismatch.err)
	}
	if busy.err != nil || busy.res.Outcome != store.OutcomeInProgress {
		t.Errorf("claim of a held key: %+v, %v; want in progress", busy.res, busy.err)
	}
	if takeover.err != nil || takeover.res.Outcome != store.OutcomeAcquired || !takeover.res.Takeover ||
		takeover.res.Record.Attempt != 2 || takeover.res.Record.Token <= lapsed.Token {
		t.Errorf("claim of a lapsed lease: %+v, %v; want a takeover", takeover.res, takeover.err)
	}
	if complete.err != nil || complete.rec.State != store.StateCompleted {
		t.Errorf("complete: %+v, %v", complete.rec, complete.err)
	}
	if completeAgain.err != nil || !completeAgain.rec.UpdatedAt.Equal(complete.rec.UpdatedAt) {
		t.Errorf("complete repeated: %+v, %v; want the stored record", completeAgain.rec, completeAgain.err)
	}
	if !errors.Is(beatDone.err, store.ErrAlreadyTerminal) {
		t.Errorf("heartbeat after complete: %+v, %v; want ErrAlreadyTerminal", beatDone.rec, beatDone.err)
	}
	if !errors.Is(lost.err, store.ErrLeaseLost) {
		t.Errorf("complete with a superseded token: %+v, %v; want ErrLeaseLost", lost.rec, lost.err)
	}
	if failed.err != nil || failed.rec.State != store.StateFailed {
		t.Errorf("fail: %+v, %v", failed.rec, failed.err)
	}
	if released.err != nil || released.rec.State != store.StateReleased {
		t.Errorf("fail, retryable: %+v, %v", released.rec, released.err)
	}
	if beat.err != nil || !beat.rec.LeaseExpiresAt.After(beating.LeaseExpiresAt.Add(30*time.Minute)) {
		t.Errorf("heartbeat: %+v, %v; want the lease an hour on", beat.rec, beat.err)
	}
	if !errors.Is(unknown.err, store.ErrNotFound) {
		t.Errorf("complete of an unknown key: %+v, %v; want ErrNotFound", unknown.rec, unknown.err)
	}
	if expired != 1 || expireErr != nil {
		t.Errorf("SweepExpire: %d, %v; want 1", expired, expireErr)
	}
	if purgedN != 1 || purgeErr != nil {
		t.Errorf("SweepPurge: %d, %v; want 1", purgedN, purgeErr)
	}
	if deleted.err != nil || deleted.rec.Key != "to-delete" {
		t.Errorf("delete: %+v, %v", deleted.rec, deleted.err)
	}
	if !errors.Is(deleteMissing.err, store.ErrNotFound) {
		t.Errorf("delete of an unknown key: %+v, %v; want ErrNotFound", deleteMissing.rec, deleteMissing.err)
	}
	if fresh2.err != nil || fresh2.res.Outcome != store.OutcomeAcquired || fresh2.res.Record.Token <= takeover.res.Record.Token {
		t.Errorf("claim of another new key: %+v, %v; want acquired with a later token", fresh2.res, fresh2.err)
	}
	if t.Failed() {
		t.FailNow()
	}

	// What the batch committed.
	if got := f.tokenCounter(t); got != counterBefore+3 {
		t.Errorf("token counter %d after the batch, want %d: three tokens drawn", got, counterBefore+3)
	}
	for key, want := range map[string]store.State{
		"new": store.StateProcessing, "lapsed": store.StateProcessing, "held": store.StateCompleted,
		"stale": store.StateProcessing, "failing": store.StateFailed, "releasing": store.StateReleased,
		"beating": store.StateProcessing, "to-expire": store.StateExpired, "new2": store.StateProcessing,
	} {
		if rec := f.get(t, key); rec.State != want {
			t.Errorf("%s after the batch: %s, want %s", key, rec.State, want)
		}
	}
	if rec := f.get(t, "new"); !bytes.Equal(rec.Fingerprint, []byte{'x'}) || rec.Claimant != "w1" {
		t.Errorf("new after the batch: %+v; want the first claim's fingerprint and claimant", rec)
	}
	for _, key := range []string{"to-purge", "to-delete", "unknown"} {
		f.requireGone(t, key)
	}
}

// TestBatchFailureAnswersEveryCallUnavailable: when the batch's transaction
// fails, every call in it is answered store.ErrUnavailable, whether it had
// run before the failure or not, and nothing of the batch is written.
func TestBatchFailureAnswersEveryCallUnavailable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// poison runs in the batch among the others and breaks it.
		poison func(tx *writeTx) error
		// big is the size of the result the calls after poison store.
		big int
	}{
		{
			// A real SQLITE_FULL: the file may not grow, and a Complete
			// after the poison stores a result that needs new pages.
			name: "disk full",
			poison: func(tx *writeTx) error {
				var pages int64
				if err := tx.QueryRow("PRAGMA page_count").Scan(&pages); err != nil {
					return err
				}
				_, err := tx.ExecScript(fmt.Sprintf("PRAGMA max_page_count = %d", pages))
				return err
			},
			big: 1 << 20,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newBatchFixture(t)
			var maxPages int64
			if err := f.s.inWriteTx(f.ctx, func(tx *writeTx, _ time.Time) error {
				return tx.QueryRow("PRAGMA max_page_count").Scan(&maxPages)
			}); err != nil {
				t.Fatal(err)
			}
			before := f.acquire(t, "before")
			after := f.acquire(t, "after")
			counter := f.tokenCounter(t)

			errs := make([]error, 5)
			f.oneBatch(t,
				func() { _, errs[0] = f.s.RecordClaim(f.ctx, batchClaim("new-before", "w")) },
				func() {
					_, errs[1] = f.s.RecordComplete(f.ctx, &store.CompleteParams{RecordID: batchID("before"), Token: before.Token})
				},
				func() {
					errs[2] = f.s.inWriteTx(f.ctx, func(tx *writeTx, _ time.Time) error { return c.poison(tx) })
				},
				func() {
					_, errs[3] = f.s.RecordComplete(f.ctx, &store.CompleteParams{RecordID: batchID("after"), Token: after.Token,
						Result: bytes.Repeat([]byte{'r'}, c.big)})
				},
				func() { _, errs[4] = f.s.RecordClaim(f.ctx, batchClaim("new-after", "w")) },
			)
			for i, err := range errs {
				if !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("call %d of the failed batch: %v; want ErrUnavailable", i, err)
				}
			}
			if err := f.s.inWriteTx(f.ctx, func(tx *writeTx, _ time.Time) error {
				_, err := tx.ExecScript(fmt.Sprintf("PRAGMA max_page_count = %d", maxPages))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if t.Failed() {
				t.FailNow()
			}

			// Nothing of the batch was written, and the store writes again.
			f.requireGone(t, "new-before")
			f.requireGone(t, "new-after")
			if rec := f.get(t, "before"); rec.State != store.StateProcessing {
				t.Fatalf("before after the failed batch: %s, want processing", rec.State)
			}
			if got := f.tokenCounter(t); got != counter {
				t.Fatalf("token counter %d after the failed batch, want %d", got, counter)
			}
			if rec, err := f.s.RecordComplete(f.ctx, &store.CompleteParams{RecordID: batchID("after"), Token: after.Token,
				Result: bytes.Repeat([]byte{'r'}, c.big)}); err != nil || rec.State != store.StateCompleted {
				t.Fatalf("complete after the failed batch: %+v, %v", rec, err)
			}
			if res, err := f.s.RecordClaim(f.ctx, batchClaim("new-before", "w")); err != nil || res.Outcome != store.OutcomeAcquired {
				t.Fatalf("claim after the failed batch: %+v, %v", res, err)
			}
		})
	}
}

// TestCallGivenUpBeforeItsBatchIsDropped: a caller whose context ends while
// its call waits in the queue gets its context's error at once, and the call
// is never run.
func TestCallGivenUpBeforeItsBatchIsDropped(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	release := f.hold(t)
	ctx, cancel := context.WithCancel(f.ctx)
	answered := make(chan error, 1)
	go func() {
		_, err := f.s.RecordClaim(ctx, batchClaim("k", "w"))
		answered <- err
	}()
	f.waitQueued(t, 1)
	cancel()
	if err := <-answered; !errors.Is(err, context.Canceled) {
		t.Fatalf("claim given up in the queue: %v; want context.Canceled", err)
	}
	release()
	// A call queued after it has been answered once the writer is past it.
	if _, err := f.s.RecordClaim(f.ctx, batchClaim("other", "w")); err != nil {
		t.Fatal(err)
	}
	f.requireGone(t, "k")
}

// TestCloseAnswersQueuedCalls: Close lets the running batch finish and
// answers the calls still queued store.ErrUnavailable, without running them.
func TestCloseAnswersQueuedCalls(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	release := f.hold(t)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := f.s.RecordClaim(f.ctx, batchClaim(fmt.Sprint("k", i), "w"))
			errs <- err
		}()
		f.waitQueued(t, i+1)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.s.Close() }()
	for {
		f.s.w.mu.Lock()
		stopped := f.s.w.stopped
		f.s.w.mu.Unlock()
		if stopped {
			break
		}
		time.Sleep(time.Millisecond)
	}
	release()
	for range 3 {
		if err := <-errs; !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("a call queued at Close: %v; want ErrUnavailable", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	var n int
	if err := f.raw.QueryRowContext(f.ctx, "SELECT count(*) FROM idem_records").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d records (%v) after Close, want none of the queued calls written", n, err)
	}
}

// TestPanickingCallPanicsInItsCaller: a call that panics in the writer
// panics in its caller's goroutine (where the server's recovery catches it),
// its batch is rolled back and answered store.ErrUnavailable, and the writer
// goes on.
func TestPanickingCallPanicsInItsCaller(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	var (
		claimErr  error
		recovered any
	)
	f.oneBatch(t,
		func() { _, claimErr = f.s.RecordClaim(f.ctx, batchClaim("k", "w")) },
		func() {
			defer func() { recovered = recover() }()
			_ = f.s.inWriteTx(f.ctx, func(tx *writeTx, _ time.Time) error {
				if _, err := tx.Exec(`UPDATE idem_token SET value = value + 1000`); err != nil {
					return err
				}
				panic("boom")
			})
		},
	)
	if recovered != "boom" {
		t.Fatalf("the panicking call's caller recovered %v, want boom", recovered)
	}
	if !errors.Is(claimErr, store.ErrUnavailable) {
		t.Fatalf("a claim in the batch of the panic: %v; want ErrUnavailable", claimErr)
	}
	f.requireGone(t, "k")
	res, err := f.s.RecordClaim(f.ctx, batchClaim("k", "w"))
	if err != nil || res.Outcome != store.OutcomeAcquired {
		t.Fatalf("claim after the panic: %+v, %v", res, err)
	}
	if got := f.tokenCounter(t); got != res.Record.Token {
		t.Fatalf("token counter %d after the panic, want %d: the panicking call's write undone", got, res.Record.Token)
	}
}

// TestBatchCallsMetric checks idem_sqlite_batch_calls, the histogram that
// tells an operator how many calls share a commit: one observation per
// committed batch, of that batch's calls.
func TestBatchCallsMetric(t *testing.T) {
	f := newBatchFixture(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.s.Collectors()...)
	observed := func() (count uint64, sum float64) {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range families {
			if mf.GetName() == "idem_sqlite_batch_calls" {
				h := mf.GetMetric()[0].GetHistogram()
				return h.GetSampleCount(), h.GetSampleSum()
			}
		}
		t.Fatal("idem_sqlite_batch_calls is not among the store's collectors")
		return 0, 0
	}
	count0, sum0 := observed()
	before := f.stats()
	claim := func(key string) func() {
		return func() {
			if _, err := f.s.RecordClaim(f.ctx, batchClaim(key, "w")); err != nil {
				t.Error(err)
			}
		}
	}
	// oneBatch's hold is a batch of its own, of one call.
	f.oneBatch(t, claim("m1"), claim("m2"), claim("m3"))
	f.requireCommitted(t, before, 2, 4)
	if count, sum := observed(); count-count0 != 2 || sum-sum0 != 4 {
		t.Fatalf("idem_sqlite_batch_calls gained %d observations summing to %g, want 2 (of 1 and 3 calls)", count-count0, sum-sum0)
	}
}

// TestSweepExpireWakesItsRecords: the sweeper's expiry wakes the Claims
// waiting on the records it expired, and no others (it used to wake every
// waiter in the process).
func TestSweepExpireWakesItsRecords(t *testing.T) {
	f := newBatchFixture(t)
	f.acquire(t, "lapsed")
	f.lapse(t, "lapsed")
	f.acquire(t, "live")
	lapsed, live := f.s.RecordWatch(batchID("lapsed")), f.s.RecordWatch(batchID("live"))
	defer lapsed.Close()
	defer live.Close()

	n, err := f.s.SweepExpire(f.ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("SweepExpire: %d, %v; want 1 record expired", n, err)
	}
	if got := f.get(t, "lapsed").State; got != store.StateExpired {
		t.Fatalf("the lapsed record is %s, want EXPIRED", got)
	}
	select {
	case <-lapsed.C:
	case <-time.After(10 * time.Second):
		t.Fatal("the Claim waiting on the expired record was not woken")
	}
	select {
	case <-live.C:
		t.Fatal("the Claim waiting on a live lease was woken by the expiry of another record")
	default:
	}
}

// TestCallersLeaveMidBatch: callers whose contexts end while their calls'
// batch still runs. Their calls have run and commit with the batch; what the
// writer learned while running them is not read by the callers that left
// (run with -race: a Claim's note of whether a read would have answered it
// was such a read), and the Complete's waiting Claims are woken once the
// batch has committed, not when its caller leaves, so that they look after
// the change is visible.
func TestCallersLeaveMidBatch(t *testing.T) {
	f := newBatchFixture(t)
	rec := f.acquire(t, "waited-on")
	watch := f.s.RecordWatch(batchID("waited-on"))
	defer watch.Close()

	// A deadline, not a cancel from the writer: the callers must leave
	// without anything that orders their return after the writer's work.
	leaving, cancel := context.WithTimeout(f.ctx, time.Second)
	defer cancel()
	claimLeft, completeLeft, migrateLeft := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	f.oneBatch(t,
		func() {
			_, err := f.s.RecordClaim(leaving, batchClaim("new-key", "w"))
			claimLeft <- err
		},
		func() {
			_, err := f.s.RecordComplete(leaving, &store.CompleteParams{RecordID: batchID("waited-on"),
				Token: rec.Token, Result: []byte("r")})
			completeLeft <- err
		},
		func() {
			_, err := f.s.Migrate(leaving, slog.New(slog.DiscardHandler))
			migrateLeft <- err
		},
		func() {
			err := f.s.inWriteTx(f.ctx, func(*writeTx, time.Time) error {
				// The calls before this one have run; wait for their
				// callers to leave, inside the batch.
				for _, left := range []chan error{claimLeft, completeLeft, migrateLeft} {
					select {
					case err := <-left:
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("a caller that left: %v, want its deadline", err)
						}
					case <-time.After(10 * time.Second):
						t.Error("a caller did not leave at its deadline")
					}
				}
				select {
				case <-watch.C:
					t.Error("the waiting Claim was woken before the Complete's batch committed")
				default:
				}
				return nil
			})
			if err != nil {
				t.Errorf("the call that outlasts the callers: %v", err)
			}
		},
	)
	select {
	case <-watch.C:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Claim was not woken after the Complete's batch committed")
	}
	if got := f.get(t, "waited-on"); got.State != store.StateCompleted {
		t.Fatalf("after the wake the record is %s, want COMPLETED (committed although its caller left)", got.State)
	}
	if got := f.get(t, "new-key"); got.State != store.StateProcessing {
		t.Fatalf("the Claim whose caller left: %s, want PROCESSING (committed with its batch)", got.State)
	}
}
