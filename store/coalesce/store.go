package coalesce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
)

// The defaults of Options.
const (
	// DefaultMaxInFlight is how many batches of one kind of call run at
	// once unless the options say otherwise.
	DefaultMaxInFlight = 2
	// DefaultMaxRows bounds the calls of one batch unless the options say
	// otherwise.
	DefaultMaxRows = 64
)

// Options are a Store's bounds and hooks. The zero value takes every
// default.
type Options struct {
	// MaxInFlight is how many batches of one kind of call (Claim, Get,
	// Complete, Fail, Heartbeat, Step) run at once; calls that arrive while they all run
	// queue for the next. Fewer gives larger batches and less database work
	// per call, more lets a call wait less behind another batch's commit. It
	// defaults to DefaultMaxInFlight.
	MaxInFlight int
	// MaxRows bounds the calls of one batch. It defaults to DefaultMaxRows.
	MaxRows int
	// MaxOverflow is how many batches may run beyond MaxInFlight for the
	// calls the running ones could not take (past MaxRows, or a second call
	// of a key a batch holds). It defaults to 7; a negative value allows
	// none.
	MaxOverflow int
	// Deadline bounds each batch, which runs detached from its callers'
	// contexts. It defaults to 15 seconds.
	Deadline time.Duration
	// Tracer, when set, makes a span per call and per batch (trace.go), with
	// SpanAttributes on each.
	Tracer         trace.Tracer
	SpanAttributes []attribute.KeyValue
}

// Store is a store.Store that gathers concurrent RecordClaim calls into
// the inner store's RecordClaimMany, and the same for RecordGet,
// RecordComplete, RecordFail, RecordHeartbeat and RecordStep; every other
// call passes through. Reads are a kind of their own, so that they never
// queue behind a batch of writes.
type Store struct {
	store.Store
	claims     *coalescer[*store.ClaimParams, *store.ClaimResult]
	gets       *coalescer[store.RecordID, *store.Record]
	completes  *coalescer[*store.CompleteParams, *store.Record]
	fails      *coalescer[*store.FailParams, *store.Record]
	heartbeats *coalescer[*store.HeartbeatParams, *store.Record]
	steps      *coalescer[*store.StepParams, *store.Step]
	// batchCalls counts the calls each batch answered, by kind.
	batchCalls *prometheus.HistogramVec
}

var _ store.Store = (*Store)(nil)

// New returns a Store that batches the calls it is given into inner's
// many-row operations.
func New(inner store.Store, opts Options) *Store {
	s := &Store{Store: inner, batchCalls: newBatchCalls()}
	observer := func(kind string) prometheus.Observer { return s.batchCalls.WithLabelValues(kind) }
	s.claims = newCoalescer("claim", opts, observer("claim"), batchRun(inner.RecordClaim, inner.RecordClaimMany), followClaim)
	s.gets = newCoalescer("get", opts, observer("get"), batchRun(inner.RecordGet, inner.RecordGetMany), followGet)
	s.completes = newCoalescer("complete", opts, observer("complete"), batchRun(inner.RecordComplete, inner.RecordCompleteMany), nil)
	s.fails = newCoalescer("fail", opts, observer("fail"), batchRun(inner.RecordFail, inner.RecordFailMany), nil)
	s.heartbeats = newCoalescer("heartbeat", opts, observer("heartbeat"), batchRun(inner.RecordHeartbeat, inner.RecordHeartbeatMany), nil)
	s.steps = newCoalescer("step", opts, observer("step"), batchRun(inner.RecordStep, inner.RecordStepMany), nil)
	return s
}

// withDefaults is o with its zero bounds set to their defaults.
func (o Options) withDefaults() Options {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxRows <= 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.MaxOverflow < 0 {
		o.MaxOverflow = 0
	} else if o.MaxOverflow == 0 {
		o.MaxOverflow = 7
	}
	if o.Deadline <= 0 {
		o.Deadline = 15 * time.Second
	}
	return o
}

// newBatchCalls is the histogram of the calls per batch, by kind: how well
// the coalescer batches under the load it sees.
func newBatchCalls() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "idem_db_batch_calls",
		Help:    "Calls answered by one batch of the store's coalescer, by kind (claim, get, complete, fail, heartbeat, step): 1 when calls do not overlap, more under load; Claims of a key already in the batch count with it.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
	}, []string{"kind"})
}

// Collectors are the coalescer's metrics (idem_db_batch_calls).
func (s *Store) Collectors() []prometheus.Collector { return []prometheus.Collector{s.batchCalls} }

// RecordClaim implements store.Store.
func (s *Store) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	return s.claims.Do(ctx, p.RecordID, p)
}

// RecordClaimMany implements store.Store: the calls queue together
// (DoMany), so they fill as few batches as MaxRows allows.
func (s *Store) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	return doMany(ctx, s.claims, ps, func(p *store.ClaimParams) store.RecordID { return p.RecordID })
}

// RecordGet implements store.Store.
func (s *Store) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	return s.gets.Do(ctx, id, id)
}

// RecordGetMany implements store.Store.
func (s *Store) RecordGetMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, []error) {
	return doMany(ctx, s.gets, ids, func(id store.RecordID) store.RecordID { return id })
}

// RecordComplete implements store.Store.
func (s *Store) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	return s.completes.Do(ctx, p.RecordID, p)
}

// RecordCompleteMany implements store.Store.
func (s *Store) RecordCompleteMany(ctx context.Context, ps []*store.CompleteParams) ([]*store.Record, []error) {
	return doMany(ctx, s.completes, ps, func(p *store.CompleteParams) store.RecordID { return p.RecordID })
}

// RecordFail implements store.Store.
func (s *Store) RecordFail(ctx context.Context, p *store.FailParams) (*store.Record, error) {
	return s.fails.Do(ctx, p.RecordID, p)
}

// RecordFailMany implements store.Store.
func (s *Store) RecordFailMany(ctx context.Context, ps []*store.FailParams) ([]*store.Record, []error) {
	return doMany(ctx, s.fails, ps, func(p *store.FailParams) store.RecordID { return p.RecordID })
}

// RecordHeartbeat implements store.Store.
func (s *Store) RecordHeartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.Record, error) {
	return s.heartbeats.Do(ctx, p.RecordID, p)
}

// RecordHeartbeatMany implements store.Store.
func (s *Store) RecordHeartbeatMany(ctx context.Context, ps []*store.HeartbeatParams) ([]*store.Record, []error) {
	return doMany(ctx, s.heartbeats, ps, func(p *store.HeartbeatParams) store.RecordID { return p.RecordID })
}

// RecordStep implements store.Store.
func (s *Store) RecordStep(ctx context.Context, p *store.StepParams) (*store.Step, error) {
	return s.steps.Do(ctx, p.RecordID, p)
}

// RecordStepMany implements store.Store.
func (s *Store) RecordStepMany(ctx context.Context, ps []*store.StepParams) ([]*store.Step, []error) {
	return doMany(ctx, s.steps, ps, func(p *store.StepParams) store.RecordID { return p.RecordID })
}

// doMany queues ps in c together and returns their answers in order.
func doMany[P, R any](ctx context.Context, c *coalescer[P, R], ps []P, idOf func(P) store.RecordID) ([]R, []error) {
	ids := make([]store.RecordID, len(ps))
	for i, p := range ps {
		ids[i] = idOf(p)
	}
	return c.DoMany(ctx, ids, ps)
}

// batchRun is the Run of one kind of call: a batch of one goes to the inner
// store's one-row operation, which costs the database less, and a larger
// one to its many-row operation. Each call keeps its own answer. An error
// of the batch's own context, which is no caller's, is store.ErrUnavailable:
// no call's outcome is known.
func batchRun[P, R any](one func(context.Context, P) (R, error), many func(context.Context, []P) ([]R, []error)) runFunc[P, R] {
	return func(ctx context.Context, batch []*pending[P, R]) error {
		if len(batch) == 1 {
			batch[0].Res, batch[0].Err = one(ctx, batch[0].Params)
			batch[0].Err = ownError(ctx, batch[0].Err)
			return nil
		}
		ps := make([]P, len(batch))
		for i, c := range batch {
			ps[i] = c.Params
		}
		res, errs := many(ctx, ps)
		for i, c := range batch {
			c.Res, c.Err = res[i], ownError(ctx, errs[i])
		}
		return nil
	}
}

// ownError turns an error of the batch's context into store.ErrUnavailable:
// the deadline that passed is the coalescer's, not the caller's.
func ownError(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		// Not wrapped: the caller's own deadline did not pass.
		return fmt.Errorf("%w: the batch did not finish: %v", store.ErrUnavailable, err)
	}
	return err
}

// followClaim answers f, a Claim of the key that leader's batch answered,
// from leader's answer as if f ran right after it, when f's decision on
// that record is an answer (store.ClaimAnswer): a replay, IN_PROGRESS on
// leader's lease, the same claimant's ACQUIRED again. It leaves f to a
// batch of its own (false) when leader got no record (an error), when the
// store gave no clock with it, or when f would write: take the record
// over, make a held record whose lease ran out UNRESOLVED, or keep a
// refused fingerprint on the record's timeline.
//
// The answer is true at a moment within f's call: f was queued before the
// batch began and is answered after it ended. A record leader's call wrote
// is f's from its commit on, which no other write can come between while
// the store holds the row; a record it only read is a snapshot taken after
// f was queued.
func followClaim(leader, f *pending[*store.ClaimParams, *store.ClaimResult]) bool {
	res := leader.Res
	if leader.Err != nil || res == nil || res.Record == nil || res.Now.IsZero() {
		return false
	}
	d := store.DecideClaim(res.Record, f.Params, res.Now)
	if d.Action != store.ClaimAnswer || errors.Is(d.Err, store.ErrFingerprintMismatch) {
		// A refused fingerprint is kept on the record's timeline, which
		// the inner store writes.
		return false
	}
	if d.Answer != nil {
		// A Record of its own (the byte slices it shares with the leader's
		// are never written).
		rec := *res.Record
		d.Answer.Record = &rec
	}
	f.Res, f.Err = d.Answer, d.Err
	return true
}

// followGet answers f, a read of the record leader's batch read, with
// leader's answer: the read began after f was queued and ended before f is
// answered, so it is true at a moment within f's call.
func followGet(leader, f *pending[store.RecordID, *store.Record]) bool {
	if errors.Is(leader.Err, store.ErrNotFound) {
		f.Err = leader.Err
		return true
	}
	if leader.Err != nil || leader.Res == nil {
		return false
	}
	// A Record of its own (the byte slices it shares are never written).
	rec := *leader.Res
	f.Res = &rec
	return true
}

// NewBackend returns inner with its calls batched as New does: what idemd
// runs on. Its metrics are the inner backend's and the coalescer's.
func NewBackend(inner store.Backend, opts Options) *store.Layered {
	s := New(inner, opts)
	return store.Layer(inner, s, s.Collectors()...)
}
