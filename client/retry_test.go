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
