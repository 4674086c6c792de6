package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
)

// WithConcurrency makes DoBatch run at most n of its functions at a time,
// starting them in the order of the jobs; 1 runs them one after another.
// By default DoBatch runs the functions of all the jobs it acquired at
// once. Do ignores it.
func WithConcurrency(n int) DoOption { return func(o *doOptions) { o.concurrency = n } }

// DoBatch is Do for a delivery of several jobs, such as a batch of queue
// messages: it claims them all in one BatchClaim, runs fn for each job it
// acquired (fn's i is the job's index in jobs), keeps their leases alive
// with one BatchHeartbeat for all of them, every third of the shortest lease,
// and records each outcome with one BatchComplete and one BatchFail once
// every fn has returned. It returns one item per job, in the order of jobs,
// each what Do would have returned for that job alone: the value (fresh, or
// stored and Replayed), or the error: *InProgressError, *UnresolvedError,
// *JobFailedError, ErrFingerprintMismatch, fn's error, ErrLeaseLost,
// ErrResolvedByOperator, *CompletionUnknownError, or the Claim's error.
// Two jobs of one key are two Claims in that order: the second finds the
// first's lease, an *InProgressError.
//
// Each item is retried as Do retries its unary call, and a retry carries
// only the items still owed an answer. The Claims are retried while they
// fail transiently, up to the retry policy's MaxAttempts, each job under a
// claimant of its own that its retries reuse. The heartbeats are retried in
// the same way, and a job whose heartbeat answers LEASE_LOST (or any other
// error that is not transient) has its fn's context cancelled with that
// error, as in Do. The Completes and Fails are retried until the server
// confirms them or each job's lease runs out (the lease as the heartbeats
// extended it, and one last try after that), whatever ctx does once fn has
// returned: a restart of idemd while they are due costs no second side
// effect. A batch the server refuses for its size (more items or bytes than
// it takes) is halved and the halves sent in turn.
//
// fn's errors are recorded as in Do: an error wrapped with Permanent fails
// the job for good, any other releases it. When an fn panics, its job is
// recorded as a retryable failure with the others' outcomes, and DoBatch
// then panics with the first panic's value (in the order of jobs).
//
// A BatchClaim answers at once, so DoBatch does not take WithWait. The error
// DoBatch returns is nil unless it could not start at all (WithWait given);
// the jobs' outcomes, failures included, are in the items. No jobs is no RPC
// and no items.
func (c *Client) DoBatch(ctx context.Context, jobs []Job, fn func(ctx context.Context, i int, a Attempt) ([]byte, error), opts ...DoOption) ([]BatchItem[Result], error) {
	var o doOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.wait > 0 {
		return nil, errors.New("idem: DoBatch does not take WithWait: a BatchClaim answers at once; use Do for a job that should wait for its holder")
	}
	out := make([]BatchItem[Result], len(jobs))
	if len(jobs) == 0 {
		return out, nil
	}
	claims := make([]*idemv1.ClaimRequest, len(jobs))
	lims := make([]retryLimit, len(jobs))
	for i, job := range jobs {
		claims[i] = ClaimRequest{
			Namespace:   job.Namespace,
			Key:         job.Key,
			Fingerprint: job.Fingerprint,
			LeaseTTL:    job.LeaseTTL,
			Claimant:    uuid.NewString(),
			Retention:   job.Retention,
		}.proto()
		lims[i] = retryLimit{attempts: c.retry.MaxAttempts}
	}
	answers, sent := retryItems(ctx, c, claims, lims, c.claimKind())
	var acquired []*batchJob
	for i, a := range answers {
		res, err := a.Value, a.Err
		var busy *InProgressError
		switch {
		case errors.As(err, &busy), err != nil && res.Outcome == OutcomeUnresolved:
			out[i] = BatchItem[Result]{Value: Result{Record: res.Record}, Err: err}
		case err != nil:
			out[i].Err = err
		case res.Outcome == OutcomeCompleted:
			out[i].Value = Result{Value: res.Record.Result, Replayed: true, Record: res.Record}
		case res.Outcome == OutcomeFailed:
			out[i] = BatchItem[Result]{Value: Result{Record: res.Record}, Err: &JobFailedError{Message: res.Record.Error, Record: res.Record}}
		default: // OutcomeAcquired
			lease := leaseOf(jobs[i], res.Record)
			acquired = append(acquired, &batchJob{i: i, job: jobs[i], rec: res.Record, lease: lease, until: sent[i].Add(lease)})
		}
	}
	if len(acquired) > 0 {
		c.runBatch(ctx, acquired, fn, o, out)
	}
	return out, nil
}

// batchJob is one job of a DoBatch that was acquired.
type batchJob struct {
	i     int
	job   Job
	rec   Record // as acquired
	lease time.Duration
	ctx   context.Context // fn's
	stop  context.CancelCauseFunc

	// Written by the heartbeats, read once they have stopped.
	until time.Time // when the lease runs out, as keepLease's heldLease.until
	lost  error

	// Written by fn's goroutine, read once it has returned.
	value    []byte
	fnErr    error
	panicked *panicValue
}

// runBatch runs fn for the acquired jobs, keeps their leases, records their
// outcomes and fills in their items of out.
func (c *Client) runBatch(ctx context.Context, jobs []*batchJob, fn func(context.Context, int, Attempt) ([]byte, error), o doOptions, out []BatchItem[Result]) {
	for _, j := range jobs {
		j.ctx, j.stop = context.WithCancelCause(ctx)
		defer j.stop(nil)
	}
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	beating := make(chan struct{})
	if o.noHeartbeat {
		close(beating)
	} else {
		go func() {
			defer close(beating)
			c.keepLeases(beatCtx, jobs)
		}()
	}

	running := len(jobs)
	if o.concurrency > 0 {
		running = min(o.concurrency, len(jobs))
	}
	slots := make(chan struct{}, running)
	var wg sync.WaitGroup
	for _, j := range jobs {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			jobFn := func(ctx context.Context, a Attempt) ([]byte, error) { return fn(ctx, j.i, a) }
			j.value, j.panicked, j.fnErr = callFn(j.ctx, jobFn, newAttempt(c, j.rec))
		})
	}
	wg.Wait()
	stopBeats()
	<-beating

	// As in Do: what already happened is recorded whatever ctx does now,
	// until the last lease has ended and its last try was answered.
	var deadline time.Time
	var completes, fails []*batchJob
	for _, j := range jobs {
		if d := lastTryDeadline(j.until, j.lease); d.After(deadline) {
			deadline = d
		}
		switch {
		case j.lost != nil:
			// A successor may hold the job now: record nothing.
			out[j.i] = BatchItem[Result]{Value: Result{Value: j.value, Record: j.rec}, Err: j.lost}
		case j.panicked != nil || j.fnErr != nil:
			fails = append(fails, j)
		default:
			completes = append(completes, j)
		}
	}
	finishCtx, cancelFinish := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancelFinish()
	var finishing sync.WaitGroup
	if len(completes) > 0 {
		finishing.Go(func() { c.completeBatch(finishCtx, completes, out) })
	}
	if len(fails) > 0 {
		finishing.Go(func() { c.failBatch(finishCtx, fails, out) })
	}
	finishing.Wait()

	for _, j := range jobs {
		if j.panicked != nil {
			panic(j.panicked.value)
		}
	}
}

// keepLeases heartbeats every job that has not lost its lease, in one
// BatchHeartbeat every third of the shortest lease, until ctx is done. It
// records each job's lease as keepLease does, and cancels the fn of a job
// whose heartbeat fails with an error that is not transient.
func (c *Client) keepLeases(ctx context.Context, jobs []*batchJob) {
	shortest := jobs[0].lease
	for _, j := range jobs {
		shortest = min(shortest, j.lease)
	}
	t := time.NewTicker(shortest / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var (
			held []*batchJob
			reqs []*idemv1.HeartbeatRequest
			lims []retryLimit
		)
		for _, j := range jobs {
			if j.lost == nil {
				held = append(held, j)
				reqs = append(reqs, HeartbeatRequest{Namespace: j.job.Namespace, Key: j.job.Key, Token: j.rec.Token, LeaseTTL: j.job.LeaseTTL}.proto())
				lims = append(lims, retryLimit{attempts: c.retry.MaxAttempts})
			}
		}
		if len(held) == 0 {
			return
		}
		items, sent := retryItems(ctx, c, reqs, lims, c.heartbeatKind())
		for k, j := range held {
			switch err := items[k].Err; {
			case err == nil:
				j.until = sent[k].Add(j.lease)
			case ctx.Err() == nil && !isTransient(err):
				j.lost = err
				j.stop(err)
			}
		}
	}
}

// completeBatch records the values of jobs, retrying each until it is
// confirmed or its lease runs out.
func (c *Client) completeBatch(ctx context.Context, jobs []*batchJob, out []BatchItem[Result]) {
	reqs := make([]*idemv1.CompleteRequest, len(jobs))
	lims := make([]retryLimit, len(jobs))
	for k, j := range jobs {
		reqs[k] = CompleteRequest{Namespace: j.job.Namespace, Key: j.job.Key, Token: j.rec.Token, Result: j.value}.proto()
		lims[k] = retryLimit{until: j.until}
	}
	items, _ := retryItems(ctx, c, reqs, lims, c.completeKind())
	for k, j := range jobs {
		switch err := items[k].Err; {
		case err == nil:
			out[j.i].Value = Result{Value: j.value, Record: items[k].Value}
		case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrResolvedByOperator):
			out[j.i] = BatchItem[Result]{Value: Result{Value: j.value, Record: j.rec}, Err: err}
		default:
			out[j.i] = BatchItem[Result]{Value: Result{Value: j.value, Record: j.rec}, Err: &CompletionUnknownError{Value: j.value, Record: j.rec, Err: err}}
		}
	}
}

// failBatch records the failures of jobs (a panic as a retryable one),
// retrying each until it is confirmed or its lease runs out.
func (c *Client) failBatch(ctx context.Context, jobs []*batchJob, out []BatchItem[Result]) {
	reqs := make([]*idemv1.FailRequest, len(jobs))
	lims := make([]retryLimit, len(jobs))
	for k, j := range jobs {
		msg, retryable := "", true
		if j.panicked != nil {
			msg = fmt.Sprintf("panic: %v", j.panicked.value)
		} else {
			msg, retryable = j.fnErr.Error(), !isPermanent(j.fnErr)
		}
		reqs[k] = FailRequest{Namespace: j.job.Namespace, Key: j.job.Key, Token: j.rec.Token, Error: storableText(msg, limits.MaxErrorBytes), Retryable: retryable}.proto()
		lims[k] = retryLimit{until: j.until}
	}
	items, _ := retryItems(ctx, c, reqs, lims, c.failKind())
	for k, j := range jobs {
		if j.panicked != nil {
			continue // DoBatch panics
		}
		if err := items[k].Err; err != nil {
			out[j.i] = BatchItem[Result]{Value: Result{Record: j.rec}, Err: &FailureNotRecordedError{HandlerErr: j.fnErr, FailErr: err, Record: j.rec}}
			continue
		}
		out[j.i] = BatchItem[Result]{Value: Result{Record: items[k].Value}, Err: j.fnErr}
	}
}
