package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// put creates the record id through the store and leaves it in state. An
// EXPIRED record is made by lapsing its lease and sweeping, so put fails when
// another record has a lapsed lease.
func (b *bundle) put(t *testing.T, id store.RecordID, state store.State) *store.Record {
	t.Helper()
	if err := b.seedOne(id, state); err != nil {
		t.Fatalf("put %s/%s/%s as %s: %v", id.Tenant, id.Namespace, id.Key, state, err)
	}
	if state == store.StateExpired {
		b.expire(t, id)
	}
	return b.get(t, id)
}

// list runs RecordList and fails the test on an error.
func (b *bundle) list(t *testing.T, p store.ListParams) []*store.Record {
	t.Helper()
	recs, err := b.store.RecordList(b.ctx, &p)
	if err != nil {
		t.Fatalf("RecordList(%+v): %v", p, err)
	}
	if len(recs) > p.Limit {
		t.Fatalf("RecordList(%+v): %d records, more than the limit", p, len(recs))
	}
	return recs
}

// requireListed fails unless recs are the records want, in that order, each
// as RecordGet reads it.
func (b *bundle) requireListed(t *testing.T, what string, recs []*store.Record, want ...store.RecordID) {
	t.Helper()
	got := make([]store.RecordID, len(recs))
	for i, r := range recs {
		got[i] = r.RecordID
	}
	if len(want) == 0 {
		want = []store.RecordID{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: listed %v, want %v", what, got, want)
	}
	for _, r := range recs {
		requireSameRecord(t, what+": listed record", r, b.get(t, r.RecordID))
	}
}

func nsID(namespace, key string) store.RecordID {
	return store.RecordID{Tenant: "acme", Namespace: namespace, Key: key}
}

// testListPagesInKeyOrder: the listing is ordered by namespace then key, a
// page starts after the given (namespace, key), and paging through it sees
// every record of the tenant once. Namespaces and keys are lowercase letters
// and digits of one length, which sort the same bytewise and under any
// collation.
func testListPagesInKeyOrder(t *testing.T, h Harness) {
	b := setup(t, h)
	var want []store.RecordID
	for _, ns := range []string{"alpha", "beta", "gamma"} {
		for k := range 7 {
			want = append(want, nsID(ns, fmt.Sprintf("k%02d", k)))
		}
	}
	for i := len(want) - 1; i >= 0; i-- { // created in the reverse order
		b.put(t, want[i], store.StateProcessing)
	}
	// Another tenant's records are never listed.
	b.put(t, store.RecordID{Tenant: "other", Namespace: "alpha", Key: "k00"}, store.StateProcessing)
	b.put(t, store.RecordID{Tenant: "other", Namespace: "beta", Key: "k99"}, store.StateCompleted)

	var got []*store.Record
	var after store.RecordID
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatalf("the listing does not end: %d pages", page)
		}
		recs := b.list(t, store.ListParams{Tenant: "acme", After: after, Limit: 4})
		got = append(got, recs...)
		if len(recs) < 4 {
			break
		}
		after = recs[len(recs)-1].RecordID
		after.Tenant = "ignored" // After's Tenant plays no part
	}
	b.requireListed(t, "paged listing", got, want...)
	b.requireListed(t, "one page", b.list(t, store.ListParams{Tenant: "acme", Limit: 100}), want...)
	b.requireListed(t, "after the last record", b.list(t, store.ListParams{Tenant: "acme", After: want[len(want)-1], Limit: 100}))
	b.requireListed(t, "after a key between two", b.list(t, store.ListParams{Tenant: "acme", After: nsID("beta", "k035"), Limit: 2}),
		nsID("beta", "k04"), nsID("beta", "k05"))
	b.requireListed(t, "after a namespace alone", b.list(t, store.ListParams{Tenant: "acme", After: store.RecordID{Namespace: "beta"}, Limit: 1}),
		nsID("beta", "k00"))
	b.requireListed(t, "limit 0", b.list(t, store.ListParams{Tenant: "acme", Limit: 0}))
	b.requireListed(t, "a tenant without records", b.list(t, store.ListParams{Tenant: "nobody", Limit: 100}))
}

func testListFilters(t *testing.T, h Harness) {
	b := setup(t, h)
	// EXPIRED first: making it sweeps, and nothing else has lapsed yet.
	b.put(t, nsID("alpha", "k04"), store.StateExpired)
	b.put(t, nsID("alpha", "k00"), store.StateProcessing)
	b.put(t, nsID("alpha", "k01"), store.StateCompleted)
	b.put(t, nsID("alpha", "k02"), store.StateFailed)
	b.put(t, nsID("alpha", "k03"), store.StateReleased)
	b.put(t, nsID("beta", "k00"), store.StateCompleted)
	b.put(t, nsID("beta", "k01"), store.StateProcessing)
	b.put(t, store.RecordID{Tenant: "other", Namespace: "alpha", Key: "k01"}, store.StateCompleted)

	list := func(p store.ListParams) []*store.Record {
		t.Helper()
		p.Tenant, p.Limit = "acme", 100
		return b.list(t, p)
	}
	b.requireListed(t, "namespace beta", list(store.ListParams{Namespace: "beta"}), nsID("beta", "k00"), nsID("beta", "k01"))
	b.requireListed(t, "completed", list(store.ListParams{State: store.StateCompleted}), nsID("alpha", "k01"), nsID("beta", "k00"))
	b.requireListed(t, "expired", list(store.ListParams{State: store.StateExpired}), nsID("alpha", "k04"))
	b.requireListed(t, "alpha, processing", list(store.ListParams{Namespace: "alpha", State: store.StateProcessing}), nsID("alpha", "k00"))
	b.requireListed(t, "beta, failed", list(store.ListParams{Namespace: "beta", State: store.StateFailed}))
	b.requireListed(t, "a namespace without records", list(store.ListParams{Namespace: "delta"}))
	b.requireListed(t, "namespace alpha after k01", list(store.ListParams{Namespace: "alpha", After: nsID("alpha", "k01")}),
		nsID("alpha", "k02"), nsID("alpha", "k03"), nsID("alpha", "k04"))

	// OlderThan keeps records whose updated_at is at least that long ago by
	// the store's clock.
	now := b.now(t)
	b.h.SetUpdatedAt(t, b.store, nsID("alpha", "k01"), now.Add(-2*time.Hour))
	b.h.SetUpdatedAt(t, b.store, nsID("beta", "k01"), now.Add(-30*time.Minute))
	b.requireListed(t, "older than 1h", list(store.ListParams{OlderThan: time.Hour}), nsID("alpha", "k01"))
	b.requireListed(t, "older than 10m", list(store.ListParams{OlderThan: 10 * time.Minute}), nsID("alpha", "k01"), nsID("beta", "k01"))
	b.requireListed(t, "older than 10m, processing", list(store.ListParams{OlderThan: 10 * time.Minute, State: store.StateProcessing}),
		nsID("beta", "k01"))
	if n := len(list(store.ListParams{})); n != 7 {
		t.Fatalf("OlderThan 0 listed %d records, want all 7", n)
	}
}

// testListKeyPrefix: KeyPrefix keeps the keys that start with it, byte for
// byte (no pattern characters, no case folding), across namespaces and
// with the other filters and paging.
func testListKeyPrefix(t *testing.T, h Harness) {
	b := setup(t, h)
	for _, id := range []store.RecordID{
		nsID("alpha", "order-1"), nsID("alpha", "order-2"), nsID("alpha", "Order-3"), nsID("alpha", "ord"),
		nsID("alpha", "refund-1"), nsID("alpha", "o%der"), nsID("alpha", "o_der"), nsID("alpha", "zé-1"), nsID("alpha", "zè-1"),
		nsID("beta", "order-9"),
		{Tenant: "other", Namespace: "alpha", Key: "order-1"},
	} {
		b.put(t, id, store.StateProcessing)
	}
	b.put(t, nsID("beta", "order-8"), store.StateCompleted)
	list := func(p store.ListParams) []*store.Record {
		t.Helper()
		p.Tenant = "acme"
		if p.Limit == 0 {
			p.Limit = 100
		}
		return b.list(t, p)
	}
	b.requireListed(t, "prefix order-", list(store.ListParams{KeyPrefix: "order-"}),
		nsID("alpha", "order-1"), nsID("alpha", "order-2"), nsID("beta", "order-8"), nsID("beta", "order-9"))
	b.requireListed(t, "prefix order- in alpha", list(store.ListParams{Namespace: "alpha", KeyPrefix: "order-"}),
		nsID("alpha", "order-1"), nsID("alpha", "order-2"))
	b.requireListed(t, "prefix order-, completed", list(store.ListParams{State: store.StateCompleted, KeyPrefix: "order-"}),
		nsID("beta", "order-8"))
	b.requireListed(t, "prefix ord", list(store.ListParams{Namespace: "alpha", KeyPrefix: "ord"}),
		nsID("alpha", "ord"), nsID("alpha", "order-1"), nsID("alpha", "order-2"))
	b.requireListed(t, "a whole key is its own prefix", list(store.ListParams{Namespace: "alpha", KeyPrefix: "order-2"}), nsID("alpha", "order-2"))
	b.requireListed(t, "% is no wildcard", list(store.ListParams{KeyPrefix: "o%"}), nsID("alpha", "o%der"))
	b.requireListed(t, "_ is no wildcard", list(store.ListParams{KeyPrefix: "o_"}), nsID("alpha", "o_der"))
	b.requireListed(t, "a multi-byte prefix", list(store.ListParams{KeyPrefix: "zé"}), nsID("alpha", "zé-1"))
	b.requireListed(t, "a prefix longer than every key", list(store.ListParams{KeyPrefix: "order-1-and-more"}))
	b.requireListed(t, "a prefix of no key", list(store.ListParams{KeyPrefix: "x"}))
	page := list(store.ListParams{KeyPrefix: "order-", Limit: 3})
	b.requireListed(t, "prefix order-, first page", page, nsID("alpha", "order-1"), nsID("alpha", "order-2"), nsID("beta", "order-8"))
	b.requireListed(t, "prefix order-, next page", list(store.ListParams{KeyPrefix: "order-", After: page[2].RecordID, Limit: 3}),
		nsID("beta", "order-9"))
}

func testDeleteReturnsOldRecord(t *testing.T, h Harness) {
	b := setup(t, h)
	recs := map[store.State]*store.Record{}
	// EXPIRED first: making it sweeps, and nothing else has lapsed yet.
	for _, state := range []store.State{store.StateExpired, store.StateProcessing, store.StateCompleted, store.StateFailed, store.StateReleased} {
		recs[state] = b.put(t, recordID("del-"+string(state)), state)
	}
	other := b.put(t, store.RecordID{Tenant: "other", Namespace: "process_payment", Key: "del-processing"}, store.StateProcessing)

	var maxToken int64
	for state, before := range recs {
		maxToken = max(maxToken, before.Token)
		deleted, err := b.store.RecordDelete(b.ctx, &store.DeleteParams{RecordID: before.RecordID})
		if err != nil {
			t.Fatalf("RecordDelete of a %s record: %v", state, err)
		}
		requireSameRecord(t, "deleted "+string(state)+" record", deleted, before)
		b.requireGone(t, before.RecordID)
		_, err = b.store.RecordDelete(b.ctx, &store.DeleteParams{RecordID: before.RecordID})
		requireErr(t, "RecordDelete again", err, store.ErrNotFound)
	}
	_, err := b.store.RecordDelete(b.ctx, &store.DeleteParams{RecordID: recordID("never-there")})
	requireErr(t, "RecordDelete of a missing key", err, store.ErrNotFound)
	requireSameRecord(t, "the other tenant's record", b.get(t, other.RecordID), other)

	// A deleted key starts a new life with a greater token; the old holder's
	// token is superseded.
	old := recs[store.StateProcessing]
	reborn := b.acquire(t, old.RecordID, "")
	if reborn.Token <= maxToken || reborn.Attempt != 1 {
		t.Fatalf("token %d attempt %d after the delete; want > %d and attempt 1", reborn.Token, reborn.Attempt, maxToken)
	}
	_, err = b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: old.RecordID, Token: old.Token})
	requireErr(t, "RecordComplete with the deleted record's token", err, store.ErrLeaseLost)
}

func testStats(t *testing.T, h Harness) {
	b := setup(t, h)
	if rows, err := b.store.RecordStats(b.ctx, &store.StatsParams{Tenant: "acme"}); err != nil || len(rows) != 0 {
		t.Fatalf("RecordStats of an empty store: %v, %v; want none", rows, err)
	}
	// EXPIRED first: making it sweeps, and nothing else has lapsed yet.
	b.put(t, nsID("gamma", "k0"), store.StateExpired)
	b.put(t, nsID("alpha", "k0"), store.StateProcessing)
	b.put(t, nsID("alpha", "k1"), store.StateProcessing)
	b.put(t, nsID("alpha", "k2"), store.StateCompleted)
	b.put(t, nsID("beta", "k0"), store.StateReleased)
	b.put(t, nsID("beta", "k1"), store.StateFailed)
	b.put(t, nsID("beta", "k2"), store.StateCompleted)
	for k := range 3 {
		b.put(t, store.RecordID{Tenant: "other", Namespace: "alpha", Key: fmt.Sprint(k)}, store.StateCompleted)
	}

	stats := func(p store.StatsParams) []store.StatsRow {
		t.Helper()
		rows, err := b.store.RecordStats(b.ctx, &p)
		if err != nil {
			t.Fatalf("RecordStats(%+v): %v", p, err)
		}
		return rows
	}
	requireRows := func(what string, got, want []store.StatsRow) {
		t.Helper()
		counts := make([]store.StatsRow, len(got))
		for i, r := range got {
			if r.OldestUpdatedAt.IsZero() || r.OldestUpdatedAt.Location() != time.UTC {
				t.Fatalf("%s: row %+v: OldestUpdatedAt is not a UTC time", what, r)
			}
			counts[i] = r
			counts[i].OldestUpdatedAt = time.Time{}
		}
		if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(counts, want)) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
	// Ordered by namespace, then state.
	requireRows(t.Name(), stats(store.StatsParams{Tenant: "acme"}), []store.StatsRow{
		{Namespace: "alpha", State: store.StateCompleted, Count: 1},
		{Namespace: "alpha", State: store.StateProcessing, Count: 2},
		{Namespace: "beta", State: store.StateCompleted, Count: 1},
		{Namespace: "beta", State: store.StateFailed, Count: 1},
		{Namespace: "beta", State: store.StateReleased, Count: 1},
		{Namespace: "gamma", State: store.StateExpired, Count: 1},
	})
	requireRows("namespace beta", stats(store.StatsParams{Tenant: "acme", Namespace: "beta"}), []store.StatsRow{
		{Namespace: "beta", State: store.StateCompleted, Count: 1},
		{Namespace: "beta", State: store.StateFailed, Count: 1},
		{Namespace: "beta", State: store.StateReleased, Count: 1},
	})
	requireRows("the other tenant", stats(store.StatsParams{Tenant: "other"}), []store.StatsRow{
		{Namespace: "alpha", State: store.StateCompleted, Count: 3},
	})
	requireRows("a namespace without records", stats(store.StatsParams{Tenant: "acme", Namespace: "delta"}), nil)
	requireRows("a tenant without records", stats(store.StatsParams{Tenant: "nobody"}), nil)

	// OldestUpdatedAt is the earliest updated_at of the row's records: the
	// PROCESSING claim that has gone longest without renewing its lease.
	now := b.now(t).Truncate(time.Microsecond)
	b.h.SetUpdatedAt(t, b.store, nsID("alpha", "k0"), now.Add(-time.Hour))
	b.h.SetUpdatedAt(t, b.store, nsID("alpha", "k1"), now.Add(-3*time.Hour))
	b.h.SetUpdatedAt(t, b.store, nsID("alpha", "k2"), now.Add(-2*time.Hour))
	oldest := map[store.State]time.Time{}
	for _, r := range stats(store.StatsParams{Tenant: "acme", Namespace: "alpha"}) {
		oldest[r.State] = r.OldestUpdatedAt
	}
	if got, want := oldest[store.StateProcessing], now.Add(-3*time.Hour); !got.Equal(want) {
		t.Fatalf("alpha, PROCESSING: OldestUpdatedAt %s, want %s (the older of two)", got, want)
	}
	if got, want := oldest[store.StateCompleted], now.Add(-2*time.Hour); !got.Equal(want) {
		t.Fatalf("alpha, COMPLETED: OldestUpdatedAt %s, want %s", got, want)
	}
}

func testCountByState(t *testing.T, h Harness) {
	b := setup(t, h)
	requireCounts := func(what string, want map[store.State]int64) {
		t.Helper()
		got := b.countStates(t)
		for state, n := range got {
			if n != want[state] {
				t.Fatalf("%s: CountByState %v, want %v", what, got, want)
			}
		}
		for state, n := range want {
			if got[state] != n {
				t.Fatalf("%s: CountByState %v, want %v", what, got, want)
			}
		}
	}
	requireCounts("empty store", map[store.State]int64{})

	// Every tenant counts. EXPIRED first: making it sweeps, and nothing else
	// has lapsed yet.
	b.put(t, store.RecordID{Tenant: "other", Namespace: "n", Key: "e"}, store.StateExpired)
	held := b.put(t, recordID("p1"), store.StateProcessing)
	b.put(t, recordID("p2"), store.StateProcessing)
	b.put(t, recordID("c"), store.StateCompleted)
	b.put(t, store.RecordID{Tenant: "other", Namespace: "n", Key: "f"}, store.StateFailed)
	b.put(t, store.RecordID{Tenant: "other", Namespace: "n", Key: "r"}, store.StateReleased)
	requireCounts("one of each", map[store.State]int64{
		store.StateProcessing: 2, store.StateCompleted: 1, store.StateFailed: 1, store.StateReleased: 1, store.StateExpired: 1,
	})

	b.complete(t, held.RecordID, held.Token, "r")
	requireCounts("after a Complete", map[store.State]int64{
		store.StateProcessing: 1, store.StateCompleted: 2, store.StateFailed: 1, store.StateReleased: 1, store.StateExpired: 1,
	})
}
