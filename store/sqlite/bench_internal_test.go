package sqlite

import (
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// BenchmarkBatchedJobs times the writer's own work per job (a Claim of a new
// key, then its Complete) when the calls fill batches of batchedJobs: the
// writer is held while the calls queue, then takes them as one batch, so a
// batch's fsync is spread over all of them and what is left per call is
// mostly its statements. ns/job and cpu-µs/job are per job, two calls.
func BenchmarkBatchedJobs(b *testing.B) {
	const batchedJobs = 64
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "idem.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	ctx := b.Context()

	// batch runs calls as one batch behind a call that holds the writer.
	batch := func(calls func(i int)) {
		inside, let := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			held <- s.inWriteTx(ctx, func(*writeTx, time.Time) error {
				close(inside)
				<-let
				return nil
			})
		}()
		<-inside
		var wg sync.WaitGroup
		for i := range batchedJobs {
			wg.Go(func() { calls(i) })
		}
		for {
			s.w.mu.Lock()
			n := len(s.w.queue)
			s.w.mu.Unlock()
			if n == batchedJobs {
				break
			}
			time.Sleep(20 * time.Microsecond)
		}
		close(let)
		if err := <-held; err != nil {
			b.Fatal(err)
		}
		wg.Wait()
	}

	var tokens [batchedJobs]int64
	var ids [batchedJobs]store.RecordID
	key := 0
	b.ReportAllocs()
	cpu := cpuTimeOf(b)
	for b.Loop() {
		for i := range ids {
			key++
			ids[i] = store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: "k" + strconv.Itoa(key)}
		}
		batch(func(i int) {
			res, err := s.RecordClaim(ctx, &store.ClaimParams{RecordID: ids[i], LeaseTTL: time.Minute, Retention: time.Hour})
			if err != nil || res.Outcome != store.OutcomeAcquired {
				b.Errorf("RecordClaim: %+v, %v", res, err)
				return
			}
			tokens[i] = res.Record.Token
		})
		batch(func(i int) {
			if _, err := s.RecordComplete(ctx, &store.CompleteParams{RecordID: ids[i], Token: tokens[i],
				Result: []byte(`{"status":"succeeded"}`)}); err != nil {
				b.Errorf("RecordComplete: %v", err)
			}
		})
	}
	jobs := float64(b.N * batchedJobs)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/jobs, "ns/job")
	b.ReportMetric(float64((cpuTimeOf(b)-cpu).Microseconds())/jobs, "cpu-µs/job")
}

// cpuTimeOf is the CPU time the process has used, user and system.
func cpuTimeOf(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
