package client

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// RetryPolicy is capped exponential backoff with jitter for RPCs that fail
// with a transient error: UNAVAILABLE (the server or its database is
// unreachable, or the record was contended), DEADLINE_EXCEEDED and
// RESOURCE_EXHAUSTED with a google.rpc.RetryInfo (idemd's per-tenant rate
// limit). RESOURCE_EXHAUSTED without one is gRPC refusing a message over its
// size limit, which no retry can fix. Retry n waits a random time between half
// and all of min(BaseDelay·2ⁿ, MaxDelay), and never less than the server's
// RetryInfo delay. While the client has no connection to the server (idemd
// restarting, say), a wait asks for a new connection at once and ends as soon
// as it is made, so the retry goes out when the server is back.
//
// MaxAttempts bounds Do's Claims and heartbeats. It does not bound Do's
// Complete and Fail: they record a side effect that already happened, so Do
// retries them until the server confirms them or the lease they hold runs out
// (see Do).
type RetryPolicy struct {
	// BaseDelay is the delay before the first retry. It defaults to 100ms.
	BaseDelay time.Duration
	// MaxDelay caps each delay. It defaults to 5s.
	MaxDelay time.Duration
	// MaxAttempts is how many times one Claim or Heartbeat is tried in all,
	// the first try included. It defaults to 10: with the default delays,
	// about 11 to 21 s of retrying, enough to ride out a restart of idemd.
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
		p.MaxAttempts = 10
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

// lastTryGrace is the least time the last try of a Complete or Fail, sent
// as its lease ends, has to be answered, however short the lease.
const lastTryGrace = 5 * time.Second

// lastTryDeadline bounds the tries of a Complete or Fail whose lease ends at
// until: one lease (at least lastTryGrace) past it, so that the try sent
// when the lease ends is not cut short.
func lastTryDeadline(until time.Time, lease time.Duration) time.Time {
	return until.Add(max(lease, lastTryGrace))
}

// retryLimit says when retry gives up on an RPC that keeps failing with
// transient errors. Zero fields set no limit.
type retryLimit struct {
	// attempts is how many tries there are in all, the first included.
	attempts int
	// until is when retrying ends: a wait that would outlast it ends at it,
	// with one last try there, and no try starts later. The first try always
	// goes out.
	until time.Time
}

// retry calls call until it succeeds, fails with an error that is not
// transient, reaches lim, or ctx is done; it returns the last result. It
// waits between tries with c's backoff (see pause).
func retry[T any](ctx context.Context, c *Client, lim retryLimit, call func(context.Context) (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := call(ctx)
		if err == nil || !isTransient(err) || (lim.attempts > 0 && attempt >= lim.attempts) {
			return v, err
		}
		d := c.retry.backoff(attempt-1, err)
		if !lim.until.IsZero() {
			left := time.Until(lim.until)
			if left <= 0 {
				return v, err
			}
			d = min(d, left)
		}
		if !c.pause(ctx, d) {
			return v, err
		}
	}
}

// pause waits d before a retry, and reports false if ctx was done first.
// While the channel has no connection, it asks for one at once (rather than
// when the channel's reconnect backoff would) and ends the wait as soon as
// the connection is ready: the server is back, and a retry now reaches it. A
// channel that is connected already waits all of d, for an error the server
// itself sent.
func (c *Client) pause(ctx context.Context, d time.Duration) bool {
	state := c.conn.GetState()
	if state == connectivity.Ready || state == connectivity.Shutdown {
		return sleep(ctx, d)
	}
	c.conn.ResetConnectBackoff() // a channel in its reconnect backoff dials now
	c.conn.Connect()             // an idle one starts to
	waitCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for state != connectivity.Ready {
		if !c.conn.WaitForStateChange(waitCtx, state) {
			return ctx.Err() == nil // d has passed, or ctx is done
		}
		state = c.conn.GetState()
	}
	return true
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
