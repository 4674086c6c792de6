package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// TestDoWaitsOutARateLimit: RESOURCE_EXHAUSTED with a RetryInfo (idemd's
// rate limit) is retried, no sooner than the server asked.
func TestDoWaitsOutARateLimit(t *testing.T) {
	t.Parallel()
	const hint = 300 * time.Millisecond
	limited, err := status.New(codes.ResourceExhausted, "rate limited").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(hint)})
	if err != nil {
		t.Fatal(err)
	}
	c := setup(t, onMethod(idemv1.IdempotencyService_Claim_FullMethodName,
		func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
			if n == 1 {
				return nil, limited.Err()
			}
			return handler(ctx, req)
		}))
	var runs atomic.Int64
	start := time.Now()
	res, err := c.Do(t.Context(), client.Job{Namespace: "limits", Key: "rate"}, counted(&runs, value("v")))
	if err != nil || string(res.Value) != "v" || runs.Load() != 1 {
		t.Fatalf("Do = %+v, %v after %d runs; want the value from one run", res, err, runs.Load())
	}
	if waited := time.Since(start); waited < hint {
		t.Fatalf("Do retried after %s, sooner than the server's RetryInfo of %s", waited, hint)
	}
}

// TestDoDoesNotRetryAnOversizedMessage: RESOURCE_EXHAUSTED without a
// RetryInfo is gRPC's message size limit, which no retry can fix.
func TestDoDoesNotRetryAnOversizedMessage(t *testing.T) {
	t.Parallel()
	var claims atomic.Int64
	c := setup(t, onMethod(idemv1.IdempotencyService_Claim_FullMethodName,
		func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
			claims.Add(1)
			return nil, status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
		}))
	var runs atomic.Int64
	_, err := c.Do(t.Context(), client.Job{Namespace: "limits", Key: "size"}, counted(&runs, value("v")))
	if status.Code(err) != codes.ResourceExhausted || claims.Load() != 1 || runs.Load() != 0 {
		t.Fatalf("Do = %v after %d Claims and %d runs; want RESOURCE_EXHAUSTED after one Claim, fn not run", err, claims.Load(), runs.Load())
	}
}

// TestDoCompleteTriesOnceMoreAtTheLeaseEnd: when the backoff would outlast
// the lease, Do's Complete waits until the lease ends and tries once more
// there: the server still applies a Complete whose lease ran out while no one
// took the job over, so giving up before that try would leave the effect
// unrecorded.
func TestDoCompleteTriesOnceMoreAtTheLeaseEnd(t *testing.T) {
	t.Parallel()
	srv := testserver.StartWith(t, testserver.Options{
		ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(onMethod(idemv1.IdempotencyService_Complete_FullMethodName,
			func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
				if n == 1 {
					return nil, errInjected
				}
				return handler(ctx, req)
			}))},
	})
	// A first backoff far longer than the 1 s lease: the only retry left is
	// the one at the lease's end.
	c, err := client.New(srv.Addr, client.WithInsecure(), client.WithRetry(client.RetryPolicy{BaseDelay: 30 * time.Second, MaxDelay: 30 * time.Second}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	job := client.Job{Namespace: "limits", Key: "last-try", LeaseTTL: time.Second}
	var runs atomic.Int64
	res, err := c.Do(t.Context(), job, counted(&runs, value("v")))
	if err != nil || string(res.Value) != "v" || runs.Load() != 1 {
		t.Fatalf("Do = %+v, %v after %d runs; want the value recorded by the Complete tried at the lease's end", res, err, runs.Load())
	}
	if rec := mustLookup(t, c, job); rec.State != client.StateCompleted {
		t.Fatalf("record is %v; want COMPLETED", rec.State)
	}
}
