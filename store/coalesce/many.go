package coalesce

import (
	"context"

	"go.opentelemetry.io/otel/codes"

	"github.com/idemhq/idem/store"
)

// DoMany queues the calls (ids[i], params[i]) together and waits for each
// one's answer, or for ctx; it returns the answers in the order of ids.
//
// A caller that holds many calls at once (a batch request) would, calling
// Do from one goroutine per call, start a batch with whichever calls
// reached the queue first, often one alone, and send the rest after it.
// DoMany puts them all in the queue under one lock, so the batch that
// takes them takes up to MaxRows of them, and what is past MaxRows starts a
// batch of its own beside it (the overflow of drain): ceil(n/MaxRows)
// batches for n calls of distinct keys, with whatever else was queued.
// Every rule of Do holds for each call: a repeated key follows or waits for
// a later batch, each call gets its own answer, and a call whose caller
// left before its batch was taken is dropped.
func (c *coalescer[P, R]) DoMany(ctx context.Context, ids []store.RecordID, params []P) ([]R, []error) {
	if len(ids) != len(params) {
		panic("coalesce: DoMany with as many ids as params")
	}
	res, errs := make([]R, len(ids)), make([]error, len(ids))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return res, errs
	}
	calls := make([]*pending[P, R], len(ids))
	for i, id := range ids {
		calls[i] = &pending[P, R]{ID: id, Params: params[i], done: make(chan struct{})}
		if c.opts.Tracer != nil {
			calls[i].span = c.startCall(ctx)
		}
	}
	c.mu.Lock()
	c.queue = append(c.queue, calls...)
	start := c.inFlight < c.opts.MaxInFlight
	if start {
		c.inFlight++
	}
	c.mu.Unlock()
	if start {
		goDrain(c.drainFn)
	}
	for i, call := range calls {
		select {
		case <-call.done:
			if call.span != nil {
				endCall(call.span, call)
			}
			res[i], errs[i] = call.Res, call.Err
		case <-ctx.Done():
			// This call and every one after it that has no answer yet are
			// given up, as Do gives up its one.
			for j := i; j < len(calls); j++ {
				select {
				case <-calls[j].done:
					if calls[j].span != nil {
						endCall(calls[j].span, calls[j])
					}
					res[j], errs[j] = calls[j].Res, calls[j].Err
					continue
				default:
				}
				calls[j].abandoned.Store(true)
				if calls[j].span != nil {
					calls[j].span.SetStatus(codes.Error, ctx.Err().Error())
					calls[j].span.End()
				}
				errs[j] = ctx.Err()
			}
			return res, errs
		}
	}
	return res, errs
}
