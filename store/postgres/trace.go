package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store/coalesce"
)

// Tracing. A Store opened with a tracer provider (OpenBackend) makes spans of
// two kinds; one opened without makes none and installs no hook at all.
//
//   - A call span ("store claim", "store complete", …) for every call that
//     goes through a coalescer, made by the coalescer (store/coalesce).
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

// queryTracer is the pool's pgx.QueryTracer: one span per statement that a
// traced caller's context reaches.
type queryTracer struct {
	tracer trace.Tracer
}

func newQueryTracer(tp trace.TracerProvider) *queryTracer {
	return &queryTracer{tracer: tp.Tracer(tracerName)}
}

// querySpanKey marks a context whose statement queryTracer made a span for,
// so that TraceQueryEnd ends that span and never the caller's.
type querySpanKey struct{}

// TraceQueryStart implements pgx.QueryTracer.
func (t *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return t.start(ctx, data.SQL)
}

// TraceBatchStart implements pgx.BatchTracer: statements sent together
// (claimIfAbsent's, a lone Claim of a key seen with a record) make one
// span, as one statement does.
func (t *queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(data.Batch.QueuedQueries))
	for i, q := range data.Batch.QueuedQueries {
		sqls[i] = strings.TrimSpace(q.SQL)
	}
	return t.start(ctx, strings.Join(sqls, ";\n"))
}

// TraceBatchQuery implements pgx.BatchTracer: the batch's span covers its
// statements.
func (t *queryTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *queryTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	span, ok := ctx.Value(querySpanKey{}).(trace.Span)
	if !ok {
		return
	}
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, data.Err.Error())
	}
	span.End()
}

// start makes the span of a statement (or of statements sent together)
// whose text is sql, when ctx is a traced caller's.
func (t *queryTracer) start(ctx context.Context, sql string) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx // no traced caller: a sweep, a health check, a migration
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", sql))
	opts := make([]trace.SpanStartOption, 0, 3)
	opts = append(opts, trace.WithSpanKind(trace.SpanKindClient))
	st := coalesce.StatementFrom(ctx)
	var name string
	if st != nil {
		name = "postgres " + st.Kind
		attrs = append(attrs, coalesce.BatchCalls.Int(st.Calls))
		opts = append(opts, trace.WithLinks(st.Links...))
	} else {
		name = "postgres " + operation(sql)
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	ctx, span := t.tracer.Start(ctx, name, opts...)
	if st != nil {
		st.Started(span.SpanContext())
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

// tracedCalls is the coalescers' bounds of a traced Store: call spans from
// tp's tracer.
func tracedCalls(tp trace.TracerProvider) coalesce.Config {
	return coalesce.Config{Tracer: tp.Tracer(tracerName),
		SpanAttributes: []attribute.KeyValue{attribute.String("db.system.name", "postgresql")}}
}
