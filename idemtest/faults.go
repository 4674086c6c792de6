package idemtest

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// faults is what the kit does to one worker's calls, in that worker's
// client connection (a gRPC interceptor): the server sees only what a real
// worker that stalled, died or lost an answer would have sent it.
type faults struct {
	// holdHeartbeats keeps every Heartbeat from the server: it is held
	// until the call's context ends (Do ends it when the handler returns).
	holdHeartbeats bool
	// dieBeforeComplete stands for a worker that died once its handler
	// returned: its Complete never goes out, and Do returns at once.
	dieBeforeComplete bool
	// loseCompleteAnswer lets the first Complete reach the server and, once
	// the server applied it, answers the worker UNAVAILABLE instead.
	loseCompleteAnswer bool

	mu         sync.Mutex
	died       bool
	answerLost bool
}

func (f *faults) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case idemv1.IdempotencyService_Heartbeat_FullMethodName:
		if f.holdHeartbeats {
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
	case idemv1.IdempotencyService_Complete_FullMethodName:
		if f.dieBeforeComplete {
			f.mu.Lock()
			f.died = true
			f.mu.Unlock()
			// Not UNAVAILABLE: Do would retry it. A dead worker sends
			// nothing more.
			return status.Error(codes.Canceled, "idemtest: the worker died before its Complete went out")
		}
		f.mu.Lock()
		lose := f.loseCompleteAnswer && !f.answerLost
		f.mu.Unlock()
		if lose {
			if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
				return err // not applied: the next try is the one whose answer is lost
			}
			f.mu.Lock()
			f.answerLost = true
			f.mu.Unlock()
			return status.Error(codes.Unavailable, "idemtest: the server applied the Complete, and its answer was lost")
		}
	}
	return invoke(ctx, method, req, reply, cc, opts...)
}

// happened reports which faults took effect.
func (f *faults) happened() (died, answerLost bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.died, f.answerLost
}
