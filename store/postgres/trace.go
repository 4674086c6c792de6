package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
)

// Tracing. A Store opened with a tracer provider (OpenBackend) makes spans of
// two kinds; one opened without makes none and installs no hook at all, so
// that its calls cost exactly what they cost before tracing existed.
//
//   - A call span ("store claim", "store complete", …) for every call that
//     goes through a coalescer, a child of the caller's span (the RPC's). It
//     lasts from the moment the call queues to the moment its answer is
//     back, and records idem.batch.calls, the number of calls in the
//     statement it went in. A call that has to run again (a row changed under
//     the statement) makes one call span per statement.
//   - A statement span ("postgres claim", "postgres SELECT", …) for every
//     statement pgx sends on behalf of a traced caller, made by the pool's
//     pgx.QueryTracer. A coalesced statement serves many callers but can
//     have one parent: its span is a child of the first recording call span
//     of its batch (in primary-key order) and links to the others, and each
//     of those links back to it, so every caller's trace leads to the
//     statement it waited for. A statement with no traced caller (the
//     sweeper's passes, health checks) makes no span.

// tracerName is the instrumentation scope of the store's spans.
const tracerName = "github.com/idemhq/idem/store/postgres"

// batchCallsKey is the attribute with the number of calls a statement carried.
const batchCallsKey = attribute.Key("idem.batch.calls")

// queryTracer is the pool's pgx.QueryTracer: one span per statement that a
// traced caller's context reaches.
type queryTracer struct {
	tracer trace.Tracer
}

func newQueryTracer(tp trace.TracerProvider) *queryTracer {
	return &queryTracer{tracer: tp.Tracer(tracerName)}
}

// statementTrace is what a coalescer tells queryTracer about the statement
// it runs for a batch, and what it learns back.
type statementTrace struct {
	kind   string       // the coalescer's kind: claim, complete, …
	calls  int          // calls in the batch
	parent trace.Span   // the call span the statement span is a child of
	links  []trace.Link // the batch's other call spans
	span   trace.SpanContext
}

type statementTraceKey struct{}

// querySpanKey marks a context whose statement queryTracer made a span for,
// so that TraceQueryEnd ends that span and never the caller's.
type querySpanKey struct{}

// TraceQueryStart implements pgx.QueryTracer.
func (t *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx // no traced caller: a sweep, a health check, a migration
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", data.SQL))
	opts := make([]trace.SpanStartOption, 0, 3)
	opts = append(opts, trace.WithSpanKind(trace.SpanKindClient))
	st, _ := ctx.Value(statementTraceKey{}).(*statementTrace)
	var name string
	if st != nil {
		name = "postgres " + st.kind
		attrs = append(attrs, batchCallsKey.Int(st.calls))
		opts = append(opts, trace.WithLinks(st.links...))
	} else {
		name = "postgres " + operation(data.SQL)
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	ctx, span := t.tracer.Start(ctx, name, opts...)
	if st != nil {
		st.span = span.SpanContext()
	}
	return context.WithValue(ctx, querySpanKey{}, span)
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(querySpanKey{}).(trace.Span)
	if !ok {
		return
	}
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, data.Err.Error())
	} else {
		span.SetAttributes(attribute.Int64("db.response.returned_rows", data.CommandTag.RowsAffected()))
	}
	span.End()
}

// operation is a statement's first keyword (SELECT, WITH, UPDATE, …), for
// the name of a statement span.
func operation(sql string) string {
	sql = strings.TrimSpace(sql)
	if i := strings.IndexAny(sql, " \t\n("); i > 0 {
		sql = sql[:i]
	}
	return strings.ToUpper(sql)
}

// startCall starts a call span for a call queued in c, a child of ctx's
// span.
func (c *coalescer[P, R]) startCall(ctx context.Context) trace.Span {
	_, span := c.tracer.Start(ctx, "store "+c.kind, trace.WithAttributes(attribute.String("db.system.name", "postgresql")))
	return span
}

// traceStatement prepares the statement a batch runs in ctx: its span's
// parent, its links and its name, for queryTracer.
// A batch's followers (coalescer.follow) are its callers too: the statement
// counts them and links to them like the others, also a follower that its
// leader's answer does not settle and that goes in a later statement (whose
// span it gets; idem_db_batch_calls counts it there only).
func (c *coalescer[P, R]) traceStatement(ctx context.Context, batch []*pending[P, R]) (context.Context, *statementTrace) {
	st := &statementTrace{kind: c.kind}
	add := func(call *pending[P, R]) {
		st.calls++
		if call.span == nil {
			return
		}
		if st.parent == nil && call.span.IsRecording() {
			st.parent = call.span
			return
		}
		if sc := call.span.SpanContext(); sc.IsSampled() {
			st.links = append(st.links, trace.Link{SpanContext: sc})
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
	return context.WithValue(trace.ContextWithSpan(ctx, st.parent), statementTraceKey{}, st), st
}

// endCall ends a call span once its batch has answered it.
func endCall[P, R any](span trace.Span, call *pending[P, R]) {
	st := call.trace
	if st != nil {
		span.SetAttributes(batchCallsKey.Int(st.calls))
		if st.span.IsValid() && st.parent != span {
			span.AddLink(trace.Link{SpanContext: st.span})
		}
	}
	if errors.Is(call.err, store.ErrUnavailable) || errors.Is(call.err, store.ErrContention) {
		span.RecordError(call.err)
		span.SetStatus(codes.Error, call.err.Error())
	}
	span.End()
}

// traceWith turns on the call spans of s's coalescers.
func (s *Store) traceWith(tp trace.TracerProvider) {
	tracer := tp.Tracer(tracerName)
	if s.claims != nil {
		s.claims.tracer = tracer
	}
	for _, c := range s.tokens {
		if c != nil {
			c.tracer = tracer
		}
	}
}
