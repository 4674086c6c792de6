package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing. A Store opened with a tracer provider (OpenBackend) makes a span
// for every statement pgx sends on behalf of a traced caller ("postgres
// claim", "postgres complete", …, "postgres SELECT" for the others), a child
// of the caller's span: the RPC's, or, behind store/coalesce, the span of
// the call or batch the statement answers. A statement with no traced
// caller (the sweeper's passes, health checks) makes no span; a Store
// opened without a tracer provider installs no hook at all.

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

// TraceBatchStart implements pgx.BatchTracer: statements sent together (the
// takeovers of a many-row Claim) make one span, as one statement does.
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
	attrs := []attribute.KeyValue{attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", sql)}
	ctx, span := t.tracer.Start(ctx, "postgres "+operation(sql),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
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

// operation names a statement span: the driver's name for one of its
// statements (statementNames), or the statement's first keyword (SELECT,
// UPDATE, …).
func operation(sql string) string {
	sql = strings.TrimSpace(sql)
	for _, one := range strings.Split(sql, ";\n") { // a pgx batch's statements
		if name, ok := statementNames[strings.TrimSpace(one)]; ok {
			return name
		}
	}
	if i := strings.IndexAny(sql, " \t\n("); i > 0 {
		sql = sql[:i]
	}
	return strings.ToUpper(sql)
}

// statementNames are the names of the driver's statements on records, by
// their text without the spaces around it.
var statementNames = trimKeys(map[string]string{
	claimSQL: "claim", claimManySQL: "claim many", takeOverSQL: "takeover", holdSQL: "hold",
	completeOneSQL: "complete", completeManySQL: "complete many",
	failOneSQL: "fail", failManySQL: "fail many",
	heartbeatOneSQL: "heartbeat", heartbeatManySQL: "heartbeat many",
	getSQL: "lookup", getManySQL: "lookup many", resolveSQL: "resolve", deleteSQL: "delete", markWaitedSQL: "mark waited",
})

func trimKeys(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.TrimSpace(k)] = v
	}
	return out
}
