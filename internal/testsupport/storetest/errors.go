package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem/store"
)

// storeCalls runs every store method once against st, on the record id
// with token where one is needed, and returns their errors by name.
func storeCalls(ctx context.Context, st store.Store, id store.RecordID, token int64) map[string]error {
	errs := map[string]error{}
	_, errs["RecordClaim"] = st.RecordClaim(ctx, claimParams(id, "w"))
	_, errs["RecordComplete"] = st.RecordComplete(ctx, &store.CompleteParams{RecordID: id, Token: token, Result: []byte("r")})
	_, errs["RecordFail"] = st.RecordFail(ctx, &store.FailParams{RecordID: id, Token: token, Error: "e"})
	_, errs["RecordHeartbeat"] = st.RecordHeartbeat(ctx, &store.HeartbeatParams{RecordID: id, Token: token, LeaseTTL: testLease})
	_, errs["RecordGet"] = st.RecordGet(ctx, id)
	_, errs["SweepExpire"] = st.SweepExpire(ctx, 10)
	_, errs["SweepPurge"] = st.SweepPurge(ctx, 10)
	errs["Ping"] = st.Ping(ctx)
	_, errs["RecordList"] = st.RecordList(ctx, &store.ListParams{Tenant: id.Tenant, Limit: 10})
	_, errs["RecordDelete"] = st.RecordDelete(ctx, &store.DeleteParams{RecordID: id})
	_, errs["RecordStats"] = st.RecordStats(ctx, &store.StatsParams{Tenant: id.Tenant})
	_, errs["CountByState"] = st.CountByState(ctx)
	return errs
}

// testCanceledContextPassesThrough: a caller's cancellation is reported as
// such, not as the store being unavailable, and changes nothing.
func testCanceledContextPassesThrough(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("k")
	held := b.acquire(t, id, "holder")

	canceled, cancel := context.WithCancel(b.ctx)
	cancel()
	for name, err := range storeCalls(canceled, b.store, id, held.Token) {
		if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with a canceled context: %v; want context.Canceled", name, err)
		}
	}
	requireSameRecord(t, "RecordGet after the canceled calls", b.get(t, id), held)
}

// testClosedStoreIsUnavailable: once the store is closed, as at shutdown,
// every call is store.ErrUnavailable, never a wrong answer.
func testClosedStoreIsUnavailable(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("k")
	held := b.acquire(t, id, "holder")
	if err := b.store.Ping(b.ctx); err != nil {
		t.Fatalf("Ping before closing: %v", err)
	}
	b.h.Close(t, b.store)
	for name, err := range storeCalls(b.ctx, b.store, id, held.Token) {
		requireErr(t, name+" on a closed store", err, store.ErrUnavailable)
		for _, wrong := range []error{store.ErrNotFound, store.ErrLeaseLost, store.ErrAlreadyTerminal, context.Canceled} {
			if errors.Is(err, wrong) {
				t.Fatalf("%s: %v is also %v", name, err, wrong)
			}
		}
	}
}
