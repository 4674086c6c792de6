package server_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/maintenance"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
)

// The lease and retention the state-table tests send, distinct from the
// defaults so that a test sees which one the server used.
const (
	testLease     = 30 * time.Second
	testRetention = 2 * time.Hour
)

func testClaim(key, claimant string) *idemv1.ClaimRequest {
	return &idemv1.ClaimRequest{
		Namespace: ns, Key: key, Claimant: claimant,
		LeaseTtl: dur(testLease), Retention: dur(testRetention),
	}
}

// checkAcquired checks the record of an ACQUIRED Claim: PROCESSING under a
// fresh lease of lease from the statement's now(), no outcome of an earlier
// attempt, no expiry.
func checkAcquired(t *testing.T, resp *idemv1.ClaimResponse, key, claimant string, attempt int32, lease time.Duration) {
	t.Helper()
	if resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("outcome %s; want ACQUIRED", resp.GetOutcome())
	}
	if resp.GetRetryAfter() != nil {
		t.Errorf("retry_after = %s on ACQUIRED; want unset", resp.GetRetryAfter().AsDuration())
	}
	rec := resp.GetRecord()
	if rec.GetNamespace() != ns || rec.GetKey() != key {
		t.Errorf("record id (%q, %q); want (%q, %q)", rec.GetNamespace(), rec.GetKey(), ns, key)
	}
	if rec.GetState() != idemv1.State_STATE_PROCESSING {
		t.Errorf("state %s; want PROCESSING", rec.GetState())
	}
	if rec.GetToken() <= 0 {
		t.Errorf("token %d; want > 0", rec.GetToken())
	}
	if rec.GetAttempt() != attempt {
		t.Errorf("attempt %d; want %d", rec.GetAttempt(), attempt)
	}
	if rec.GetClaimant() != claimant {
		t.Errorf("claimant %q; want %q", rec.GetClaimant(), claimant)
	}
	if rec.GetResult() != nil || rec.GetError() != "" {
		t.Errorf("result %q error %q on an acquired record; want none", rec.GetResult(), rec.GetError())
	}
	wantNow(t, "created_at", rec.GetCreatedAt())
	wantNow(t, "updated_at", rec.GetUpdatedAt())
	wantSpan(t, "lease_expires_at - updated_at", rec.GetLeaseExpiresAt(), rec.GetUpdatedAt(), lease)
	wantUnset(t, "completed_at", rec.GetCompletedAt())
	wantUnset(t, "expires_at", rec.GetExpiresAt())
}

// TestClaimStateTable walks every row of the state table of DESIGN §1
// through gRPC.
func TestClaimStateTable(t *testing.T) {
	t.Parallel()

	t.Run("new key is ACQUIRED", func(t *testing.T) {
		t.Parallel()
		ts := testserver.Start(t)
		req := testClaim("new", "w1")
		req.Fingerprint = []byte("sha256-of-payload")
		resp := mustClaim(t, ts.Client, req)
		checkAcquired(t, resp, "new", "w1", 1, testLease)
		rec := resp.GetRecord()
		if string(rec.GetFingerprint()) != "sha256-of-payload" {
			t.Errorf("fingerprint %q; want the Claim's", rec.GetFingerprint())
		}
		if !rec.GetCreatedAt().AsTime().Equal(rec.GetUpdatedAt().AsTime()) {
			t.Errorf("created_at %s != updated_at %s on a new record", rec.GetCreatedAt().AsTime(), rec.GetUpdatedAt().AsTime())
		}
		if got := mustLookup(t, ts.Client, "new"); !proto.Equal(got, rec) {
			t.Errorf("Lookup = %v; want the Claim's record %v", got, rec)
		}
	})

	t.Run("PROCESSING with a live lease is IN_PROGRESS", func(t *testing.T) {
		t.Parallel()
		ts := testserver.Start(t)
		held := mustAcquire(t, ts.Client, testClaim("busy", "w1"))
		for _, claimant := range []string{"w2", ""} {
			resp := mustClaim(t, ts.Client, testClaim("busy", claimant))
			if resp.GetOutcome() != idemv1.Outcome_OUTCOME_IN_PROGRESS {
				t.Fatalf("claimant %q: outcome %s; want IN_PROGRESS", claimant, resp.GetOutcome())
			}
			if !proto.Equal(resp.GetRecord(), held) {
				t.Errorf("claimant %q: record %v; want the holder's, unchanged: %v", claimant, resp.GetRecord(), held)
			}
			if resp.GetRetryAfter() == nil {
				t.Fatalf("claimant %q: retry_after unset on IN_PROGRESS", claimant)
			}
			ra := resp.GetRetryAfter().AsDuration()
			if ra <= 0 || ra > testLease {
				t.Errorf("claimant %q: retry_after %s; want in (0, %s]", claimant, ra, testLease)
			}
			if ra < testLease-5*time.Second {
				t.Errorf("claimant %q: retry_after %s; the lease of %s was taken a moment ago", claimant, ra, testLease)
			}
		}
	})

	t.Run("PROCESSING with a lapsed lease is ACQUIRED (takeover)", func(t *testing.T) {
		t.Parallel()
		ts := testserver.Start(t)
		first := mustAcquire(t, ts.Client, testClaim("lapsed", "w1"))
		lapse(t, ts.DB.Pool, "lapsed")
		resp := mustClaim(t, ts.Client, testClaim("lapsed", "w2"))
		checkAcquired(t, resp, "lapsed", "w2", 2, testLease)
		rec := resp.GetRecord()
		if rec.GetToken() <= first.GetToken() {
			t.Errorf("takeover token %d; want > %d", rec.GetToken(), first.GetToken())
		}
		if !proto.Equal(rec.GetCreatedAt(), first.GetCreatedAt()) {
			t.Errorf("created_at changed on takeover: %v -> %v", first.GetCreatedAt().AsTime(), rec.GetCreatedAt().AsTime())
		}
		wantAfter(t, "updated_at after takeover", rec.GetUpdatedAt(), first.GetUpdatedAt())
	})

	t.Run("COMPLETED replays the result", func(t *testing.T) {
		t.Parallel()
		ts := testserver.Start(t)
		ctx := testContext(t)
		held := mustAcquire(t, ts.Client, testClaim("done", "w1"))
		done, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "done", Token: held.GetToken(), Result: []byte("receipt-42")})
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		rec := done.GetRecord()
		if rec.GetState() != idemv1.State_STATE_COMPLETED || string(rec.GetResult()) != "receipt-42" || rec.GetToken() != held.GetToken() {
			t.Errorf("Complete record: state %s result %q token %d; want COMPLETED %q %d",
				rec.GetState(), rec.GetResult(), rec.GetToken(), "receipt-42", held.GetToken())
		}
		wantNow(t, "completed_at", rec.GetCompletedAt())
		if !proto.Equal(rec.GetCompletedAt(), rec.GetUpdatedAt()) {
			t.Errorf("completed_at %v != updated_at %v", rec.GetCompletedAt().AsTime(), rec.GetUpdatedAt().AsTime())
		}
		wantSpan(t, "expires_at - completed_at", rec.GetExpiresAt(), rec.GetCompletedAt(), testRetention)
		wantUnset(t, "lease_expires_at", rec.GetLeaseExpiresAt())

		for _, claimant := range []string{"w2", "w1", ""} {
			resp := mustClaim(t, ts.Client, testClaim("done", claimant))
			if resp.GetOutcome() != idemv1.Outcome_OUTCOME_COMPLETED {
				t.Fatalf("claimant %q: outcome %s; want COMPLETED", claimant, resp.GetOutcome())
			}
			if resp.GetRetryAfter() != nil {
				t.Errorf("claimant %q: retry_after set on COMPLETED", claimant)
			}
			if !proto.Equal(resp.GetRecord(), rec) {
				t.Errorf("claimant %q: replayed record %v; want %v", claimant, resp.GetRecord(), rec)
			}
		}
	})

	t.Run("FAILED replays the error", func(t *testing.T) {
		t.Parallel()
		ts := testserver.Start(t)
		held := mustAcquire(t, ts.Client, testClaim("failed", "w1"))
		failed, err := ts.Client.Fail(testContext(t), &idemv1.FailRequest{Namespace: ns, Key: "failed", Token: held.GetToken(), Error: "card declined"})
		if err != nil {
			t.Fatalf("Fail: %v", err)
		}
		rec := failed.GetRecord()
		if rec.GetState() != idemv1.State_STATE_FAILED || rec.GetError() != "card declined" || rec.GetResult() != nil {
			t.Errorf("Fail record: state %s error %q result %q; want FAILED %q no result", rec.GetState(), rec.GetError(), rec.GetResult(), "card declined")
		}
		wantNow(t, "completed_at", rec.GetCompletedAt())
		wantSpan(t, "expires_at - completed_at", rec.GetExpiresAt(), rec.GetCompletedAt(), testRetention)
		wantUnset(t, "lease_expires_at", rec.GetLeaseExpiresAt())

		resp := mustClaim(t, ts.Client, testClaim("failed", "w2"))
		if resp.GetOutcome() != idemv1.Outcome_OUTCOME_FAILED {
			t.Fatalf("outcome %s; want FAILED", resp.GetOutcome())
		}
		if resp.GetRetryAfter() != nil {
			t.Errorf("retry_after set on FAILED")
		}
		if !proto.Equal(resp.GetRecord(), rec) {
			t.Errorf("replayed record %v; want %v", resp.GetRecord(), rec)
		}
	})

	t.Run("RELEASED is ACQUIRED", func(t *testing.T) {
		t.Parallel()
		ts := testserver.Start(t)
		held := mustAcquire(t, ts.Client, testClaim("released", "w1"))
		released, err := ts.Client.Fail(testContext(t), &idemv1.FailRequest{
			Namespace: ns, Key: "released", Token: held.GetToken(), Error: "timeout upstream", Retryable: true,
		})
		if err != nil {
			t.Fatalf("Fail retryable: %v", err)
		}
		rec := released.GetRecord()
		if rec.GetState() != idemv1.State_STATE_RELEASED || rec.GetError() != "timeout upstream" {
			t.Errorf("state %s error %q; want RELEASED %q", rec.GetState(), rec.GetError(), "timeout upstream")
		}
		wantUnset(t, "completed_at of RELEASED", rec.GetCompletedAt())
		wantUnset(t, "lease_expires_at of RELEASED", rec.GetLeaseExpiresAt())
		wantSpan(t, "expires_at - updated_at", rec.GetExpiresAt(), rec.GetUpdatedAt(), testRetention)
		if got := mustLookup(t, ts.Client, "released"); !proto.Equal(got, rec) {
			t.Errorf("Lookup = %v; want %v", got, rec)
		}

		resp := mustClaim(t, ts.Client, testClaim("released", "w2"))
		checkAcquired(t, resp, "released", "w2", 2, testLease)
		if resp.GetRecord().GetToken() <= held.GetToken() {
			t.Errorf("token %d; want > %d", resp.GetRecord().GetToken(), held.GetToken())
		}
	})

	t.Run("EXPIRED is ACQUIRED", func(t *testing.T) {
		t.Parallel()
		ts := testserver.Start(t)
		held := mustAcquire(t, ts.Client, testClaim("expired", "w1"))
		lapse(t, ts.DB.Pool, "expired")
		lapsed := mustLookup(t, ts.Client, "expired")
		stats, err := maintenance.NewSweeper(ts.Store, maintenance.SweeperConfig{}).SweepOnce(testContext(t))
		if err != nil || stats.Expired != 1 || stats.Purged != 0 {
			t.Fatalf("SweepOnce = %+v, %v; want 1 expired", stats, err)
		}
		rec := mustLookup(t, ts.Client, "expired")
		if rec.GetState() != idemv1.State_STATE_EXPIRED || rec.GetToken() != held.GetToken() || rec.GetAttempt() != 1 {
			t.Errorf("after the sweep: state %s token %d attempt %d; want EXPIRED %d 1", rec.GetState(), rec.GetToken(), rec.GetAttempt(), held.GetToken())
		}
		if !proto.Equal(rec.GetLeaseExpiresAt(), lapsed.GetLeaseExpiresAt()) {
			t.Errorf("lease_expires_at %v; want it kept at %v", rec.GetLeaseExpiresAt().AsTime(), lapsed.GetLeaseExpiresAt().AsTime())
		}
		wantNow(t, "updated_at of EXPIRED", rec.GetUpdatedAt())
		wantSpan(t, "expires_at - updated_at", rec.GetExpiresAt(), rec.GetUpdatedAt(), testRetention)
		wantUnset(t, "completed_at of EXPIRED", rec.GetCompletedAt())

		resp := mustClaim(t, ts.Client, testClaim("expired", "w2"))
		checkAcquired(t, resp, "expired", "w2", 2, testLease)
		if resp.GetRecord().GetToken() <= held.GetToken() {
			t.Errorf("token %d; want > %d", resp.GetRecord().GetToken(), held.GetToken())
		}
	})

	t.Run("defaults apply when lease_ttl and retention are unset", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name             string
			cfg              server.Config
			lease, retention time.Duration
		}{
			{"DESIGN defaults", server.Config{}, 5 * time.Minute, 24 * time.Hour},
			{"configured", server.Config{DefaultLeaseTTL: 42 * time.Second, DefaultRetention: 3 * time.Hour}, 42 * time.Second, 3 * time.Hour},
		} {
			ts := testserver.StartWith(t, testserver.Options{Config: tc.cfg})
			resp := mustClaim(t, ts.Client, &idemv1.ClaimRequest{Namespace: ns, Key: "k"})
			checkAcquired(t, resp, "k", "", 1, tc.lease)
			done, err := ts.Client.Complete(testContext(t), &idemv1.CompleteRequest{Namespace: ns, Key: "k", Token: resp.GetRecord().GetToken()})
			if err != nil {
				t.Fatalf("%s: Complete: %v", tc.name, err)
			}
			wantSpan(t, tc.name+": expires_at - completed_at", done.GetRecord().GetExpiresAt(), done.GetRecord().GetCompletedAt(), tc.retention)
			if done.GetRecord().GetResult() != nil {
				t.Errorf("%s: result %q after a Complete without one", tc.name, done.GetRecord().GetResult())
			}
		}
	})
}

// TestExpiryAloneDoesNotRevoke: with the current token, Complete, Fail and
// Heartbeat succeed on a lapsed or EXPIRED record that nobody took over, and
// a Heartbeat on an EXPIRED record makes it PROCESSING again (DESIGN §1).
func TestExpiryAloneDoesNotRevoke(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := testContext(t)
	sweeper := maintenance.NewSweeper(ts.Store, maintenance.SweeperConfig{})

	// Lapsed, not swept: Complete succeeds.
	held := mustAcquire(t, ts.Client, testClaim("lapsed", "w1"))
	lapse(t, ts.DB.Pool, "lapsed")
	done, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "lapsed", Token: held.GetToken(), Result: []byte("ok")})
	if err != nil {
		t.Fatalf("Complete on a lapsed lease with the current token: %v", err)
	}
	if done.GetRecord().GetState() != idemv1.State_STATE_COMPLETED {
		t.Errorf("state %s; want COMPLETED", done.GetRecord().GetState())
	}

	// EXPIRED: Heartbeat revives it, then Fail succeeds.
	held = mustAcquire(t, ts.Client, testClaim("revived", "w1"))
	lapse(t, ts.DB.Pool, "revived")
	if _, err := sweeper.SweepOnce(ctx); err != nil {
		t.Fatalf("SweepOnce: %v", err)
	}
	if st := mustLookup(t, ts.Client, "revived").GetState(); st != idemv1.State_STATE_EXPIRED {
		t.Fatalf("state %s after the sweep; want EXPIRED", st)
	}
	hb, err := ts.Client.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: ns, Key: "revived", Token: held.GetToken(), LeaseTtl: dur(time.Minute)})
	if err != nil {
		t.Fatalf("Heartbeat on EXPIRED with the current token: %v", err)
	}
	rec := hb.GetRecord()
	if rec.GetState() != idemv1.State_STATE_PROCESSING || rec.GetToken() != held.GetToken() || rec.GetAttempt() != 1 {
		t.Errorf("after Heartbeat: state %s token %d attempt %d; want PROCESSING %d 1", rec.GetState(), rec.GetToken(), rec.GetAttempt(), held.GetToken())
	}
	wantSpan(t, "lease_expires_at - updated_at after Heartbeat", rec.GetLeaseExpiresAt(), rec.GetUpdatedAt(), time.Minute)
	wantUnset(t, "expires_at after Heartbeat", rec.GetExpiresAt())
	if _, err := ts.Client.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: "revived", Token: held.GetToken(), Error: "gave up"}); err != nil {
		t.Fatalf("Fail after the revival: %v", err)
	}

	// EXPIRED: Complete succeeds directly.
	held = mustAcquire(t, ts.Client, testClaim("expired", "w1"))
	lapse(t, ts.DB.Pool, "expired")
	if _, err := sweeper.SweepOnce(ctx); err != nil {
		t.Fatalf("SweepOnce: %v", err)
	}
	done, err = ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "expired", Token: held.GetToken(), Result: []byte("late")})
	if err != nil {
		t.Fatalf("Complete on EXPIRED with the current token: %v", err)
	}
	if done.GetRecord().GetState() != idemv1.State_STATE_COMPLETED || string(done.GetRecord().GetResult()) != "late" {
		t.Errorf("state %s result %q; want COMPLETED late", done.GetRecord().GetState(), done.GetRecord().GetResult())
	}
	wantSpan(t, "expires_at - completed_at", done.GetRecord().GetExpiresAt(), done.GetRecord().GetCompletedAt(), testRetention)
}
