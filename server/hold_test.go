package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
)

// holdPolicies hold the records of hold.* for resolution and let retry.*
// be taken over, as records are by default.
var holdPolicies = []config.Policy{
	{Namespaces: []string{"hold.*"}, OnLeaseExpiry: config.OnLeaseExpiryHold},
	{Namespaces: []string{"retry.*"}, OnLeaseExpiry: config.OnLeaseExpiryRetry},
}

// holdBundle is a service with holdPolicies over one store.
type holdBundle struct {
	st    store.Store
	c     idemv1.IdempotencyServiceClient
	admin idemv1.AdminServiceClient
}

func setupHold(t *testing.T, st store.Store) *holdBundle {
	c, conn := serve(t, st, server.Config{Policies: holdPolicies})
	return &holdBundle{st: st, c: c, admin: idemv1.NewAdminServiceClient(conn)}
}

// acquireLapsing acquires ns/key with the shortest lease and waits until it
// has run out.
func (b *holdBundle) acquireLapsing(t *testing.T, ns, key string) *idemv1.Record {
	t.Helper()
	rec := mustAcquire(t, b.c, &idemv1.ClaimRequest{Namespace: ns, Key: key, LeaseTtl: dur(limits.MinLeaseTTL)})
	time.Sleep(time.Until(rec.GetLeaseExpiresAt().AsTime()) + 50*time.Millisecond)
	return rec
}

func (b *holdBundle) claim(t *testing.T, ns, key string) *idemv1.ClaimResponse {
	t.Helper()
	resp, err := b.c.Claim(testContext(t), &idemv1.ClaimRequest{Namespace: ns, Key: key})
	if err != nil {
		t.Fatalf("Claim %s/%s: %v", ns, key, err)
	}
	return resp
}

func (b *holdBundle) requireUnresolved(t *testing.T, ns, key string, token int64) {
	t.Helper()
	resp := b.claim(t, ns, key)
	if resp.GetOutcome() != idemv1.Outcome_OUTCOME_UNRESOLVED {
		t.Fatalf("Claim: outcome %s; want UNRESOLVED", resp.GetOutcome())
	}
	rec := resp.GetRecord()
	if rec.GetState() != idemv1.State_STATE_UNRESOLVED || rec.GetToken() != token || !rec.GetHold() || rec.GetPolicy() != "hold.*" {
		t.Fatalf("Claim: record %s token %d hold %v policy %q; want UNRESOLVED, token %d, hold, hold.*",
			rec.GetState(), rec.GetToken(), rec.GetHold(), rec.GetPolicy(), token)
	}
	if rec.GetExpiresAt() != nil {
		t.Errorf("an UNRESOLVED record has expires_at %v; it is never purged", rec.GetExpiresAt().AsTime())
	}
}

// TestHoldLateCompleteByTheHolder: a Claim that finds a held lease run out
// makes the record UNRESOLVED and never takes it over; so does every later
// Claim; the holder's late Complete resolves it.
func TestHoldLateCompleteByTheHolder(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		b := setupHold(t, st)
		ctx := testContext(t)
		held := b.acquireLapsing(t, "hold.pay", "k")
		b.requireUnresolved(t, "hold.pay", "k", held.GetToken())
		b.requireUnresolved(t, "hold.pay", "k", held.GetToken()) // and again: still no takeover

		list, err := b.admin.ListRecords(ctx, &idemv1.ListRecordsRequest{State: idemv1.State_STATE_UNRESOLVED})
		if err != nil {
			t.Fatalf("ListRecords: %v", err)
		}
		if len(list.GetRecords()) != 1 || list.GetRecords()[0].GetKey() != "k" {
			t.Fatalf("ListRecords(UNRESOLVED) = %v; want the one record", list.GetRecords())
		}

		done, err := b.c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "hold.pay", Key: "k", Token: held.GetToken(), Result: []byte("r")})
		if err != nil {
			t.Fatalf("late Complete by the holder: %v", err)
		}
		if done.GetRecord().GetState() != idemv1.State_STATE_COMPLETED {
			t.Fatalf("late Complete: state %s; want COMPLETED", done.GetRecord().GetState())
		}
		if resp := b.claim(t, "hold.pay", "k"); resp.GetOutcome() != idemv1.Outcome_OUTCOME_COMPLETED || string(resp.GetRecord().GetResult()) != "r" {
			t.Fatalf("Claim after the late Complete: %s %q; want the replay", resp.GetOutcome(), resp.GetRecord().GetResult())
		}
	})
}

// TestHoldSweeperAndLateFail: the sweeper makes a held lease UNRESOLVED (not
// EXPIRED), the purge leaves it, and the holder's late Fail resolves it.
func TestHoldSweeperAndLateFail(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		b := setupHold(t, st)
		ctx := testContext(t)
		held := b.acquireLapsing(t, "hold.pay", "k")
		if n, err := st.SweepExpire(ctx, 100); err != nil || n != 1 {
			t.Fatalf("SweepExpire = %d, %v; want 1", n, err)
		}
		rec := mustLookupIn(t, b.c, "hold.pay", "k")
		if rec.GetState() != idemv1.State_STATE_UNRESOLVED || rec.GetExpiresAt() != nil {
			t.Fatalf("after the sweep: %s, expires_at %v; want UNRESOLVED without expiry", rec.GetState(), rec.GetExpiresAt())
		}
		if _, err := st.SweepPurge(ctx, 100); err != nil {
			t.Fatal(err)
		}
		counts, err := st.CountByState(ctx)
		if err != nil || counts[store.StateUnresolved] != 1 {
			t.Fatalf("CountByState = %v, %v; want one unresolved", counts, err)
		}
		b.requireUnresolved(t, "hold.pay", "k", held.GetToken())
		failed, err := b.c.Fail(ctx, &idemv1.FailRequest{Namespace: "hold.pay", Key: "k", Token: held.GetToken(), Error: "declined"})
		if err != nil || failed.GetRecord().GetState() != idemv1.State_STATE_FAILED {
			t.Fatalf("late Fail by the holder: %v, %v; want FAILED", failed.GetRecord().GetState(), err)
		}
	})
}

// TestHoldHeartbeatRevives: the holder's Heartbeat makes an UNRESOLVED
// record PROCESSING again under a fresh lease.
func TestHoldHeartbeatRevives(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		b := setupHold(t, st)
		held := b.acquireLapsing(t, "hold.pay", "k")
		b.requireUnresolved(t, "hold.pay", "k", held.GetToken())
		hb, err := b.c.Heartbeat(testContext(t), &idemv1.HeartbeatRequest{Namespace: "hold.pay", Key: "k", Token: held.GetToken(), LeaseTtl: dur(time.Minute)})
		if err != nil || hb.GetRecord().GetState() != idemv1.State_STATE_PROCESSING {
			t.Fatalf("Heartbeat: %v, %v; want PROCESSING", hb.GetRecord().GetState(), err)
		}
		if resp := b.claim(t, "hold.pay", "k"); resp.GetOutcome() != idemv1.Outcome_OUTCOME_IN_PROGRESS {
			t.Fatalf("Claim: %s; want IN_PROGRESS", resp.GetOutcome())
		}
	})
}

// TestResolveRecord: each kind of resolution, answered with the resolved
// record; the holder's token stays current until a Claim takes a released
// record over with a greater one.
func TestResolveRecord(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		b := setupHold(t, st)
		ctx := testContext(t)
		resolve := func(key string, how *idemv1.ResolveRecordRequest) *idemv1.Record {
			t.Helper()
			how.Namespace, how.Key = "hold.pay", key
			resp, err := b.admin.ResolveRecord(ctx, how)
			if err != nil {
				t.Fatalf("ResolveRecord %s: %v", key, err)
			}
			return resp.GetRecord()
		}

		held := b.acquireLapsing(t, "hold.pay", "completed")
		b.requireUnresolved(t, "hold.pay", "completed", held.GetToken())
		rec := resolve("completed", &idemv1.ResolveRecordRequest{Resolution: &idemv1.ResolveRecordRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("by hand")}}})
		if rec.GetState() != idemv1.State_STATE_COMPLETED || string(rec.GetResult()) != "by hand" || rec.GetToken() != held.GetToken() || rec.GetCompletedAt() == nil || rec.GetExpiresAt() == nil {
			t.Fatalf("resolved completed: %v", rec)
		}
		if resp := b.claim(t, "hold.pay", "completed"); resp.GetOutcome() != idemv1.Outcome_OUTCOME_COMPLETED {
			t.Fatalf("Claim: %s; want COMPLETED", resp.GetOutcome())
		}
		_, err := b.admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Namespace: "hold.pay", Key: "completed",
			Resolution: &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}})
		requireStatus(t, err, codes.FailedPrecondition, "NOT_UNRESOLVED")

		held = b.acquireLapsing(t, "hold.pay", "failed")
		b.requireUnresolved(t, "hold.pay", "failed", held.GetToken())
		rec = resolve("failed", &idemv1.ResolveRecordRequest{Resolution: &idemv1.ResolveRecordRequest_Failed{Failed: &idemv1.ResolveFailed{Error: "refunded"}}})
		if rec.GetState() != idemv1.State_STATE_FAILED || rec.GetError() != "refunded" {
			t.Fatalf("resolved failed: %v", rec)
		}
		if resp := b.claim(t, "hold.pay", "failed"); resp.GetOutcome() != idemv1.Outcome_OUTCOME_FAILED {
			t.Fatalf("Claim: %s; want FAILED", resp.GetOutcome())
		}
		_, err = b.c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "hold.pay", Key: "failed", Token: held.GetToken()})
		requireStatus(t, err, codes.FailedPrecondition, "RESOLVED_BY_OPERATOR")

		held = b.acquireLapsing(t, "hold.pay", "released")
		b.requireUnresolved(t, "hold.pay", "released", held.GetToken())
		rec = resolve("released", &idemv1.ResolveRecordRequest{Resolution: &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}})
		if rec.GetState() != idemv1.State_STATE_RELEASED {
			t.Fatalf("resolved released: %v", rec)
		}
		resp := b.claim(t, "hold.pay", "released")
		if resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || resp.GetRecord().GetToken() <= held.GetToken() || resp.GetRecord().GetAttempt() != 2 {
			t.Fatalf("Claim after release: %s token %d attempt %d; want ACQUIRED, a token above %d, attempt 2",
				resp.GetOutcome(), resp.GetRecord().GetToken(), resp.GetRecord().GetAttempt(), held.GetToken())
		}
		_, err = b.c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "hold.pay", Key: "released", Token: held.GetToken()})
		requireStatus(t, err, codes.Aborted, "LEASE_LOST")

		_, err = b.admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Namespace: "hold.pay", Key: "missing",
			Resolution: &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}})
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")
		_, err = b.admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Namespace: "hold.pay", Key: "released"})
		requireStatus(t, err, codes.InvalidArgument, "INVALID_RESOLUTION")
	})
}

// TestRetryPolicyTakesOver: a namespace with on_lease_expiry: retry keeps
// the behaviour without a policy: the sweeper expires, a Claim takes over.
func TestRetryPolicyTakesOver(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		b := setupHold(t, st)
		ctx := testContext(t)
		first := b.acquireLapsing(t, "retry.mail", "k")
		if first.GetHold() {
			t.Fatal("a retry policy's record is held")
		}
		resp := b.claim(t, "retry.mail", "k")
		if resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || resp.GetRecord().GetToken() <= first.GetToken() {
			t.Fatalf("Claim: %s token %d; want a takeover above %d", resp.GetOutcome(), resp.GetRecord().GetToken(), first.GetToken())
		}
		second := b.acquireLapsing(t, "retry.mail", "k2")
		if n, err := st.SweepExpire(ctx, 100); err != nil || n < 1 {
			t.Fatalf("SweepExpire = %d, %v", n, err)
		}
		if rec := mustLookupIn(t, b.c, "retry.mail", "k2"); rec.GetState() != idemv1.State_STATE_EXPIRED || rec.GetToken() != second.GetToken() {
			t.Fatalf("after the sweep: %s; want EXPIRED", rec.GetState())
		}
	})
}

func mustLookupIn(t *testing.T, c idemv1.IdempotencyServiceClient, ns, key string) *idemv1.Record {
	t.Helper()
	resp, err := c.Lookup(testContext(t), &idemv1.LookupRequest{Namespace: ns, Key: key})
	if err != nil {
		t.Fatalf("Lookup %s/%s: %v", ns, key, err)
	}
	return resp.GetRecord()
}
