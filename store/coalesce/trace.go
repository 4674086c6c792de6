package coalesce

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
)

// Tracing. A Coalescer with a Tracer makes a call span ("store claim",
// "store complete", …) for every call, a child of the caller's span (the
// RPC's). It lasts from the moment the call queues to the moment its answer
// is back, and records idem.batch.calls, the number of calls in the
// statement it went in. A call that has to run again makes one call span per
// statement.
//
// A batch's statement serves many callers but can have one parent: the
// Coalescer puts a Statement in the context it runs the batch with, naming
// the first recording call span of the batch (in primary-key order) as its
// parent and the others as its links. The store's statement tracer makes
// the statement's span from it and tells it back (Statement.Started), and
// each call span then links to the statement's: every caller's trace leads
// to the statement it waited for. A batch with no traced caller has no
// Statement in its context, and its statement makes no span.

// BatchCalls is the attribute with the number of calls a statement carried.
const BatchCalls = attribute.Key("idem.batch.calls")

// Statement is what a traced batch's statement is told about its callers,
// and what it tells back.
type Statement struct {
	// Kind is the coalescer's kind: claim, complete, …
	Kind string
	// Calls is the number of calls in the batch, its followers included.
	Calls int
	// Links are the batch's other call spans.
	Links []trace.Link

	parent trace.Span
	span   trace.SpanContext
}

// Started records the span the store made for the statement, so that the
// batch's call spans link to it.
func (s *Statement) Started(sc trace.SpanContext) { s.span = sc }

type statementKey struct{}

// StatementFrom is the Statement of the batch that ctx runs, or nil when
// ctx is no traced batch's.
func StatementFrom(ctx context.Context) *Statement {
	st, _ := ctx.Value(statementKey{}).(*Statement)
	return st
}

// startCall starts a call span for a call queued in c, a child of ctx's
// span.
func (c *Coalescer[P, R]) startCall(ctx context.Context) trace.Span {
	_, span := c.cfg.Tracer.Start(ctx, "store "+c.cfg.Kind, trace.WithAttributes(c.cfg.SpanAttributes...))
	return span
}

// traceStatement prepares the context a batch runs in: its Statement, with
// the parent and links of the statement's span. A batch's followers are
// its callers too: the statement counts them and links to them like the
// others, also a follower that its leader's answer does not settle and
// that goes in a later statement (whose span it gets; Config.Calls counts
// it there only).
func (c *Coalescer[P, R]) traceStatement(ctx context.Context, batch []*Call[P, R]) (context.Context, *Statement) {
	st := &Statement{Kind: c.cfg.Kind}
	add := func(call *Call[P, R]) {
		st.Calls++
		if call.span == nil {
			return
		}
		if st.parent == nil && call.span.IsRecording() {
			st.parent = call.span
			return
		}
		if sc := call.span.SpanContext(); sc.IsSampled() {
			st.Links = append(st.Links, trace.Link{SpanContext: sc})
		}
	}
	for _, call := range batch {
		add(call)
		for _, f := range call.followers {
			add(f)
		}
	}
	if st.parent == nil {
		return ctx, st // no caller is traced: neither is the statement
	}
	return context.WithValue(trace.ContextWithSpan(ctx, st.parent), statementKey{}, st), st
}

// endCall ends a call span once its batch has answered it.
func endCall[P, R any](span trace.Span, call *Call[P, R]) {
	if st := call.statement; st != nil {
		span.SetAttributes(BatchCalls.Int(st.Calls))
		if st.span.IsValid() && st.parent != span {
			span.AddLink(trace.Link{SpanContext: st.span})
		}
	}
	if errors.Is(call.Err, store.ErrUnavailable) || errors.Is(call.Err, store.ErrContention) {
		span.RecordError(call.Err)
		span.SetStatus(codes.Error, call.Err.Error())
	}
	span.End()
}

// traceBatch starts the span of a batch that answers more than one call,
// a child of one of their call spans that links to the others, which link
// back to it (Statement); the inner store's spans are its children. A
// batch of one call needs none: the call span is its parent already.
func traceBatch(ctx context.Context, opts Options, kind string) (context.Context, func()) {
	st := StatementFrom(ctx)
	if st == nil || st.Calls < 2 {
		return ctx, func() {}
	}
	attrs := append([]attribute.KeyValue{BatchCalls.Int(st.Calls)}, opts.SpanAttributes...)
	ctx, span := opts.Tracer.Start(ctx, "store "+kind+" batch", trace.WithLinks(st.Links...), trace.WithAttributes(attrs...))
	st.Started(span.SpanContext())
	return ctx, func() { span.End() }
}
