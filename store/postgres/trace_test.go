package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// TestOpenBackendWithoutTracingInstallsNothing: without a tracer provider
// the pool has no pgx tracer and the coalescers make no spans, so an
// untraced idemd does no tracing work per call.
func TestOpenBackendWithoutTracingInstallsNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	b, err := postgres.OpenBackend(t.Context(), db.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if pool, calls := b.Traced(); pool || calls {
		t.Fatalf("OpenBackend without a tracer provider: pool tracer %v, call spans %v; want neither", pool, calls)
	}
}

// TestTracedBatch: calls coalesced into one statement each get a call span
// under their caller's span that records the batch's size; the statement's
// span is a child of one of them and links to the others, which link back
// to it. A statement without a traced caller makes no span. A Claim that
// follows another of its key in the batch counts and links like the rest.
func TestTracedBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		key  func(i int) string
	}{
		{"distinct keys", func(i int) string { return fmt.Sprint("traced-", i) }},
		{"a follower", func(i int) string { return fmt.Sprint("traced-follower-", min(i, 1)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testTracedBatch(t, tc.key)
		})
	}
}

func testTracedBatch(t *testing.T, key func(i int) string) {
	db := testdb.New(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b, err := postgres.OpenBackend(t.Context(), db.URL, tp)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if pool, calls := b.Traced(); !pool || !calls {
		t.Fatalf("OpenBackend with a tracer provider: pool tracer %v, call spans %v; want both", pool, calls)
	}
	if err := b.Ping(t.Context()); err != nil { // no caller span: no statement span
		t.Fatal(err)
	}

	const n = 3
	ctxs := make([]context.Context, n)
	callers := make([]trace.Span, n)
	calls := make([]*store.ClaimParams, n)
	for i := range n {
		ctxs[i], callers[i] = tp.Tracer("test").Start(t.Context(), fmt.Sprint("caller ", i))
		calls[i] = claimParams(recordID(key(i)), "")
	}
	// The n Claims queue while the coalescer's one statement slot is busy
	// with an untraced Claim that waits for a row lock, and so go in one
	// statement once it is free.
	tb := &testBundle{ctx: t.Context(), db: db, pool: db.Pool, store: b.Store}
	tx, pid := tb.begin(t)
	blocker := recordID("traced-blocker")
	if _, err := tx.Exec(tb.ctx, insertProcessingSQL, blocker.Tenant, blocker.Namespace, blocker.Key, "other"); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan struct{})
	go func() { defer close(blocked); _, _ = b.RecordClaim(tb.ctx, claimParams(blocker, "blocked")) }()
	tb.waitBlockedBy(t, pid, blocked)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = b.RecordClaim(ctxs[i], calls[i]) })
	}
	waitQueued(t, b.Store, n)
	if err := tx.Rollback(tb.ctx); err != nil {
		t.Fatal(err)
	}
	<-blocked
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		callers[i].End()
	}

	// The blocker's spans are of a trace of their own.
	var callSpans, stmtSpans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if !inCallersTrace(s, callers) {
			continue
		}
		switch s.Name() {
		case "store claim":
			callSpans = append(callSpans, s)
		case "postgres claim":
			stmtSpans = append(stmtSpans, s)
		case "caller 0", "caller 1", "caller 2":
		default:
			t.Errorf("unexpected span %q (parent %v)", s.Name(), s.Parent().SpanID())
		}
	}
	if len(callSpans) != n || len(stmtSpans) != 1 {
		t.Fatalf("%d call spans and %d statement spans, want %d and 1", len(callSpans), len(stmtSpans), n)
	}
	stmt := stmtSpans[0]
	if got := intAttribute(stmt.Attributes(), "idem.batch.calls"); got != n {
		t.Errorf("statement span's idem.batch.calls = %d, want %d", got, n)
	}
	parents := 0
	for _, c := range callSpans {
		if got := intAttribute(c.Attributes(), "idem.batch.calls"); got != n {
			t.Errorf("call span's idem.batch.calls = %d, want %d", got, n)
		}
		if !isCaller(c.Parent(), callers) {
			t.Errorf("call span's parent %v is none of the callers' spans", c.Parent().SpanID())
		}
		if stmt.Parent().SpanID() == c.SpanContext().SpanID() {
			parents++
			if len(c.Links()) != 0 {
				t.Errorf("the statement's parent call span links to %v", c.Links())
			}
			continue
		}
		if !linksTo(c.Links(), stmt.SpanContext()) {
			t.Errorf("call span %v does not link to the statement span", c.SpanContext().SpanID())
		}
		if !linksTo(stmt.Links(), c.SpanContext()) {
			t.Errorf("statement span does not link to call span %v", c.SpanContext().SpanID())
		}
	}
	if parents != 1 {
		t.Errorf("the statement span is a child of %d call spans, want 1", parents)
	}
}

func intAttribute(attrs []attribute.KeyValue, key string) int64 {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value.AsInt64()
		}
	}
	return -1
}

func inCallersTrace(s sdktrace.ReadOnlySpan, callers []trace.Span) bool {
	for _, c := range callers {
		if c.SpanContext().TraceID() == s.SpanContext().TraceID() {
			return true
		}
	}
	return false
}

func isCaller(parent trace.SpanContext, callers []trace.Span) bool {
	for _, c := range callers {
		if c.SpanContext().SpanID() == parent.SpanID() {
			return true
		}
	}
	return false
}

func linksTo(links []sdktrace.Link, sc trace.SpanContext) bool {
	for _, l := range links {
		if l.SpanContext.SpanID() == sc.SpanID() && l.SpanContext.TraceID() == sc.TraceID() {
			return true
		}
	}
	return false
}

// TestTracedLoneClaim: a Claim that runs alone gets a call span under its
// caller's span and one statement span under that, for a new key (the
// insert alone) and for a key the store has seen held (the insert and the
// read sent together, as one pgx batch).
func TestTracedLoneClaim(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b, err := postgres.OpenBackend(t.Context(), db.URL, tp)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, want := range []store.Outcome{store.OutcomeAcquired, store.OutcomeInProgress} {
		ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
		res, err := b.RecordClaim(ctx, claimParams(recordID("traced-lone"), fmt.Sprint("c", i)))
		caller.End()
		if err != nil || res.Outcome != want {
			t.Fatalf("claim %d: %v, %v; want %v", i, res, err, want)
		}
		var callSpan, stmtSpan sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() != caller.SpanContext().TraceID() {
				continue
			}
			switch s.Name() {
			case "store claim":
				callSpan = s
			case "postgres claim":
				stmtSpan = s
			}
		}
		if callSpan == nil || stmtSpan == nil {
			t.Fatalf("claim %d: call span %v, statement span %v; want both", i, callSpan != nil, stmtSpan != nil)
		}
		if callSpan.Parent().SpanID() != caller.SpanContext().SpanID() || stmtSpan.Parent().SpanID() != callSpan.SpanContext().SpanID() {
			t.Errorf("claim %d: the statement span is not the call span's child, or the call span not the caller's", i)
		}
		if got := intAttribute(stmtSpan.Attributes(), "idem.batch.calls"); got != 1 {
			t.Errorf("claim %d: statement span's idem.batch.calls = %d, want 1", i, got)
		}
	}
}

// TestTracedDetachedStatement: a statement run apart from its caller's
// cancellation (a Lookup's read) still gets a span under the caller's.
func TestTracedDetachedStatement(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b, err := postgres.OpenBackend(t.Context(), db.URL, tp)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
	_, err = b.RecordGet(ctx, recordID("traced-get"))
	caller.End()
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RecordGet: %v; want not found", err)
	}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == caller.SpanContext().TraceID() && s.Name() == "postgres SELECT" {
			if s.Parent().SpanID() != caller.SpanContext().SpanID() {
				t.Fatalf("the statement span's parent is %s; want the caller's span %s", s.Parent().SpanID(), caller.SpanContext().SpanID())
			}
			return
		}
	}
	t.Fatal("no statement span in the caller's trace")
}
