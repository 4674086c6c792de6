package coalesce

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
)

// Tracing. With Options.Tracer, every call gets a call span ("store claim",
// "store complete", …), a child of its caller's span (the RPC's), from the
// moment it queues to the moment its answer is back, with
// idem.batch.calls, the number of calls its batch answered. A batch serves
// many callers but can have one parent: a batch of several calls gets a
// span of its own ("store claim batch", …), a child of its first recording
// call span (in primary-key order) that links to the others, which link
// back to it, so every caller's trace leads to the batch it waited for and
// to the inner store's spans under it. A batch of one call runs under its
// call span. A batch with no traced caller makes no span.

// batchCallsAttr is the attribute with the number of calls a batch
// answered.
const batchCallsAttr = attribute.Key("idem.batch.calls")

// batchTrace is what a traced batch tells its calls' spans.
type batchTrace struct {
	calls int               // the calls in the batch, its followers included
	span  trace.SpanContext // the batch's span, when it has one of its own
}

// startCall starts a call span for a call queued in c, a child of ctx's
// span.
func (c *coalescer[P, R]) startCall(ctx context.Context) trace.Span {
	_, span := c.opts.Tracer.Start(ctx, "store "+c.kind, trace.WithAttributes(c.opts.SpanAttributes...))
	return span
}

// traceBatch prepares the context batch runs in, and returns its trace and
// the end of its span. A batch's followers are its callers too: it counts
// them and links to them like the others, also a follower that its
// leader's answer does not settle and that goes in a later batch.
func (c *coalescer[P, R]) traceBatch(ctx context.Context, batch []*pending[P, R]) (context.Context, *batchTrace, func()) {
	bt := &batchTrace{}
	var parent trace.Span
	var links []trace.Link
	add := func(call *pending[P, R]) {
		bt.calls++
		switch {
		case call.span == nil:
		case parent == nil && call.span.IsRecording():
			parent = call.span
		case call.span.SpanContext().IsSampled():
			links = append(links, trace.Link{SpanContext: call.span.SpanContext()})
		}
	}
	for _, call := range batch {
		add(call)
		for _, f := range call.followers {
			add(f)
		}
	}
	switch {
	case parent == nil:
		return ctx, bt, func() {} // no caller is traced: neither is the batch
	case bt.calls == 1:
		return trace.ContextWithSpan(ctx, parent), bt, func() {}
	}
	attrs := append([]attribute.KeyValue{batchCallsAttr.Int(bt.calls)}, c.opts.SpanAttributes...)
	ctx, span := c.opts.Tracer.Start(trace.ContextWithSpan(ctx, parent), "store "+c.kind+" batch",
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	bt.span = span.SpanContext()
	return ctx, bt, func() { span.End() }
}

// endCall ends a call span once its batch has answered it.
func endCall[P, R any](span trace.Span, call *pending[P, R]) {
	if bt := call.batch; bt != nil {
		span.SetAttributes(batchCallsAttr.Int(bt.calls))
		if bt.span.IsValid() {
			span.AddLink(trace.Link{SpanContext: bt.span})
		}
	}
	if errors.Is(call.Err, store.ErrUnavailable) || errors.Is(call.Err, store.ErrContention) {
		span.RecordError(call.Err)
		span.SetStatus(codes.Error, call.Err.Error())
	}
	span.End()
}
