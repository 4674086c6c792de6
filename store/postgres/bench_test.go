package postgres_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// The benchmarks below time the store's statements on the local Postgres, one
// round trip each, for before/after comparisons with benchstat:
//
//	go test -run '^$' -bench . -count 10 ./store/postgres > old.txt
//	(change something)
//	go test -run '^$' -bench . -count 10 ./store/postgres > new.txt
//	go run golang.org/x/perf/cmd/benchstat@latest old.txt new.txt
//
// The serial ones measure one statement's latency; the parallel one (16
// goroutines per GOMAXPROCS, 32 on two cores, over a pool of 16) measures
// throughput under concurrency, where commits share WAL flushes.

func benchStore(b *testing.B, maxConns int32) (*postgres.Store, context.Context) {
	b.Helper()
	db := testdb.New(b, testdb.MaxConns(maxConns))
	return postgres.New(db.Pool), b.Context()
}

// benchID and benchClaimParams are the benchmarks' own, so that they do not
// move with the tests' helpers.
func benchID(key string) store.RecordID {
	return store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: key}
}

func benchClaimParams(id store.RecordID) *store.ClaimParams {
	return &store.ClaimParams{RecordID: id, LeaseTTL: time.Minute, Retention: time.Hour}
}

func benchClaim(b *testing.B, st *postgres.Store, ctx context.Context, key string) *store.ClaimResult {
	res, err := st.RecordClaim(ctx, benchClaimParams(benchID(key)))
	if err != nil {
		b.Fatalf("RecordClaim %s: %v", key, err)
	}
	return res
}

var benchResult = []byte(`{"charge":"ch_3PqLnV2eZvKYlo2C1xq0aB7x","status":"succeeded"}`)

// BenchmarkRecordClaim claims a new key each time: an INSERT that commits.
func BenchmarkRecordClaim(b *testing.B) {
	st, ctx := benchStore(b, 4)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if res := benchClaim(b, st, ctx, "new-"+strconv.Itoa(i)); res.Outcome != store.OutcomeAcquired {
			b.Fatalf("outcome %v, want acquired", res.Outcome)
		}
	}
}

// BenchmarkRecordClaimReplay claims a completed key: the statement reads the
// row, writes nothing and answers with the stored result.
func BenchmarkRecordClaimReplay(b *testing.B) {
	st, ctx := benchStore(b, 4)
	held := benchClaim(b, st, ctx, "done").Record
	if _, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: held.RecordID, Token: held.Token, Result: benchResult}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if res := benchClaim(b, st, ctx, "done"); res.Outcome != store.OutcomeCompleted {
			b.Fatalf("outcome %v, want completed", res.Outcome)
		}
	}
}

// BenchmarkRecordClaimInProgress claims a key another worker holds.
func BenchmarkRecordClaimInProgress(b *testing.B) {
	st, ctx := benchStore(b, 4)
	benchClaim(b, st, ctx, "held")
	b.ReportAllocs()
	for b.Loop() {
		if res := benchClaim(b, st, ctx, "held"); res.Outcome != store.OutcomeInProgress {
			b.Fatalf("outcome %v, want in_progress", res.Outcome)
		}
	}
}

// BenchmarkRecordComplete completes a held key each time: an UPDATE that
// commits. The keys are claimed before the timer starts.
func BenchmarkRecordComplete(b *testing.B) {
	st, ctx := benchStore(b, 4)
	var tokens []int64
	for i := range b.N {
		tokens = append(tokens, benchClaim(b, st, ctx, "k-"+strconv.Itoa(i)).Record.Token)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		_, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: benchID("k-" + strconv.Itoa(i)), Token: tokens[i], Result: benchResult})
		if err != nil {
			b.Fatalf("RecordComplete: %v", err)
		}
	}
}

// BenchmarkClaimCompleteParallel is a job (Claim a new key, then Complete
// it) from 16 goroutines per GOMAXPROCS over a pool of 16: throughput with
// group commit.
func BenchmarkClaimCompleteParallel(b *testing.B) {
	st, ctx := benchStore(b, 16)
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := benchID("p-" + strconv.FormatInt(n.Add(1), 10))
			res, err := st.RecordClaim(ctx, benchClaimParams(id))
			if err != nil {
				b.Errorf("RecordClaim: %v", err)
				return
			}
			_, err = st.RecordComplete(ctx, &store.CompleteParams{RecordID: id, Token: res.Record.Token, Result: benchResult})
			if err != nil {
				b.Errorf("RecordComplete: %v", err)
				return
			}
		}
	})
}
