package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/server"
)

func coalescing(t *testing.T, interceptors ...grpc.UnaryServerInterceptor) *client.Client {
	t.Helper()
	return setupWith(t, server.Config{}, []client.Option{client.WithCoalescing()}, interceptors...)
}

// TestCoalescingOneKey: many workers of one Client deliver one job at once;
// their Claims share batches, and exactly one of them acquires it.
func TestCoalescingOneKey(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := coalescing(t, counts.interceptor())
	const callers = 50
	job := client.Job{Namespace: "coalesce", Key: "one", LeaseTTL: 5 * time.Second}
	var runs atomic.Int64
	start := make(chan struct{})
	results := make([]client.Result, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			results[i], errs[i] = c.Do(t.Context(), job, counted(&runs, func(context.Context, client.Attempt) ([]byte, error) {
				time.Sleep(100 * time.Millisecond) // long enough for the others to find it in progress
				return []byte("once"), nil
			}))
		})
	}
	close(start)
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times; want 1", n)
	}
	fresh := 0
	for i, err := range errs {
		var busy *client.InProgressError
		switch {
		case err == nil && string(results[i].Value) == "once":
			if !results[i].Replayed {
				fresh++
			}
		case errors.As(err, &busy):
		default:
			t.Errorf("caller %d: %+v, %v; want the value or *InProgressError", i, results[i], err)
		}
	}
	if fresh != 1 {
		t.Errorf("%d callers got a fresh value; want 1", fresh)
	}
	if n := counts.count("Claim") + counts.count("Complete"); n != 0 {
		t.Errorf("%d unary Claims and Completes; want none: they are coalesced", n)
	}
	if n := counts.count("BatchClaim"); n < 1 || n >= callers {
		t.Errorf("%d BatchClaims for %d Claims; want fewer", n, callers)
	}
	t.Logf("BatchClaim sizes %v", counts.batchSizes("BatchClaim"))
}

// TestCoalescingManyKeys: concurrent Do calls of distinct keys cost fewer
// RPCs than calls, and each gets its own value.
func TestCoalescingManyKeys(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := coalescing(t, counts.interceptor())
	const callers = 200
	start := make(chan struct{})
	errs := make([]error, callers)
	results := make([]client.Result, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			key := fmt.Sprint("k-", i)
			results[i], errs[i] = c.Do(t.Context(), client.Job{Namespace: "coalesce", Key: key}, value("v-"+key))
			if i%2 == 0 && errs[i] == nil {
				// Some fail, too: a retryable Fail after a second Claim.
				_, errs[i] = c.Do(t.Context(), client.Job{Namespace: "coalesce-fail", Key: key}, fails(errors.New("later")))
				if errs[i] != nil && errs[i].Error() == "later" {
					errs[i] = nil
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil || string(results[i].Value) != fmt.Sprint("v-k-", i) || results[i].Record.Key != fmt.Sprint("k-", i) {
			t.Fatalf("caller %d: %+v, %v; want its own value", i, results[i], err)
		}
	}
	calls := callers*2 + callers // a Claim and a Complete each, and a Claim and a Fail for half
	rpcs := counts.count("BatchClaim") + counts.count("BatchComplete") + counts.count("BatchFail")
	if unary := counts.count("Claim") + counts.count("Complete") + counts.count("Fail"); unary != 0 {
		t.Errorf("%d unary calls; want none", unary)
	}
	if rpcs >= calls {
		t.Errorf("%d batch RPCs for %d calls; want fewer", rpcs, calls)
	}
	t.Logf("%d calls in %d RPCs", calls, rpcs)
}

// blockFirst returns an interceptor that holds the first call of method
// until release is closed, and reports on entered once it holds it.
func blockFirst(method string, entered chan<- struct{}, release <-chan struct{}) grpc.UnaryServerInterceptor {
	return onMethod(method, func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
		if n == 1 {
			close(entered)
			<-release
		}
		return handler(ctx, req)
	})
}

// waitQueued waits until n Claims of c wait for the next batch.
func waitQueued(t *testing.T, c *client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.QueuedClaims() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d Claims queued after 5 s; want %d", c.QueuedClaims(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCoalescingCallerLeaves: a caller whose context ends while its call
// waits for the batch in flight returns at once with its context's error,
// and its call is never sent; the others get their answers.
func TestCoalescingCallerLeaves(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var counts rpcCounts
	c := coalescing(t, counts.interceptor(), blockFirst(idemv1.IdempotencyService_BatchClaim_FullMethodName, entered, release))
	first := make(chan error, 1)
	go func() {
		_, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: "leave", Key: "first"})
		first <- err
	}()
	<-entered // the first batch is in flight: the next calls queue

	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() {
		_, err := c.Claim(ctx, client.ClaimRequest{Namespace: "leave", Key: "left"})
		left <- err
	}()
	stays := make(chan error, 1)
	go func() {
		_, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: "leave", Key: "stays"})
		stays <- err
	}()
	waitQueued(t, c, 2) // both queue behind the batch in flight
	cancel()
	err := await(t, "the cancelled caller's return", left, 2*time.Second)
	if !errors.Is(err, context.Canceled) || status.Code(err) != codes.Canceled {
		t.Errorf("cancelled caller: %v; want CANCELED matching context.Canceled", err)
	}
	close(release)
	if err := await(t, "the first Claim", first, 5*time.Second); err != nil {
		t.Errorf("first Claim: %v", err)
	}
	if err := await(t, "the queued Claim", stays, 5*time.Second); err != nil {
		t.Errorf("queued Claim: %v", err)
	}
	if _, err := c.Lookup(t.Context(), client.LookupRequest{Namespace: "leave", Key: "left"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Lookup of the cancelled caller's key: %v; want ErrNotFound: its Claim was not sent", err)
	}
	if got := counts.batchSizes("BatchClaim"); len(got) != 2 || got[1] != 1 {
		t.Errorf("BatchClaim sizes = %v; want [1 1]", got)
	}
}

// TestCoalescingBatchFailsForAll: a batch that fails as a whole answers
// every call in it with its error, UNAVAILABLE here.
func TestCoalescingBatchFailsForAll(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var counts rpcCounts
	c := coalescing(t, counts.interceptor(),
		blockFirst(idemv1.IdempotencyService_BatchClaim_FullMethodName, entered, release),
		onMethod(idemv1.IdempotencyService_BatchClaim_FullMethodName, func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
			if n == 2 {
				return nil, errInjected
			}
			return handler(ctx, req)
		}))
	go func() { _, _ = c.Claim(t.Context(), client.ClaimRequest{Namespace: "fails", Key: "first"}) }()
	<-entered
	const queued = 5
	errs := make(chan error, queued)
	for i := range queued {
		go func() {
			_, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: "fails", Key: fmt.Sprint(i)})
			errs <- err
		}()
	}
	waitQueued(t, c, queued)
	close(release)
	for range queued {
		if err := await(t, "a queued Claim", errs, 5*time.Second); status.Code(err) != codes.Unavailable {
			t.Errorf("queued Claim: %v; want UNAVAILABLE", err)
		}
	}
	if got := counts.batchSizes("BatchClaim"); len(got) != 2 || got[1] != queued {
		t.Errorf("BatchClaim sizes = %v; want [1 %d]", got, queued)
	}
}

// TestCoalescingLeavesSomeCallsUnary: a Claim with a wait, and calls with
// call options or outgoing metadata, go out as the unary RPC.
func TestCoalescingLeavesSomeCallsUnary(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := coalescing(t, counts.interceptor())
	ctx := t.Context()
	res, err := c.Claim(ctx, client.ClaimRequest{Namespace: "unary", Key: "a", Wait: time.Second})
	if err != nil || res.Outcome != client.OutcomeAcquired {
		t.Fatalf("Claim with a wait: %+v, %v", res, err)
	}
	if _, err := c.Complete(ctx, client.CompleteRequest{Namespace: "unary", Key: "a", Token: res.Record.Token, Result: []byte("x")}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	mdCtx := metadata.AppendToOutgoingContext(ctx, "x-trace", "1")
	if _, err := c.Claim(mdCtx, client.ClaimRequest{Namespace: "unary", Key: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: "unary", Key: "c"}); err != nil {
		t.Fatal(err)
	}
	if counts.count("Claim") != 2 || counts.count("Complete") != 1 || counts.count("BatchClaim") != 1 {
		t.Errorf("Claim %d, Complete %d, BatchClaim %d; want 2, 1, 1", counts.count("Claim"), counts.count("Complete"), counts.count("BatchClaim"))
	}
}

// TestCoalescingErrorsAreTyped: a coalesced call's error is the unary
// call's, decoded the same way.
func TestCoalescingErrorsAreTyped(t *testing.T) {
	t.Parallel()
	c := coalescing(t)
	ctx := t.Context()
	if _, err := c.Do(ctx, client.Job{Namespace: "typed", Key: "k", Fingerprint: []byte("a")}, value("v")); err != nil {
		t.Fatal(err)
	}
	_, err := c.Claim(ctx, client.ClaimRequest{Namespace: "typed", Key: "k", Fingerprint: []byte("b")})
	if !errors.Is(err, client.ErrFingerprintMismatch) {
		t.Errorf("Claim with another fingerprint: %v; want ErrFingerprintMismatch", err)
	}
	_, err = c.Complete(ctx, client.CompleteRequest{Namespace: "typed", Key: "missing", Token: 1})
	if !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Complete of a missing key: %v; want ErrNotFound", err)
	}
	_, err = c.Fail(ctx, client.FailRequest{Namespace: "typed", Key: "k", Token: 1, Error: "x"})
	if !errors.Is(err, client.ErrAlreadyTerminal) {
		t.Errorf("Fail of a completed key: %v; want ErrAlreadyTerminal", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Claim(ended, client.ClaimRequest{Namespace: "typed", Key: "ended"}); !errors.Is(err, context.Canceled) || status.Code(err) != codes.Canceled {
		t.Errorf("Claim with an ended context: %v; want CANCELED", err)
	}
}

// TestCoalescingWithoutBatchRPCs: against a server that answers the batch
// RPCs UNIMPLEMENTED, the calls are sent unary, then and from then on.
func TestCoalescingWithoutBatchRPCs(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := coalescing(t, counts.interceptor(), onMethod(idemv1.IdempotencyService_BatchClaim_FullMethodName, func(context.Context, any, int, grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Unimplemented, "unknown method BatchClaim")
	}))
	for i := range 3 {
		res, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: "old", Key: fmt.Sprint(i)})
		if err != nil || res.Outcome != client.OutcomeAcquired {
			t.Fatalf("Claim %d: %+v, %v", i, res, err)
		}
	}
	if counts.count("BatchClaim") != 1 || counts.count("Claim") != 3 {
		t.Errorf("BatchClaim %d, Claim %d; want 1 then 3 unary", counts.count("BatchClaim"), counts.count("Claim"))
	}
}

// TestCoalescingDeadline: the batch RPC carries its callers' latest
// deadline, and none when a caller has none.
func TestCoalescingDeadline(t *testing.T) {
	t.Parallel()
	deadlines := make(chan time.Duration, 4)
	c := coalescing(t, onMethod(idemv1.IdempotencyService_BatchClaim_FullMethodName, func(ctx context.Context, req any, _ int, handler grpc.UnaryHandler) (any, error) {
		d, ok := ctx.Deadline()
		if !ok {
			deadlines <- -1
		} else {
			deadlines <- time.Until(d)
		}
		return handler(ctx, req)
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: "deadline", Key: "a"}); err != nil {
		t.Fatal(err)
	}
	if d := <-deadlines; d < 20*time.Second || d > 30*time.Second {
		t.Errorf("the batch's deadline was %v away; want the caller's 30 s", d)
	}
	if _, err := c.Claim(context.Background(), client.ClaimRequest{Namespace: "deadline", Key: "b"}); err != nil {
		t.Fatal(err)
	}
	if d := <-deadlines; d != -1 {
		t.Errorf("the batch of a caller without a deadline had one %v away", d)
	}
}

// TestCoalescingRawClaimsOfOneKey: concurrent raw Claims of one key under
// claimants of their own, coalesced: exactly one is ACQUIRED, every other
// is answered IN_PROGRESS with that holder's record.
func TestCoalescingRawClaimsOfOneKey(t *testing.T) {
	t.Parallel()
	c := coalescing(t)
	const callers = 64
	start := make(chan struct{})
	results := make([]client.ClaimResult, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			results[i], errs[i] = c.Claim(t.Context(), client.ClaimRequest{Namespace: "raw", Key: "one", Claimant: fmt.Sprint("w", i)})
		})
	}
	close(start)
	wg.Wait()
	acquired := -1
	for i, err := range errs {
		if err == nil && results[i].Outcome == client.OutcomeAcquired {
			if acquired >= 0 {
				t.Fatalf("callers %d and %d both acquired the key", acquired, i)
			}
			acquired = i
		}
	}
	if acquired < 0 {
		t.Fatal("no caller acquired the key")
	}
	for i, err := range errs {
		var busy *client.InProgressError
		if i != acquired && (!errors.As(err, &busy) || busy.Record.Claimant != fmt.Sprint("w", acquired)) {
			t.Errorf("caller %d: %v; want IN_PROGRESS held by w%d", i, err, acquired)
		}
	}
}
