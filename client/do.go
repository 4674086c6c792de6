package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/idemhq/idem/limits"
)

// Job identifies one unit of work and how to hold it.
type Job struct {
	// Namespace is the job type, matching ^[a-z0-9][a-z0-9_.-]{0,63}$.
	Namespace string
	// Key is the idempotency key, chosen once when the job was created.
	Key string
	// Fingerprint is an optional hash of the payload (see Fingerprint and
	// FingerprintJSON): a Claim with the same key and another fingerprint
	// fails with ErrFingerprintMismatch. None by default.
	Fingerprint []byte
	// LeaseTTL is how long the job is held without a heartbeat. Zero means
	// the server's default (5 minutes unless configured otherwise). Do
	// heartbeats every third of it while fn runs.
	LeaseTTL time.Duration
	// Retention is how long the outcome is kept (and replayed) after the job
	// finishes. Zero means the server's default (24 hours unless configured
	// otherwise).
	Retention time.Duration
}

// Attempt describes the acquisition that fn runs under.
type Attempt struct {
	// Token is the fencing token of this acquisition. Pass it to downstream
	// systems that can reject writes from a superseded token.
	Token int64
	// Number is the record's attempt count: 1 for the first acquisition.
	Number int
	// Takeover is Number > 1: an earlier attempt held the job and may have
	// done part of the work before it failed or lost its lease. Check the
	// downstream state before repeating a partial effect.
	Takeover bool

	steps *attemptSteps // for Steps, Step and StepKey; a pointer keeps Attempt comparable
}

// Result is what Do returns.
type Result struct {
	// Value is fn's value, or the stored value when Replayed.
	Value []byte
	// Replayed is true when the job had completed earlier and fn was not
	// called.
	Replayed bool
	// Record is the record after Do's last successful call.
	Record Record
}

// DoOption configures one Do call.
type DoOption func(*doOptions)

type doOptions struct {
	wait        time.Duration
	concurrency int
	noHeartbeat bool // test hook: see export_test.go
}

// WithWait makes Do wait while another worker holds the job, instead of
// returning an *InProgressError at once (the default, which suits queues that
// redeliver). Do waits until the job has COMPLETED (the stored value), FAILED
// (*JobFailedError) or is acquired (fn runs), or until max has passed
// (*InProgressError). The server does the waiting (ClaimRequest.Wait, up to
// MaxWait per Claim) and answers as soon as the holder finishes, on whichever
// replica; when it answers IN_PROGRESS before the wait it was asked for (it
// holds as many waiting Claims as it allows, or it predates server-side
// waits), Do polls with the client's backoff (WithRetry) instead, never later
// than the holder's lease runs out.
func WithWait(max time.Duration) DoOption { return func(o *doOptions) { o.wait = max } }

// Do runs fn at most once per (Namespace, Key) across all workers, and
// records its outcome.
//
// It claims the job under a fresh claimant id (a UUID), reused when a Claim
// that failed transiently is retried, so a Claim whose response was lost
// still acquires. Then, by outcome:
//   - COMPLETED: returns the stored value with Replayed true; fn is not called.
//   - FAILED: returns a *JobFailedError with the stored message; fn is not
//     called.
//   - IN_PROGRESS: returns an *InProgressError (with Result.Record), unless
//     WithWait is given.
//   - UNRESOLVED: returns an *UnresolvedError (with Result.Record); fn is not
//     called.
//   - ACQUIRED: calls fn with a context that is cancelled when the lease is
//     lost, and heartbeats every third of the lease while fn runs.
//
// When fn returns a value, Do records it with Complete and returns it. When
// fn returns an error, Do records a retryable failure, or a permanent one if
// the error is wrapped with Permanent, and returns fn's error itself (when
// the failure cannot be recorded, a *FailureNotRecordedError that carries
// it and the Fail's error); the text it
// records is the error's made storable (bytes that are not UTF-8 and NULs
// become U+FFFD, and it is cut to 4 KiB on a rune boundary), so the failure
// is recorded whatever the text holds. When fn panics, Do records a
// retryable failure and panics again with the same value.
// Complete and Fail record what already happened, so they are not bounded
// by the retry policy's MaxAttempts, nor by ctx once fn has returned: they are
// retried with the same token on transient errors (idemd restarting, its
// database unreachable) until the server confirms them or the lease runs out,
// the lease counted from the last Claim or heartbeat the server answered.
// While the connection is down, a retry goes out as soon as the server is
// back (see RetryPolicy). The first try goes out even after the lease ran
// out, since the server takes it while no other worker has taken the job
// over. Claims and heartbeats are retried as the retry policy says, within
// ctx.
//
// If another worker took the job over (a heartbeat or the Complete answered
// LEASE_LOST), Do returns an error matching ErrLeaseLost, never sends a
// second Complete, and leaves fn's value, if any, in Result.Value: the side
// effect may then have run twice, which is what the fencing token is for.
// If the lease ran out and an operator resolved the record before the
// Complete arrived, Do returns an error matching ErrResolvedByOperator (the
// value was not stored), with fn's value in Result.Value. If the Complete
// cannot be confirmed, Do returns a *CompletionUnknownError
// (errors.Is(err, ErrCompletionUnknown)) carrying fn's value, also in
// Result.Value: the side effect ran, and the caller must know.
func (c *Client) Do(ctx context.Context, job Job, fn func(ctx context.Context, a Attempt) ([]byte, error), opts ...DoOption) (Result, error) {
	var o doOptions
	for _, opt := range opts {
		opt(&o)
	}
	req := ClaimRequest{
		Namespace:   job.Namespace,
		Key:         job.Key,
		Fingerprint: job.Fingerprint,
		LeaseTTL:    job.LeaseTTL,
		Claimant:    uuid.NewString(),
		Retention:   job.Retention,
	}
	var claimSent time.Time // when the last Claim went out: the lease runs from after it
	claim := func(ctx context.Context) (ClaimResult, error) {
		claimSent = time.Now()
		return c.Claim(ctx, req)
	}
	waitUntil := time.Now().Add(o.wait)
	for poll := 0; ; {
		// The server waits for the holder, for what is left of o.wait.
		req.Wait = min(max(time.Until(waitUntil), 0), MaxWait).Truncate(time.Millisecond)
		asked := time.Now()
		res, err := retry(ctx, c, retryLimit{attempts: c.retry.MaxAttempts}, claim)
		var busy *InProgressError
		switch {
		case errors.As(err, &busy):
			remaining := time.Until(waitUntil)
			if remaining <= 0 {
				return Result{Record: res.Record}, err
			}
			if req.Wait > 0 && time.Since(asked) >= req.Wait {
				continue // the server waited all it was asked to: ask again
			}
			// Answered before the wait it was asked for: poll.
			if !sleep(ctx, min(c.retry.delay(poll), remaining, max(busy.RetryAfter, time.Millisecond))) {
				return Result{Record: res.Record}, ctx.Err()
			}
			poll++
		case err != nil && res.Outcome == OutcomeUnresolved:
			return Result{Record: res.Record}, err // *UnresolvedError: fn is not called
		case err != nil:
			return Result{}, err
		case res.Outcome == OutcomeCompleted:
			return Result{Value: res.Record.Result, Replayed: true, Record: res.Record}, nil
		case res.Outcome == OutcomeFailed:
			return Result{Record: res.Record}, &JobFailedError{Message: res.Record.Error, Record: res.Record}
		default: // OutcomeAcquired: Claim returns no other outcome without an error
			return c.run(ctx, job, res.Record, claimSent, fn, o)
		}
	}
}

// run calls fn under the acquired record rec, whose Claim went out at
// claimed, and records its outcome.
func (c *Client) run(ctx context.Context, job Job, rec Record, claimed time.Time, fn func(context.Context, Attempt) ([]byte, error), o doOptions) (Result, error) {
	lease := leaseOf(job, rec)

	fnCtx, cancelFn := context.WithCancelCause(ctx)
	defer cancelFn(nil)
	stopBeats := func() heldLease { return heldLease{until: claimed.Add(lease)} }
	if !o.noHeartbeat {
		stopBeats = c.heartbeat(fnCtx, cancelFn, HeartbeatRequest{Namespace: job.Namespace, Key: job.Key, Token: rec.Token, LeaseTTL: job.LeaseTTL}, lease, claimed.Add(lease))
	}

	value, panicked, fnErr := callFn(fnCtx, fn, newAttempt(c, rec))
	h := stopBeats()

	// Complete and Fail record what already happened, so a caller that gives
	// up now must not skip them: they are retried until the lease runs out,
	// with one last try there. The context only keeps a try that hangs from
	// hanging forever; it gives that last try time to be answered.
	finishCtx, cancelFinish := context.WithDeadline(context.WithoutCancel(ctx), lastTryDeadline(h.until, lease))
	defer cancelFinish()
	untilLeaseEnds := retryLimit{until: h.until}
	fail := func(msg string, retryable bool) (Record, error) {
		return retry(finishCtx, c, untilLeaseEnds, func(ctx context.Context) (Record, error) {
			return c.Fail(ctx, FailRequest{Namespace: job.Namespace, Key: job.Key, Token: rec.Token, Error: storableText(msg, limits.MaxErrorBytes), Retryable: retryable})
		})
	}

	if panicked != nil {
		if h.lost == nil {
			_, _ = fail(fmt.Sprintf("panic: %v", panicked.value), true) // best effort: the panic matters more
		}
		panic(panicked.value)
	}
	if h.lost != nil {
		// A successor may hold the job now; anything we record would be
		// rejected, and fn's error, if any, is most likely the cancellation.
		return Result{Value: value, Record: rec}, h.lost
	}
	if fnErr != nil {
		failed, err := fail(fnErr.Error(), !isPermanent(fnErr))
		if err != nil {
			return Result{Record: rec}, &FailureNotRecordedError{HandlerErr: fnErr, FailErr: err, Record: rec}
		}
		return Result{Record: failed}, fnErr
	}
	done, err := retry(finishCtx, c, untilLeaseEnds, func(ctx context.Context) (Record, error) {
		return c.Complete(ctx, CompleteRequest{Namespace: job.Namespace, Key: job.Key, Token: rec.Token, Result: value})
	})
	switch {
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrResolvedByOperator):
		return Result{Value: value, Record: rec}, err
	case err != nil:
		return Result{Value: value, Record: rec}, &CompletionUnknownError{Value: value, Record: rec, Err: err}
	}
	return Result{Value: value, Record: done}, nil
}

// leaseOf is the lease that job was acquired with, as rec says.
func leaseOf(job Job, rec Record) time.Duration {
	lease := job.LeaseTTL
	if lease <= 0 {
		// The server's default lease, measured on the server's clock.
		lease = rec.LeaseExpiresAt.Sub(rec.UpdatedAt)
	}
	if lease <= 0 {
		lease = limits.DefaultLeaseTTL // neither tells: assume the documented default
	}
	return lease
}

// heldLease is what keepLease knows of the lease when it returns.
type heldLease struct {
	// until is when the lease runs out, by the client's clock: a lease
	// after the last Claim or heartbeat that the server answered was sent.
	until time.Time
	// lost is why the lease was given up, or nil.
	lost error
}

// heartbeat keeps the lease held with req's token, which runs out at until,
// while fn runs under fnCtx: a Heartbeat every third of lease, the first a
// third of lease from now (see keepLease). A lease that is lost cancels fnCtx with the error. stop ends
// the beats, a Heartbeat in flight included, and returns what is known of
// the lease then.
//
// No goroutine runs until the first beat is due: a job that ends within a
// third of its lease, most of them, costs a timer that never fires, where a
// goroutine waiting for it would cost two hand-offs between goroutines.
func (c *Client) heartbeat(fnCtx context.Context, cancelFn context.CancelCauseFunc, req HeartbeatRequest, lease time.Duration, until time.Time) (stop func() heldLease) {
	var (
		mu      sync.Mutex
		stopped bool
		cancel  context.CancelFunc // of the beats' context, once they started
	)
	held := make(chan heldLease, 1)
	beats := time.AfterFunc(lease/3, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			held <- heldLease{until: until}
			return
		}
		var beatCtx context.Context
		beatCtx, cancel = context.WithCancel(fnCtx)
		mu.Unlock()
		h := c.keepLease(beatCtx, req, lease, until)
		if h.lost != nil {
			cancelFn(h.lost)
		}
		held <- h
	})
	return func() heldLease {
		if beats.Stop() {
			return heldLease{until: until} // no beat was due yet
		}
		mu.Lock()
		stopped = true
		if cancel != nil {
			cancel()
		}
		mu.Unlock()
		return <-held
	}
}

// keepLease heartbeats at once and then every third of lease until ctx is
// done, and returns when the lease runs out, starting from until. It returns
// early with the first error that is not transient: the lease was lost, or
// the record changed under the worker. Transient failures are retried and
// then left to the next beat: the lease outlives two missed beats, and a
// lease that ran out is still ours until someone takes it over.
func (c *Client) keepLease(ctx context.Context, req HeartbeatRequest, lease time.Duration, until time.Time) heldLease {
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	for ctx.Err() == nil {
		var sent time.Time
		_, err := retry(ctx, c, retryLimit{attempts: c.retry.MaxAttempts}, func(ctx context.Context) (Record, error) {
			sent = time.Now()
			return c.Heartbeat(ctx, req)
		})
		switch {
		case err == nil:
			until = sent.Add(lease)
		case ctx.Err() == nil && !isTransient(err):
			return heldLease{until: until, lost: err}
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return heldLease{until: until}
}

type panicValue struct{ value any }

// callFn runs fn and turns a panic into a value, so that Do can record the
// failure before panicking again.
func callFn(ctx context.Context, fn func(context.Context, Attempt) ([]byte, error), a Attempt) (value []byte, panicked *panicValue, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked = &panicValue{r}
		}
	}()
	value, err = fn(ctx, a)
	return value, nil, err
}

// storableText returns s as text idem stores, for an error message that
// must be recorded whatever it holds: every byte that is not UTF-8 and every
// NUL (U+0000) becomes U+FFFD, and the text is cut to at most n bytes on a
// rune boundary. Text that is already fine comes back unchanged.
func storableText(s string, n int) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return limits.Clip(s, n)
	}
	// A replacement is never shorter than what it replaces, so the first n
	// bytes of the result come from characters that start in the first n
	// bytes of s: those, and the rest of the last one, are all it needs.
	s = s[:min(len(s), n+utf8.UTFMax)]
	return limits.Clip(strings.Map(func(r rune) rune {
		if r == 0 {
			return utf8.RuneError
		}
		return r // strings.Map makes each byte that is not UTF-8 one U+FFFD
	}, s), n)
}
