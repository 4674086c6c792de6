package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// counted returns fn wrapped so that runs counts its calls.
func counted(runs *atomic.Int64, fn func(context.Context, client.Attempt) ([]byte, error)) func(context.Context, client.Attempt) ([]byte, error) {
	return func(ctx context.Context, a client.Attempt) ([]byte, error) {
		runs.Add(1)
		return fn(ctx, a)
	}
}

func value(v string) func(context.Context, client.Attempt) ([]byte, error) {
	return func(context.Context, client.Attempt) ([]byte, error) { return []byte(v), nil }
}

func mustLookup(t *testing.T, c *client.Client, job client.Job) client.Record {
	t.Helper()
	rec, err := c.Lookup(t.Context(), client.LookupRequest{Namespace: job.Namespace, Key: job.Key})
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	return rec
}

func TestDoConcurrentOneKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		callers int
		wait    bool
	}{{2, false}, {50, false}, {2, true}, {50, true}} {
		t.Run(fmt.Sprintf("callers=%d/wait=%v", tc.callers, tc.wait), func(t *testing.T) {
			t.Parallel()
			c := setup(t)
			job := client.Job{Namespace: "concurrent", Key: "one", LeaseTTL: 2 * time.Second}
			var opts []client.DoOption
			if tc.wait {
				opts = append(opts, client.WithWait(10*time.Second))
			}
			var runs atomic.Int64
			fn := counted(&runs, func(context.Context, client.Attempt) ([]byte, error) {
				time.Sleep(100 * time.Millisecond) // long enough for the others to find it in progress
				return []byte("charged"), nil
			})
			start := make(chan struct{})
			errs := make([]error, tc.callers)
			results := make([]client.Result, tc.callers)
			var wg sync.WaitGroup
			for i := range tc.callers {
				wg.Go(func() {
					<-start
					results[i], errs[i] = c.Do(t.Context(), job, fn, opts...)
				})
			}
			close(start)
			wg.Wait()

			if n := runs.Load(); n != 1 {
				t.Errorf("fn ran %d times, want 1", n)
			}
			var got, busy, replayed int
			for i, err := range errs {
				var inProgress *client.InProgressError
				switch {
				case err == nil && string(results[i].Value) == "charged":
					got++
					if results[i].Replayed {
						replayed++
					}
				case errors.As(err, &inProgress) && !tc.wait:
					busy++
				default:
					t.Errorf("caller %d: %q, %v; want the value%s", i, results[i].Value, err, map[bool]string{false: " or *InProgressError"}[tc.wait])
				}
			}
			if got-replayed != 1 {
				t.Errorf("%d callers got a fresh value, want 1", got-replayed)
			}
			t.Logf("%d ran fn, %d replayed, %d in progress", got-replayed, replayed, busy)
		})
	}
}

func TestDoReplaysCompleted(t *testing.T) {
	t.Parallel()
	c := setup(t)
	job := client.Job{Namespace: "replay", Key: "order-1"}
	var runs atomic.Int64
	first, err := c.Do(t.Context(), job, counted(&runs, value("receipt-1")))
	if err != nil || first.Replayed || string(first.Value) != "receipt-1" || first.Record.State != client.StateCompleted {
		t.Fatalf("first Do = %+v, %v", first, err)
	}
	again, err := c.Do(t.Context(), job, counted(&runs, value("receipt-2")))
	if err != nil || !again.Replayed || string(again.Value) != "receipt-1" || again.Record.Token != first.Record.Token {
		t.Errorf("second Do = %+v, %v; want the stored receipt-1, replayed", again, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1", n)
	}
}

func TestDoPermanentFailureReplays(t *testing.T) {
	t.Parallel()
	c := setup(t)
	job := client.Job{Namespace: "replay", Key: "order-2"}
	declined := errors.New("card declined")
	_, err := c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) {
		return nil, client.Permanent(fmt.Errorf("charge: %w", declined))
	})
	if !errors.Is(err, declined) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	var runs atomic.Int64
	res, err := c.Do(t.Context(), job, counted(&runs, value("never")))
	var failed *client.JobFailedError
	if !errors.As(err, &failed) || failed.Message != "charge: card declined" || res.Record.State != client.StateFailed {
		t.Errorf("Do after a permanent failure = %+v, %v; want *JobFailedError with the message", res, err)
	}
	if runs.Load() != 0 {
		t.Error("fn ran after a permanent failure")
	}
}

func TestDoRetryableFailureRunsAgain(t *testing.T) {
	t.Parallel()
	c := setup(t)
	job := client.Job{Namespace: "retry", Key: "order-3"}
	var first client.Attempt
	_, err := c.Do(t.Context(), job, func(_ context.Context, a client.Attempt) ([]byte, error) {
		first = a
		return nil, errors.New("gateway timeout")
	})
	if err == nil || err.Error() != "gateway timeout" || first.Takeover || first.Number != 1 {
		t.Fatalf("Do = %v with attempt %+v; want fn's error from a first attempt", err, first)
	}
	if rec := mustLookup(t, c, job); rec.State != client.StateReleased || rec.Error != "gateway timeout" {
		t.Errorf("record after a retryable failure = %v %q, want RELEASED with the error", rec.State, rec.Error)
	}
	var second client.Attempt
	res, err := c.Do(t.Context(), job, func(_ context.Context, a client.Attempt) ([]byte, error) {
		second = a
		return []byte("ok"), nil
	})
	if err != nil || string(res.Value) != "ok" || res.Replayed {
		t.Fatalf("second Do = %+v, %v", res, err)
	}
	if second.Token <= first.Token || !second.Takeover || second.Number != 2 {
		t.Errorf("second attempt %+v after %+v; want a greater token, Number 2, Takeover", second, first)
	}
}

func TestDoPanicReleasesAndRepanics(t *testing.T) {
	t.Parallel()
	c := setup(t)
	job := client.Job{Namespace: "panic", Key: "order-4"}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic value boom", r)
			}
		}()
		_, _ = c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) { panic("boom") })
		t.Error("Do returned after fn panicked")
	}()
	if rec := mustLookup(t, c, job); rec.State != client.StateReleased || rec.Error != "panic: boom" {
		t.Errorf("record after a panic = %v %q, want RELEASED with \"panic: boom\"", rec.State, rec.Error)
	}
	if res, err := c.Do(t.Context(), job, value("ok")); err != nil || res.Record.Attempt != 2 {
		t.Errorf("Do after a panic = %+v, %v; want a second attempt", res, err)
	}
}

// TestDoLeaseLostOnHeartbeat blocks the first worker's heartbeats so that its
// lease runs out and a second worker takes over; once heartbeats flow again,
// the first learns it lost the lease: its context is cancelled and Do
// returns ErrLeaseLost without completing, even though fn returns a value.
func TestDoLeaseLostOnHeartbeat(t *testing.T) {
	t.Parallel()
	var blockBeats atomic.Bool
	blockBeats.Store(true)
	var completes tokenLog
	c := setup(t, completes.interceptor(),
		onMethod(idemv1.IdempotencyService_Heartbeat_FullMethodName, func(ctx context.Context, req any, _ int, handler grpc.UnaryHandler) (any, error) {
			if blockBeats.Load() {
				return nil, errInjected
			}
			return handler(ctx, req)
		}))
	job := client.Job{Namespace: "lease", Key: "order-5", LeaseTTL: time.Second}

	type outcome struct {
		res   client.Result
		err   error
		cause error
	}
	started := make(chan client.Attempt, 1)
	first := make(chan outcome, 1)
	go func() {
		var cause error
		res, err := c.Do(t.Context(), job, func(ctx context.Context, a client.Attempt) ([]byte, error) {
			started <- a
			<-ctx.Done()
			cause = context.Cause(ctx)
			return []byte("late"), nil // ignores the cancellation; Do must still not complete
		})
		first <- outcome{res, err, cause}
	}()
	a1 := <-started

	var a2 client.Attempt
	res, err := c.Do(t.Context(), job, func(_ context.Context, a client.Attempt) ([]byte, error) {
		a2 = a
		blockBeats.Store(false)
		return []byte("second"), nil
	}, client.WithWait(5*time.Second))
	if err != nil || string(res.Value) != "second" {
		t.Fatalf("second Do = %+v, %v", res, err)
	}
	if !a2.Takeover || a2.Token <= a1.Token {
		t.Errorf("second attempt %+v after %+v; want a takeover with a greater token", a2, a1)
	}

	select {
	case o := <-first:
		if !errors.Is(o.err, client.ErrLeaseLost) || errors.Is(o.err, client.ErrCompletionUnknown) {
			t.Errorf("first Do returned %v, want ErrLeaseLost", o.err)
		}
		if !errors.Is(o.cause, client.ErrLeaseLost) {
			t.Errorf("first fn's context was cancelled with %v, want ErrLeaseLost", o.cause)
		}
		if string(o.res.Value) != "late" {
			t.Errorf("first Do's value = %q, want fn's late value", o.res.Value)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first worker never learned that it lost the lease")
	}
	if got := completes.get(); !slices.Equal(got, []int64{a2.Token}) {
		t.Errorf("Complete tokens = %v, want only the second worker's %d", got, a2.Token)
	}
	if rec := mustLookup(t, c, job); rec.State != client.StateCompleted || string(rec.Result) != "second" {
		t.Errorf("record = %v %q, want COMPLETED with the second worker's value", rec.State, rec.Result)
	}
}

// TestDoLeaseLostOnComplete runs the first worker without heartbeats: it
// learns of the takeover from its Complete, which it must not retry.
func TestDoLeaseLostOnComplete(t *testing.T) {
	t.Parallel()
	var completes tokenLog
	c := setup(t, completes.interceptor())
	job := client.Job{Namespace: "lease", Key: "order-6", LeaseTTL: time.Second}

	started := make(chan client.Attempt, 1)
	release := make(chan struct{})
	type outcome struct {
		res client.Result
		err error
	}
	first := make(chan outcome, 1)
	go func() {
		res, err := c.Do(t.Context(), job, func(_ context.Context, a client.Attempt) ([]byte, error) {
			started <- a
			<-release
			return []byte("first"), nil
		}, client.WithoutHeartbeat())
		first <- outcome{res, err}
	}()
	a1 := <-started
	res, err := c.Do(t.Context(), job, value("second"), client.WithWait(5*time.Second))
	if err != nil || string(res.Value) != "second" || res.Record.Token <= a1.Token {
		t.Fatalf("second Do = %+v, %v; want a takeover", res, err)
	}
	close(release)
	o := <-first
	if !errors.Is(o.err, client.ErrLeaseLost) || errors.Is(o.err, client.ErrCompletionUnknown) || string(o.res.Value) != "first" {
		t.Errorf("first Do = %q, %v; want fn's value and ErrLeaseLost (a definite answer, not ErrCompletionUnknown)", o.res.Value, o.err)
	}
	if got := completes.get(); !slices.Equal(got, []int64{res.Record.Token, a1.Token}) {
		t.Errorf("Complete tokens = %v, want the second's %d then the first's %d once", got, res.Record.Token, a1.Token)
	}
}

// TestDoHeartbeatKeepsLease runs fn for longer than its lease: heartbeats
// keep the job from being taken over.
func TestDoHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	c := setup(t)
	// fn outlives its 2 s lease by half; heartbeats every third of it leave
	// over a second of slack for a slow heartbeat on a loaded machine.
	job := client.Job{Namespace: "lease", Key: "order-7", LeaseTTL: 2 * time.Second}
	var intruderErr error
	res, err := c.Do(t.Context(), job, func(ctx context.Context, a client.Attempt) ([]byte, error) {
		time.Sleep(3 * time.Second)
		_, intruderErr = c.Do(ctx, job, value("intruder"))
		return []byte("slow"), ctx.Err()
	})
	if err != nil || string(res.Value) != "slow" || res.Record.Attempt != 1 {
		t.Errorf("Do = %+v, %v; want the slow value on attempt 1", res, err)
	}
	var busy *client.InProgressError
	if !errors.As(intruderErr, &busy) {
		t.Errorf("a Do past the first lease got %v, want *InProgressError", intruderErr)
	}
}

// TestDoStopsAHeartbeatInFlight returns from fn while a heartbeat hangs on
// the server: Do cancels it rather than wait for it, and completes.
func TestDoStopsAHeartbeatInFlight(t *testing.T) {
	t.Parallel()
	beating := make(chan struct{}, 1)
	c := setup(t, onMethod(idemv1.IdempotencyService_Heartbeat_FullMethodName, func(ctx context.Context, _ any, _ int, _ grpc.UnaryHandler) (any, error) {
		select {
		case beating <- struct{}{}:
		default:
		}
		<-ctx.Done() // until the client gives up on it
		return nil, ctx.Err()
	}))
	job := client.Job{Namespace: "lease", Key: "beat-in-flight", LeaseTTL: time.Second}
	start := time.Now()
	res, err := c.Do(t.Context(), job, func(ctx context.Context, _ client.Attempt) ([]byte, error) {
		select {
		case <-beating:
		case <-ctx.Done():
		}
		return []byte("done"), ctx.Err()
	})
	if err != nil || string(res.Value) != "done" || res.Record.State != client.StateCompleted {
		t.Fatalf("Do = %+v, %v; want the value completed", res, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Do took %s: it waited for the hanging heartbeat", took)
	}
}

// TestDoEndsAtTheFirstBeat returns from fn about when the first heartbeat is
// due, a third of the lease, so that Do stops the beats as they start, or
// just before or after: each Do completes its job.
func TestDoEndsAtTheFirstBeat(t *testing.T) {
	t.Parallel()
	c := setup(t)
	const lease = time.Second
	for i := range 8 {
		job := client.Job{Namespace: "lease", Key: fmt.Sprintf("first-beat-%d", i), LeaseTTL: lease}
		res, err := c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) {
			time.Sleep(lease/3 + time.Duration(i-4)*time.Millisecond)
			return []byte("v"), nil
		})
		if err != nil || res.Record.State != client.StateCompleted {
			t.Fatalf("Do %d = %+v, %v; want it completed", i, res, err)
		}
	}
}

func TestDoRetriesTransientErrors(t *testing.T) {
	t.Parallel()
	failFirst := func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
		if n == 1 {
			return nil, errInjected
		}
		return handler(ctx, req)
	}
	var completes tokenLog
	c := setup(t,
		onMethod(idemv1.IdempotencyService_Claim_FullMethodName, failFirst),
		onMethod(idemv1.IdempotencyService_Complete_FullMethodName, failFirst),
		completes.interceptor())
	var runs atomic.Int64
	res, err := c.Do(t.Context(), client.Job{Namespace: "transient", Key: "k"}, counted(&runs, value("v")))
	if err != nil || string(res.Value) != "v" || res.Record.State != client.StateCompleted {
		t.Fatalf("Do = %+v, %v", res, err)
	}
	if runs.Load() != 1 {
		t.Errorf("fn ran %d times, want 1", runs.Load())
	}
	if got := completes.get(); len(got) != 1 {
		t.Errorf("Completes that reached the service: %v, want 1 (after 1 injected failure)", got)
	}
}

// TestDoAmbiguousClaim commits the first Claim and drops its response: the
// retry, with the same claimant, must get the same token.
func TestDoAmbiguousClaim(t *testing.T) {
	t.Parallel()
	var (
		mu        sync.Mutex
		claimants []string
		dropped   atomic.Int64
	)
	c := setup(t, onMethod(idemv1.IdempotencyService_Claim_FullMethodName, func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
		mu.Lock()
		claimants = append(claimants, req.(*idemv1.ClaimRequest).GetClaimant())
		mu.Unlock()
		resp, err := handler(ctx, req)
		if n == 1 && err == nil {
			dropped.Store(resp.(*idemv1.ClaimResponse).GetRecord().GetToken())
			return nil, errInjected
		}
		return resp, err
	}))
	var runs atomic.Int64
	var got client.Attempt
	res, err := c.Do(t.Context(), client.Job{Namespace: "ambiguous", Key: "claim"}, counted(&runs, func(_ context.Context, a client.Attempt) ([]byte, error) {
		got = a
		return []byte("v"), nil
	}))
	if err != nil || string(res.Value) != "v" {
		t.Fatalf("Do = %+v, %v", res, err)
	}
	if runs.Load() != 1 || got.Token != dropped.Load() || got.Number != 1 || got.Takeover {
		t.Errorf("fn ran %d times with %+v; want once with the dropped token %d, attempt 1", runs.Load(), got, dropped.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(claimants) != 2 || claimants[0] != claimants[1] || uuid.Validate(claimants[0]) != nil {
		t.Errorf("claimants = %q, want the same UUID twice", claimants)
	}
}

// TestDoAmbiguousComplete commits the first Complete and drops its response:
// the retry with the same token gets the stored record.
func TestDoAmbiguousComplete(t *testing.T) {
	t.Parallel()
	c := setup(t, onMethod(idemv1.IdempotencyService_Complete_FullMethodName, func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if n == 1 && err == nil {
			return nil, errInjected
		}
		return resp, err
	}))
	res, err := c.Do(t.Context(), client.Job{Namespace: "ambiguous", Key: "complete"}, value("v"))
	if err != nil || string(res.Value) != "v" || res.Record.State != client.StateCompleted {
		t.Errorf("Do = %+v, %v; want success", res, err)
	}
}

// TestDoCompletionUnknown: a Complete that keeps failing transiently is
// retried past the retry policy's MaxAttempts, until the lease runs out, and
// then Do says the completion is unknown.
func TestDoCompletionUnknown(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	c := setup(t, onMethod(idemv1.IdempotencyService_Complete_FullMethodName, func(context.Context, any, int, grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		return nil, errInjected
	}))
	job := client.Job{Namespace: "unknown", Key: "k", LeaseTTL: time.Second}
	claimed := time.Now()
	res, err := c.Do(t.Context(), job, value("charged"))
	var unknown *client.CompletionUnknownError
	if !errors.Is(err, client.ErrCompletionUnknown) || !errors.As(err, &unknown) || string(unknown.Value) != "charged" || string(res.Value) != "charged" {
		t.Fatalf("Do = %+v, %v; want ErrCompletionUnknown carrying fn's value", res, err)
	}
	if n := calls.Load(); n <= int64(fastRetry.MaxAttempts) {
		t.Errorf("Complete was tried %d times; want more than MaxAttempts (%d): the lease bounds it", n, fastRetry.MaxAttempts)
	}
	if took := time.Since(claimed); took < job.LeaseTTL {
		t.Errorf("Do gave up on the Complete %v after the Claim, before the lease of %v ran out", took, job.LeaseTTL)
	}
	if rec := mustLookup(t, c, job); rec.State != client.StateProcessing {
		t.Errorf("record = %v, want PROCESSING", rec.State)
	}
}

// TestDoCompleteRetriesForTheExtendedLease: the heartbeats extend the lease
// that bounds the Complete's retries. The Complete fails until the lease the
// Claim gave has run out, and fn returns after two heartbeats have extended
// it: the retries go on into the extension and the Complete is recorded.
func TestDoCompleteRetriesForTheExtendedLease(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	var claimedAt atomic.Int64 // when the server acquired the job, in Unix nanoseconds
	beats := make(chan struct{}, 16)
	c := setup(t,
		onMethod(idemv1.IdempotencyService_Claim_FullMethodName, func(ctx context.Context, req any, _ int, handler grpc.UnaryHandler) (any, error) {
			claimedAt.CompareAndSwap(0, time.Now().UnixNano())
			return handler(ctx, req)
		}),
		onMethod(idemv1.IdempotencyService_Heartbeat_FullMethodName, func(ctx context.Context, req any, _ int, handler grpc.UnaryHandler) (any, error) {
			resp, err := handler(ctx, req)
			if err == nil {
				beats <- struct{}{}
			}
			return resp, err
		}),
		onMethod(idemv1.IdempotencyService_Complete_FullMethodName, func(ctx context.Context, req any, _ int, handler grpc.UnaryHandler) (any, error) {
			// Half a second past the end of the Claim's lease, by the
			// server's clock, which acquired it after the client sent it.
			if time.Since(time.Unix(0, claimedAt.Load())) < lease+500*time.Millisecond {
				return nil, errInjected
			}
			return handler(ctx, req)
		}))
	job := client.Job{Namespace: "extended", Key: "k", LeaseTTL: lease}
	res, err := c.Do(t.Context(), job, func(ctx context.Context, _ client.Attempt) ([]byte, error) {
		for range 2 {
			select {
			case <-beats:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return []byte("charged"), nil
	})
	if err != nil || res.Record.State != client.StateCompleted {
		t.Fatalf("Do = %+v, %v; want the Complete recorded within the lease the heartbeats extended", res, err)
	}
}

func TestDoWaitGivesUp(t *testing.T) {
	t.Parallel()
	c := setup(t)
	// The holder's lease far outlasts the wait, so giving up is the only way
	// Do can return without running fn.
	job := client.Job{Namespace: "wait", Key: "k", LeaseTTL: time.Minute}
	if _, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: job.Namespace, Key: job.Key, LeaseTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var runs atomic.Int64
	_, err := c.Do(t.Context(), job, counted(&runs, value("v")), client.WithWait(200*time.Millisecond))
	var busy *client.InProgressError
	if !errors.As(err, &busy) || runs.Load() != 0 {
		t.Errorf("Do = %v with %d runs; want *InProgressError and no run", err, runs.Load())
	}
	// The upper bound only has to tell "gave up" from "waited for the lease".
	if waited := time.Since(start); waited < 200*time.Millisecond || waited > 20*time.Second {
		t.Errorf("Do waited %v, want about 200ms", waited)
	}
}

// TestDoCancelledCallerStillRecordsFailure cancels the caller's context while
// fn runs: the failure is still recorded, so the next delivery can run.
func TestDoCancelledCallerStillRecordsFailure(t *testing.T) {
	t.Parallel()
	c := setup(t)
	job := client.Job{Namespace: "cancel", Key: "k"}
	ctx, cancel := context.WithCancel(t.Context())
	_, err := c.Do(ctx, job, func(ctx context.Context, _ client.Attempt) ([]byte, error) {
		cancel()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want context.Canceled", err)
	}
	if rec := mustLookup(t, c, job); rec.State != client.StateReleased {
		t.Errorf("record = %v, want RELEASED", rec.State)
	}
}

func TestDoFingerprintMismatch(t *testing.T) {
	t.Parallel()
	c := setup(t)
	job := client.Job{Namespace: "fp", Key: "k", Fingerprint: client.Fingerprint([]byte(`{"amount":100}`))}
	if _, err := c.Do(t.Context(), job, value("v")); err != nil {
		t.Fatal(err)
	}
	job.Fingerprint = client.Fingerprint([]byte(`{"amount":200}`))
	var runs atomic.Int64
	_, err := c.Do(t.Context(), job, counted(&runs, value("v")))
	if !errors.Is(err, client.ErrFingerprintMismatch) || runs.Load() != 0 {
		t.Fatalf("Do with another fingerprint = %v; want ErrFingerprintMismatch without running fn", err)
	}
	// It reads like the SDK's other errors, not like a raw gRPC status.
	if msg := err.Error(); !strings.HasPrefix(msg, "idem: fingerprint mismatch: ") ||
		!strings.HasSuffix(msg, " (FAILED_PRECONDITION/FINGERPRINT_MISMATCH)") || strings.Contains(msg, "rpc error") {
		t.Errorf("Do with another fingerprint: error text %q; want \"idem: fingerprint mismatch: … (FAILED_PRECONDITION/FINGERPRINT_MISMATCH)\"", msg)
	}
}

func TestDoWithEndedContext(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var runs atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Do(ctx, client.Job{Namespace: "ended", Key: "k"}, counted(&runs, value("v"))); !errors.Is(err, context.Canceled) {
		t.Errorf("Do with a cancelled context = %v, want context.Canceled", err)
	}
	expired, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := c.Do(expired, client.Job{Namespace: "ended", Key: "k"}, counted(&runs, value("v"))); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do with a passed deadline = %v, want context.DeadlineExceeded", err)
	}
	if runs.Load() != 0 {
		t.Error("fn ran with an ended context")
	}
}

// TestDoWaitsOnTheServer: WithWait hands the wait to the server, which
// answers as soon as the holder completes: one Claim, no polling.
func TestDoWaitsOnTheServer(t *testing.T) {
	t.Parallel()
	var waits sync.Map // claimant → the wait its Claims asked for
	var claims atomic.Int64
	c := setup(t, onMethod(idemv1.IdempotencyService_Claim_FullMethodName, func(ctx context.Context, req any, _ int, handler grpc.UnaryHandler) (any, error) {
		r := req.(*idemv1.ClaimRequest)
		if r.GetClaimant() != "holder" {
			claims.Add(1)
			waits.Store(r.GetClaimant(), r.GetWait().AsDuration())
		}
		return handler(ctx, req)
	}))
	job := client.Job{Namespace: "waits", Key: uuid.NewString()}
	held, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: job.Namespace, Key: job.Key, Claimant: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res client.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.Do(t.Context(), job, value("never"), client.WithWait(20*time.Second))
		done <- answer{res, err}
	}()
	for claims.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the Claim is waiting on the server
	if _, err := c.Complete(t.Context(), client.CompleteRequest{Namespace: job.Namespace, Key: job.Key, Token: held.Record.Token, Result: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		if a.err != nil || !a.res.Replayed || string(a.res.Value) != "first" {
			t.Fatalf("Do = %+v, %v; want the replayed value", a.res, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do was not answered after the Complete")
	}
	if n := claims.Load(); n != 1 {
		t.Errorf("Do sent %d Claims, want 1", n)
	}
	waits.Range(func(_, v any) bool {
		if w := v.(time.Duration); w < 19*time.Second || w > 20*time.Second {
			t.Errorf("Claim asked the server to wait %s, want about 20s", w)
		}
		return true
	})
}
