package postgres_test

import (
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// The tests in this file pin down why a call runs its statements again
// (DESIGN §4): under READ COMMITTED a statement that waited for a row lock
// sees the row's new version in its ON CONFLICT or UPDATE, but its plain
// reads see the snapshot taken when it began, and a takeover decided on one
// version must not apply to a newer one. Each test holds a transaction open
// on a row, starts the call, waits until the call's backend waits for that
// transaction's lock, and only then commits, so the interleaving is the one
// the store must survive.

type claimOutcome struct {
	res *store.ClaimResult
	err error
}

const insertProcessingSQL = `
INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, retention, created_at, updated_at)
VALUES ($1, $2, $3, 'processing', nextval('idem_token_seq'), 1, $4, '',
	now() + interval '1 minute', interval '1 hour', now(), now())
RETURNING token`

// TestClaimRaceWithConcurrentInsert: the row is inserted and committed by
// another transaction while the Claim waits on it. The INSERT's conflict
// check finds the row, the takeover's WHERE rejects it (the lease is live),
// and the snapshot of the SELECT branch predates it: the first statement
// returns nothing, and only the second one can answer IN_PROGRESS.
func TestClaimRaceWithConcurrentInsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("raced-insert")

	tx, pid := b.begin(t)
	var token int64
	if err := tx.QueryRow(b.ctx, insertProcessingSQL, id.Tenant, id.Namespace, id.Key, "other-replica").Scan(&token); err != nil {
		t.Fatalf("insert in the other transaction: %v", err)
	}

	out := make(chan claimOutcome, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := b.store.RecordClaim(b.ctx, claimParams(id, "me"))
		out <- claimOutcome{res, err}
	}()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	got := <-out
	if got.err != nil {
		t.Fatalf("RecordClaim: %v; want in_progress", got.err)
	}
	if got.res == nil || got.res.Outcome != store.OutcomeInProgress {
		t.Fatalf("RecordClaim: %+v; want in_progress", got.res)
	}
	if got.res.Record.Token != token || got.res.Record.Claimant != "other-replica" || got.res.RetryAfter <= 0 {
		t.Fatalf("record %+v RetryAfter %v; want the other transaction's row (token %d) and a positive RetryAfter",
			got.res.Record, got.res.RetryAfter, token)
	}
}

// TestClaimRaceWithOwnRetry: the SDK retries a Claim whose response is late
// while the first one is still running. The retry waits for the first one's
// insert and must then re-enter it: ACQUIRED with the same token.
func TestClaimRaceWithOwnRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("raced-retry")

	tx, pid := b.begin(t)
	var token int64
	if err := tx.QueryRow(b.ctx, insertProcessingSQL, id.Tenant, id.Namespace, id.Key, "attempt-uuid").Scan(&token); err != nil {
		t.Fatalf("insert in the other transaction: %v", err)
	}

	out := make(chan claimOutcome, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := b.store.RecordClaim(b.ctx, claimParams(id, "attempt-uuid"))
		out <- claimOutcome{res, err}
	}()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	got := <-out
	if got.err != nil {
		t.Fatalf("RecordClaim: %v; want acquired", got.err)
	}
	if got.res == nil || got.res.Outcome != store.OutcomeAcquired || got.res.Record.Token != token || got.res.Record.Attempt != 1 {
		t.Fatalf("RecordClaim: %+v; want acquired with the first call's token %d, attempt 1", got.res, token)
	}
}

// TestClaimRaceWithConcurrentTakeover: the row is RELEASED in the snapshot,
// but another transaction takes it over while the Claim waits. The Claim must
// not report the stale RELEASED row, nor take the record over a second time.
func TestClaimRaceWithConcurrentTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("raced-takeover")
	held := b.acquire(t, id, "w1")
	b.fail(t, id, held.Token, "retry me", true)

	tx, pid := b.begin(t)
	var token int64
	if err := tx.QueryRow(b.ctx, `UPDATE idem_records SET state = 'processing', token = nextval('idem_token_seq'),
		attempt = attempt + 1, claimant = 'other-replica', lease_expires_at = now() + interval '1 minute',
		expires_at = NULL, error = NULL, updated_at = now()
		WHERE tenant = $1 AND namespace = $2 AND key = $3 RETURNING token`,
		id.Tenant, id.Namespace, id.Key).Scan(&token); err != nil {
		t.Fatalf("takeover in the other transaction: %v", err)
	}

	out := make(chan claimOutcome, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := b.store.RecordClaim(b.ctx, claimParams(id, "me"))
		out <- claimOutcome{res, err}
	}()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	got := <-out
	if got.err != nil {
		t.Fatalf("RecordClaim: %v; want in_progress", got.err)
	}
	if got.res == nil || got.res.Outcome != store.OutcomeInProgress || got.res.Record.Token != token ||
		got.res.Record.State != store.StateProcessing {
		t.Fatalf("RecordClaim: %+v; want in_progress on the other transaction's takeover (token %d)", got.res, token)
	}
	if rec := b.get(t, id); rec.Token != token || rec.Attempt != 2 {
		t.Fatalf("record token %d attempt %d, want %d, 2: the record was taken over twice", rec.Token, rec.Attempt, token)
	}
}

// TestCompleteRaceWithConcurrentTakeover: the Complete's snapshot shows the
// caller's token, but a takeover commits while the Complete waits for the
// row. The UPDATE rechecks the token on the new row and applies nothing; the
// answer must be LEASE_LOST, not a stale success or a retry-forever.
func TestCompleteRaceWithConcurrentTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("raced-complete")
	held := b.acquire(t, id, "w1")

	tx, pid := b.begin(t)
	var token int64
	if err := tx.QueryRow(b.ctx, `UPDATE idem_records SET token = nextval('idem_token_seq'), attempt = attempt + 1,
		claimant = 'other-replica', lease_expires_at = now() + interval '1 minute', updated_at = now()
		WHERE tenant = $1 AND namespace = $2 AND key = $3 RETURNING token`,
		id.Tenant, id.Namespace, id.Key).Scan(&token); err != nil {
		t.Fatalf("takeover in the other transaction: %v", err)
	}

	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: held.Token, Result: []byte("stale")})
		errc <- err
	}()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	requireErr(t, "RecordComplete with the superseded token", <-errc, store.ErrLeaseLost)
	if rec := b.get(t, id); rec.State != store.StateProcessing || rec.Token != token || rec.Result != nil {
		t.Fatalf("record %+v; want the other transaction's PROCESSING row untouched", rec)
	}
}

// TestCompleteRaceWithDuplicateComplete: two Completes with the same token
// and result race (a retry sent while the first was still running). The
// second waits, then finds the row COMPLETED by the first, and must return
// that record.
func TestCompleteRaceWithDuplicateComplete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("raced-duplicate")
	held := b.acquire(t, id, "w1")

	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, `UPDATE idem_records SET state = 'completed', result = 'first', lease_expires_at = NULL,
		completed_at = now(), expires_at = now() + retention, updated_at = now()
		WHERE tenant = $1 AND namespace = $2 AND key = $3`, id.Tenant, id.Namespace, id.Key); err != nil {
		t.Fatalf("complete in the other transaction: %v", err)
	}

	type outcome struct {
		rec *store.Record
		err error
	}
	out := make(chan outcome, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: held.Token, Result: []byte("first")})
		out <- outcome{rec, err}
	}()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	got := <-out
	if got.err != nil {
		t.Fatalf("repeated RecordComplete: %v; want the stored record", got.err)
	}
	if got.rec.State != store.StateCompleted || string(got.rec.Result) != "first" {
		t.Fatalf("repeated RecordComplete: %+v; want the first call's COMPLETED record", got.rec)
	}
	requireSameRecord(t, "RecordGet", b.get(t, id), got.rec)
}

// TestHeartbeatRaceWithSweeper: the sweeper marks the lapsed record EXPIRED
// while a Heartbeat with the current token waits for the row. Expiry does not
// revoke, so the Heartbeat must still win the record back.
func TestHeartbeatRaceWithSweeper(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("raced-heartbeat")
	held := b.acquire(t, id, "w1")
	b.lapse(t, id)

	tx, pid := b.begin(t)
	if n, err := postgres.SweeperOn(tx).SweepExpire(b.ctx, 10); err != nil || n != 1 {
		t.Fatalf("SweepExpire in the other transaction: %d, %v", n, err)
	}

	type outcome struct {
		rec *store.Record
		err error
	}
	out := make(chan outcome, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec, err := b.store.RecordHeartbeat(b.ctx, &store.HeartbeatParams{RecordID: id, Token: held.Token, LeaseTTL: testLease})
		out <- outcome{rec, err}
	}()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	got := <-out
	if got.err != nil {
		t.Fatalf("RecordHeartbeat: %v", got.err)
	}
	if got.rec.State != store.StateProcessing || !got.rec.ExpiresAt.IsZero() || got.rec.Token != held.Token {
		t.Fatalf("RecordHeartbeat: %+v; want PROCESSING with the same token and no expires_at", got.rec)
	}
}

// TestResolveRaceWithOwnRetry: an operator's Resolve whose answer was late is
// retried while the first one's transaction still holds the row. The retry
// waits for it, finds the record already resolved as it asks, and must get
// the record back, not "not unresolved" from a snapshot taken before the
// first one committed.
func TestResolveRaceWithOwnRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("raced-resolve")
	b.acquire(t, id, "holder")
	b.exec(t, `UPDATE idem_records SET state = 'unresolved' WHERE tenant = $1 AND namespace = $2 AND key = $3`,
		id.Tenant, id.Namespace, id.Key)

	// The first Resolve, still running: its change made and not committed.
	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, `UPDATE idem_records SET state = 'completed', result = 'charged', lease_expires_at = NULL,
		completed_at = now(), expires_at = now() + retention, updated_at = now()
		WHERE tenant = $1 AND namespace = $2 AND key = $3`, id.Tenant, id.Namespace, id.Key); err != nil {
		t.Fatalf("the first resolve: %v", err)
	}

	type answer struct {
		rec *store.Record
		err error
	}
	out := make(chan answer, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: id,
			Resolution: store.ResolveCompleted, Result: []byte("charged")})
		out <- answer{rec, err}
	}()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	got := <-out
	if got.err != nil {
		t.Fatalf("the retried Resolve: %v; want the record, resolved as it asks", got.err)
	}
	if got.rec.State != store.StateCompleted || string(got.rec.Result) != "charged" {
		t.Fatalf("the retried Resolve: %s with result %q; want COMPLETED with %q", got.rec.State, got.rec.Result, "charged")
	}
}

// TestTakeoverLosesToConcurrentHeartbeat: the Claim reads a lapsed lease
// and decides to take it over, but the holder's Heartbeat changes the row
// before the takeover's compare-and-set: the takeover waits for the
// Heartbeat's lock, finds a newer version than it decided on, and changes
// nothing; the Claim reads again and answers IN_PROGRESS on the holder's
// token. A Complete instead makes the Claim a replay.
func TestTakeoverLosesToConcurrentHeartbeat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, change string
		want         store.Outcome
	}{
		{"heartbeat", `UPDATE idem_records SET lease_expires_at = now() + interval '1 minute', updated_at = now()`, store.OutcomeInProgress},
		{"complete", `UPDATE idem_records SET state = 'completed', result = 'done', lease_expires_at = NULL,
			completed_at = now(), expires_at = now() + retention, updated_at = now()`, store.OutcomeCompleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := recordID("raced-cas-" + tc.name)
			held := b.acquire(t, id, "holder")
			b.lapse(t, id)
			got := raceClaim(t, b, id, tc.change+` WHERE tenant = $1 AND namespace = $2 AND key = $3`, func() claimOutcome {
				res, err := b.store.RecordClaim(b.ctx, claimParams(id, "taker"))
				return claimOutcome{res, err}
			})
			if got.err != nil || got.res.Outcome != tc.want || got.res.Record.Token != held.Token {
				t.Fatalf("RecordClaim: %+v, %v; want %v on the holder's token %d", got.res, got.err, tc.want, held.Token)
			}
			if rec := b.get(t, id); rec.Token != held.Token || rec.Attempt != 1 || rec.Claimant != "holder" {
				t.Fatalf("record %+v; want the holder's, not taken over", rec)
			}
		})
	}
}

// TestHoldLosesToConcurrentComplete: the Claim finds a held lease run out
// and decides to make it UNRESOLVED, but the holder's Complete commits
// first: the Claim's write changes nothing and the Claim replays the
// result.
func TestHoldLosesToConcurrentComplete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("raced-hold")
	p := claimParams(id, "holder")
	p.Hold = true
	held := b.claim(t, p).Record
	b.lapse(t, id)
	got := raceClaim(t, b, id, `UPDATE idem_records SET state = 'completed', result = 'done', lease_expires_at = NULL,
		completed_at = now(), expires_at = now() + retention, updated_at = now()
		WHERE tenant = $1 AND namespace = $2 AND key = $3`, func() claimOutcome {
		res, err := b.store.RecordClaim(b.ctx, claimParams(id, "other"))
		return claimOutcome{res, err}
	})
	if got.err != nil || got.res.Outcome != store.OutcomeCompleted || string(got.res.Record.Result) != "done" {
		t.Fatalf("RecordClaim: %+v, %v; want the holder's completed record", got.res, got.err)
	}
	if rec := b.get(t, id); rec.State != store.StateCompleted || rec.Token != held.Token {
		t.Fatalf("record %+v; want COMPLETED by the holder", rec)
	}
}

// TestClaimManyTakeoverLosesToConcurrentHeartbeat: the same race in a
// many-row Claim: the takeover that lost is answered from a new read
// (IN_PROGRESS), and the other calls of the batch keep theirs.
func TestClaimManyTakeoverLosesToConcurrentHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raced, free := recordID("many-raced"), recordID("many-zfree")
	held := b.acquire(t, raced, "holder")
	freed := b.acquire(t, free, "holder")
	b.lapse(t, raced)
	b.lapse(t, free)
	var res []*store.ClaimResult
	var errs []error
	raceClaim(t, b, raced, `UPDATE idem_records SET lease_expires_at = now() + interval '1 minute', updated_at = now()
		WHERE tenant = $1 AND namespace = $2 AND key = $3`, func() claimOutcome {
		res, errs = b.store.RecordClaimMany(b.ctx, []*store.ClaimParams{claimParams(free, "taker"), claimParams(raced, "taker"),
			claimParams(recordID("many-new"), "taker")})
		return claimOutcome{}
	})
	if errs[1] != nil || res[1].Outcome != store.OutcomeInProgress || res[1].Record.Token != held.Token {
		t.Fatalf("the raced call: %+v, %v; want in_progress on the holder's token %d", res[1], errs[1], held.Token)
	}
	if errs[0] != nil || res[0].Outcome != store.OutcomeAcquired || !res[0].Takeover || res[0].Record.Token <= freed.Token {
		t.Fatalf("the other lapsed lease: %+v, %v; want taken over", res[0], errs[0])
	}
	if errs[2] != nil || res[2].Outcome != store.OutcomeAcquired || res[2].Takeover {
		t.Fatalf("the new key: %+v, %v; want acquired", res[2], errs[2])
	}
}

// raceClaim changes id's row with change ($1–$3 its id) in a transaction
// of its own, runs claim, waits until claim's statement waits for that
// transaction's lock, commits it, and returns what claim returned.
func raceClaim(t *testing.T, b *testBundle, id store.RecordID, change string, claim func() claimOutcome) claimOutcome {
	t.Helper()
	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, change, id.Tenant, id.Namespace, id.Key); err != nil {
		t.Fatalf("the change in the other transaction: %v", err)
	}
	out := make(chan claimOutcome, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		out <- claim()
	}()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return <-out
}
