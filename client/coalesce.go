package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// WithCoalescing makes the Client gather its concurrent Claims, Completes
// and Fails into BatchClaim, BatchComplete and BatchFail RPCs, so that many
// goroutines sharing one Client cost the server fewer RPCs. It is off by
// default.
//
// There is no timer: a call goes out at once when no batch of its kind is in
// flight, and the calls that arrive while one is go out together in the next
// (up to 500 calls or 4 MiB; a server configured lower has such a batch
// halved). Each caller gets its own answer or error, exactly as the unary call
// would have returned it, and Do retries a coalesced call as it retries a
// unary one. A caller whose context ends stops waiting at once with its
// context's error; a call whose caller left before its batch went out is
// not sent. A batch that fails as a whole (UNAVAILABLE, say) fails every
// call in it with that error. The batch RPC carries the latest deadline of
// its callers, and none when one of them has none.
//
// A batch whose answer is refused for its size on the way back (larger
// than gRPC carries, or than a proxy or a receive limit of your
// WithDialOptions lets through) is halved and sent again, though the
// server did its items: a Complete or Fail sent again is answered as the
// first time, and a Claim without a Claimant is given a fresh UUID as its
// claimant, so that the server answers it sent again ACQUIRED with the same
// token rather than IN_PROGRESS behind itself.
//
// Some calls still go out unary: a Claim with a Wait (a batch answers at
// once), and a call with grpc.CallOptions or outgoing metadata on its
// context, which would otherwise apply to its neighbours' calls too. Against
// a server without the batch RPCs (UNIMPLEMENTED), the Client sends each
// call unary from then on. Interceptors (WithDialOptions) see the batch
// RPCs, not the calls in them.
func WithCoalescing() Option { return func(o *options) { o.coalesce = true } }

// The coalescer's batches stay within the server's default limits, so that
// a server on its defaults takes each one whole.
const (
	coalesceMaxItems = 500
	coalesceMaxBytes = 4<<20 - 64<<10 // room for the envelope
)

// coalescer gathers the concurrent calls of one kind into batch RPCs. Q is
// the unary request message, T the unary call's answer.
type coalescer[Q proto.Message, T any] struct {
	send kind[Q, T]
	// unsupported is set once the server answered a batch UNIMPLEMENTED.
	unsupported atomic.Bool

	mu    sync.Mutex
	busy  bool // a batch of this kind is in flight
	queue []*coalescedCall[Q, T]
}

type coalescedCall[Q, T any] struct {
	ctx  context.Context
	req  Q
	size int
	done chan struct{} // closed when item is set
	item BatchItem[T]
}

func newCoalescer[Q proto.Message, T any](send kind[Q, T]) *coalescer[Q, T] {
	return &coalescer[Q, T]{send: send}
}

// coalescible reports whether a call made with ctx and opts may share a
// batch with others: nothing of it applies to the RPC beyond its request.
func coalescible(ctx context.Context, opts []grpc.CallOption) bool {
	if len(opts) > 0 {
		return false
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	return !ok || md.Len() == 0
}

// do makes one call, in the next batch of its kind, and returns its answer.
func (co *coalescer[Q, T]) do(ctx context.Context, req Q) (T, error) {
	size := proto.Size(req)
	if co.unsupported.Load() || size > coalesceMaxBytes {
		return co.send.one(ctx, req) // a batch of it alone would be refused
	}
	if ctx.Err() != nil {
		var zero T
		return zero, contextError(ctx)
	}
	call := &coalescedCall[Q, T]{ctx: ctx, req: req, size: size, done: make(chan struct{})}
	co.mu.Lock()
	co.queue = append(co.queue, call)
	if !co.busy {
		co.busy = true
		go co.flush()
	}
	co.mu.Unlock()
	select {
	case <-call.done:
		return call.item.Value, call.item.Err
	case <-ctx.Done():
		var zero T
		return zero, contextError(ctx)
	}
}

// contextError is the error a unary call made with ctx returns once ctx has
// ended: CANCELED or DEADLINE_EXCEEDED, matching ctx's error with errors.Is.
func contextError(ctx context.Context) error {
	return decodeError(ctx, status.FromContextError(ctx.Err()).Err())
}

// flush sends the queued calls, one batch at a time, until none are left.
func (co *coalescer[Q, T]) flush() {
	for {
		co.mu.Lock()
		calls := co.take()
		if len(calls) == 0 {
			co.busy = false
			co.mu.Unlock()
			return
		}
		co.mu.Unlock()
		co.run(calls)
	}
}

// take removes the next batch from the queue: the calls whose callers still
// wait, in the order they came, up to the item and byte limits. The caller
// holds co.mu.
func (co *coalescer[Q, T]) take() []*coalescedCall[Q, T] {
	var (
		calls []*coalescedCall[Q, T]
		bytes int
		n     int
	)
	for ; n < len(co.queue); n++ {
		call := co.queue[n]
		if call.ctx.Err() != nil {
			continue // its caller has gone: no one needs its answer
		}
		if len(calls) == coalesceMaxItems || (len(calls) > 0 && bytes+call.size > coalesceMaxBytes) {
			break
		}
		calls = append(calls, call)
		bytes += call.size
	}
	co.queue = append(co.queue[:0:0], co.queue[n:]...)
	return calls
}

// run makes one batch RPC for calls and answers each of them.
func (co *coalescer[Q, T]) run(calls []*coalescedCall[Q, T]) {
	ctx, cancel := batchContext(calls)
	defer cancel()
	reqs := make([]Q, len(calls))
	for i, call := range calls {
		reqs[i] = call.req
	}
	items := sendHalving(ctx, reqs, co.send)
	if len(items) > 0 && status.Code(items[0].Err) == codes.Unimplemented {
		// A server that predates the batch RPCs: answer these calls, and
		// every later one, with the unary RPC.
		co.unsupported.Store(true)
		var wg sync.WaitGroup
		for _, call := range calls {
			wg.Go(func() {
				call.item.Value, call.item.Err = co.send.one(call.ctx, call.req)
				close(call.done)
			})
		}
		wg.Wait()
		return
	}
	for i, call := range calls {
		call.item = items[i]
		close(call.done)
	}
}

// batchContext is the context of one batch RPC: no caller's cancellation
// ends it (the others still wait for their answers), and it has the latest
// deadline of the callers, none when one of them has none, so the server
// sees the time every caller gives it.
func batchContext[Q, T any](calls []*coalescedCall[Q, T]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, call := range calls {
		d, ok := call.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
