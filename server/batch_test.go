package server_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
)

// sqliteStore is a SQLite store in a fresh file, for tests whose subject
// is the server's, not the store's.
func sqliteStore(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

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
			hb.Requests = append(hb.Requests, &idemv1.HeartbeatRequest{Namespace: ns, Key: k, Token: tokens[i], LeaseTtl: dur(10 * time.Minute)})
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
			wantSpan(t, "heartbeat lease", r.GetResponse().GetRecord().GetLeaseExpiresAt(), r.GetResponse().GetRecord().GetUpdatedAt(), 10*time.Minute)
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

// sameAsUnary fails t unless the error of a batch item is, code, message and
// details, the error its unary call returns when sent now: for items whose
// error leaves the record as it was, the two must be one implementation.
func sameAsUnary(t testing.TB, what string, i int, r batchResult, unary error) {
	t.Helper()
	got := r.GetError()
	if got == nil {
		t.Fatalf("%s: item %d answered; the unary call says %v", what, i, unary)
	}
	if !sameStatus(status.FromProto(got), status.Convert(unary)) {
		t.Fatalf("%s: item %d is\n  %v\nthe unary call returns\n  %v", what, i, got, status.Convert(unary).Proto())
	}
}

// sameStatus reports whether a and b have one code, message and details.
// The details are compared unpacked: the bytes of an ErrorInfo with two
// metadata entries depend on the order its map was encoded in.
func sameStatus(a, b *status.Status) bool {
	if a.Code() != b.Code() || a.Message() != b.Message() || len(a.Details()) != len(b.Details()) {
		return false
	}
	for i, d := range a.Details() {
		da, ok1 := d.(proto.Message)
		db, ok2 := b.Details()[i].(proto.Message)
		if !ok1 || !ok2 || !proto.Equal(da, db) {
			return false
		}
	}
	return true
}

// TestBatchItemErrors: every reason an item can get, each in its own
// result, equal to what its unary call returns, with neighbours that
// answer as if alone and invalid items that write nothing.
func TestBatchItemErrors(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		c, conn := serve(t, st, server.Config{Policies: holdPolicies, MaxResultBytes: 1024})
		admin := idemv1.NewAdminServiceClient(conn)
		ctx := testContext(t)

		// The records the items find: one held by another claimant with a
		// fingerprint, one completed, and one resolved by an operator after
		// its held lease ran out.
		held := mustAcquire(t, c, &idemv1.ClaimRequest{Key: "held", Fingerprint: []byte("fp-1"), Claimant: "other"})
		done := mustAcquire(t, c, &idemv1.ClaimRequest{Key: "done"})
		if _, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "done", Token: done.GetToken(), Result: []byte("r")}); err != nil {
			t.Fatal(err)
		}
		resolved := mustAcquire(t, c, &idemv1.ClaimRequest{Namespace: "hold.pay", Key: "resolved", LeaseTtl: dur(limits.MinLeaseTTL)})
		time.Sleep(time.Until(resolved.GetLeaseExpiresAt().AsTime()) + 50*time.Millisecond)
		if resp := mustClaim(t, c, &idemv1.ClaimRequest{Namespace: "hold.pay", Key: "resolved"}); resp.GetOutcome() != idemv1.Outcome_OUTCOME_UNRESOLVED {
			t.Fatalf("Claim of the lapsed held lease: %s; want UNRESOLVED", resp.GetOutcome())
		}
		if _, err := admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Namespace: "hold.pay", Key: "resolved",
			Resolution: &idemv1.ResolveRecordRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("by hand")}}}); err != nil {
			t.Fatalf("ResolveRecord: %v", err)
		}

		claimReqs := []*idemv1.ClaimRequest{
			{Namespace: ns, Key: "new-1"},
			{Namespace: ns, Key: ""},
			{Namespace: "Not A Namespace", Key: "k"},
			{Namespace: ns, Key: "fp", Fingerprint: make([]byte, limits.MaxFingerprintBytes+1)},
			{Namespace: ns, Key: "claimant", Claimant: strings.Repeat("c", limits.MaxClaimantBytes+1)},
			{Namespace: ns, Key: "nul", Claimant: "a\x00b"},
			{Namespace: ns, Key: "lease", LeaseTtl: dur(time.Millisecond)},
			{Namespace: ns, Key: "retention", Retention: dur(time.Millisecond)},
			{Namespace: ns, Key: "held", Fingerprint: []byte("fp-2")},
			{Namespace: ns, Key: "new-2"},
		}
		want := []struct {
			code   codes.Code
			reason string
		}{
			{codes.OK, ""},
			{codes.InvalidArgument, "INVALID_KEY"},
			{codes.InvalidArgument, "INVALID_NAMESPACE"},
			{codes.InvalidArgument, "INVALID_FINGERPRINT"},
			{codes.InvalidArgument, "INVALID_CLAIMANT"},
			{codes.InvalidArgument, "INVALID_CLAIMANT"},
			{codes.InvalidArgument, "INVALID_LEASE_TTL"},
			{codes.InvalidArgument, "INVALID_RETENTION"},
			{codes.FailedPrecondition, "FINGERPRINT_MISMATCH"},
			{codes.OK, ""},
		}
		resp, err := c.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: claimReqs})
		if err != nil {
			t.Fatalf("BatchClaim: %v", err)
		}
		for i, r := range resp.GetResults() {
			wantItem(t, "BatchClaim", i, r, want[i].code, want[i].reason)
			if want[i].code == codes.OK {
				if r.GetResponse().GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
					t.Fatalf("BatchClaim item %d: %s; want ACQUIRED", i, r.GetResponse().GetOutcome())
				}
				continue
			}
			_, unary := c.Claim(ctx, claimReqs[i])
			sameAsUnary(t, "BatchClaim", i, r, unary)
		}
		for _, key := range []string{"fp", "claimant", "nul", "lease", "retention"} {
			_, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: key})
			requireStatus(t, err, codes.NotFound, "NOT_FOUND")
		}
		if rec := mustLookup(t, c, "held"); rec.GetToken() != held.GetToken() || rec.GetClaimant() != "other" {
			t.Fatalf("the held record changed: %v", rec)
		}

		fresh := resp.GetResults()[0].GetResponse().GetRecord()
		completeReqs := []*idemv1.CompleteRequest{
			{Namespace: ns, Key: "new-1", Token: fresh.GetToken(), Result: []byte("ok")},
			{Namespace: ns, Key: "held", Token: 0},
			{Namespace: ns, Key: "held", Token: held.GetToken(), Result: make([]byte, 1025)},
			{Namespace: ns, Key: "held", Token: held.GetToken() + 1000},
			{Namespace: ns, Key: "done", Token: done.GetToken(), Result: []byte("another")},
			{Namespace: "hold.pay", Key: "resolved", Token: resolved.GetToken(), Result: []byte("mine")},
			{Namespace: ns, Key: "nobody"},
		}
		completeReqs[6].Token = 7
		wantC := []struct {
			code   codes.Code
			reason string
		}{
			{codes.OK, ""},
			{codes.InvalidArgument, "INVALID_TOKEN"},
			{codes.InvalidArgument, "INVALID_RESULT"},
			{codes.Aborted, "LEASE_LOST"},
			{codes.FailedPrecondition, "ALREADY_TERMINAL"},
			{codes.FailedPrecondition, "RESOLVED_BY_OPERATOR"},
			{codes.NotFound, "NOT_FOUND"},
		}
		completed, err := c.BatchComplete(ctx, &idemv1.BatchCompleteRequest{Requests: completeReqs})
		if err != nil {
			t.Fatalf("BatchComplete: %v", err)
		}
		for i, r := range completed.GetResults() {
			wantItem(t, "BatchComplete", i, r, wantC[i].code, wantC[i].reason)
			if wantC[i].code != codes.OK {
				_, unary := c.Complete(ctx, completeReqs[i])
				sameAsUnary(t, "BatchComplete", i, r, unary)
			}
		}
		if rec := mustLookup(t, c, "new-1"); rec.GetState() != idemv1.State_STATE_COMPLETED {
			t.Fatalf("new-1 is %s; want COMPLETED", rec.GetState())
		}

		second := resp.GetResults()[9].GetResponse().GetRecord()
		failReqs := []*idemv1.FailRequest{
			{Namespace: ns, Key: "held", Token: held.GetToken(), Error: strings.Repeat("e", limits.MaxErrorBytes+1)},
			{Namespace: ns, Key: "held", Token: held.GetToken() + 1000, Error: "x"},
			{Namespace: ns, Key: "done", Token: done.GetToken(), Error: "late"},
			{Namespace: ns, Key: "new-2", Token: second.GetToken(), Error: "boom", Retryable: true},
		}
		wantF := []struct {
			code   codes.Code
			reason string
		}{
			{codes.InvalidArgument, "INVALID_ERROR"},
			{codes.Aborted, "LEASE_LOST"},
			{codes.FailedPrecondition, "ALREADY_TERMINAL"},
			{codes.OK, ""},
		}
		failed, err := c.BatchFail(ctx, &idemv1.BatchFailRequest{Requests: failReqs})
		if err != nil {
			t.Fatalf("BatchFail: %v", err)
		}
		for i, r := range failed.GetResults() {
			wantItem(t, "BatchFail", i, r, wantF[i].code, wantF[i].reason)
			if wantF[i].code != codes.OK {
				_, unary := c.Fail(ctx, failReqs[i])
				sameAsUnary(t, "BatchFail", i, r, unary)
			}
		}

		hbReqs := []*idemv1.HeartbeatRequest{
			{Namespace: ns, Key: "held", Token: held.GetToken(), LeaseTtl: dur(time.Millisecond)},
			{Namespace: ns, Key: "held", Token: held.GetToken() + 1000},
			{Namespace: ns, Key: "done", Token: done.GetToken()},
			{Namespace: ns, Key: "held", Token: held.GetToken()},
			{Namespace: ns, Key: "nobody", Token: 1},
		}
		wantH := []struct {
			code   codes.Code
			reason string
		}{
			{codes.InvalidArgument, "INVALID_LEASE_TTL"},
			{codes.Aborted, "LEASE_LOST"},
			{codes.FailedPrecondition, "ALREADY_TERMINAL"},
			{codes.OK, ""},
			{codes.NotFound, "NOT_FOUND"},
		}
		beaten, err := c.BatchHeartbeat(ctx, &idemv1.BatchHeartbeatRequest{Requests: hbReqs})
		if err != nil {
			t.Fatalf("BatchHeartbeat: %v", err)
		}
		for i, r := range beaten.GetResults() {
			wantItem(t, "BatchHeartbeat", i, r, wantH[i].code, wantH[i].reason)
			if wantH[i].code != codes.OK {
				_, unary := c.Heartbeat(ctx, hbReqs[i])
				sameAsUnary(t, "BatchHeartbeat", i, r, unary)
			}
		}

		lookReqs := []*idemv1.LookupRequest{
			{Namespace: ns, Key: "done"},
			{Namespace: ns, Key: "nobody"},
			{Namespace: ns, Key: "bad\nkey"},
			{Namespace: "hold.pay", Key: "resolved"},
		}
		wantL := []struct {
			code   codes.Code
			reason string
		}{
			{codes.OK, ""},
			{codes.NotFound, "NOT_FOUND"},
			{codes.InvalidArgument, "INVALID_KEY"},
			{codes.OK, ""},
		}
		looked, err := c.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: lookReqs})
		if err != nil {
			t.Fatalf("BatchLookup: %v", err)
		}
		for i, r := range looked.GetResults() {
			wantItem(t, "BatchLookup", i, r, wantL[i].code, wantL[i].reason)
			if wantL[i].code != codes.OK {
				_, unary := c.Lookup(ctx, lookReqs[i])
				sameAsUnary(t, "BatchLookup", i, r, unary)
			}
		}
		if got := looked.GetResults()[3].GetResponse().GetRecord(); string(got.GetResult()) != "by hand" {
			t.Fatalf("the resolved record's result is %q; want the operator's", got.GetResult())
		}
	})
}

// TestBatchClaimWait: an item that asks to wait is INVALID_WAIT, naming
// its place in the batch; wait 0 is no wait.
func TestBatchClaimWait(t *testing.T) {
	t.Parallel()
	c, _ := serve(t, sqliteStore(t), server.Config{})
	resp, err := c.BatchClaim(testContext(t), &idemv1.BatchClaimRequest{Requests: []*idemv1.ClaimRequest{
		{Namespace: ns, Key: "a", Wait: dur(0)},
		{Namespace: ns, Key: "b", Wait: dur(5 * time.Second)},
		{Namespace: ns, Key: "c", Wait: dur(-time.Second)},
	}})
	if err != nil {
		t.Fatalf("BatchClaim: %v", err)
	}
	wantItem(t, "BatchClaim", 0, resp.GetResults()[0], codes.OK, "")
	for i := 1; i <= 2; i++ {
		wantItem(t, "BatchClaim", i, resp.GetResults()[i], codes.InvalidArgument, "INVALID_WAIT")
		msg := resp.GetResults()[i].GetError().GetMessage()
		if !strings.Contains(msg, fmt.Sprintf("requests[%d].wait", i)) || !strings.Contains(msg, "a batch answers at once") {
			t.Fatalf("item %d: message %q; want it to name requests[%d].wait and say a batch answers at once", i, msg, i)
		}
	}
}

// TestBatchSameKeyInOrder: items of one key are answered as calls made one
// after the other in request order, never an error for the repeat, while
// the other keys' items run beside them.
func TestBatchSameKeyInOrder(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		c, _ := serve(t, st, server.Config{})
		ctx := testContext(t)
		const rounds = 20
		var reqs []*idemv1.ClaimRequest
		for i := range rounds {
			k := fmt.Sprintf("same-%d", i)
			reqs = append(reqs,
				&idemv1.ClaimRequest{Namespace: ns, Key: k, Claimant: "w"},
				&idemv1.ClaimRequest{Namespace: ns, Key: "other-" + k},
				&idemv1.ClaimRequest{Namespace: ns, Key: k, Claimant: "w"},
				&idemv1.ClaimRequest{Namespace: ns, Key: k})
		}
		resp, err := c.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: reqs})
		if err != nil {
			t.Fatalf("BatchClaim: %v", err)
		}
		var completes []*idemv1.CompleteRequest
		for i := range rounds {
			first, other, again, stranger := resp.Results[4*i].GetResponse(), resp.Results[4*i+1].GetResponse(), resp.Results[4*i+2].GetResponse(), resp.Results[4*i+3].GetResponse()
			if first.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || other.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
				t.Fatalf("round %d: %s, %s; want ACQUIRED for the first Claim of each key", i, first.GetOutcome(), other.GetOutcome())
			}
			// The same claimant again: ACQUIRED with the same token; anyone
			// else: IN_PROGRESS.
			if again.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || again.GetRecord().GetToken() != first.GetRecord().GetToken() {
				t.Fatalf("round %d: the claimant's second Claim: %s token %d; want ACQUIRED with token %d", i, again.GetOutcome(), again.GetRecord().GetToken(), first.GetRecord().GetToken())
			}
			if stranger.GetOutcome() != idemv1.Outcome_OUTCOME_IN_PROGRESS {
				t.Fatalf("round %d: another's Claim after them: %s; want IN_PROGRESS", i, stranger.GetOutcome())
			}
			k, tok := first.GetRecord().GetKey(), first.GetRecord().GetToken()
			completes = append(completes,
				&idemv1.CompleteRequest{Namespace: ns, Key: k, Token: tok, Result: []byte("first")},
				&idemv1.CompleteRequest{Namespace: ns, Key: k, Token: tok, Result: []byte("first")},
				&idemv1.CompleteRequest{Namespace: ns, Key: k, Token: tok, Result: []byte("second")})
		}
		done, err := c.BatchComplete(ctx, &idemv1.BatchCompleteRequest{Requests: completes})
		if err != nil {
			t.Fatalf("BatchComplete: %v", err)
		}
		for i := range rounds {
			// The first stores its result, its repeat is answered as a
			// repeat, and the one after with another result is refused.
			wantItem(t, "BatchComplete", 3*i, done.Results[3*i], codes.OK, "")
			wantItem(t, "BatchComplete", 3*i+1, done.Results[3*i+1], codes.OK, "")
			wantItem(t, "BatchComplete", 3*i+2, done.Results[3*i+2], codes.FailedPrecondition, "ALREADY_TERMINAL")
			if rec := mustLookup(t, c, fmt.Sprintf("same-%d", i)); string(rec.GetResult()) != "first" {
				t.Fatalf("round %d: result %q; want the first Complete's", i, rec.GetResult())
			}
		}
	})
}

// TestBatchClaimRace: goroutines claim shared keys at once, some with
// BatchClaim (each its own order of the keys, some keys twice) and some
// with Claim, each as its own claimant: exactly one ACQUIRED per key.
func TestBatchClaimRace(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		c, _ := serve(t, st, server.Config{})
		ctx := testContext(t)
		const workers, nkeys = 64, 24
		keys := keysN("race", nkeys)
		acquired := make([][]int, workers) // per worker, the key indexes it acquired
		errs := make(chan error, workers)
		var start sync.WaitGroup
		start.Add(1)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				claimant := fmt.Sprintf("w%d", w)
				order := rand.New(rand.NewPCG(uint64(w), 1)).Perm(nkeys)
				if w%2 == 1 {
					for _, k := range order {
						resp, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: keys[k], Claimant: claimant})
						if err != nil {
							errs <- err
							return
						}
						if resp.GetOutcome() == idemv1.Outcome_OUTCOME_ACQUIRED {
							acquired[w] = append(acquired[w], k)
						}
					}
					return
				}
				idx := append(order, order[:w%5]...) // some keys twice
				var reqs []*idemv1.ClaimRequest
				for _, k := range idx {
					reqs = append(reqs, &idemv1.ClaimRequest{Namespace: ns, Key: keys[k], Claimant: claimant})
				}
				resp, err := c.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: reqs})
				if err != nil {
					errs <- err
					return
				}
				seen := map[int]bool{}
				for i, r := range resp.GetResults() {
					if e := itemError(r); e != nil {
						errs <- fmt.Errorf("item %d: %w", i, e)
						return
					}
					if r.GetResponse().GetOutcome() == idemv1.Outcome_OUTCOME_ACQUIRED && !seen[idx[i]] {
						// A repeat of the claimant's own key is ACQUIRED
						// again, not a second acquisition.
						seen[idx[i]] = true
						acquired[w] = append(acquired[w], idx[i])
					}
				}
			}()
		}
		start.Done()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		winners := make([]int, nkeys)
		for w := range acquired {
			for _, k := range acquired[w] {
				winners[k]++
				if rec := mustLookup(t, c, keys[k]); rec.GetClaimant() != fmt.Sprintf("w%d", w) {
					t.Fatalf("%s: acquired by w%d, held by %q", keys[k], w, rec.GetClaimant())
				}
			}
		}
		for k, n := range winners {
			if n != 1 {
				t.Fatalf("%s: acquired %d times; want exactly once", keys[k], n)
			}
		}
	})
}
