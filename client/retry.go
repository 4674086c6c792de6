package client

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RetryPolicy is capped exponential backoff with jitter for RPCs that fail
// with a transient error: UNAVAILABLE (the server or its database is
// unreachable, or the record was contended), DEADLINE_EXCEEDED and
// RESOURCE_EXHAUSTED with a google.rpc.RetryInfo (idemd's per-tenant rate
// limit). RESOURCE_EXHAUSTED without one is gRPC refusing a message over its
// size limit, which no retry can fix. Retry n waits a random time between half
// and all of min(BaseDelay·2ⁿ, MaxDelay), and never less than the server's
// RetryInfo delay.
type RetryPolicy struct {
	// BaseDelay is the delay before the first retry. It defaults to 100ms.
	BaseDelay time.Duration
	// MaxDelay caps each delay. It defaults to 5s.
	MaxDelay time.Duration
	// MaxAttempts is how many times one RPC is tried in all, the first try
	// included. It defaults to 6 (about 3 s of retrying with the default
	// delays).
	MaxAttempts int
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.BaseDelay <= 0 {
		p.BaseDelay = 100 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 5 * time.Second
	}
	if p.MaxDelay < p.BaseDelay {
		p.MaxDelay = p.BaseDelay
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 6
	}
	return p
}

// delay is the wait before retry n (n = 0 for the first retry). The jitter
// keeps many workers that failed together from retrying together.
func (p RetryPolicy) delay(n int) time.Duration {
	d := p.MaxDelay
	if n < 32 && p.BaseDelay<<n < p.MaxDelay && p.BaseDelay<<n > 0 {
		d = p.BaseDelay << n
	}
	return d/2 + rand.N(d/2+1)
}

// isTransient reports whether err is worth retrying with the same request.
func isTransient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.ResourceExhausted:
		_, ok := retryInfoDelay(err)
		return ok
	}
	return false
}

// retryInfoDelay returns the delay of the google.rpc.RetryInfo in err's
// status, if it has one.
func retryInfoDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// backoff is the wait before retry n after err.
func (p RetryPolicy) backoff(n int, err error) time.Duration {
	d := p.delay(n)
	if hint, ok := retryInfoDelay(err); ok && hint > d {
		d = hint
	}
	return d
}

// retry calls call until it succeeds, fails with a non-transient error, has
// been tried p.MaxAttempts times, or ctx is done; it returns the last result.
func retry[T any](ctx context.Context, p RetryPolicy, call func(context.Context) (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := call(ctx)
		if err == nil || !isTransient(err) || attempt >= p.MaxAttempts || !sleep(ctx, p.backoff(attempt-1, err)) {
			return v, err
		}
	}
}

// sleep waits for d and reports false if ctx was done first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
