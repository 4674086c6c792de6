package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The tests below walk the state table of DESIGN §1, one row each.

func testClaimNewKeyAcquires(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("new")

	before := b.now(t)
	res := b.claim(t, &store.ClaimParams{
		RecordID: id, Claimant: "worker-1", Fingerprint: []byte("fp-1"),
		LeaseTTL: 90 * time.Second, Retention: 2 * time.Hour,
	})
	after := b.now(t)

	if res.Outcome != store.OutcomeAcquired {
		t.Fatalf("outcome %v, want acquired", res.Outcome)
	}
	if res.RetryAfter != 0 {
		t.Errorf("RetryAfter %v, want 0 for acquired", res.RetryAfter)
	}
	rec := res.Record
	if rec.RecordID != id {
		t.Errorf("id %+v, want %+v", rec.RecordID, id)
	}
	if rec.State != store.StateProcessing || rec.Token <= 0 || rec.Attempt != 1 {
		t.Errorf("state %s token %d attempt %d, want processing, >0, 1", rec.State, rec.Token, rec.Attempt)
	}
	if rec.Claimant != "worker-1" || string(rec.Fingerprint) != "fp-1" || rec.Retention != 2*time.Hour {
		t.Errorf("claimant %q fingerprint %q retention %v, want worker-1, fp-1, 2h", rec.Claimant, rec.Fingerprint, rec.Retention)
	}
	requireBetween(t, "created_at", rec.CreatedAt, before, after)
	if !rec.UpdatedAt.Equal(rec.CreatedAt) {
		t.Errorf("updated_at %v, want created_at %v", rec.UpdatedAt, rec.CreatedAt)
	}
	if want := rec.CreatedAt.Add(90 * time.Second); !rec.LeaseExpiresAt.Equal(want) {
		t.Errorf("lease_expires_at %v, want created_at + ttl = %v", rec.LeaseExpiresAt, want)
	}
	if !rec.ExpiresAt.IsZero() || !rec.CompletedAt.IsZero() {
		t.Errorf("expires_at %v completed_at %v, want both unset while processing", rec.ExpiresAt, rec.CompletedAt)
	}
	if rec.Result != nil || rec.Error != "" {
		t.Errorf("result %q error %q, want none", rec.Result, rec.Error)
	}
	requireUTC(t, rec)
	requireSameRecord(t, "RecordGet after claim", b.get(t, id), rec)
}

func testClaimLiveLeaseIsInProgress(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("busy")
	held := b.acquire(t, id, "worker-1")

	before := b.now(t)
	res := b.claim(t, claimParams(id, "worker-2"))
	after := b.now(t)

	if res.Outcome != store.OutcomeInProgress {
		t.Fatalf("outcome %v, want in_progress", res.Outcome)
	}
	requireSameRecord(t, "reported record", res.Record, held)
	// RetryAfter is the holder's remaining lease by the database clock at
	// the moment the Claim ran, somewhere between before and after.
	lo, hi := held.LeaseExpiresAt.Sub(after), held.LeaseExpiresAt.Sub(before)
	if res.RetryAfter <= 0 || res.RetryAfter < lo || res.RetryAfter > hi {
		t.Fatalf("RetryAfter %v, want the remaining lease, between %v and %v", res.RetryAfter, lo, hi)
	}
	requireSameRecord(t, "RecordGet after in_progress", b.get(t, id), held)
}

func testClaimLapsedLeaseTakesOver(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("stalled")
	first := b.acquire(t, id, "worker-1")
	b.lapse(t, id)

	before := b.now(t)
	res := b.claim(t, &store.ClaimParams{RecordID: id, Claimant: "worker-2", LeaseTTL: 30 * time.Second, Retention: 3 * time.Hour})
	after := b.now(t)

	if res.Outcome != store.OutcomeAcquired {
		t.Fatalf("outcome %v, want acquired (takeover)", res.Outcome)
	}
	rec := res.Record
	if rec.Token <= first.Token || rec.Attempt != 2 || rec.State != store.StateProcessing || rec.Claimant != "worker-2" {
		t.Fatalf("token %d attempt %d state %s claimant %q; want token > %d, attempt 2, processing, worker-2",
			rec.Token, rec.Attempt, rec.State, rec.Claimant, first.Token)
	}
	if !rec.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("created_at %v, want the original %v", rec.CreatedAt, first.CreatedAt)
	}
	requireBetween(t, "updated_at", rec.UpdatedAt, before, after)
	if want := rec.UpdatedAt.Add(30 * time.Second); !rec.LeaseExpiresAt.Equal(want) {
		t.Errorf("lease_expires_at %v, want updated_at + ttl = %v", rec.LeaseExpiresAt, want)
	}
	if rec.Retention != 3*time.Hour {
		t.Errorf("retention %v, want the new claim's 3h", rec.Retention)
	}
	if !rec.ExpiresAt.IsZero() || !rec.CompletedAt.IsZero() {
		t.Errorf("expires_at %v completed_at %v, want unset", rec.ExpiresAt, rec.CompletedAt)
	}
	requireSameRecord(t, "RecordGet after takeover", b.get(t, id), rec)
}

// testClaimTakeoverAfterRealLapse lets a 1 s lease run out by the store's
// clock, not by the harness's Lapse, so that the store's own comparison of a
// lease with its clock is exercised. It is the suite's one sleep.
func testClaimTakeoverAfterRealLapse(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("real-lapse")
	first := b.claim(t, &store.ClaimParams{RecordID: id, Claimant: "w1", LeaseTTL: time.Second, Retention: testRetention}).Record

	before := b.now(t)
	res := b.claim(t, claimParams(id, "w2"))
	// Only a machine that stalled for the whole second could see the lease
	// gone already; that is not what this test is about.
	if before.Before(first.LeaseExpiresAt.Add(-100*time.Millisecond)) &&
		(res.Outcome != store.OutcomeInProgress || res.RetryAfter <= 0 || res.RetryAfter > time.Second) {
		t.Fatalf("before the lease ran out: outcome %v RetryAfter %v, want in_progress within 1s", res.Outcome, res.RetryAfter)
	}
	time.Sleep(1100 * time.Millisecond)
	res = b.claim(t, claimParams(id, "w2"))
	if res.Outcome != store.OutcomeAcquired || res.Record.Token <= first.Token || res.Record.Attempt != 2 {
		t.Fatalf("after the lease ran out: outcome %v token %d attempt %d, want acquired, > %d, 2",
			res.Outcome, res.Record.Token, res.Record.Attempt, first.Token)
	}
}

func testClaimCompletedReplaysResult(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("done")
	held := b.acquire(t, id, "worker-1")

	before := b.now(t)
	done := b.complete(t, id, held.Token, "charge ch_123")
	after := b.now(t)

	if done.State != store.StateCompleted || done.Token != held.Token || done.Attempt != 1 {
		t.Fatalf("state %s token %d attempt %d, want completed, %d, 1", done.State, done.Token, done.Attempt, held.Token)
	}
	requireBetween(t, "completed_at", done.CompletedAt, before, after)
	if !done.UpdatedAt.Equal(done.CompletedAt) {
		t.Errorf("updated_at %v, want completed_at %v", done.UpdatedAt, done.CompletedAt)
	}
	if want := done.CompletedAt.Add(testRetention); !done.ExpiresAt.Equal(want) {
		t.Errorf("expires_at %v, want completed_at + retention = %v", done.ExpiresAt, want)
	}
	if !done.LeaseExpiresAt.IsZero() {
		t.Errorf("lease_expires_at %v, want unset once completed", done.LeaseExpiresAt)
	}

	for _, claimant := range []string{"worker-2", "worker-1", ""} {
		res := b.claim(t, claimParams(id, claimant))
		if res.Outcome != store.OutcomeCompleted {
			t.Fatalf("claimant %q: outcome %v, want completed", claimant, res.Outcome)
		}
		if string(res.Record.Result) != "charge ch_123" {
			t.Fatalf("claimant %q: result %q, want the stored one", claimant, res.Record.Result)
		}
		requireSameRecord(t, "replayed record", res.Record, done)
	}
	requireSameRecord(t, "RecordGet after replays", b.get(t, id), done)
}

func testClaimFailedReplaysError(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("failed")
	held := b.acquire(t, id, "worker-1")

	before := b.now(t)
	failed := b.fail(t, id, held.Token, "card declined", false)
	after := b.now(t)

	if failed.State != store.StateFailed || failed.Error != "card declined" || failed.Result != nil {
		t.Fatalf("state %s error %q result %q, want failed, card declined, none", failed.State, failed.Error, failed.Result)
	}
	requireBetween(t, "completed_at", failed.CompletedAt, before, after)
	if want := failed.CompletedAt.Add(testRetention); !failed.ExpiresAt.Equal(want) {
		t.Errorf("expires_at %v, want completed_at + retention = %v", failed.ExpiresAt, want)
	}
	if !failed.LeaseExpiresAt.IsZero() {
		t.Errorf("lease_expires_at %v, want unset", failed.LeaseExpiresAt)
	}

	res := b.claim(t, claimParams(id, "worker-2"))
	if res.Outcome != store.OutcomeFailed || res.Record.Error != "card declined" {
		t.Fatalf("outcome %v error %q, want failed with the stored error", res.Outcome, res.Record.Error)
	}
	requireSameRecord(t, "replayed record", res.Record, failed)
	requireSameRecord(t, "RecordGet after replay", b.get(t, id), failed)
}

func testClaimReleasedAcquires(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("released")
	held := b.acquire(t, id, "worker-1")

	before := b.now(t)
	released := b.fail(t, id, held.Token, "timeout talking to the bank", true)
	after := b.now(t)

	if released.State != store.StateReleased || released.Error != "timeout talking to the bank" {
		t.Fatalf("state %s error %q, want released with the error", released.State, released.Error)
	}
	if !released.CompletedAt.IsZero() {
		t.Errorf("completed_at %v, want unset: a released record did not complete", released.CompletedAt)
	}
	requireBetween(t, "updated_at", released.UpdatedAt, before, after)
	if want := released.UpdatedAt.Add(testRetention); !released.ExpiresAt.Equal(want) {
		t.Errorf("expires_at %v, want the moment it left processing + retention = %v", released.ExpiresAt, want)
	}

	before = b.now(t)
	res := b.claim(t, &store.ClaimParams{RecordID: id, Claimant: "worker-2", LeaseTTL: testLease, Retention: 2 * time.Hour})
	after = b.now(t)
	if res.Outcome != store.OutcomeAcquired {
		t.Fatalf("outcome %v, want acquired", res.Outcome)
	}
	rec := res.Record
	if rec.Token <= held.Token || rec.Attempt != 2 || rec.State != store.StateProcessing || rec.Claimant != "worker-2" {
		t.Fatalf("token %d attempt %d state %s claimant %q, want > %d, 2, processing, worker-2",
			rec.Token, rec.Attempt, rec.State, rec.Claimant, held.Token)
	}
	if rec.Error != "" || rec.Result != nil || !rec.ExpiresAt.IsZero() || !rec.CompletedAt.IsZero() {
		t.Errorf("error %q result %q expires_at %v completed_at %v, want all cleared",
			rec.Error, rec.Result, rec.ExpiresAt, rec.CompletedAt)
	}
	requireBetween(t, "updated_at", rec.UpdatedAt, before, after)
	if want := rec.UpdatedAt.Add(testLease); !rec.LeaseExpiresAt.Equal(want) {
		t.Errorf("lease_expires_at %v, want %v", rec.LeaseExpiresAt, want)
	}

	// The retention of the claim that acquired the record is the one used
	// when it leaves PROCESSING.
	done := b.complete(t, id, rec.Token, "ok")
	if want := done.CompletedAt.Add(2 * time.Hour); !done.ExpiresAt.Equal(want) {
		t.Errorf("expires_at %v, want completed_at + the new retention = %v", done.ExpiresAt, want)
	}
}

func testClaimExpiredAcquires(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("expired")
	held := b.acquire(t, id, "worker-1")
	b.lapse(t, id)

	before := b.now(t)
	n, err := b.store.SweepExpire(b.ctx, 100)
	after := b.now(t)
	if err != nil || n != 1 {
		t.Fatalf("SweepExpire: %d, %v; want 1, nil", n, err)
	}
	expired := b.get(t, id)
	if expired.State != store.StateExpired || expired.Token != held.Token {
		t.Fatalf("state %s token %d, want expired, %d", expired.State, expired.Token, held.Token)
	}
	requireBetween(t, "updated_at", expired.UpdatedAt, before, after)
	if want := expired.UpdatedAt.Add(testRetention); !expired.ExpiresAt.Equal(want) {
		t.Errorf("expires_at %v, want the sweep's now + retention = %v", expired.ExpiresAt, want)
	}

	res := b.claim(t, claimParams(id, "worker-2"))
	if res.Outcome != store.OutcomeAcquired {
		t.Fatalf("outcome %v, want acquired", res.Outcome)
	}
	rec := res.Record
	if rec.Token <= held.Token || rec.Attempt != 2 || rec.State != store.StateProcessing {
		t.Fatalf("token %d attempt %d state %s, want > %d, 2, processing", rec.Token, rec.Attempt, rec.State, held.Token)
	}
	if !rec.ExpiresAt.IsZero() {
		t.Errorf("expires_at %v, want unset while processing", rec.ExpiresAt)
	}
	if want := rec.UpdatedAt.Add(testLease); !rec.LeaseExpiresAt.Equal(want) {
		t.Errorf("lease_expires_at %v, want %v", rec.LeaseExpiresAt, want)
	}
}

func testClaimRetentionRoundTrips(t *testing.T, h Harness) {
	b := setup(t, h)
	for i, d := range []time.Duration{time.Minute, 1500 * time.Millisecond, 24 * time.Hour, 90 * 24 * time.Hour} {
		id := recordID(string(rune('a' + i)))
		rec := b.claim(t, &store.ClaimParams{RecordID: id, LeaseTTL: 24 * time.Hour, Retention: d}).Record
		if rec.Retention != d {
			t.Errorf("retention %v came back as %v", d, rec.Retention)
		}
		if want := rec.CreatedAt.Add(24 * time.Hour); !rec.LeaseExpiresAt.Equal(want) {
			t.Errorf("lease_expires_at %v, want %v", rec.LeaseExpiresAt, want)
		}
		done := b.complete(t, id, rec.Token, "")
		if want := done.CompletedAt.Add(d); !done.ExpiresAt.Equal(want) {
			t.Errorf("retention %v: expires_at %v, want %v", d, done.ExpiresAt, want)
		}
	}
}

// The policy's name is written by the Claim that acquires and is kept by
// every other call: a report, a Complete, a listing.
func testClaimStoresPolicy(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("policy")
	p := claimParams(id, "")
	p.Policy = "payments.*,refund"
	rec := b.claim(t, p).Record
	if rec.Policy != p.Policy {
		t.Fatalf("policy %q, want %q", rec.Policy, p.Policy)
	}
	other := claimParams(id, "")
	other.Policy = "other"
	if res := b.claim(t, other); res.Outcome != store.OutcomeInProgress || res.Record.Policy != p.Policy {
		t.Fatalf("report: %v with policy %q, want in_progress with %q", res.Outcome, res.Record.Policy, p.Policy)
	}
	if got := b.get(t, id); got.Policy != p.Policy {
		t.Errorf("get: policy %q, want %q", got.Policy, p.Policy)
	}
	b.lapse(t, id)
	res := b.claim(t, other)
	if res.Outcome != store.OutcomeAcquired || res.Record.Policy != "other" {
		t.Fatalf("takeover: %v with policy %q, want acquired with %q", res.Outcome, res.Record.Policy, "other")
	}
	if done := b.complete(t, id, res.Record.Token, ""); done.Policy != "other" {
		t.Errorf("complete: policy %q, want %q", done.Policy, "other")
	}
	none := recordID("no-policy")
	if rec := b.acquire(t, none, ""); rec.Policy != "" {
		t.Errorf("a Claim without a policy stored %q", rec.Policy)
	}
}

// A held record whose lease ran out is never taken over: the Claim that
// finds it makes it UNRESOLVED, the sweeper does the same to another, the
// holder's token still applies, and RecordResolve moves one on.
func testClaimHoldBecomesUnresolved(t *testing.T, h Harness) {
	b := setup(t, h)
	held := func(key string) *store.Record {
		p := claimParams(recordID(key), "")
		p.Hold, p.Policy = true, "held.*"
		rec := b.claim(t, p).Record
		if !rec.Hold {
			t.Fatalf("%s: hold not stored", key)
		}
		b.lapse(t, rec.RecordID)
		return rec
	}
	a := held("a")
	for range 2 {
		res := b.claim(t, claimParams(a.RecordID, "other"))
		if res.Outcome != store.OutcomeUnresolved || res.Record.State != store.StateUnresolved || res.Record.Token != a.Token {
			t.Fatalf("Claim of a lapsed held lease: %v, %s, token %d; want unresolved with token %d", res.Outcome, res.Record.State, res.Record.Token, a.Token)
		}
	}
	if done := b.complete(t, a.RecordID, a.Token, "late"); done.State != store.StateCompleted {
		t.Fatalf("late Complete: %s", done.State)
	}

	c := held("c")
	if n, err := b.store.SweepExpire(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepExpire = %d, %v; want 1", n, err)
	}
	got := b.get(t, c.RecordID)
	if got.State != store.StateUnresolved || !got.ExpiresAt.IsZero() {
		t.Fatalf("swept: %s, expires_at %v; want unresolved without expiry", got.State, got.ExpiresAt)
	}
	_, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: a.RecordID, Resolution: store.ResolveReleased})
	requireErr(t, "RecordResolve of a completed record", err, store.ErrNotUnresolved)
	rel, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: c.RecordID, Resolution: store.ResolveReleased})
	if err != nil || rel.State != store.StateReleased || rel.Token != c.Token {
		t.Fatalf("RecordResolve released: %v, %v", rel, err)
	}
	// A released record does not say who released it: a second release is
	// NOT_UNRESOLVED, as is any other resolution of it.
	_, err = b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: c.RecordID, Resolution: store.ResolveReleased})
	requireErr(t, "RecordResolve released of a released record", err, store.ErrNotUnresolved)
	_, err = b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: c.RecordID, Resolution: store.ResolveCompleted})
	requireErr(t, "RecordResolve completed of a released record", err, store.ErrNotUnresolved)
	_, err = b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: a.RecordID, Resolution: store.ResolveCompleted, Result: []byte("other")})
	requireErr(t, "RecordResolve completed with another result", err, store.ErrNotUnresolved)
	done, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: a.RecordID, Resolution: store.ResolveCompleted, Result: []byte("late")})
	if err != nil || done.State != store.StateCompleted || string(done.Result) != "late" {
		t.Fatalf("RecordResolve completed with the result it has: %v, %v; want the record", done, err)
	}

	// A failure resolved, then the same resolution again (a retry whose
	// answer was lost): the record; another error: NOT_UNRESOLVED.
	d := held("d")
	if res := b.claim(t, claimParams(d.RecordID, "other")); res.Outcome != store.OutcomeUnresolved {
		t.Fatalf("Claim of a lapsed held lease: %v; want unresolved", res.Outcome)
	}
	failWith := func(msg string) (*store.Record, error) {
		return b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: d.RecordID, Resolution: store.ResolveFailed, Error: msg})
	}
	for i := range 2 {
		if rec, err := failWith("card declined"); err != nil || rec.State != store.StateFailed || rec.Error != "card declined" {
			t.Fatalf("RecordResolve failed, time %d: %v, %v; want the failed record", i+1, rec, err)
		}
	}
	_, err = failWith("another error")
	requireErr(t, "RecordResolve failed with another error", err, store.ErrNotUnresolved)

	res := b.claim(t, claimParams(c.RecordID, ""))
	if res.Outcome != store.OutcomeAcquired || res.Record.Token <= c.Token || res.Record.Hold {
		t.Fatalf("Claim after release: %v token %d hold %v; want acquired above %d, no hold", res.Outcome, res.Record.Token, res.Record.Hold, c.Token)
	}
}

func testClaimTokensIncreaseAcrossKeys(t *testing.T, h Harness) {
	b := setup(t, h)
	var last int64
	for i := range 20 {
		rec := b.acquire(t, recordID(string(rune('a'+i))), "")
		if rec.Token <= last {
			t.Fatalf("token %d after %d: tokens must increase", rec.Token, last)
		}
		last = rec.Token
	}
}

// Claimant re-entrancy (DESIGN §1, Claimant).

func testClaimSameClaimantReenters(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("reenter")
	held := b.acquire(t, id, "attempt-uuid-1")

	res := b.claim(t, claimParams(id, "attempt-uuid-1"))
	if res.Outcome != store.OutcomeAcquired {
		t.Fatalf("same claimant: outcome %v, want acquired again", res.Outcome)
	}
	requireSameRecord(t, "re-entered record", res.Record, held)

	res = b.claim(t, claimParams(id, "attempt-uuid-2"))
	if res.Outcome != store.OutcomeInProgress || res.Record.Token != held.Token {
		t.Fatalf("other claimant: outcome %v token %d, want in_progress, %d", res.Outcome, res.Record.Token, held.Token)
	}
	requireSameRecord(t, "RecordGet", b.get(t, id), held)
}

func testClaimEmptyClaimantNeverReenters(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("anonymous")
	held := b.acquire(t, id, "")

	for _, claimant := range []string{"", "someone"} {
		res := b.claim(t, claimParams(id, claimant))
		if res.Outcome != store.OutcomeInProgress {
			t.Fatalf("claimant %q on a lease held without claimant: outcome %v, want in_progress", claimant, res.Outcome)
		}
	}
	requireSameRecord(t, "RecordGet", b.get(t, id), held)

	// And a holder with a claimant is not re-entered by an empty one.
	id2 := recordID("named")
	b.acquire(t, id2, "c1")
	if res := b.claim(t, claimParams(id2, "")); res.Outcome != store.OutcomeInProgress {
		t.Fatalf("empty claimant on a lease held by c1: outcome %v, want in_progress", res.Outcome)
	}
}

func testClaimSameClaimantAfterLapseTakesOver(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("reenter-lapsed")
	held := b.acquire(t, id, "c1")
	b.lapse(t, id)

	res := b.claim(t, claimParams(id, "c1"))
	if res.Outcome != store.OutcomeAcquired || res.Record.Token <= held.Token || res.Record.Attempt != 2 {
		t.Fatalf("outcome %v token %d attempt %d, want a takeover: acquired, > %d, 2",
			res.Outcome, res.Record.Token, res.Record.Attempt, held.Token)
	}
}

// Fingerprints (DESIGN §1, Fingerprint).

func testFingerprintMismatchChangesNothing(t *testing.T, h Harness) {
	fp := []byte("sha256-of-payload-A")

	// Each case leaves a record created with fp in one state.
	cases := map[string]func(t *testing.T, b *bundle, id store.RecordID){
		"processing": func(t *testing.T, b *bundle, id store.RecordID) {},
		"processing lapsed": func(t *testing.T, b *bundle, id store.RecordID) {
			b.lapse(t, id)
		},
		"completed": func(t *testing.T, b *bundle, id store.RecordID) {
			b.complete(t, id, b.get(t, id).Token, "r")
		},
		"failed": func(t *testing.T, b *bundle, id store.RecordID) {
			b.fail(t, id, b.get(t, id).Token, "e", false)
		},
		"released": func(t *testing.T, b *bundle, id store.RecordID) {
			b.fail(t, id, b.get(t, id).Token, "e", true)
		},
		"expired": func(t *testing.T, b *bundle, id store.RecordID) {
			b.expire(t, id)
		},
	}
	for name, prepare := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			id := recordID("fp")
			created := b.claim(t, &store.ClaimParams{RecordID: id, Fingerprint: fp, Claimant: "c1", LeaseTTL: testLease, Retention: testRetention})
			if !bytes.Equal(created.Record.Fingerprint, fp) {
				t.Fatalf("fingerprint %q stored, want %q", created.Record.Fingerprint, fp)
			}
			prepare(t, b, id)
			before := b.get(t, id)

			// Even the holder's own claimant does not get past a mismatch.
			for _, claimant := range []string{"c1", "c2"} {
				res, err := b.store.RecordClaim(b.ctx, &store.ClaimParams{
					RecordID: id, Fingerprint: []byte("sha256-of-payload-B"), Claimant: claimant,
					LeaseTTL: testLease, Retention: testRetention,
				})
				requireErr(t, "claim with another fingerprint", err, store.ErrFingerprintMismatch)
				if res != nil {
					t.Fatalf("result %+v alongside the error", res)
				}
			}
			requireSameRecord(t, "RecordGet after the mismatch", b.get(t, id), before)
		})
	}
}

func testFingerprintEmptyIsNotMismatch(t *testing.T, h Harness) {
	b := setup(t, h)

	// Stored fingerprint, claim without one.
	withFP := recordID("with-fp")
	held := b.claim(t, &store.ClaimParams{RecordID: withFP, Fingerprint: []byte("A"), LeaseTTL: testLease, Retention: testRetention}).Record
	if res := b.claim(t, claimParams(withFP, "")); res.Outcome != store.OutcomeInProgress {
		t.Fatalf("empty fingerprint on a processing record: outcome %v, want in_progress", res.Outcome)
	}
	b.fail(t, withFP, held.Token, "retry me", true)
	res := b.claim(t, claimParams(withFP, ""))
	if res.Outcome != store.OutcomeAcquired || string(res.Record.Fingerprint) != "A" {
		t.Fatalf("empty fingerprint on a released record: outcome %v fingerprint %q, want acquired, A kept",
			res.Outcome, res.Record.Fingerprint)
	}

	// No stored fingerprint, claim with one. The fingerprint is stored when
	// the record is created only, so a takeover does not add it.
	noFP := recordID("no-fp")
	held = b.acquire(t, noFP, "")
	if held.Fingerprint != nil {
		t.Fatalf("fingerprint %q stored, want none", held.Fingerprint)
	}
	withB := &store.ClaimParams{RecordID: noFP, Fingerprint: []byte("B"), LeaseTTL: testLease, Retention: testRetention}
	if res := b.claim(t, withB); res.Outcome != store.OutcomeInProgress {
		t.Fatalf("fingerprint on a processing record without one: outcome %v, want in_progress", res.Outcome)
	}
	b.fail(t, noFP, held.Token, "retry me", true)
	res = b.claim(t, withB)
	if res.Outcome != store.OutcomeAcquired || res.Record.Fingerprint != nil {
		t.Fatalf("fingerprint on a released record without one: outcome %v fingerprint %q, want acquired, none",
			res.Outcome, res.Record.Fingerprint)
	}
	b.complete(t, noFP, res.Record.Token, "done")
	if res := b.claim(t, withB); res.Outcome != store.OutcomeCompleted {
		t.Fatalf("fingerprint on a completed record without one: outcome %v, want completed", res.Outcome)
	}
}

func testFingerprintSameIsAccepted(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("same-fp")
	p := &store.ClaimParams{RecordID: id, Fingerprint: []byte("A"), LeaseTTL: testLease, Retention: testRetention}
	held := b.claim(t, p).Record
	if res := b.claim(t, p); res.Outcome != store.OutcomeInProgress {
		t.Fatalf("same fingerprint, live lease: outcome %v, want in_progress", res.Outcome)
	}
	b.lapse(t, id)
	res := b.claim(t, p)
	if res.Outcome != store.OutcomeAcquired || res.Record.Token <= held.Token {
		t.Fatalf("same fingerprint, lapsed lease: outcome %v token %d, want acquired, > %d", res.Outcome, res.Record.Token, held.Token)
	}
	b.complete(t, id, res.Record.Token, "r")
	if res := b.claim(t, p); res.Outcome != store.OutcomeCompleted || string(res.Record.Result) != "r" {
		t.Fatalf("same fingerprint, completed: outcome %v result %q, want completed, r", res.Outcome, res.Record.Result)
	}
}

func testClaimReportsTakeover(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("takeover-flag")
	if res := b.claim(t, claimParams(id, "first")); res.Outcome != store.OutcomeAcquired || res.Takeover {
		t.Fatalf("new record: outcome %s, takeover %v; want acquired, no takeover", res.Outcome, res.Takeover)
	}
	if res := b.claim(t, claimParams(id, "first")); res.Outcome != store.OutcomeAcquired || res.Takeover {
		t.Fatalf("same claimant again: outcome %s, takeover %v; want acquired, no takeover", res.Outcome, res.Takeover)
	}
	b.lapse(t, id)
	if res := b.claim(t, claimParams(id, "second")); res.Outcome != store.OutcomeAcquired || !res.Takeover {
		t.Fatalf("lapsed lease: outcome %s, takeover %v; want acquired, takeover", res.Outcome, res.Takeover)
	}
}

// testClaimAttemptCountsAcquisitions: attempt counts the times the record was
// acquired, whatever made it available; a claimant asking again is not a new
// acquisition.
func testClaimAttemptCountsAcquisitions(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("attempts")
	rec := b.acquire(t, id, "a1")
	if again := b.acquire(t, id, "a1"); again.Attempt != 1 {
		t.Fatalf("the same claimant again: attempt %d, want 1", again.Attempt)
	}
	b.fail(t, id, rec.Token, "retry", true)
	rec = b.acquire(t, id, "a2")
	b.lapse(t, id)
	rec3 := b.acquire(t, id, "a3")
	b.expire(t, id)
	rec4 := b.acquire(t, id, "a4")
	if rec.Attempt != 2 || rec3.Attempt != 3 || rec4.Attempt != 4 {
		t.Fatalf("attempts %d, %d, %d after a release, a lapse and an expiry; want 2, 3, 4", rec.Attempt, rec3.Attempt, rec4.Attempt)
	}
	if done := b.complete(t, id, rec4.Token, "r"); done.Attempt != 4 {
		t.Fatalf("attempt %d once completed, want 4", done.Attempt)
	}
}
