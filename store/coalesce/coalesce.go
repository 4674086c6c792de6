// Package coalesce gathers concurrent calls of one kind into batches, so
// that a store answers them with one many-row statement: one round trip,
// one plan, one commit for the whole batch. Every Claim and Complete is a
// commit that waits for its WAL flush, and on a small machine the CPU a
// statement costs the database (parse, plan, executor start-up, commit)
// runs out before the disk does; a batch pays it once.
//
// There is no timer. A call that finds a free statement slot of its kind
// runs at once, with whatever calls are already on their way in this
// process (Coalescer.drain), alone when there are none; calls that arrive
// while every slot is busy queue, and the first slot to come free takes
// them all (up to MaxRows) into its next statement. The batch size
// therefore follows the load: one call when calls do not overlap, tens when
// the database is the bottleneck. Calls a batch cannot take (past MaxRows,
// or a second call of a key it holds) start a statement of their own
// beside it, up to MaxOverflow more, so that workers polling one held key
// are not answered one statement after another.
//
// The rules that keep every guarantee of a call made alone:
//   - A batch holds each key once and is sorted by primary key, so a store
//     that locks its rows in batch order never deadlocks two batches that
//     share keys: they wait for each other.
//   - A second call of a key already in the batch either follows the first
//     (Follow: it is answered from the first's row, as if it ran right after
//     it) or waits for a later statement, ahead of the calls that queued
//     after it.
//   - Each call gets its own answer, never its neighbours'.
//   - A batch that fails as a whole answers every call in it, followers
//     included, with the same error, store.ErrUnavailable unless the store
//     named it otherwise: no call's outcome is known.
//   - The statement runs on a context of its own, detached from any one
//     caller's cancellation and bounded by Config.Deadline; a caller whose
//     context ends stops waiting and gets its context's error, and a call
//     whose caller left before its batch was taken is dropped.
//
// The coalescer knows nothing of SQL: a store gives it a Run that sends one
// batch to its driver.
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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
)

// Call is one caller's call as a batch carries it.
type Call[P, R any] struct {
	ID     store.RecordID
	Params P
	// Res and Err are the call's answer, written by Run or Follow.
	Res R
	Err error

	done      chan struct{}
	abandoned atomic.Bool // the caller stopped waiting before the call was sent
	// followers are the calls of the same key that queued with this one and
	// wait for its answer (Follow).
	followers []*Call[P, R]

	// With tracing on (trace.go): the call's span, and what its batch's
	// statement was, set before done is closed.
	span      trace.Span
	statement *Statement
}

// Run sends one batch: calls of distinct keys, sorted by primary key. It
// sets every call's Res or Err and returns nil, or returns the error that
// failed the batch as a whole.
type Run[P, R any] func(ctx context.Context, batch []*Call[P, R]) error

// Follow answers follower, a call of the key that leader holds in the
// batch, from leader's answer once leader's statement has ended, and
// reports whether it did. A follower it does not answer goes in a later
// statement. It is asked only when leader has no error.
type Follow[P, R any] func(leader, follower *Call[P, R]) bool

// Config is a Coalescer's kind and bounds.
type Config struct {
	// Kind names the calls (claim, complete, …) in metrics and spans.
	Kind string
	// MaxInFlight is how many batches of the kind run at once. It defaults
	// to DefaultMaxInFlight.
	MaxInFlight int
	// MaxRows bounds the calls of one statement. It defaults to 64.
	MaxRows int
	// MaxOverflow is how many statements may run beyond MaxInFlight for
	// calls that the running batches could not take. It defaults to 7; a
	// negative value allows none.
	MaxOverflow int
	// Deadline bounds each statement's own context. It defaults to 15
	// seconds.
	Deadline time.Duration
	// Calls, when set, observes the calls each statement answered.
	Calls prometheus.Observer
	// Tracer, when set, makes a span per call and tells the statement its
	// callers (trace.go), and SpanAttributes go on every call span.
	Tracer         trace.Tracer
	SpanAttributes []attribute.KeyValue
}

// Coalescer gathers concurrent calls of one kind into batches. It is safe
// for concurrent use.
type Coalescer[P, R any] struct {
	cfg    Config
	run    Run[P, R]
	follow Follow[P, R]

	mu       sync.Mutex
	queue    []*Call[P, R]
	inFlight int

	drainFn func() // drain, made once for goDrain
}

// NewCoalescer returns a Coalescer that sends its batches with run. follow
// may be nil: a second call of a key then always waits for a later batch.
func NewCoalescer[P, R any](cfg Config, run Run[P, R], follow Follow[P, R]) *Coalescer[P, R] {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxRows <= 0 {
		cfg.MaxRows = 64
	}
	if cfg.MaxOverflow < 0 {
		cfg.MaxOverflow = 0
	} else if cfg.MaxOverflow == 0 {
		cfg.MaxOverflow = 7
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = 15 * time.Second
	}
	c := &Coalescer[P, R]{cfg: cfg, run: run, follow: follow}
	c.drainFn = c.drain
	return c
}

// Do queues one call and waits for its batch's answer, or for ctx.
func (c *Coalescer[P, R]) Do(ctx context.Context, id store.RecordID, params P) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	call := &Call[P, R]{ID: id, Params: params, done: make(chan struct{})}
	if c.cfg.Tracer != nil {
		call.span = c.startCall(ctx)
	}
	c.mu.Lock()
	c.queue = append(c.queue, call)
	start := c.inFlight < c.cfg.MaxInFlight
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
// A drain runs the driver's statement, whose stack is deep (pgx, the
// protocol's encoding); a new goroutine per statement grew its stack again
// every time: at one call in flight, 6.5% of idemd's CPU in runtime.newstack,
// and 0.6% with workers, which keep their grown stacks. Workers never exit:
// there are as many as statements ever ran at once, at most the
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

// Queued is how many calls wait for a statement.
func (c *Coalescer[P, R]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Traced reports whether the coalescer makes call spans.
func (c *Coalescer[P, R]) Traced() bool { return c.cfg.Tracer != nil }

// maxGatherYields bounds how often a slot that was idle yields before its
// first statement (drain).
const maxGatherYields = 4

// drain runs batches while calls are queued, then gives its slot back.
//
// A slot that was idle is started by the call that found it so, and calls
// tend to come in waves: a batch's answers reach their workers together,
// and their next calls arrive together a few microseconds later. Before its
// first statement the slot therefore yields the processor while the queue
// still grows (runtime.Gosched, at most maxGatherYields times), so that the
// handlers already running reach the queue and go in the same statement
// instead of the next. This is not a timer: with nothing else runnable,
// Gosched returns at once and a lone call goes out alone.
func (c *Coalescer[P, R]) drain() {
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
		// MaxRows) do not wait for it: they go in a statement of their own
		// beside it.
		spawn := len(c.queue) > 0 && c.inFlight < c.cfg.MaxInFlight+c.cfg.MaxOverflow
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

// send runs one batch on a context of its own and returns the statement's
// trace, if any.
func (c *Coalescer[P, R]) send(batch []*Call[P, R]) *Statement {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Deadline)
	defer cancel()
	var st *Statement
	if c.cfg.Tracer != nil {
		ctx, st = c.traceStatement(ctx, batch)
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
// follower's from its leader's when Follow gives one. The followers it
// does not answer go back to the head of the queue.
func (c *Coalescer[P, R]) answer(batch []*Call[P, R], st *Statement) {
	var again []*Call[P, R]
	answered := batch // without followers, the statement answered its batch
	if slices.ContainsFunc(batch, func(call *Call[P, R]) bool { return len(call.followers) > 0 }) {
		answered = make([]*Call[P, R], 0, len(batch))
		for _, call := range batch {
			for _, f := range call.followers {
				switch {
				case errors.Is(call.Err, store.ErrUnavailable):
					// The statement failed as a whole: the follower's
					// call would have gone in it, and sending it again
					// would only wait as long again. Nothing of it was
					// written.
					var zero R
					f.Res, f.Err = zero, call.Err
				case call.Err == nil && c.follow(call, f):
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
		call.statement = st
	}
	// Each call is counted once, by the statement that answered it,
	// before its caller hears.
	if c.cfg.Calls != nil {
		c.cfg.Calls.Observe(float64(len(answered)))
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
// when the coalescer has Follow, and otherwise stays queued, in order, for a
// later batch. It returns the batch sorted by primary key. c.mu is held.
func (c *Coalescer[P, R]) take() []*Call[P, R] {
	var batch []*Call[P, R]
	var seen map[store.RecordID]*Call[P, R]
	rest := c.queue[:0]
	for i, call := range c.queue {
		if len(batch) == c.cfg.MaxRows {
			rest = append(rest, c.queue[i:]...)
			break
		}
		if call.abandoned.Load() {
			close(call.done)
			continue
		}
		if seen == nil && len(batch) == 1 {
			seen = map[store.RecordID]*Call[P, R]{batch[0].ID: batch[0]}
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
	slices.SortFunc(batch, func(a, b *Call[P, R]) int { return CompareIDs(a.ID, b.ID) })
	return batch
}

// CompareIDs orders record ids by their primary key columns, byte-wise: the
// order of every batch. Any fixed total order keeps batches from
// deadlocking; this one is cheap.
func CompareIDs(a, b store.RecordID) int {
	if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// Find is the index of the call of a sorted batch that addresses id, or -1.
func Find[P, R any](batch []*Call[P, R], id store.RecordID) int {
	i, ok := slices.BinarySearchFunc(batch, id, func(c *Call[P, R], id store.RecordID) int { return CompareIDs(c.ID, id) })
	if !ok {
		return -1
	}
	return i
}

// batchFailure is what every call of a batch gets when its Run failed as a
// whole. Whatever the cause, no call's outcome is known: the errors the
// store named (store.ErrUnavailable, store.ErrContention) stay as they are,
// and anything else, the batch's own deadline included, is
// store.ErrUnavailable.
func batchFailure(err error) error {
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrContention) {
		return err
	}
	return fmt.Errorf("%w: batch statement: %w", store.ErrUnavailable, err)
}
