package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// maxTimeline is the limit the suite reads timelines with: more than any
// test writes.
const maxTimeline = 1000

// timeline reads the timeline of id's key and fails the test on an error.
func (b *bundle) timeline(t *testing.T, id store.RecordID) []store.TimelineEntry {
	t.Helper()
	entries, err := b.store.RecordTimeline(b.ctx, &store.TimelineParams{RecordID: id, Limit: maxTimeline})
	if err != nil {
		t.Fatalf("RecordTimeline(%q): %v", id.Key, err)
	}
	return entries
}

// requireTimeline fails unless the timeline of id's key is want, field by
// field, with each entry's At between from and the store's now and in UTC,
// in order.
func (b *bundle) requireTimeline(t *testing.T, what string, id store.RecordID, from time.Time, want ...store.TimelineEntry) {
	t.Helper()
	got := b.timeline(t, id)
	to := b.now(t)
	if len(got) != len(want) {
		t.Fatalf("%s: %d timeline entries, want %d:\n got: %+v\nwant: %+v", what, len(got), len(want), got, want)
	}
	for i := range got {
		requireBetween(t, fmt.Sprintf("%s: entry %d (%s) at", what, i, got[i].Kind), got[i].At, from.Add(-time.Millisecond), to)
		if got[i].At.Location() != time.UTC {
			t.Errorf("%s: entry %d at %v, want UTC", what, i, got[i].At.Location())
		}
		if i > 0 && got[i].At.Before(got[i-1].At) {
			t.Errorf("%s: entry %d at %v, before entry %d at %v", what, i, got[i].At, i-1, got[i-1].At)
		}
		e := got[i]
		e.At = time.Time{}
		if !reflect.DeepEqual(e, want[i]) {
			t.Errorf("%s: entry %d\n got: %+v\nwant: %+v", what, i, e, want[i])
		}
	}
}

// heldClaim is a Claim under a hold policy.
func heldClaim(id store.RecordID, claimant string) *store.ClaimParams {
	p := claimParams(id, claimant)
	p.Hold, p.Policy = true, "held.*"
	return p
}

// testTimelineOrdinaryPathWritesNothing: a Claim that creates a record, its
// holder's Heartbeat and Complete, the same claimant's Claim again, a Claim
// that finds the live lease, a replay, and a Lookup leave no entry; nor does
// a Claim with the record's own fingerprint or none.
func testTimelineOrdinaryPathWritesNothing(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("ordinary")
	p := claimParams(id, "w1")
	p.Fingerprint = []byte("fp")
	rec := b.claim(t, p).Record
	b.claim(t, p) // the same claimant again
	if res := b.claim(t, claimParams(id, "w2")); res.Outcome != store.OutcomeInProgress {
		t.Fatalf("Claim of a live lease: %v", res.Outcome)
	}
	if _, err := b.store.RecordHeartbeat(b.ctx, &store.HeartbeatParams{RecordID: id, Token: rec.Token, LeaseTTL: testLease}); err != nil {
		t.Fatal(err)
	}
	b.complete(t, id, rec.Token, "done")
	b.complete(t, id, rec.Token, "done") // a retry after a lost answer
	b.claim(t, p)                        // a replay, with the record's own fingerprint
	b.claim(t, claimParams(id, "w3"))    // and with none
	b.get(t, id)
	if got := b.timeline(t, id); len(got) != 0 {
		t.Fatalf("the ordinary path wrote %d entries: %+v; want none", len(got), got)
	}
	// A batch of them too.
	ids := []store.RecordID{recordID("many-0"), recordID("many-1")}
	res, errs := b.store.RecordClaimMany(b.ctx, []*store.ClaimParams{claimParams(ids[0], "w"), claimParams(ids[1], "w")})
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("RecordClaimMany: %v", errs[i])
		}
	}
	_, errs = b.store.RecordCompleteMany(b.ctx, []*store.CompleteParams{
		{RecordID: ids[0], Token: res[0].Record.Token}, {RecordID: ids[1], Token: res[1].Record.Token}})
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("RecordCompleteMany: %v", errs[i])
		}
		if got := b.timeline(t, id); len(got) != 0 {
			t.Fatalf("%s: the batched ordinary path wrote %+v; want nothing", id.Key, got)
		}
	}
}

// testTimelineTakeover: a Claim that takes a record over keeps the lease it
// took over (token, claimant and the state it was in: a lapsed PROCESSING
// lease, EXPIRED, RELEASED) and the new one, in order.
func testTimelineTakeover(t *testing.T, h Harness) {
	b := setup(t, h)
	from := b.now(t)
	id := recordID("taken")
	first := b.acquire(t, id, "w1")
	b.lapse(t, id)
	second := b.acquire(t, id, "w2")
	b.expire(t, id)
	third := b.acquire(t, id, "w3")
	b.fail(t, id, third.Token, "try later", true)
	fourth := b.acquire(t, id, "")
	b.requireTimeline(t, "takeovers", id, from,
		store.TimelineEntry{Kind: store.EntryTakenOver, Token: second.Token, State: store.StateProcessing,
			PreviousToken: first.Token, PreviousState: store.StateProcessing, Claimant: "w2", PreviousClaimant: "w1"},
		store.TimelineEntry{Kind: store.EntryTakenOver, Token: third.Token, State: store.StateProcessing,
			PreviousToken: second.Token, PreviousState: store.StateExpired, Claimant: "w3", PreviousClaimant: "w2"},
		store.TimelineEntry{Kind: store.EntryReleased, Token: third.Token, State: store.StateReleased, Claimant: "w3", Error: "try later"},
		store.TimelineEntry{Kind: store.EntryTakenOver, Token: fourth.Token, State: store.StateProcessing,
			PreviousToken: third.Token, PreviousState: store.StateReleased, Claimant: "", PreviousClaimant: "w3"})

	// In a batch of Claims as alone.
	other := recordID("taken-in-batch")
	was := b.acquire(t, other, "b1")
	b.lapse(t, other)
	res, errs := b.store.RecordClaimMany(b.ctx, []*store.ClaimParams{claimParams(other, "b2"), claimParams(recordID("fresh"), "b3")})
	if errs[0] != nil || !res[0].Takeover {
		t.Fatalf("RecordClaimMany takeover: %+v, %v", res[0], errs[0])
	}
	b.requireTimeline(t, "a takeover in a batch", other, from,
		store.TimelineEntry{Kind: store.EntryTakenOver, Token: res[0].Record.Token, State: store.StateProcessing,
			PreviousToken: was.Token, PreviousState: store.StateProcessing, Claimant: "b2", PreviousClaimant: "b1"})
}

// testTimelineFail: the holder's Fail keeps its error, as FAILED or, when
// retryable, RELEASED; a Fail repeated after a lost answer, or refused,
// writes nothing more.
func testTimelineFail(t *testing.T, h Harness) {
	b := setup(t, h)
	from := b.now(t)
	failed, released := recordID("failed"), recordID("released")
	f := b.acquire(t, failed, "w1")
	r := b.acquire(t, released, "w2")
	b.fail(t, failed, f.Token, "card declined", false)
	b.fail(t, failed, f.Token, "card declined", false) // a retry
	if _, err := b.store.RecordFail(b.ctx, &store.FailParams{RecordID: failed, Token: f.Token, Error: "other"}); err == nil {
		t.Fatal("a Fail with another error after FAILED succeeded")
	}
	b.fail(t, released, r.Token, "downstream busy", true)
	b.requireTimeline(t, "a permanent Fail", failed, from,
		store.TimelineEntry{Kind: store.EntryFailed, Token: f.Token, State: store.StateFailed, Claimant: "w1", Error: "card declined"})
	b.requireTimeline(t, "a retryable Fail", released, from,
		store.TimelineEntry{Kind: store.EntryReleased, Token: r.Token, State: store.StateReleased, Claimant: "w2", Error: "downstream busy"})

	// In a batch as alone.
	ids := []store.RecordID{recordID("batch-0"), recordID("batch-1")}
	tokens := []int64{b.acquire(t, ids[0], "b0").Token, b.acquire(t, ids[1], "b1").Token}
	_, errs := b.store.RecordFailMany(b.ctx, []*store.FailParams{
		{RecordID: ids[0], Token: tokens[0], Error: "e0"}, {RecordID: ids[1], Token: tokens[1], Error: "e1", Retryable: true}})
	for _, err := range errs {
		if err != nil {
			t.Fatalf("RecordFailMany: %v", err)
		}
	}
	b.requireTimeline(t, "a batched Fail", ids[0], from,
		store.TimelineEntry{Kind: store.EntryFailed, Token: tokens[0], State: store.StateFailed, Claimant: "b0", Error: "e0"})
	b.requireTimeline(t, "a batched retryable Fail", ids[1], from,
		store.TimelineEntry{Kind: store.EntryReleased, Token: tokens[1], State: store.StateReleased, Claimant: "b1", Error: "e1"})
}

// testTimelineHeld: a held lease that runs out is kept as HELD, whether a
// Claim or the sweeper makes the record UNRESOLVED, once.
func testTimelineHeld(t *testing.T, h Harness) {
	b := setup(t, h)
	from := b.now(t)
	byClaim, bySweeper := recordID("held-by-claim"), recordID("held-by-sweeper")
	c := b.claim(t, heldClaim(byClaim, "w1")).Record
	s := b.claim(t, heldClaim(bySweeper, "w2")).Record
	b.lapse(t, byClaim)
	for range 2 {
		if res := b.claim(t, claimParams(byClaim, "other")); res.Outcome != store.OutcomeUnresolved {
			t.Fatalf("Claim of a lapsed held lease: %v", res.Outcome)
		}
	}
	b.lapse(t, bySweeper)
	if n, err := b.store.SweepExpire(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepExpire = %d, %v; want 1", n, err)
	}
	b.requireTimeline(t, "held by a Claim", byClaim, from,
		store.TimelineEntry{Kind: store.EntryHeld, Token: c.Token, State: store.StateUnresolved, PreviousState: store.StateProcessing, Claimant: "w1"})
	b.requireTimeline(t, "held by the sweeper", bySweeper, from,
		store.TimelineEntry{Kind: store.EntryHeld, Token: s.Token, State: store.StateUnresolved, PreviousState: store.StateProcessing, Claimant: "w2"})

	// The sweeper's plain expiry is no exception of its own: the takeover
	// that follows it says it was EXPIRED.
	plain := recordID("expired")
	b.acquire(t, plain, "w3")
	b.expire(t, plain)
	if got := b.timeline(t, plain); len(got) != 0 {
		t.Fatalf("an expiry wrote %+v; want nothing", got)
	}
}

// testTimelineResolved: a resolution keeps who (the actor) and why, the
// state it left and, when FAILED, the error; one refused (another token,
// not UNRESOLVED) or repeated writes nothing more.
func testTimelineResolved(t *testing.T, h Harness) {
	b := setup(t, h)
	from := b.now(t)
	held := func(key string) *store.Record {
		rec := b.claim(t, heldClaim(recordID(key), "w")).Record
		b.lapse(t, rec.RecordID)
		if res := b.claim(t, claimParams(rec.RecordID, "other")); res.Outcome != store.OutcomeUnresolved {
			t.Fatalf("%s: Claim of a lapsed held lease: %v", key, res.Outcome)
		}
		return rec
	}
	heldEntry := func(rec *store.Record) store.TimelineEntry {
		return store.TimelineEntry{Kind: store.EntryHeld, Token: rec.Token, State: store.StateUnresolved, PreviousState: store.StateProcessing, Claimant: "w"}
	}
	alice := store.Actor{Tenant: "ops", Operator: "alice@example.com"}
	resolver := store.Actor{Tenant: "acme", Resolver: "stripe-reconciler"}

	c := held("completed")
	p := &store.ResolveParams{RecordID: c.RecordID, Resolution: store.ResolveCompleted, Result: []byte("receipt"),
		Token: c.Token, Actor: resolver, Reason: "charge ch_1 found"}
	if _, err := b.store.RecordResolve(b.ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.RecordResolve(b.ctx, p); err != nil { // a retry after a lost answer
		t.Fatal(err)
	}
	b.requireTimeline(t, "resolved as COMPLETED by a resolver", c.RecordID, from, heldEntry(c),
		store.TimelineEntry{Kind: store.EntryResolved, Token: c.Token, State: store.StateCompleted, PreviousState: store.StateUnresolved,
			Actor: resolver, Reason: "charge ch_1 found"})

	f := held("failed")
	if _, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: f.RecordID, Resolution: store.ResolveFailed,
		Error: "card declined", Actor: alice, Reason: "the bank says no"}); err != nil {
		t.Fatal(err)
	}
	b.requireTimeline(t, "resolved as FAILED by a person", f.RecordID, from, heldEntry(f),
		store.TimelineEntry{Kind: store.EntryResolved, Token: f.Token, State: store.StateFailed, PreviousState: store.StateUnresolved,
			Error: "card declined", Actor: alice, Reason: "the bank says no"})

	r := held("released")
	_, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: r.RecordID, Resolution: store.ResolveReleased,
		Token: r.Token + 1000, Actor: resolver})
	requireErr(t, "RecordResolve with another token", err, store.ErrLeaseLost)
	if _, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: r.RecordID, Resolution: store.ResolveReleased,
		Token: r.Token, Actor: alice}); err != nil {
		t.Fatal(err)
	}
	_, err = b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: r.RecordID, Resolution: store.ResolveReleased, Actor: resolver})
	requireErr(t, "a second release", err, store.ErrNotUnresolved)
	b.requireTimeline(t, "released by a person, refused twice", r.RecordID, from, heldEntry(r),
		store.TimelineEntry{Kind: store.EntryResolved, Token: r.Token, State: store.StateReleased, PreviousState: store.StateUnresolved, Actor: alice})
}

// testTimelineDeleted: a deletion keeps who and why, and the state it
// deleted, after the entries of the record's life; they stay under the key
// with the next record of it, and go when that record is purged, or, with
// no record of the key, once their retention has passed.
func testTimelineDeleted(t *testing.T, h Harness) {
	b := setup(t, h)
	from := b.now(t)
	id := recordID("deleted")
	first := b.acquire(t, id, "w1")
	b.fail(t, id, first.Token, "boom", true)
	alice := store.Actor{Tenant: "ops", Operator: "alice"}
	if _, err := b.store.RecordDelete(b.ctx, &store.DeleteParams{RecordID: id, Actor: alice, Reason: "poison message"}); err != nil {
		t.Fatal(err)
	}
	released := store.TimelineEntry{Kind: store.EntryReleased, Token: first.Token, State: store.StateReleased, Claimant: "w1", Error: "boom"}
	deleted := store.TimelineEntry{Kind: store.EntryDeleted, Token: first.Token, PreviousState: store.StateReleased, Actor: alice, Reason: "poison message"}
	b.requireTimeline(t, "after the deletion", id, from, released, deleted)
	// A purge of other records leaves them: their retention has not passed.
	b.put(t, recordID("other"), store.StateCompleted)
	b.h.AgeOutAll(t, b.store)
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepPurge = %d, %v; want 1", n, err)
	}
	b.requireTimeline(t, "after another record's purge", id, from, released, deleted)

	// The next record of the key shows them; its purge takes them all.
	second := b.acquire(t, id, "w2")
	b.complete(t, id, second.Token, "done")
	b.requireTimeline(t, "with the next record", id, from, released, deleted)
	if n := b.h.AgeOutTimeline(t, b.store, id); n != 2 {
		t.Fatalf("AgeOutTimeline changed %d entries, want the deleted life's 2", n)
	}
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("SweepPurge = %d, %v; want 0", n, err)
	}
	b.requireTimeline(t, "past their retention, while the key has a record", id, from, released, deleted)
	b.h.AgeOut(t, b.store, id)
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepPurge = %d, %v; want 1", n, err)
	}
	b.requireGone(t, id)
	b.requireTimeline(t, "after the next record's purge", id, from)

	// With no record of the key after it, the deletion's entries go once
	// their retention has passed.
	alone := recordID("deleted-alone")
	rec := b.acquire(t, alone, "w")
	b.fail(t, alone, rec.Token, "bad", false)
	if _, err := b.store.RecordDelete(b.ctx, &store.DeleteParams{RecordID: alone, Actor: alice}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("SweepPurge = %d, %v; want 0", n, err)
	}
	if got := b.timeline(t, alone); len(got) != 2 {
		t.Fatalf("before their retention passed: %+v; want the Fail and the deletion", got)
	}
	if n := b.h.AgeOutTimeline(t, b.store, alone); n != 2 {
		t.Fatalf("AgeOutTimeline changed %d entries, want 2", n)
	}
	if _, err := b.store.SweepPurge(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
	b.requireTimeline(t, "past their retention, with no record", alone, from)
}

// testTimelineFingerprintMismatch: a Claim refused for its fingerprint is
// kept with its claimant and fingerprint, once per lease and fingerprint
// however often it comes back, also in a batch.
func testTimelineFingerprintMismatch(t *testing.T, h Harness) {
	b := setup(t, h)
	from := b.now(t)
	id := recordID("fp")
	p := claimParams(id, "w1")
	p.Fingerprint = []byte("payload-a")
	rec := b.claim(t, p).Record
	refused := func(claimant, fp string) {
		t.Helper()
		q := claimParams(id, claimant)
		q.Fingerprint = []byte(fp)
		_, err := b.store.RecordClaim(b.ctx, q)
		requireErr(t, "RecordClaim with another fingerprint", err, store.ErrFingerprintMismatch)
	}
	refused("w2", "payload-b")
	refused("w3", "payload-b")
	refused("w2", "payload-c")
	q := claimParams(id, "w4")
	q.Fingerprint = []byte("payload-d")
	_, errs := b.store.RecordClaimMany(b.ctx, []*store.ClaimParams{q, claimParams(recordID("fresh"), "w5")})
	requireErr(t, "RecordClaimMany with another fingerprint", errs[0], store.ErrFingerprintMismatch)
	mismatch := func(claimant, fp string) store.TimelineEntry {
		return store.TimelineEntry{Kind: store.EntryFingerprintMismatch, Token: rec.Token, State: store.StateProcessing,
			Claimant: claimant, Fingerprint: []byte(fp)}
	}
	b.requireTimeline(t, "refused fingerprints", id, from,
		mismatch("w2", "payload-b"), mismatch("w2", "payload-c"), mismatch("w4", "payload-d"))
	requireSameRecord(t, "the refused record", b.get(t, id), rec)

	// A finished record's replays may be answered without a write (a store
	// that reads first): its refusals are kept all the same.
	rec = b.complete(t, id, rec.Token, "done")
	b.claim(t, p)
	refused("w6", "payload-e")
	refused("w6", "payload-e")
	done := mismatch("w6", "payload-e")
	done.State = store.StateCompleted
	b.requireTimeline(t, "a finished record's refused fingerprints", id, from,
		mismatch("w2", "payload-b"), mismatch("w2", "payload-c"), mismatch("w4", "payload-d"), done)
}

// testTimelinePurgedWithRecord: the purge of a record deletes its entries,
// and no other key's.
func testTimelinePurgedWithRecord(t *testing.T, h Harness) {
	b := setup(t, h)
	from := b.now(t)
	gone, kept := recordID("gone"), recordID("kept")
	for _, id := range []store.RecordID{gone, kept} {
		rec := b.acquire(t, id, "w1")
		b.lapse(t, id)
		rec2 := b.acquire(t, id, "w2")
		b.fail(t, id, rec2.Token, "no", false)
		q := claimParams(id, "w3")
		q.Fingerprint = []byte("other") // the record has none: no mismatch
		if res := b.claim(t, q); res.Outcome != store.OutcomeFailed {
			t.Fatalf("replay: %v", res.Outcome)
		}
		if n := len(b.timeline(t, id)); n != 2 {
			t.Fatalf("%s: %d entries (token %d), want 2", id.Key, n, rec.Token)
		}
	}
	b.h.AgeOut(t, b.store, gone)
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepPurge = %d, %v; want 1", n, err)
	}
	b.requireTimeline(t, "the purged record's", gone, from)
	if n := len(b.timeline(t, kept)); n != 2 {
		t.Fatalf("the kept record's timeline has %d entries, want 2", n)
	}
}

// testTimelineLatestEntries: a timeline longer than the limit gives its
// latest entries, oldest first.
func testTimelineLatestEntries(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("long")
	var tokens []int64
	for i := range 5 {
		rec := b.acquire(t, id, fmt.Sprint("w", i))
		b.fail(t, id, rec.Token, fmt.Sprint("e", i), true)
		tokens = append(tokens, rec.Token)
	}
	// Released, then taken over, four times, and released: 9 entries.
	entries, err := b.store.RecordTimeline(b.ctx, &store.TimelineParams{RecordID: id, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s/%d", e.Kind, e.Token))
	}
	want := []string{
		fmt.Sprintf("released/%d", tokens[3]), fmt.Sprintf("taken_over/%d", tokens[4]), fmt.Sprintf("released/%d", tokens[4]),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the latest 3 entries: %v, want %v", got, want)
	}
	if all := b.timeline(t, id); len(all) != 9 {
		t.Fatalf("%d entries, want 9", len(all))
	}
	if got := b.timeline(t, recordID("never")); len(got) != 0 {
		t.Fatalf("a key never claimed has entries %+v", got)
	}
}

// testListHeld: the held records of one tenant, in namespace and key order,
// paged, and nobody else's or no other state.
func testListHeld(t *testing.T, h Harness) {
	b := setup(t, h)
	withStep := nsID("alpha", "k2") // a resolver looks its steps up downstream
	hold := func(id store.RecordID) {
		t.Helper()
		rec := b.claim(t, heldClaim(id, "w")).Record
		if id == withStep {
			b.step(t, finishParams(id, rec.Token, "charge", "ch_1"))
		}
		b.lapse(t, id)
		if res := b.claim(t, claimParams(id, "other")); res.Outcome != store.OutcomeUnresolved {
			t.Fatalf("%v: %v", rec.RecordID, res.Outcome)
		}
	}
	want := []store.RecordID{nsID("alpha", "k1"), nsID("alpha", "k2"), nsID("beta", "k0"), nsID("gamma", "k5")}
	for i := len(want) - 1; i >= 0; i-- {
		hold(want[i])
	}
	hold(store.RecordID{Tenant: "other", Namespace: "alpha", Key: "k0"})
	b.claim(t, heldClaim(nsID("alpha", "live"), "w")) // held policy, live lease
	b.put(t, nsID("alpha", "k0"), store.StateCompleted)
	b.put(t, nsID("beta", "k1"), store.StateExpired)
	b.put(t, nsID("beta", "k2"), store.StateReleased)
	resolved := nsID("gamma", "k6")
	hold(resolved)
	if _, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: resolved, Resolution: store.ResolveReleased}); err != nil {
		t.Fatal(err)
	}

	list := func(after store.RecordID, limit int) []*store.Record {
		t.Helper()
		recs, err := b.store.RecordListHeld(b.ctx, &store.ListHeldParams{Tenant: "acme", After: after, Limit: limit})
		if err != nil {
			t.Fatalf("RecordListHeld: %v", err)
		}
		return recs
	}
	all := list(store.RecordID{}, 100)
	b.requireListed(t, "every held record", all, want...)
	for _, r := range all {
		if r.State != store.StateUnresolved {
			t.Fatalf("listed %v in state %s", r.RecordID, r.State)
		}
		if wantSteps := r.RecordID == withStep; wantSteps != (len(r.Steps) == 1 && r.Steps[0].Name == "charge" && string(r.Steps[0].Result) == "ch_1") {
			t.Fatalf("listed %v with steps %+v; want %v", r.RecordID, r.Steps, map[bool]string{true: "its step charge", false: "none"}[wantSteps])
		}
	}
	var paged []*store.Record
	for after := (store.RecordID{}); ; {
		page := list(after, 3)
		paged = append(paged, page...)
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].RecordID
	}
	b.requireListed(t, "paged by 3", paged, want...)
	if got := list(store.RecordID{}, 0); len(got) != 0 {
		t.Fatalf("limit 0 listed %d", len(got))
	}
}

// testWatchHeld: a held watch wakes when a record of its tenant becomes
// UNRESOLVED, whether a Claim or the sweeper makes it so, and when one is
// resolved or deleted.
func testWatchHeld(t *testing.T, h Harness) {
	b := setup(t, h)
	w := b.store.RecordWatchHeld("acme")
	defer w.Close()
	wait := func(what string) {
		t.Helper()
		select {
		case <-w.C:
		case <-b.ctx.Done():
			t.Fatalf("%s: no wake", what)
		}
	}
	drain := func() {
		for {
			select {
			case <-w.C:
			default:
				return
			}
		}
	}
	byClaim := recordID("by-claim")
	b.claim(t, heldClaim(byClaim, "w"))
	b.lapse(t, byClaim)
	b.claim(t, claimParams(byClaim, "other"))
	// A store that hears of changes from elsewhere may wake every watch
	// once it starts to: either way the watch is woken now.
	wait("held by a Claim")
	drain()
	bySweeper := recordID("by-sweeper")
	b.claim(t, heldClaim(bySweeper, "w"))
	b.lapse(t, bySweeper)
	if n, err := b.store.SweepExpire(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepExpire = %d, %v; want 1", n, err)
	}
	wait("held by the sweeper")
	drain()
	again := recordID("by-claim-again")
	b.claim(t, heldClaim(again, "w"))
	b.lapse(t, again)
	b.claim(t, claimParams(again, "other"))
	wait("held by a Claim, with the store listening")
	drain()
	if _, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: again, Resolution: store.ResolveReleased}); err != nil {
		t.Fatal(err)
	}
	wait("resolved")
	drain()
	if _, err := b.store.RecordDelete(b.ctx, &store.DeleteParams{RecordID: bySweeper}); err != nil {
		t.Fatal(err)
	}
	wait("deleted while held")
	w.Close()
	w.Close() // twice is no error
}
