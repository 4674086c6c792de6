package postgres_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// TestOpenBackendWithoutTracingInstallsNothing: without a tracer provider
// the pool has no pgx tracer, so an untraced idemd does no tracing work per
// statement.
func TestOpenBackendWithoutTracingInstallsNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	b, err := postgres.OpenBackend(t.Context(), db.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Traced() {
		t.Fatal("OpenBackend without a tracer provider installed a pgx tracer")
	}
}

// TestTracedStatements: each statement a traced caller's call sends is a
// span under the caller's span, named for the statement: a Claim of a new
// key is one, a takeover two, a many-row Claim one; a statement without a
// traced caller makes no span.
func TestTracedStatements(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b, err := postgres.OpenBackend(t.Context(), db.URL, tp)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.Traced() {
		t.Fatal("OpenBackend with a tracer provider installed no pgx tracer")
	}
	if err := b.Ping(t.Context()); err != nil { // no caller span: no statement span
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("an untraced Ping made %d spans", n)
	}

	id := recordID("traced")
	traced := func(what string, call func(ctx context.Context) error, want ...string) {
		t.Helper()
		ctx, caller := tp.Tracer("test").Start(t.Context(), "caller")
		err := call(ctx)
		caller.End()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var got []string
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() != caller.SpanContext().TraceID() || s.Name() == "caller" {
				continue
			}
			if s.Parent().SpanID() != caller.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
				t.Errorf("%s: span %q is not a client span under the caller's", what, s.Name())
			}
			got = append(got, s.Name())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: spans %q, want %q", what, got, want)
		}
	}
	var token int64
	traced("a Claim of a new key", func(ctx context.Context) error {
		res, err := b.RecordClaim(ctx, claimParams(id, "a"))
		if err == nil {
			token = res.Record.Token
		}
		return err
	}, "postgres claim")
	traced("a Fail", func(ctx context.Context) error {
		_, err := b.RecordFail(ctx, &store.FailParams{RecordID: id, Token: token, Error: "again", Retryable: true})
		return err
	}, "postgres fail")
	traced("a takeover", func(ctx context.Context) error {
		_, err := b.RecordClaim(ctx, claimParams(id, "b"))
		return err
	}, "postgres claim", "postgres takeover")
	traced("a many-row Claim", func(ctx context.Context) error {
		_, errs := b.RecordClaimMany(ctx, []*store.ClaimParams{claimParams(recordID("m1"), "a"), claimParams(recordID("m2"), "a")})
		return errs[0]
	}, "postgres claim many")
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
		if s.SpanContext().TraceID() == caller.SpanContext().TraceID() && s.Name() == "postgres lookup" {
			if s.Parent().SpanID() != caller.SpanContext().SpanID() {
				t.Fatalf("the statement span's parent is %s; want the caller's span %s", s.Parent().SpanID(), caller.SpanContext().SpanID())
			}
			return
		}
	}
	t.Fatal("no statement span in the caller's trace")
}
