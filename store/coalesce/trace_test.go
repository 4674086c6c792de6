package coalesce_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
	"github.com/idemhq/idem/store/postgres"
)

// tracedPostgres is a traced Postgres backend behind a gate, and the
// decorator around it with the same tracer provider.
func tracedPostgres(t *testing.T) (*coalesce.Store, *gate, *sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b, err := postgres.OpenBackend(t.Context(), testdb.New(t).URL, tp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	g := newGate(b)
	return coalesce.New(g, coalesce.Options{MaxInFlight: 1, MaxOverflow: -1, Tracer: tp.Tracer("test")}), g, tp, rec
}

// TestTracedBatch: calls that went in one batch each get a call span under
// their caller's span that records the batch's size; the batch's span is a
// child of one of them and links to the others, which link back to it; the
// store's statement is the batch span's child. A Claim that follows
// another of its key in the batch counts and links like the rest.
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
			s, g, tp, rec := tracedPostgres(t)
			const n = 3
			callers := make([]trace.Span, n)
			claims := make([]*store.ClaimParams, n)
			ctxs := make([]context.Context, n)
			for i := range n {
				ctxs[i], callers[i] = tp.Tracer("test").Start(t.Context(), fmt.Sprint("caller ", i))
				claims[i] = claimParams(tc.key(i), "")
			}
			go func() { _, _ = s.RecordClaim(t.Context(), claimParams(g.blocker, "blocker")) }()
			<-g.blocked
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if _, err := s.RecordClaim(ctxs[i], claims[i]); err != nil {
						t.Errorf("claim %d: %v", i, err)
					}
				})
				waitQueued(t, s, i+1)
			}
			close(g.release)
			wg.Wait()
			for _, c := range callers {
				c.End()
			}
			spans := map[string][]sdktrace.ReadOnlySpan{}
			for _, sp := range rec.Ended() {
				if inTraceOf(sp, callers) {
					spans[sp.Name()] = append(spans[sp.Name()], sp)
				}
			}
			calls, batches, stmts := spans["store claim"], spans["store claim batch"], spans["postgres claim many"]
			if len(calls) != n || len(batches) != 1 || len(stmts) != 1 || len(spans) != 3+n {
				t.Fatalf("spans %v; want %d call spans, one batch span, one statement span and the callers'", names(spans), n)
			}
			batch := batches[0]
			if got := intAttribute(batch.Attributes(), "idem.batch.calls"); got != n {
				t.Errorf("the batch span's idem.batch.calls = %d, want %d", got, n)
			}
			if stmts[0].Parent().SpanID() != batch.SpanContext().SpanID() {
				t.Error("the statement span is not the batch span's child")
			}
			parents := 0
			for _, c := range calls {
				if got := intAttribute(c.Attributes(), "idem.batch.calls"); got != n {
					t.Errorf("a call span's idem.batch.calls = %d, want %d", got, n)
				}
				if batch.Parent().SpanID() == c.SpanContext().SpanID() {
					parents++
				} else if !linksTo(batch.Links(), c.SpanContext()) {
					t.Errorf("the batch span does not link to call span %v", c.SpanContext().SpanID())
				}
				if !linksTo(c.Links(), batch.SpanContext()) {
					t.Errorf("call span %v does not link to the batch span", c.SpanContext().SpanID())
				}
			}
			if parents != 1 {
				t.Errorf("the batch span is a child of %d call spans, want 1", parents)
			}
		})
	}
}

// TestTracedLoneCall: a call that runs alone gets a call span under its
// caller's span and the store's statement span under that, with no batch
// span between.
func TestTracedLoneCall(t *testing.T) {
	t.Parallel()
	s, _, tp, rec := tracedPostgres(t)
	ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
	if _, err := s.RecordClaim(ctx, claimParams("lone", "w")); err != nil {
		t.Fatal(err)
	}
	caller.End()
	spans := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		if inTraceOf(sp, []trace.Span{caller}) {
			spans[sp.Name()] = append(spans[sp.Name()], sp)
		}
	}
	call, stmt := spans["store claim"], spans["postgres claim"]
	if len(call) != 1 || len(stmt) != 1 || len(spans) != 3 {
		t.Fatalf("spans %v; want the caller's, one call span and one statement span", names(spans))
	}
	if call[0].Parent().SpanID() != caller.SpanContext().SpanID() || stmt[0].Parent().SpanID() != call[0].SpanContext().SpanID() {
		t.Error("the statement span is not the call span's child, or the call span not the caller's")
	}
	if got := intAttribute(call[0].Attributes(), "idem.batch.calls"); got != 1 {
		t.Errorf("the call span's idem.batch.calls = %d, want 1", got)
	}
}

func waitQueued(t *testing.T, s *coalesce.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.QueuedClaims() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d Claims queued after 10s, want %d", s.QueuedClaims(), n)
		}
	}
}

func names(spans map[string][]sdktrace.ReadOnlySpan) map[string]int {
	out := map[string]int{}
	for name, s := range spans {
		out[name] = len(s)
	}
	return out
}

func intAttribute(attrs []attribute.KeyValue, key string) int64 {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value.AsInt64()
		}
	}
	return -1
}

func inTraceOf(s sdktrace.ReadOnlySpan, callers []trace.Span) bool {
	for _, c := range callers {
		if c.SpanContext().TraceID() == s.SpanContext().TraceID() {
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
