package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/maintenance"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// tokenCalls are the three calls that present a token, for tables.
var tokenCalls = []struct {
	name string
	call func(ctx context.Context, c idemv1.IdempotencyServiceClient, key string, token int64) error
}{
	{"Complete", func(ctx context.Context, c idemv1.IdempotencyServiceClient, key string, token int64) error {
		_, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: token, Result: []byte("stale")})
		return err
	}},
	{"Fail", func(ctx context.Context, c idemv1.IdempotencyServiceClient, key string, token int64) error {
		_, err := c.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: key, Token: token, Error: "stale"})
		return err
	}},
	{"Fail retryable", func(ctx context.Context, c idemv1.IdempotencyServiceClient, key string, token int64) error {
		_, err := c.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: key, Token: token, Error: "stale", Retryable: true})
		return err
	}},
	{"Heartbeat", func(ctx context.Context, c idemv1.IdempotencyServiceClient, key string, token int64) error {
		_, err := c.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: ns, Key: key, Token: token, LeaseTtl: dur(time.Hour)})
		return err
	}},
}

// TestFencingAfterTakeover lets a real 1 s lease run out: the next Claim takes
// over with a greater token, and the old holder's Complete, Fail and Heartbeat
// are ABORTED / LEASE_LOST, before and after the new holder completes.
func TestFencingAfterTakeover(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := testContext(t)

	old := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "job", Claimant: "old", LeaseTtl: dur(time.Second)})

	// Wait for the lease to run out by the database clock; until then the
	// record is IN_PROGRESS.
	var takeover *idemv1.Record
	deadline := time.Now().Add(5 * time.Second)
	for takeover == nil {
		resp := mustClaim(t, ts.Client, &idemv1.ClaimRequest{Key: "job", Claimant: "new", LeaseTtl: dur(time.Minute)})
		switch resp.GetOutcome() {
		case idemv1.Outcome_OUTCOME_ACQUIRED:
			takeover = resp.GetRecord()
		case idemv1.Outcome_OUTCOME_IN_PROGRESS:
			if ra := resp.GetRetryAfter().AsDuration(); ra <= 0 || ra > time.Second {
				t.Fatalf("retry_after %s under a 1s lease", ra)
			}
			if time.Now().After(deadline) {
				t.Fatal("the 1s lease did not run out within 5s")
			}
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("outcome %s while waiting for the lease to run out", resp.GetOutcome())
		}
	}
	if takeover.GetToken() <= old.GetToken() || takeover.GetAttempt() != 2 || takeover.GetClaimant() != "new" {
		t.Fatalf("takeover: token %d attempt %d claimant %q; want token > %d, attempt 2, claimant new",
			takeover.GetToken(), takeover.GetAttempt(), takeover.GetClaimant(), old.GetToken())
	}

	for _, tc := range tokenCalls {
		requireStatus(t, tc.call(ctx, ts.Client, "job", old.GetToken()), codes.Aborted, "LEASE_LOST")
	}
	if got := mustLookup(t, ts.Client, "job"); !proto.Equal(got, takeover) {
		t.Fatalf("the stale calls changed the record: %v; want %v", got, takeover)
	}

	hb, err := ts.Client.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: ns, Key: "job", Token: takeover.GetToken(), LeaseTtl: dur(10 * time.Minute)})
	if err != nil {
		t.Fatalf("new holder's Heartbeat: %v", err)
	}
	if rec := hb.GetRecord(); rec.GetState() != idemv1.State_STATE_PROCESSING || rec.GetToken() != takeover.GetToken() || rec.GetAttempt() != 2 {
		t.Errorf("after Heartbeat: state %s token %d attempt %d; want PROCESSING %d 2", rec.GetState(), rec.GetToken(), rec.GetAttempt(), takeover.GetToken())
	}
	wantSpan(t, "lease_expires_at - updated_at after Heartbeat", hb.GetRecord().GetLeaseExpiresAt(), hb.GetRecord().GetUpdatedAt(), 10*time.Minute)
	wantUnset(t, "expires_at after Heartbeat", hb.GetRecord().GetExpiresAt())
	done, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "job", Token: takeover.GetToken(), Result: []byte("new")})
	if err != nil {
		t.Fatalf("new holder's Complete: %v", err)
	}
	if rec := done.GetRecord(); rec.GetState() != idemv1.State_STATE_COMPLETED || string(rec.GetResult()) != "new" || rec.GetToken() != takeover.GetToken() {
		t.Fatalf("after Complete: state %s result %q token %d", rec.GetState(), rec.GetResult(), rec.GetToken())
	}

	// A superseded token stays rejected whatever the state; so does one that
	// was never handed out.
	for _, token := range []int64{old.GetToken(), takeover.GetToken() + 1000} {
		for _, tc := range tokenCalls {
			err := tc.call(ctx, ts.Client, "job", token)
			if ok, why := checkStatus(err, codes.Aborted, "LEASE_LOST"); !ok {
				t.Errorf("%s with token %d on COMPLETED: %s; want ABORTED / LEASE_LOST", tc.name, token, why)
			}
		}
	}
	if got := mustLookup(t, ts.Client, "job"); string(got.GetResult()) != "new" || got.GetState() != idemv1.State_STATE_COMPLETED {
		t.Errorf("stored result %q state %s; want new COMPLETED", got.GetResult(), got.GetState())
	}
}

// TestTokenCallRules covers the rest of DESIGN §1's rule for token-bearing
// calls, claimant re-entrancy, NOT_FOUND and fingerprints.
func TestTokenCallRules(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)

	t.Run("same claimant re-enters with the same token", func(t *testing.T) {
		t.Parallel()
		first := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "reenter", Claimant: "attempt-1"})
		again := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "reenter", Claimant: "attempt-1"})
		if again.GetToken() != first.GetToken() || again.GetAttempt() != 1 {
			t.Errorf("retried Claim: token %d attempt %d; want %d 1", again.GetToken(), again.GetAttempt(), first.GetToken())
		}
		for _, claimant := range []string{"attempt-2", ""} {
			if out := mustClaim(t, ts.Client, &idemv1.ClaimRequest{Key: "reenter", Claimant: claimant}).GetOutcome(); out != idemv1.Outcome_OUTCOME_IN_PROGRESS {
				t.Errorf("claimant %q: outcome %s; want IN_PROGRESS", claimant, out)
			}
		}
		// Without a claimant there is nothing to re-enter with.
		mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "anonymous"})
		if out := mustClaim(t, ts.Client, &idemv1.ClaimRequest{Key: "anonymous"}).GetOutcome(); out != idemv1.Outcome_OUTCOME_IN_PROGRESS {
			t.Errorf("second anonymous Claim: outcome %s; want IN_PROGRESS", out)
		}
	})

	t.Run("Complete repeated returns the stored record unchanged", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		held := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "complete-twice"})
		first, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "complete-twice", Token: held.GetToken(), Result: []byte("first")})
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		again, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "complete-twice", Token: held.GetToken(), Result: []byte("first")})
		if err != nil {
			t.Fatalf("repeated Complete: %v", err)
		}
		if !proto.Equal(again.GetRecord(), first.GetRecord()) {
			t.Errorf("repeated Complete = %v; want the stored record %v", again.GetRecord(), first.GetRecord())
		}
		// Other bytes are not a repeat: they were not stored.
		_, err = ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "complete-twice", Token: held.GetToken(), Result: []byte("second")})
		requireStatus(t, err, codes.FailedPrecondition, "ALREADY_TERMINAL")
		if got := mustLookup(t, ts.Client, "complete-twice"); !proto.Equal(got, first.GetRecord()) {
			t.Errorf("Lookup = %v; want %v", got, first.GetRecord())
		}
	})

	t.Run("Fail repeated returns the stored record unchanged", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		for _, retryable := range []bool{false, true} {
			key := "fail-twice"
			if retryable {
				key = "release-twice"
			}
			held := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: key})
			first, err := ts.Client.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: key, Token: held.GetToken(), Error: "e1", Retryable: retryable})
			if err != nil {
				t.Fatalf("%s: Fail: %v", key, err)
			}
			again, err := ts.Client.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: key, Token: held.GetToken(), Error: "e1", Retryable: retryable})
			if err != nil {
				t.Fatalf("%s: repeated Fail: %v", key, err)
			}
			if !proto.Equal(again.GetRecord(), first.GetRecord()) || again.GetRecord().GetError() != "e1" {
				t.Errorf("%s: repeated Fail = %v; want the stored record %v", key, again.GetRecord(), first.GetRecord())
			}
			// Another error, or the other kind of Fail, is not a repeat.
			for _, other := range []*idemv1.FailRequest{
				{Namespace: ns, Key: key, Token: held.GetToken(), Error: "e2", Retryable: retryable},
				{Namespace: ns, Key: key, Token: held.GetToken(), Error: "e1", Retryable: !retryable},
			} {
				_, err := ts.Client.Fail(ctx, other)
				requireStatus(t, err, codes.FailedPrecondition, "ALREADY_TERMINAL")
			}
			if got := mustLookup(t, ts.Client, key); !proto.Equal(got, first.GetRecord()) {
				t.Errorf("%s: Lookup = %v; want %v", key, got, first.GetRecord())
			}
		}
	})

	t.Run("another call on a finished record is ALREADY_TERMINAL", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		finish := map[string]func(key string, token int64) error{
			"Complete": func(key string, token int64) error {
				_, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: token, Result: []byte("r")})
				return err
			},
			"Fail": func(key string, token int64) error {
				_, err := ts.Client.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: key, Token: token, Error: "e"})
				return err
			},
			"Fail retryable": func(key string, token int64) error {
				_, err := ts.Client.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: key, Token: token, Error: "e", Retryable: true})
				return err
			},
		}
		for _, tc := range []struct{ first, then string }{
			{"Complete", "Fail"},
			{"Complete", "Fail retryable"},
			{"Complete", "Heartbeat"},
			{"Fail", "Complete"},
			{"Fail", "Heartbeat"},
			{"Fail retryable", "Complete"},
			{"Fail retryable", "Heartbeat"},
		} {
			key := "terminal-" + tc.first + "-" + tc.then
			held := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: key})
			if err := finish[tc.first](key, held.GetToken()); err != nil {
				t.Fatalf("%s: %v", tc.first, err)
			}
			before := mustLookup(t, ts.Client, key)
			var err error
			for _, c := range tokenCalls {
				if c.name == tc.then {
					err = c.call(ctx, ts.Client, key, held.GetToken())
				}
			}
			if ok, why := checkStatus(err, codes.FailedPrecondition, "ALREADY_TERMINAL"); !ok {
				t.Errorf("%s after %s: %s; want FAILED_PRECONDITION / ALREADY_TERMINAL", tc.then, tc.first, why)
			}
			if after := mustLookup(t, ts.Client, key); !proto.Equal(after, before) {
				t.Errorf("%s after %s changed the record: %v -> %v", tc.then, tc.first, before, after)
			}
		}
	})

	t.Run("unknown record is NOT_FOUND", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		for _, c := range tokenCalls {
			requireStatus(t, c.call(ctx, ts.Client, "never-claimed", 1), codes.NotFound, "NOT_FOUND")
		}
		_, err := ts.Client.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: "never-claimed"})
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")
		// Same key, other namespace.
		mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "elsewhere"})
		_, err = ts.Client.Lookup(ctx, &idemv1.LookupRequest{Namespace: "other", Key: "elsewhere"})
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")
	})

	t.Run("fingerprint mismatch", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		a, b := []byte("fingerprint-a"), []byte("fingerprint-b")
		held := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "fp", Fingerprint: a})
		mismatch := func(when string) {
			t.Helper()
			_, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: "fp", Fingerprint: b})
			if ok, why := checkStatus(err, codes.FailedPrecondition, "FINGERPRINT_MISMATCH"); !ok {
				t.Errorf("%s: Claim with another fingerprint: %s; want FAILED_PRECONDITION / FINGERPRINT_MISMATCH", when, why)
			}
		}
		mismatch("PROCESSING")
		for _, fp := range [][]byte{a, nil} {
			if out := mustClaim(t, ts.Client, &idemv1.ClaimRequest{Key: "fp", Fingerprint: fp}).GetOutcome(); out != idemv1.Outcome_OUTCOME_IN_PROGRESS {
				t.Errorf("Claim with fingerprint %q: outcome %s; want IN_PROGRESS", fp, out)
			}
		}
		lapse(t, ts.DB.Pool, "fp")
		mismatch("lapsed") // a mismatching Claim must not take over
		if got := mustLookup(t, ts.Client, "fp"); got.GetToken() != held.GetToken() || string(got.GetFingerprint()) != string(a) {
			t.Fatalf("after the mismatch: token %d fingerprint %q; want %d %q", got.GetToken(), got.GetFingerprint(), held.GetToken(), a)
		}
		taken := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "fp", Fingerprint: a})
		if _, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "fp", Token: taken.GetToken()}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		mismatch("COMPLETED")
		if out := mustClaim(t, ts.Client, &idemv1.ClaimRequest{Key: "fp", Fingerprint: a}).GetOutcome(); out != idemv1.Outcome_OUTCOME_COMPLETED {
			t.Errorf("Claim with the same fingerprint on COMPLETED: %s; want COMPLETED", out)
		}
	})
}

// TestTokensIncreaseAcrossPurge: a record purged after its retention and
// claimed again gets a token greater than every earlier one, and attempt 1.
func TestTokensIncreaseAcrossPurge(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := testContext(t)

	var last *idemv1.Record
	for round := 1; round <= 3; round++ {
		held := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "reborn", Retention: dur(time.Minute)})
		if held.GetAttempt() != 1 {
			t.Errorf("round %d: attempt %d; want 1 for a record created again", round, held.GetAttempt())
		}
		if last != nil {
			if held.GetToken() <= last.GetToken() {
				t.Fatalf("round %d: token %d after a purge; want > %d", round, held.GetToken(), last.GetToken())
			}
			wantAfter(t, "created_at of the new record", held.GetCreatedAt(), last.GetCreatedAt())
			// The purged record's token is not the new record's.
			_, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "reborn", Token: last.GetToken()})
			requireStatus(t, err, codes.Aborted, "LEASE_LOST")
		}
		done, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "reborn", Token: held.GetToken()})
		if err != nil {
			t.Fatalf("round %d: Complete: %v", round, err)
		}
		wantSpan(t, "expires_at - completed_at", done.GetRecord().GetExpiresAt(), done.GetRecord().GetCompletedAt(), time.Minute)
		if _, err := ts.DB.Pool.Exec(ctx, `UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE namespace = $1 AND key = $2`, ns, "reborn"); err != nil {
			t.Fatal(err)
		}
		stats, err := maintenance.NewSweeper(ts.Store, maintenance.SweeperConfig{}).SweepOnce(ctx)
		if err != nil || stats.Purged != 1 {
			t.Fatalf("round %d: SweepOnce = %+v, %v; want 1 purged", round, stats, err)
		}
		_, err = ts.Client.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: "reborn"})
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")
		last = held
	}
}
