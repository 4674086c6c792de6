package server_test

import (
	"fmt"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
)

// batchResult is what every Batch<X>Result has.
type batchResult interface {
	GetError() *spb.Status
}

// itemError is a batch item's error as the error its unary call would
// return, nil when the item answered.
func itemError(r batchResult) error {
	if st := r.GetError(); st != nil {
		return status.FromProto(st).Err()
	}
	return nil
}

// wantItem fails t unless result i of a batch is the error code / reason,
// or, with codes.OK, a response.
func wantItem(t testing.TB, what string, i int, r batchResult, code codes.Code, reason string) {
	t.Helper()
	err := itemError(r)
	if code == codes.OK {
		if err != nil {
			t.Fatalf("%s: item %d: %v; want a response", what, i, err)
		}
		return
	}
	if ok, why := checkStatus(err, code, reason); !ok {
		t.Fatalf("%s: item %d: %s", what, i, why)
	}
}

func claims(keys ...string) []*idemv1.ClaimRequest {
	reqs := make([]*idemv1.ClaimRequest, len(keys))
	for i, k := range keys {
		reqs[i] = &idemv1.ClaimRequest{Namespace: ns, Key: k, Fingerprint: []byte("fp"), Claimant: "w1"}
	}
	return reqs
}

func keysN(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return keys
}

// TestBatchHappyPath runs a delivery of jobs through every batch call:
// claim all, heartbeat all, complete half and fail the other half, look
// all up.
func TestBatchHappyPath(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		c, _ := serve(t, st, server.Config{})
		ctx := testContext(t)
		keys := keysN("job", 40)

		claimed, err := c.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: claims(keys...)})
		if err != nil {
			t.Fatalf("BatchClaim: %v", err)
		}
		if len(claimed.GetResults()) != len(keys) {
			t.Fatalf("%d results; want %d", len(claimed.GetResults()), len(keys))
		}
		tokens := make([]int64, len(keys))
		for i, r := range claimed.GetResults() {
			wantItem(t, "BatchClaim", i, r, codes.OK, "")
			resp := r.GetResponse()
			if resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || resp.GetRecord().GetKey() != keys[i] {
				t.Fatalf("item %d: %s of %q; want ACQUIRED of %q", i, resp.GetOutcome(), resp.GetRecord().GetKey(), keys[i])
			}
			tokens[i] = resp.GetRecord().GetToken()
		}

		hb := &idemv1.BatchHeartbeatRequest{}
		for i, k := range keys {
			hb.Requests = append(hb.Requests, &idemv1.HeartbeatRequest{Namespace: ns, Key: k, Token: tokens[i], LeaseTtl: dur(10 * 60e9)})
		}
		beaten, err := c.BatchHeartbeat(ctx, hb)
		if err != nil {
			t.Fatalf("BatchHeartbeat: %v", err)
		}
		for i, r := range beaten.GetResults() {
			wantItem(t, "BatchHeartbeat", i, r, codes.OK, "")
			if r.GetResponse().GetRecord().GetKey() != keys[i] {
				t.Fatalf("BatchHeartbeat item %d is of %q; want %q", i, r.GetResponse().GetRecord().GetKey(), keys[i])
			}
			wantSpan(t, "heartbeat lease", r.GetResponse().GetRecord().GetLeaseExpiresAt(), r.GetResponse().GetRecord().GetUpdatedAt(), 10*60e9)
		}

		half := len(keys) / 2
		done := &idemv1.BatchCompleteRequest{}
		for i, k := range keys[:half] {
			done.Requests = append(done.Requests, &idemv1.CompleteRequest{Namespace: ns, Key: k, Token: tokens[i], Result: []byte("ok " + k)})
		}
		completed, err := c.BatchComplete(ctx, done)
		if err != nil {
			t.Fatalf("BatchComplete: %v", err)
		}
		for i, r := range completed.GetResults() {
			wantItem(t, "BatchComplete", i, r, codes.OK, "")
			if rec := r.GetResponse().GetRecord(); rec.GetState() != idemv1.State_STATE_COMPLETED || string(rec.GetResult()) != "ok "+keys[i] {
				t.Fatalf("BatchComplete item %d: %s %q", i, rec.GetState(), rec.GetResult())
			}
		}
		fail := &idemv1.BatchFailRequest{}
		for i, k := range keys[half:] {
			fail.Requests = append(fail.Requests, &idemv1.FailRequest{Namespace: ns, Key: k, Token: tokens[half+i], Error: "boom " + k, Retryable: i%2 == 0})
		}
		failed, err := c.BatchFail(ctx, fail)
		if err != nil {
			t.Fatalf("BatchFail: %v", err)
		}
		for i, r := range failed.GetResults() {
			wantItem(t, "BatchFail", i, r, codes.OK, "")
			want := idemv1.State_STATE_FAILED
			if i%2 == 0 {
				want = idemv1.State_STATE_RELEASED
			}
			if rec := r.GetResponse().GetRecord(); rec.GetState() != want || rec.GetError() != "boom "+keys[half+i] {
				t.Fatalf("BatchFail item %d: %s %q; want %s", i, rec.GetState(), rec.GetError(), want)
			}
		}

		look := &idemv1.BatchLookupRequest{}
		for _, k := range keys {
			look.Requests = append(look.Requests, &idemv1.LookupRequest{Namespace: ns, Key: k})
		}
		looked, err := c.BatchLookup(ctx, look)
		if err != nil {
			t.Fatalf("BatchLookup: %v", err)
		}
		for i, r := range looked.GetResults() {
			wantItem(t, "BatchLookup", i, r, codes.OK, "")
			rec := r.GetResponse().GetRecord()
			if rec.GetKey() != keys[i] || rec.GetToken() != tokens[i] {
				t.Fatalf("BatchLookup item %d: %q token %d; want %q token %d", i, rec.GetKey(), rec.GetToken(), keys[i], tokens[i])
			}
			if want := mustLookup(t, c, keys[i]); rec.GetState() != want.GetState() {
				t.Fatalf("BatchLookup item %d: %s; Lookup says %s", i, rec.GetState(), want.GetState())
			}
		}
	})
}
