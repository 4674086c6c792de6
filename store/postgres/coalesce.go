package postgres

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

// Coalescing. Every Claim and Complete is a commit that waits for its WAL
// flush, and on a small machine the CPU a statement costs Postgres (parse,
// plan, executor start-up, commit) is what runs out first, not the disk. So
// concurrent calls of one kind go to Postgres together, as one multi-row
// statement over arrays (unnest): one round trip, one plan, one commit for
// the whole batch.
//
// There is no timer. A call that finds a free statement slot of its kind
// runs at once, with whatever calls are already on their way in this
// process (drain), alone when there are none (as the single-row statement,
// so a lone caller pays nothing for the batching); calls that arrive while every slot of their
// kind is busy queue, and the first slot to come free takes them all (up to
// maxRows) into its next statement. The batch size therefore follows the
// load: one at low concurrency, tens when the database is the bottleneck.
// Calls a batch cannot take (more than maxRows, or a second Complete, Fail
// or Heartbeat for a key it holds) start a statement of their own beside
// it, up to maxOverflow more, so that workers polling one held key are not
// answered one statement after another.
//
// Rules that keep every guarantee of a single-row call:
//   - A batch's rows are sorted by primary key and locked in that order by
//     every batch statement of every kind, so two batches that share keys
//     wait for each other but never deadlock.
//   - A key appears at most once in a statement. A second Claim of a key
//     already in the batch follows the first (followClaim): it is answered
//     from the row the statement wrote or read, as if it ran right after
//     the first, or, when it would write (take over a record the first
//     was refused), goes in a later statement. A second token call of a
//     key goes in another statement (see drain), and Postgres orders the
//     two as it orders any two concurrent calls. So N workers that get
//     one message at once cost one statement, not N.
//   - Each row gets its own answer (a fingerprint mismatch, a lost lease, a
//     row that must be read again), never its neighbours'.
//   - A statement that fails as a whole (connection lost, its time bound
//     ran out) answers every caller in it with store.ErrUnavailable: the
//     outcome is unknown, so no caller gets a definite answer.
//   - The statement runs on a context of its own, detached from any one
//     caller's cancellation and bounded by statementDeadline (detach.go),
//     under the connection's statement_timeout; a caller whose
//     context ends stops waiting and gets its context's error.

// Defaults of the coalescers, measured with idem-bench (docs/BENCHMARKS.md).
const (
	// defaultMaxInFlight is how many statements of one kind run at once.
	// One gives the largest batches and the least CPU per call: at C=32 on
	// two cores, Postgres spent 215 µs per job with one Claim and one
	// Complete statement in flight (about 10 rows each), 375 µs with two
	// (about 5 rows), 538 µs with four (3 rows). A statement that waits for
	// a row lock holds up the calls queued behind it, but row locks are only
	// ever held by other single statements, so that wait is short.
	defaultMaxInFlight = 1
	// defaultMaxRows bounds the rows of one statement. At C=32 batches stay
	// near 10 rows, so the bound is rarely reached; 16 and 64 measured the
	// same.
	defaultMaxRows = 64
	// maxOverflow is how many statements of one kind may run beyond
	// maxInFlight for calls that the running batches could not take.
	maxOverflow = 7
)

// newBatchRows is the histogram of the calls per statement, by kind: how
// well the coalescers batch under the load they see.
func newBatchRows() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "idem_db_batch_calls",
		Help:    "Calls answered by one statement of the coalescer, by kind (claim, complete, fail, heartbeat): 1 when calls do not overlap, more under load; Claims of a key already in the statement count with it.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
	}, []string{"kind"})
}

// pending is one caller's call waiting in a coalescer. The batch runner
// writes res and err, then done is closed.
type pending[P, R any] struct {
	id        store.RecordID
	params    P
	res       R
	err       error
	done      chan struct{}
	abandoned atomic.Bool // the caller stopped waiting before the call was sent
	// followers are the calls of the same key that queued with this one and
	// wait for its answer (coalescer.follow).
	followers []*pending[P, R]

	// With tracing on (trace.go): the call's span, and what its batch's
	// statement was, set before done is closed.
	span  trace.Span
	trace *statementTrace
}

// coalescer gathers concurrent calls of one kind into batches.
type coalescer[P, R any] struct {
	// run executes one batch, sorted by primary key with distinct keys, and
	// sets every call's res or err.
	run         func(ctx context.Context, batch []*pending[P, R])
	maxInFlight int
	maxRows     int
	rows        prometheus.Observer // each statement's number of calls
	kind        string              // claim, complete, fail or heartbeat
	tracer      trace.Tracer        // nil unless the store is traced (trace.go)
	// follow, when set, answers follower, a call of the key that leader
	// holds in the batch, from leader's answer once leader's statement has
	// ended, and reports whether it did; a follower it does not answer goes
	// in a later statement. Without follow, a second call of a key waits
	// for a later statement.
	follow func(leader, follower *pending[P, R]) bool

	mu       sync.Mutex
	queue    []*pending[P, R]
	inFlight int
}

// do queues one call and waits for its batch, or for ctx.
func (c *coalescer[P, R]) do(ctx context.Context, id store.RecordID, params P) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	call := &pending[P, R]{id: id, params: params, done: make(chan struct{})}
	if c.tracer != nil {
		call.span = c.startCall(ctx)
	}
	c.mu.Lock()
	c.queue = append(c.queue, call)
	start := c.inFlight < c.maxInFlight
	if start {
		c.inFlight++
	}
	c.mu.Unlock()
	if start {
		go c.drain()
	}
	select {
	case <-call.done:
		if call.span != nil {
			endCall(call.span, call)
		}
		return call.res, call.err
	case <-ctx.Done():
		call.abandoned.Store(true)
		if call.span != nil {
			call.span.SetStatus(codes.Error, ctx.Err().Error())
			call.span.End()
		}
		return zero, ctx.Err()
	}
}

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
// Gosched returns at once and a lone call goes out alone (after one yield:
// on a saturated machine that yield can cost a scheduler slice, which the
// measurements below include). In idem-bench at C=32 it raised throughput
// by 8% and cut Postgres CPU per job by 7%, and at half the maximum rate it
// keeps the Claim p99 at a third of what it is without.
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
		// maxRows) do not wait for it: they go in a statement of their own
		// beside it, up to maxOverflow more than maxInFlight. Without that,
		// N workers polling one held key would take N statements one after
		// another.
		spawn := len(c.queue) > 0 && c.inFlight < c.maxInFlight+maxOverflow
		if spawn {
			c.inFlight++
		}
		c.mu.Unlock()
		if spawn {
			go c.drain()
		}
		ctx, cancel := context.WithTimeout(context.Background(), statementDeadline)
		var st *statementTrace
		if c.tracer != nil {
			ctx, st = c.traceStatement(ctx, batch)
		}
		c.run(ctx, batch)
		cancel()
		var again []*pending[P, R]
		answered := batch // without followers, the statement answered its batch
		if slices.ContainsFunc(batch, func(call *pending[P, R]) bool { return len(call.followers) > 0 }) {
			answered = make([]*pending[P, R], 0, len(batch))
			for _, call := range batch {
				for _, f := range call.followers {
					switch {
					case errors.Is(call.err, store.ErrUnavailable):
						// The statement failed as a whole (the
						// database is gone, or its time bound ran
						// out): the follower's Claim would have
						// gone in it, and sending it again would
						// only wait as long again. Nothing of it
						// was written.
						var zero R
						f.res, f.err = zero, call.err
					case call.err == nil && c.follow(call, f):
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
			call.trace = st
		}
		// Each call is counted once, by the statement that answered it,
		// before its caller hears.
		c.rows.Observe(float64(len(answered)))
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
}

// take removes the next batch from the queue: calls in arrival order, at
// most maxRows, each key once, without the calls whose callers stopped
// waiting. A repeated key becomes a follower of the batch's call of that key
// when the coalescer has follow, and otherwise stays queued, in order, for a
// later batch. It returns the batch sorted by primary key. c.mu is held.
func (c *coalescer[P, R]) take() []*pending[P, R] {
	var batch []*pending[P, R]
	var seen map[store.RecordID]*pending[P, R]
	rest := c.queue[:0]
	for i, call := range c.queue {
		if len(batch) == c.maxRows {
			rest = append(rest, c.queue[i:]...)
			break
		}
		if call.abandoned.Load() {
			close(call.done)
			continue
		}
		if seen == nil && len(batch) == 1 {
			seen = map[store.RecordID]*pending[P, R]{batch[0].id: batch[0]}
		}
		if seen != nil {
			if leader, dup := seen[call.id]; dup {
				if c.follow != nil {
					leader.followers = append(leader.followers, call)
				} else {
					rest = append(rest, call)
				}
				continue
			}
			seen[call.id] = call
		}
		batch = append(batch, call)
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	slices.SortFunc(batch, func(a, b *pending[P, R]) int { return compareIDs(a.id, b.id) })
	return batch
}

// compareIDs orders record ids by their primary key columns, byte-wise. Any
// fixed total order keeps batches from deadlocking; this one is cheap.
func compareIDs(a, b store.RecordID) int {
	if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// batchError is what every caller of a batch gets when its statement failed
// as a whole. Whatever the cause, no row's outcome is known, so anything that
// is not already one of the store's errors (a lost connection, the batch's own
// time bound) is store.ErrUnavailable.
func batchError(err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return err
	}
	err = interpretError(err)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: batch statement: %w", store.ErrUnavailable, err)
	}
	return err
}
