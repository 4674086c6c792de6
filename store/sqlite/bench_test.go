package sqlite_test

import (
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
)

// The benchmarks below time the store's writes on a file in a temporary
// directory, for before/after comparisons with benchstat:
//
//	go test -run '^$' -bench . -count 10 ./store/sqlite > old.txt
//	(change something)
//	go test -run '^$' -bench . -count 10 ./store/sqlite > new.txt
//	go run golang.org/x/perf/cmd/benchstat@latest old.txt new.txt
//
// Every commit fsyncs (synchronous=FULL), so the serial ones measure a write
// and its fsync; the parallel ones (16 goroutines per GOMAXPROCS, 32 on two
// cores) measure throughput when concurrent writes share a batch and its
// fsync (group commit).
//
// Each also reports cpu-µs/op, the CPU time of the whole process (user and
// system) per op. On a shared machine the fsyncs make sec/op swing widely
// from run to run; the CPU a write costs the store (its statements, the
// writer's work) moves much less, and it is what bounds the throughput once
// batches share their fsyncs.

func benchStore(b *testing.B) (*sqlite.Store, context.Context) {
	b.Helper()
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "idem.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st, b.Context()
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time used since start per op.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

func benchClaimParams(key string) *store.ClaimParams {
	return &store.ClaimParams{RecordID: store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: key},
		LeaseTTL: time.Minute, Retention: time.Hour}
}

var benchResult = []byte(`{"charge":"ch_3PqLnV2eZvKYlo2C1xq0aB7x","status":"succeeded"}`)

// BenchmarkRecordClaim claims a new key each time: one write and its fsync.
func BenchmarkRecordClaim(b *testing.B) {
	st, ctx := benchStore(b)
	b.ReportAllocs()
	i := 0
	cpu := cpuTime(b)
	for b.Loop() {
		i++
		res, err := st.RecordClaim(ctx, benchClaimParams("new-"+strconv.Itoa(i)))
		if err != nil || res.Outcome != store.OutcomeAcquired {
			b.Fatalf("RecordClaim: %+v, %v", res, err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkClaimParallel claims a new key each time from 16 goroutines per
// GOMAXPROCS.
func BenchmarkClaimParallel(b *testing.B) {
	st, ctx := benchStore(b)
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	cpu := cpuTime(b)
	defer reportCPU(b, cpu)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := st.RecordClaim(ctx, benchClaimParams("p-"+strconv.FormatInt(n.Add(1), 10)))
			if err != nil || res.Outcome != store.OutcomeAcquired {
				b.Errorf("RecordClaim: %+v, %v", res, err)
				return
			}
		}
	})
}

// BenchmarkClaimCompleteParallel is a job (Claim a new key, then Complete
// it) from 16 goroutines per GOMAXPROCS.
func BenchmarkClaimCompleteParallel(b *testing.B) {
	st, ctx := benchStore(b)
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	cpu := cpuTime(b)
	defer reportCPU(b, cpu)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := benchClaimParams("p-" + strconv.FormatInt(n.Add(1), 10))
			res, err := st.RecordClaim(ctx, p)
			if err != nil {
				b.Errorf("RecordClaim: %v", err)
				return
			}
			_, err = st.RecordComplete(ctx, &store.CompleteParams{RecordID: p.RecordID, Token: res.Record.Token, Result: benchResult})
			if err != nil {
				b.Errorf("RecordComplete: %v", err)
				return
			}
		}
	})
}
