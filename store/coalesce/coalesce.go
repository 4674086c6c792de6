// Package coalesce is a decorator around any store.Store (New) that
// gathers concurrent Claims, Completes, Fails, Heartbeats and step calls
// into the inner store's many-row calls: one round trip, one plan, one
// commit for a whole batch, which a database pays once instead of per call.
// Every other call passes through. It knows no SQL and no store.
//
// There is no timer. A call that finds a free batch slot of its kind runs
// at once, with whatever calls are already on their way in this process
// (drain), alone when there are none; calls that arrive while every slot
// is busy queue, and the first slot to come free takes them all (up to
// MaxRows) into its next batch. The batch size therefore follows the load.
// Calls a batch cannot take (past MaxRows, or a second call of a key it
// holds) start a batch of their own beside it, up to MaxOverflow more.
//
// The rules that keep every guarantee of a call made alone:
//   - A batch holds each key once and is sorted by primary key, so a store
//     that locks its rows in batch order never deadlocks two batches that
//     share keys.
//   - A second Claim of a key already in the batch follows the first: it
//     is answered from the first's answer with store.DecideClaim, as if it
//     ran right after it, or, when it would write, waits for a later batch
//     ahead of the calls that queued after it. A second token call of a key
//     always waits.
//   - Each call gets its own answer, never its neighbours'.
//   - A batch that fails as a whole answers every call in it, followers
//     included, store.ErrUnavailable unless the store named the error: no
//     call's outcome is known.
//   - A batch runs on a context of its own, detached from any one caller's
//     cancellation and bounded by Options.Deadline; a caller whose context
//     ends stops waiting and gets its context's error, and a call whose
//     caller left before its batch was taken is dropped.
package coalesce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
)

// pending is one caller's call as a batch carries it.
type pending[P, R any] struct {
	ID     store.RecordID
	Params P
	// Res and Err are the call's answer, written by runFunc or followFunc.
	Res R
	Err error

	done      chan struct{}
	abandoned atomic.Bool // the caller stopped waiting before the call was sent
	// followers are the calls of the same key that queued with this one and
	// wait for its answer (followFunc).
	followers []*pending[P, R]

	// With tracing on (trace.go): the call's span, and its batch's trace,
	// set before done is closed.
	span  trace.Span
	batch *batchTrace
}

// runFunc sends one batch: calls of distinct keys, sorted by primary key. It
// sets every call's Res or Err and returns nil, or returns the error that
// failed the batch as a whole.
type runFunc[P, R any] func(ctx context.Context, batch []*pending[P, R]) error

// followFunc answers follower, a call of the key that leader holds in the
// batch, from leader's answer (an error too, unless the whole batch
// failed) once leader's batch has ended, and reports whether it did. A
// follower it does not answer goes in a later batch.
type followFunc[P, R any] func(leader, follower *pending[P, R]) bool

// coalescer gathers concurrent calls of one kind into batches. It is safe
// for concurrent use.
type coalescer[P, R any] struct {
	kind   string // claim, complete, …: in spans
	opts   Options
	calls  prometheus.Observer // the calls each batch answered; may be nil
	run    runFunc[P, R]
	follow followFunc[P, R]

	mu       sync.Mutex
	queue    []*pending[P, R]
	inFlight int

	drainFn func() // drain, made once for goDrain
}

// newCoalescer returns a coalescer of kind that sends its batches with run.
// follow may be nil: a second call of a key then always waits for a later
// batch.
func newCoalescer[P, R any](kind string, opts Options, calls prometheus.Observer, run runFunc[P, R], follow followFunc[P, R]) *coalescer[P, R] {
	c := &coalescer[P, R]{kind: kind, opts: opts.withDefaults(), calls: calls, run: run, follow: follow}
	c.drainFn = c.drain
	return c
}

// Do queues one call and waits for its batch's answer, or for ctx.
func (c *coalescer[P, R]) Do(ctx context.Context, id store.RecordID, params P) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	call := &pending[P, R]{ID: id, Params: params, done: make(chan struct{})}
	if c.opts.Tracer != nil {
		call.span = c.startCall(ctx)
	}
	c.mu.Lock()
	c.queue = append(c.queue, call)
	start := c.inFlight < c.opts.MaxInFlight
	if start {
		c.inFlight++
	}
	c.mu.Unlock()
	if start {
		goDrain(c.drainFn)
	}
	select {
	case <-call.done:
		if call.span != nil {
			endCall(call.span, call)
		}
		return call.Res, call.Err
	case <-ctx.Done():
		call.abandoned.Store(true)
		if call.span != nil {
			call.span.SetStatus(codes.Error, ctx.Err().Error())
			call.span.End()
		}
		return zero, ctx.Err()
	}
}

// idleWorkers hands a drain to a goroutine that has run one before and waits
// for the next (worker), of any coalescer in the process.
var idleWorkers = make(chan func())

// goDrain runs drain on an idle worker, or on a new one when none waits.
//
// A drain runs the store's call, whose stack is deep (a database driver, its
// protocol's encoding), and a worker keeps the stack it grew rather than
// growing a new goroutine's again for every batch. Workers never exit: there
// are as many as batches ever ran at once, at most the
// MaxInFlight+MaxOverflow of every coalescer, each an idle goroutine.
func goDrain(drain func()) {
	select {
	case idleWorkers <- drain:
	default:
		go worker(drain)
	}
}

func worker(drain func()) {
	for {
		drain()
		drain = <-idleWorkers
	}
}

// Queued is how many calls wait for a batch.
func (c *coalescer[P, R]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// maxGatherYields bounds how often a slot that was idle yields before its
// first batch (drain).
const maxGatherYields = 4

// drain runs batches while calls are queued, then gives its slot back.
//
// A slot that was idle is started by the call that found it so, and calls
// tend to come in waves: a batch's answers reach their workers together,
// and their next calls arrive together a few microseconds later. Before its
// first batch the slot therefore yields the processor while the queue
// still grows (runtime.Gosched, at most maxGatherYields times), so that the
// handlers already running reach the queue and go in the same batch
// instead of the next. This is not a timer: with nothing else runnable,
// Gosched returns at once and a lone call goes out alone.
func (c *coalescer[P, R]) drain() {
	for n, yields := -1, 0; yields < maxGatherYields; yields++ {
		c.mu.Lock()
		queued := len(c.queue)
		c.mu.Unlock()
		if queued == n {
			break
		}
		n = queued
		runtime.Gosched()
	}
	for {
		c.mu.Lock()
		batch := c.take()
		if len(batch) == 0 {
			c.inFlight--
			c.mu.Unlock()
			return
		}
		// Calls this batch could not take (a key it already holds, or past
		// MaxRows) do not wait for it: they go in a batch of their own
		// beside it.
		spawn := len(c.queue) > 0 && c.inFlight < c.opts.MaxInFlight+c.opts.MaxOverflow
		if spawn {
			c.inFlight++
		}
		c.mu.Unlock()
		if spawn {
			goDrain(c.drainFn)
		}
		c.answer(batch, c.send(batch))
	}
}

// send runs one batch on a context of its own and returns its trace, if
// any.
func (c *coalescer[P, R]) send(batch []*pending[P, R]) *batchTrace {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Deadline)
	defer cancel()
	var st *batchTrace
	if c.opts.Tracer != nil {
		var end func()
		ctx, st, end = c.traceBatch(ctx, batch)
		defer end()
	}
	if err := c.run(ctx, batch); err != nil {
		err = batchFailure(err)
		for _, call := range batch {
			var zero R
			call.Res, call.Err = zero, err
		}
	}
	return st
}

// answer hands a batch's answers to its callers: each call's own, and each
// follower's from its leader's when followFunc gives one. The followers it
// does not answer go back to the head of the queue.
func (c *coalescer[P, R]) answer(batch []*pending[P, R], st *batchTrace) {
	var again []*pending[P, R]
	answered := batch // without followers, the batch answered its calls
	if slices.ContainsFunc(batch, func(call *pending[P, R]) bool { return len(call.followers) > 0 }) {
		answered = make([]*pending[P, R], 0, len(batch))
		for _, call := range batch {
			for _, f := range call.followers {
				switch {
				case errors.Is(call.Err, store.ErrUnavailable):
					// The batch failed as a whole: the follower's
					// call would have gone in it, and sending it again
					// would only wait as long again. Nothing of it was
					// written.
					var zero R
					f.Res, f.Err = zero, call.Err
				case c.follow(call, f):
				default:
					again = append(again, f)
					continue
				}
				answered = append(answered, f)
			}
			call.followers = nil
			answered = append(answered, call)
		}
	}
	for _, call := range answered {
		call.batch = st
	}
	// Each call is counted once, by the batch that answered it,
	// before its caller hears.
	if c.calls != nil {
		c.calls.Observe(float64(len(answered)))
	}
	for _, call := range answered {
		close(call.done)
	}
	if len(again) > 0 {
		// Ahead of the calls that queued after them.
		c.mu.Lock()
		c.queue = append(again, c.queue...)
		c.mu.Unlock()
	}
}

// take removes the next batch from the queue: calls in arrival order, at
// most MaxRows, each key once, without the calls whose callers stopped
// waiting. A repeated key becomes a follower of the batch's call of that key
// when the coalescer has followFunc, and otherwise stays queued, in order, for a
// later batch. It returns the batch sorted by primary key. c.mu is held.
func (c *coalescer[P, R]) take() []*pending[P, R] {
	var batch []*pending[P, R]
	var seen map[store.RecordID]*pending[P, R]
	rest := c.queue[:0]
	for i, call := range c.queue {
		if len(batch) == c.opts.MaxRows {
			rest = append(rest, c.queue[i:]...)
			break
		}
		if call.abandoned.Load() {
			close(call.done)
			continue
		}
		if seen == nil && len(batch) == 1 {
			seen = map[store.RecordID]*pending[P, R]{batch[0].ID: batch[0]}
		}
		if seen != nil {
			if leader, dup := seen[call.ID]; dup {
				if c.follow != nil {
					leader.followers = append(leader.followers, call)
				} else {
					rest = append(rest, call)
				}
				continue
			}
			seen[call.ID] = call
		}
		batch = append(batch, call)
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	slices.SortFunc(batch, func(a, b *pending[P, R]) int { return compareIDs(a.ID, b.ID) })
	return batch
}

// compareIDs orders record ids by their primary key columns, byte-wise: the
// order of every batch. Any fixed total order keeps batches from
// deadlocking; this one is cheap.
func compareIDs(a, b store.RecordID) int {
	if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// batchFailure is what every call of a batch gets when its runFunc failed as a
// whole. Whatever the cause, no call's outcome is known: the errors the
// store named (store.ErrUnavailable, store.ErrContention) stay as they are,
// and anything else, the batch's own deadline included, is
// store.ErrUnavailable.
func batchFailure(err error) error {
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrContention) {
		return err
	}
	return fmt.Errorf("%w: batch: %w", store.ErrUnavailable, err)
}
