package postgres_test

import (
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// The tests in this file pin down the one exception to "one statement per
// call" (DESIGN §4): under READ COMMITTED a statement that waited for a row
// lock sees the row's new version in its ON CONFLICT / UPDATE, but its plain
// SELECT branch still reads the snapshot taken when the statement began. Each
// test holds a transaction open on a row, starts the call, waits until the
// call's backend waits for that transaction's lock, and only then commits, so
// the interleaving is the one the store's second read exists for.

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
