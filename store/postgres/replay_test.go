package postgres_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// statements counts the statements of the Claim coalescer and of the read
// slot that s has sent so far.
func statements(s *postgres.Store) (claims, reads uint64) {
	claims, _ = s.BatchCalls("claim")
	reads, _ = s.BatchCalls("claim_read")
	return claims, reads
}

// requireStatements fails unless s sent the claim and read statements given
// since before (as statements returned them).
func requireStatements(t *testing.T, what string, s *postgres.Store, beforeClaims, beforeReads, claims, reads uint64) {
	t.Helper()
	c, r := statements(s)
	if c-beforeClaims != claims || r-beforeReads != reads {
		t.Fatalf("%s: %d claim and %d read statements, want %d and %d", what, c-beforeClaims, r-beforeReads, claims, reads)
	}
}

// A Claim of a record this store saw finished is answered from a read in
// the read slot, and writes nothing; a Claim of a key it never saw
// finished goes to the Claim coalescer.
func TestReplayGoesThroughTheReadSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done, failed := recordID("replay-done"), recordID("replay-failed")

	c0, r0 := statements(b.store)
	rec := b.acquire(t, done, "w1")
	requireStatements(t, "first claim", b.store, c0, r0, 1, 0)
	completed := b.complete(t, done, rec.Token, "result")
	rec = b.acquire(t, failed, "w1")
	failedRec := b.fail(t, failed, rec.Token, "boom", false)

	var seq int64
	if err := b.pool.QueryRow(b.ctx, `SELECT last_value FROM idem_token_seq`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	c0, r0 = statements(b.store)
	for i := range 3 {
		res := b.claim(t, claimParams(done, fmt.Sprintf("other-%d", i)))
		if res.Outcome != store.OutcomeCompleted {
			t.Fatalf("replay %d: outcome %v, want completed", i, res.Outcome)
		}
		requireSameRecord(t, "replay", res.Record, completed)
		res = b.claim(t, claimParams(failed, "other"))
		if res.Outcome != store.OutcomeFailed {
			t.Fatalf("replay of a failure %d: outcome %v, want failed", i, res.Outcome)
		}
		requireSameRecord(t, "replay of a failure", res.Record, failedRec)
	}
	requireStatements(t, "replays", b.store, c0, r0, 0, 6)
	var seq2 int64
	if err := b.pool.QueryRow(b.ctx, `SELECT last_value FROM idem_token_seq`).Scan(&seq2); err != nil {
		t.Fatal(err)
	}
	if seq2 != seq {
		t.Fatalf("replays drew tokens: the sequence moved %d→%d", seq, seq2)
	}
}

// A retryable Fail leaves nothing to replay: the next Claim acquires the
// record through the Claim coalescer.
func TestRetryableFailIsNotReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("retry")
	rec := b.acquire(t, id, "w1")
	b.fail(t, id, rec.Token, "later", true)
	c0, r0 := statements(b.store)
	if res := b.claim(t, claimParams(id, "w2")); res.Outcome != store.OutcomeAcquired || !res.Takeover {
		t.Fatalf("claim after a retryable fail: outcome %v takeover %v, want a takeover", res.Outcome, res.Takeover)
	}
	requireStatements(t, "claim after a retryable fail", b.store, c0, r0, 1, 0)
}

// A finished record that went away (deleted by an operator, purged by the
// sweeper) or expired is claimed as any other key: ACQUIRED.
func TestReplayOfARecordThatWentAway(t *testing.T) {
	t.Parallel()
	b := setup(t)
	finish := func(id store.RecordID) {
		t.Helper()
		rec := b.acquire(t, id, "w1")
		b.complete(t, id, rec.Token, "old")
	}

	deleted := recordID("deleted")
	finish(deleted)
	if _, err := b.store.RecordDelete(b.ctx, deleted); err != nil {
		t.Fatalf("RecordDelete: %v", err)
	}
	c0, r0 := statements(b.store)
	if got := b.acquire(t, deleted, "w2"); got.Attempt != 1 {
		t.Fatalf("claim after delete: attempt %d, want a new record", got.Attempt)
	}
	// The delete dropped the hint: no read first.
	requireStatements(t, "claim after delete", b.store, c0, r0, 1, 0)

	purged := recordID("purged")
	finish(purged)
	b.exec(t, `UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE key = $1`, purged.Key)
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepPurge: %d, %v; want 1 record purged", n, err)
	}
	c0, r0 = statements(b.store)
	if got := b.acquire(t, purged, "w2"); got.Attempt != 1 {
		t.Fatalf("claim after purge: attempt %d, want a new record", got.Attempt)
	}
	// The purge happened behind the hint's back: one read that finds
	// nothing, then the Claim's own statement.
	requireStatements(t, "claim after purge", b.store, c0, r0, 1, 1)
	c0, r0 = statements(b.store)
	if res := b.claim(t, claimParams(purged, "w3")); res.Outcome != store.OutcomeInProgress {
		t.Fatalf("second claim after purge: outcome %v, want in progress", res.Outcome)
	}
	requireStatements(t, "second claim after purge (hint dropped)", b.store, c0, r0, 1, 0)

	expired := recordID("expired")
	finish(expired)
	b.exec(t, `UPDATE idem_records SET state = 'expired' WHERE key = $1`, expired.Key)
	c0, r0 = statements(b.store)
	if res := b.claim(t, claimParams(expired, "w2")); res.Outcome != store.OutcomeAcquired || !res.Takeover {
		t.Fatalf("claim of an expired record: outcome %v takeover %v, want a takeover", res.Outcome, res.Takeover)
	}
	requireStatements(t, "claim of an expired record", b.store, c0, r0, 1, 1)
}

// A Claim with another fingerprint than a finished record's is refused
// from the read, as from the Claim's own statement.
func TestReplayFingerprintMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("fp")
	p := claimParams(id, "w1")
	p.Fingerprint = []byte("request-a")
	res := b.claim(t, p)
	b.complete(t, id, res.Record.Token, "a")

	c0, r0 := statements(b.store)
	other := claimParams(id, "w2")
	other.Fingerprint = []byte("request-b")
	_, err := b.store.RecordClaim(b.ctx, other)
	requireErr(t, "claim with another fingerprint", err, store.ErrFingerprintMismatch)
	same := claimParams(id, "w2")
	same.Fingerprint = []byte("request-a")
	if res := b.claim(t, same); res.Outcome != store.OutcomeCompleted {
		t.Fatalf("claim with the same fingerprint: outcome %v, want completed", res.Outcome)
	}
	requireStatements(t, "claims of a finished record", b.store, c0, r0, 0, 2)
}

// Another replica (a second Store on the database) purges a record this
// one saw finished, creates it again and finishes it again: this store
// answers with the record as it is, never as it remembers it.
func TestReplayAfterAnotherReplicaRecreated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := postgres.New(b.pool)
	id := recordID("recreated")
	rec := b.acquire(t, id, "w1")
	b.complete(t, id, rec.Token, "first")

	b.exec(t, `UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE key = $1`, id.Key)
	if n, err := other.SweepPurge(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepPurge: %d, %v; want 1 record purged", n, err)
	}
	again, err := other.RecordClaim(b.ctx, claimParams(id, "w2"))
	if err != nil || again.Outcome != store.OutcomeAcquired {
		t.Fatalf("other replica's claim: %+v, %v; want acquired", again, err)
	}

	// Held by the other replica: IN_PROGRESS, from the Claim's own
	// statement after the read.
	c0, r0 := statements(b.store)
	if res := b.claim(t, claimParams(id, "w3")); res.Outcome != store.OutcomeInProgress || res.Record.Token != again.Record.Token {
		t.Fatalf("claim of the recreated record: outcome %v token %d, want in progress under token %d", res.Outcome, res.Record.Token, again.Record.Token)
	}
	requireStatements(t, "claim of the recreated record", b.store, c0, r0, 1, 1)

	second, err := other.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: again.Record.Token, Result: []byte("second")})
	if err != nil {
		t.Fatalf("other replica's complete: %v", err)
	}
	// This store has no hint now; its Claim's answer gives it one.
	for i, want := range []struct{ claims, reads uint64 }{{1, 0}, {0, 1}} {
		c0, r0 = statements(b.store)
		res := b.claim(t, claimParams(id, "w4"))
		if res.Outcome != store.OutcomeCompleted {
			t.Fatalf("claim %d after the other replica completed: outcome %v, want completed", i, res.Outcome)
		}
		requireSameRecord(t, "replay of the recreated record", res.Record, second)
		requireStatements(t, fmt.Sprintf("claim %d after the other replica completed", i), b.store, c0, r0, want.claims, want.reads)
	}
}

// Concurrent replays share the read slot's statements, each answered with
// its own record.
func TestConcurrentReplays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const keys, workers = 8, 64
	results := map[string]*store.Record{}
	for i := range keys {
		id := recordID(fmt.Sprintf("conc-%d", i))
		rec := b.acquire(t, id, "w")
		results[id.Key] = b.complete(t, id, rec.Token, id.Key)
	}
	c0, r0 := statements(b.store)
	_, calls0 := b.store.BatchCalls("claim_read")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			id := recordID(fmt.Sprintf("conc-%d", w%keys))
			res, err := b.store.RecordClaim(b.ctx, claimParams(id, fmt.Sprintf("c%d", w)))
			switch {
			case err != nil:
				errs <- err
			case res.Outcome != store.OutcomeCompleted || string(res.Record.Result) != id.Key:
				errs <- fmt.Errorf("%s: outcome %v result %q, want completed with %q", id.Key, res.Outcome, res.Record.Result, id.Key)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c, r := statements(b.store)
	_, calls := b.store.BatchCalls("claim_read")
	if c != c0 || r == r0 || r-r0 > workers || calls-calls0 != workers {
		t.Fatalf("%d claim and %d read statements for %v calls, want 0 claim statements and at most %d reads carrying %d calls",
			c-c0, r-r0, calls-calls0, workers, workers)
	}
}

// RecordClaimMany reads the calls of records it saw finished in the read
// slot, together, and sends only the others, with those the read did not
// answer, to the Claim coalescer.
func TestClaimManyReadsFinishedRecordsFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := []store.RecordID{recordID("many-a"), recordID("many-b"), recordID("many-c")}
	results := make([]*store.Record, len(done))
	for i, id := range done {
		p := claimParams(id, "w1")
		p.Fingerprint = []byte("request")
		rec := b.claim(t, p).Record
		results[i] = b.complete(t, id, rec.Token, id.Key)
	}
	gone, fresh := recordID("many-gone"), recordID("many-new")
	rec := b.acquire(t, gone, "w1")
	b.complete(t, gone, rec.Token, "gone")
	b.exec(t, `DELETE FROM idem_records WHERE key = $1`, gone.Key) // behind the hint's back

	mismatch := claimParams(done[2], "w2")
	mismatch.Fingerprint = []byte("other")
	ps := []*store.ClaimParams{claimParams(done[0], "w2"), claimParams(fresh, "w2"), claimParams(done[1], "w2"),
		claimParams(gone, "w2"), mismatch, claimParams(done[0], "w3")}
	c0, r0 := statements(b.store)
	res, errs := b.store.RecordClaimMany(b.ctx, ps)
	for i, want := range []struct {
		outcome store.Outcome
		rec     *store.Record
	}{{store.OutcomeCompleted, results[0]}, {store.OutcomeAcquired, nil}, {store.OutcomeCompleted, results[1]},
		{store.OutcomeAcquired, nil}, {}, {store.OutcomeCompleted, results[0]}} {
		if want.outcome == 0 {
			requireErr(t, fmt.Sprintf("call %d", i), errs[i], store.ErrFingerprintMismatch)
			continue
		}
		if errs[i] != nil || res[i].Outcome != want.outcome {
			t.Fatalf("call %d (%s): %+v, %v; want %v", i, ps[i].Key, res[i], errs[i], want.outcome)
		}
		if want.rec != nil {
			requireSameRecord(t, fmt.Sprintf("call %d", i), res[i].Record, want.rec)
		}
	}
	requireStatements(t, "RecordClaimMany", b.store, c0, r0, 1, 1)
}
