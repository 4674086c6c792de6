package server_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// The benchmarks below time the handlers through a real gRPC server on
// loopback (interceptors, validation, store, Postgres), for before/after
// comparisons with benchstat:
//
//	go test -run '^$' -bench . -count 10 ./server > old.txt
//	(change something)
//	go test -run '^$' -bench . -count 10 ./server > new.txt
//	go run golang.org/x/perf/cmd/benchstat@latest old.txt new.txt
//
// Each runs twice: log=none discards the log records before they are
// formatted; log=debug formats them as idemd does at --log-level debug (text;
// at the default, info, an answered call writes no line) and writes them to
// io.Discard, so the difference is what a line per call costs.

var benchLoggers = []struct {
	name   string
	logger func() *slog.Logger
}{
	{"log=none", func() *slog.Logger { return nil }},
	{"log=debug", func() *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}},
}

// benchNS is the benchmarks' namespace; like benchAcquire, it is their own,
// so that they do not move with the tests' helpers.
const benchNS = "bench"

func benchAcquire(b *testing.B, c idemv1.IdempotencyServiceClient, ctx context.Context, key string) int64 {
	b.Helper()
	resp, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: benchNS, Key: key})
	if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		b.Fatalf("Claim %s: %v %v; want ACQUIRED", key, resp.GetOutcome(), err)
	}
	return resp.GetRecord().GetToken()
}

var benchResult = []byte(`{"charge":"ch_3PqLnV2eZvKYlo2C1xq0aB7x","status":"succeeded"}`)

func benchServer(b *testing.B, logger *slog.Logger, maxConns int32) (idemv1.IdempotencyServiceClient, context.Context) {
	b.Helper()
	ts := testserver.StartWith(b, testserver.Options{Logger: logger, DBOptions: []testdb.Option{testdb.MaxConns(maxConns)}})
	return ts.Client, b.Context()
}

// BenchmarkClaim claims a new key each time.
func BenchmarkClaim(b *testing.B) {
	for _, l := range benchLoggers {
		b.Run(l.name, func(b *testing.B) {
			c, ctx := benchServer(b, l.logger(), 4)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				resp, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: benchNS, Key: "new-" + strconv.Itoa(i)})
				if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
					b.Fatalf("Claim: %v %v; want ACQUIRED", resp.GetOutcome(), err)
				}
			}
		})
	}
}

// BenchmarkClaimReplay claims a completed key: the answer carries the stored
// result and nothing is written.
func BenchmarkClaimReplay(b *testing.B) {
	for _, l := range benchLoggers {
		b.Run(l.name, func(b *testing.B) {
			c, ctx := benchServer(b, l.logger(), 4)
			token := benchAcquire(b, c, ctx, "done")
			if _, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: benchNS, Key: "done", Token: token, Result: benchResult}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: benchNS, Key: "done"})
				if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_COMPLETED {
					b.Fatalf("Claim: %v %v; want COMPLETED", resp.GetOutcome(), err)
				}
			}
		})
	}
}

// BenchmarkComplete completes a held key each time; the keys are claimed
// before the timer starts.
func BenchmarkComplete(b *testing.B) {
	for _, l := range benchLoggers {
		b.Run(l.name, func(b *testing.B) {
			c, ctx := benchServer(b, l.logger(), 4)
			tokens := make([]int64, b.N)
			for i := range b.N {
				tokens[i] = benchAcquire(b, c, ctx, "k-"+strconv.Itoa(i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				_, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: benchNS, Key: "k-" + strconv.Itoa(i), Token: tokens[i], Result: benchResult})
				if err != nil {
					b.Fatalf("Complete: %v", err)
				}
			}
		})
	}
}

// BenchmarkClaimCompleteParallel is a job (Claim a new key, then Complete it)
// from 16 goroutines per GOMAXPROCS (32 on two cores) over one client
// connection and a store pool of 16: the service's throughput.
func BenchmarkClaimCompleteParallel(b *testing.B) {
	for _, l := range benchLoggers {
		b.Run(l.name, func(b *testing.B) {
			c, ctx := benchServer(b, l.logger(), 16)
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := "p-" + strconv.FormatInt(n.Add(1), 10)
					resp, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: benchNS, Key: key})
					if err != nil {
						b.Errorf("Claim: %v", err)
						return
					}
					_, err = c.Complete(ctx, &idemv1.CompleteRequest{Namespace: benchNS, Key: key, Token: resp.GetRecord().GetToken(), Result: benchResult})
					if err != nil {
						b.Errorf("Complete: %v", err)
						return
					}
				}
			})
		})
	}
}
