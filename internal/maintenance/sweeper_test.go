package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/maintenance"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// batchLog records what every sweep statement returned.
type batchLog struct {
	store.Store
	mu             sync.Mutex
	expire, purges []int
}

func (b *batchLog) SweepExpire(ctx context.Context, limit int) (int, error) {
	n, err := b.Store.SweepExpire(ctx, limit)
	b.mu.Lock()
	b.expire = append(b.expire, n)
	b.mu.Unlock()
	return n, err
}

func (b *batchLog) SweepPurge(ctx context.Context, limit int) (int, error) {
	n, err := b.Store.SweepPurge(ctx, limit)
	b.mu.Lock()
	b.purges = append(b.purges, n)
	b.mu.Unlock()
	return n, err
}

func (b *batchLog) take() (expire, purge []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	expire, purge = b.expire, b.purges
	b.expire, b.purges = nil, nil
	return expire, purge
}

func pastRetention(t testing.TB, ts *testserver.Server) {
	t.Helper()
	if _, err := ts.DB.Pool.Exec(testContext(t), `UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE state <> 'processing'`); err != nil {
		t.Fatal(err)
	}
}

// TestSweepOnceBatches: 35 lapsed records with BatchSize 10 are expired in
// batches 10, 10, 10, 5 and then purged likewise.
func TestSweepOnceBatches(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a pass that never ends shows as a deadline
	defer cancel()
	insertLapsed(t, ts.DB.Pool, 35)
	// A live lease and a record inside its retention are left alone.
	mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "live"})
	kept := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "kept"})
	if _, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "kept", Token: kept.GetToken()}); err != nil {
		t.Fatal(err)
	}

	log := &batchLog{Store: ts.Store}
	var passes []maintenance.SweepStats
	sw := maintenance.NewSweeper(log, maintenance.SweeperConfig{BatchSize: 10, OnPass: func(s maintenance.SweepStats, err error) {
		if err != nil {
			t.Errorf("OnPass error: %v", err)
		}
		passes = append(passes, s)
	}})

	stats, err := sw.SweepOnce(ctx)
	if err != nil || stats.Expired != 35 || stats.Purged != 0 {
		t.Fatalf("first pass = %+v, %v; want 35 expired, 0 purged", stats, err)
	}
	if expire, purge := log.take(); !slices.Equal(expire, []int{10, 10, 10, 5}) || !slices.Equal(purge, []int{0}) {
		t.Errorf("first pass batches: expire %v purge %v; want [10 10 10 5] [0]", expire, purge)
	}
	if n := countRows(t, ts.DB.Pool, "expired"); n != 35 {
		t.Errorf("%d EXPIRED records; want 35", n)
	}

	pastRetention(t, ts)
	if _, err := ts.DB.Pool.Exec(ctx, `UPDATE idem_records SET expires_at = now() + interval '1 hour' WHERE key = 'kept'`); err != nil {
		t.Fatal(err)
	}
	stats, err = sw.SweepOnce(ctx)
	if err != nil || stats.Expired != 0 || stats.Purged != 35 {
		t.Fatalf("second pass = %+v, %v; want 0 expired, 35 purged", stats, err)
	}
	if expire, purge := log.take(); !slices.Equal(expire, []int{0}) || !slices.Equal(purge, []int{10, 10, 10, 5}) {
		t.Errorf("second pass batches: expire %v purge %v; want [0] [10 10 10 5]", expire, purge)
	}
	if n := countRows(t, ts.DB.Pool, ""); n != 2 {
		t.Errorf("%d records left; want the live and the kept one", n)
	}
	if st := mustLookup(t, ts.Client, "live").GetState(); st != idemv1.State_STATE_PROCESSING {
		t.Errorf("live lease swept to %s", st)
	}
	if len(passes) != 2 || passes[0].Expired != 35 || passes[1].Purged != 35 {
		t.Errorf("OnPass saw %+v; want the two passes", passes)
	}
}

// TestConcurrentSweepers: two sweepers over 2000 lapsed records expire each
// exactly once between them, then purge each exactly once, without deadlock.
func TestConcurrentSweepers(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{DBOptions: []testdb.Option{testdb.MaxConns(6)}})
	const rows = 2000
	insertLapsed(t, ts.DB.Pool, rows)

	both := func(what string) (expired, purged int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		var stats [2]maintenance.SweepStats
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 2 {
			sw := maintenance.NewSweeper(ts.Store, maintenance.SweeperConfig{BatchSize: 50})
			wg.Go(func() {
				<-start
				stats[i], errs[i] = sw.SweepOnce(ctx)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: sweeper %d: %v (a deadlock or a hang shows as a deadline)", what, i, err)
			}
		}
		t.Logf("%s: sweeper stats %+v", what, stats)
		return stats[0].Expired + stats[1].Expired, stats[0].Purged + stats[1].Purged
	}

	if expired, purged := both("expire"); expired != rows || purged != 0 {
		t.Errorf("expired %d purged %d between the two sweepers; want %d, 0", expired, purged, rows)
	}
	if n := countRows(t, ts.DB.Pool, "expired"); n != rows {
		t.Errorf("%d EXPIRED records; want %d", n, rows)
	}
	pastRetention(t, ts)
	if expired, purged := both("purge"); expired != 0 || purged != rows {
		t.Errorf("expired %d purged %d between the two sweepers; want 0, %d", expired, purged, rows)
	}
	if n := countRows(t, ts.DB.Pool, ""); n != 0 {
		t.Errorf("%d records left; want 0", n)
	}
}

// TestSweepDoesNotBlockClaims: rows locked by a sweep in progress (here an
// open transaction holding the lock a sweeper batch takes) neither block a
// Claim of another key nor another sweeper, which skips them.
func TestSweepDoesNotBlockClaims(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := testContext(t)
	insertLapsed(t, ts.DB.Pool, 10)

	tx, err := ts.DB.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tag, err := tx.Exec(ctx, `SELECT 1 FROM idem_records WHERE state = 'processing' AND lease_expires_at <= now()
		ORDER BY lease_expires_at LIMIT 5 FOR UPDATE SKIP LOCKED`)
	if err != nil || tag.RowsAffected() != 5 {
		t.Fatalf("lock 5 rows: %v, %v", tag, err)
	}

	quick, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := ts.Client.Claim(quick, &idemv1.ClaimRequest{Namespace: ns, Key: "fresh"})
	if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim of a fresh key during the sweep: %v, %v", resp.GetOutcome(), err)
	}
	stats, err := maintenance.NewSweeper(ts.Store, maintenance.SweeperConfig{}).SweepOnce(quick)
	if err != nil || stats.Expired != 5 {
		t.Fatalf("second sweeper = %+v, %v; want the 5 unlocked rows expired, the locked ones skipped", stats, err)
	}
	// A swept (unlocked) record can be claimed at once.
	var unlocked string
	if err := ts.DB.Pool.QueryRow(quick, `SELECT key FROM idem_records WHERE state = 'expired' LIMIT 1`).Scan(&unlocked); err != nil {
		t.Fatal(err)
	}
	resp, err = ts.Client.Claim(quick, &idemv1.ClaimRequest{Namespace: "bulk", Key: unlocked})
	if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || resp.GetRecord().GetAttempt() != 2 {
		t.Fatalf("Claim of a swept record: %v attempt %d, %v", resp.GetOutcome(), resp.GetRecord().GetAttempt(), err)
	}
	t.Logf("Claim, sweep and takeover beside a held sweep lock took %s", time.Since(start))

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	stats, err = maintenance.NewSweeper(ts.Store, maintenance.SweeperConfig{}).SweepOnce(ctx)
	if err != nil || stats.Expired != 5 {
		t.Fatalf("after the lock is gone = %+v, %v; want the other 5 expired", stats, err)
	}
}

// TestClaimsDuringBigSweep: Claims of fresh keys and of the records being
// swept run while one sweeper batch expires 5000 records; they all answer
// correctly and promptly.
func TestClaimsDuringBigSweep(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{DBOptions: []testdb.Option{testdb.MaxConns(6)}})
	ctx := testContext(t)
	insertLapsed(t, ts.DB.Pool, 5000)

	sw := maintenance.NewSweeper(ts.Store, maintenance.SweeperConfig{BatchSize: 5000})
	swept := make(chan error, 1)
	go func() {
		_, err := sw.SweepOnce(ctx)
		swept <- err
	}()

	var wg sync.WaitGroup
	var slowest atomic.Int64
	errs := make(chan error, 40)
	for i := range 20 {
		wg.Go(func() {
			callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			resp, err := ts.Client.Claim(callCtx, &idemv1.ClaimRequest{Namespace: ns, Key: fmt.Sprintf("fresh-%d", i)})
			if d := int64(time.Since(start)); d > slowest.Load() {
				slowest.Store(d)
			}
			if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || resp.GetRecord().GetAttempt() != 1 {
				errs <- fmt.Errorf("fresh-%d: %s attempt %d, %v", i, resp.GetOutcome(), resp.GetRecord().GetAttempt(), err)
			}
			// A record the sweep is working on: expired or not, its lease ran
			// out, so the Claim takes it over.
			key := fmt.Sprintf("k%d", 1+i*250)
			resp, err = ts.Client.Claim(callCtx, &idemv1.ClaimRequest{Namespace: "bulk", Key: key})
			if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || resp.GetRecord().GetAttempt() != 2 {
				errs <- fmt.Errorf("bulk %s: %s attempt %d, %v", key, resp.GetOutcome(), resp.GetRecord().GetAttempt(), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-swept; err != nil {
		t.Fatalf("sweep: %v", err)
	}
	t.Logf("slowest fresh Claim during the sweep: %s", time.Duration(slowest.Load()))
	if n := countRows(t, ts.DB.Pool, "processing"); n != 40 {
		t.Errorf("%d PROCESSING records after the sweep; want the 40 claimed", n)
	}
}

// TestSweeperRunStopsOnCancel: Run sweeps every Interval, reports each pass to
// OnPass, and returns once its context is cancelled.
func TestSweeperRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	insertLapsed(t, ts.DB.Pool, 3)

	var passes, expired atomic.Int32
	passed := make(chan struct{}, 100)
	sw := maintenance.NewSweeper(ts.Store, maintenance.SweeperConfig{Interval: 20 * time.Millisecond, OnPass: func(s maintenance.SweepStats, err error) {
		if err == nil {
			expired.Add(int32(s.Expired))
		}
		passes.Add(1)
		select {
		case passed <- struct{}{}:
		default:
		}
	}})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		sw.Run(ctx)
		close(done)
	}()
	for range 3 {
		select {
		case <-passed:
		case <-time.After(5 * time.Second):
			cancel()
			t.Fatalf("only %d passes in 5s with a 20ms interval", passes.Load())
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2s of the cancellation")
	}
	after := passes.Load()
	time.Sleep(100 * time.Millisecond)
	if passes.Load() != after {
		t.Errorf("passes went on after Run returned: %d -> %d", after, passes.Load())
	}
	if expired.Load() != 3 {
		t.Errorf("Run expired %d records; want 3", expired.Load())
	}
}

// TestSweeperRunReturnsWhenCancelledBeforeFirstPass covers a cancel during the
// first wait.
func TestSweeperRunReturnsWhenCancelledBeforeFirstPass(t *testing.T) {
	t.Parallel()
	sw := maintenance.NewSweeper(&hookStore{hook: func(context.Context, string) error {
		t.Error("the store was called")
		return context.Canceled
	}}, maintenance.SweeperConfig{Interval: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	done := make(chan struct{})
	go func() {
		sw.Run(ctx)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return")
	}
}

// TestSweeperCountsRecordsAtMostEveryCountEvery: the idem_records count
// reads the whole table, so passes closer together than CountEvery share one.
func TestSweeperCountsRecordsAtMostEveryCountEvery(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	var counts atomic.Int64
	st := &hookStore{Store: postgres.New(db.Pool), hook: func(_ context.Context, method string) error {
		if method == "CountByState" {
			counts.Add(1)
		}
		return nil
	}}
	sw := maintenance.NewSweeper(st, maintenance.SweeperConfig{Metrics: server.NewMetrics(), CountEvery: time.Hour})
	for range 3 {
		if _, err := sw.SweepOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := counts.Load(); n != 1 {
		t.Fatalf("3 passes within CountEvery counted the records %d times, want once", n)
	}
	often := maintenance.NewSweeper(st, maintenance.SweeperConfig{Metrics: server.NewMetrics(), CountEvery: time.Nanosecond})
	for range 2 {
		if _, err := often.SweepOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := counts.Load() - 1; n != 2 {
		t.Fatalf("2 passes further apart than CountEvery counted the records %d times, want twice", n)
	}
}

// slowBatches makes every expiry batch take at least delay and records when
// each began and ended. onBatch, when set, runs as batch i (from 0) begins.
type slowBatches struct {
	store.Store
	delay      time.Duration
	onBatch    func(i int)
	mu         sync.Mutex
	began, end []time.Time
}

// slowSweeper is a sweeper of cfg with batches of 10 over a store that holds
// lapsed PROCESSING records, every expiry batch taking at least delay.
func slowSweeper(t *testing.T, lapsed int, delay time.Duration, cfg maintenance.SweeperConfig) (*maintenance.Sweeper, *slowBatches) {
	t.Helper()
	ts := testserver.Start(t)
	insertLapsed(t, ts.DB.Pool, lapsed)
	slow := &slowBatches{Store: ts.Store, delay: delay}
	cfg.BatchSize = 10
	return maintenance.NewSweeper(slow, cfg), slow
}

func (s *slowBatches) SweepExpire(ctx context.Context, limit int) (int, error) {
	s.mu.Lock()
	i := len(s.began)
	s.began = append(s.began, time.Now())
	s.mu.Unlock()
	if s.onBatch != nil {
		s.onBatch(i)
	}
	time.Sleep(s.delay)
	n, err := s.Store.SweepExpire(ctx, limit)
	s.mu.Lock()
	s.end = append(s.end, time.Now())
	s.mu.Unlock()
	return n, err
}

// TestSweepRestsBetweenFullBatches: with a backlog, a pass rests after each
// full batch for the batch's time times (1 - Duty) / Duty, so that it takes
// only Duty of the database's time; after the short batch that ends the
// backlog it does not rest.
func TestSweepRestsBetweenFullBatches(t *testing.T) {
	t.Parallel()
	sw, slow := slowSweeper(t, 25, 40*time.Millisecond, maintenance.SweeperConfig{Duty: 0.25}) // rest 3 × at least 40 ms after each full batch
	stats, err := sw.SweepOnce(t.Context())
	if err != nil || stats.Expired != 25 {
		t.Fatalf("pass = %+v, %v; want 25 expired", stats, err)
	}
	if len(slow.began) != 3 {
		t.Fatalf("%d expiry batches; want 10, 10, 5", len(slow.began))
	}
	for i := 1; i < len(slow.began); i++ {
		took := slow.end[i-1].Sub(slow.began[i-1])
		if rest := slow.began[i].Sub(slow.end[i-1]); rest < 3*took {
			t.Errorf("rest before batch %d: %s after a batch of %s; want at least %s", i+1, rest, took, 3*took)
		}
	}
	if min := slow.end[2].Sub(slow.began[0]); stats.Duration < min {
		t.Errorf("pass took %s, less than its batches and rests (%s)", stats.Duration, min)
	}
}

// TestSweepRestIsBoundedByTheInterval: however slow a batch and low the
// duty, a rest is never longer than the sweeper's interval.
func TestSweepRestIsBoundedByTheInterval(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	sw, slow := slowSweeper(t, 15, 50*time.Millisecond, maintenance.SweeperConfig{Duty: 0.001, Interval: interval}) // below MinSweepDuty: a rest of 99 × 50 ms unbounded
	stats, err := sw.SweepOnce(t.Context())
	if err != nil || stats.Expired != 15 {
		t.Fatalf("pass = %+v, %v; want 15 expired", stats, err)
	}
	if len(slow.began) != 2 {
		t.Fatalf("%d expiry batches; want 10, 5", len(slow.began))
	}
	if rest := slow.began[1].Sub(slow.end[0]); rest < interval || rest > 3*time.Second {
		t.Errorf("rest %s; want the interval, %s (4.95 s unbounded)", rest, interval)
	}
}

// TestSweepRestEndsWithTheContext: a pass resting between batches returns
// as soon as its context ends.
func TestSweepRestEndsWithTheContext(t *testing.T) {
	t.Parallel()
	sw, _ := slowSweeper(t, 25, 50*time.Millisecond, maintenance.SweeperConfig{Duty: 0.01}) // a rest of 99 × 50 ms, about 5 s
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	began := time.Now()
	_, err := sw.SweepOnce(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("SweepOnce = %v; want context.Canceled", err)
	}
	if took := time.Since(began); took > 2500*time.Millisecond {
		t.Errorf("SweepOnce returned %s after it began, though cancelled after 200ms", took)
	}
}

// TestSweepCountsAsItGoes: a pass counts the records it expired and the time
// it spent after each batch, not only at its end, so that one long pass
// over a backlog shows in the metrics while it runs.
func TestSweepCountsAsItGoes(t *testing.T) {
	t.Parallel()
	metrics := server.NewMetrics()
	sw, slow := slowSweeper(t, 25, 20*time.Millisecond, maintenance.SweeperConfig{Duty: 0.5, Metrics: metrics})
	type reading struct{ expired, busy, passes float64 }
	read := func() reading {
		families, err := metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var r reading
		for _, fam := range families {
			for _, m := range fam.GetMetric() {
				switch fam.GetName() {
				case "idem_sweeper_expired_total":
					r.expired += m.GetCounter().GetValue()
				case "idem_sweeper_busy_seconds_total":
					r.busy += m.GetCounter().GetValue()
				case "idem_sweep_duration_seconds":
					r.passes += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		return r
	}
	var mid reading
	slow.onBatch = func(i int) {
		if i == 2 { // two full batches and a rest after each are done
			mid = read()
		}
	}
	start := time.Now()
	stats, err := sw.SweepOnce(t.Context())
	took := time.Since(start)
	if err != nil || stats.Expired != 25 {
		t.Fatalf("pass = %+v, %v; want 25 expired", stats, err)
	}
	if mid.expired != 20 || mid.passes != 0 {
		t.Errorf("during the pass: %v expired, %v passes observed; want 20 and 0", mid.expired, mid.passes)
	}
	// Two batches of at least 20 ms, each followed by a rest as long.
	if mid.busy < 0.08 {
		t.Errorf("during the pass: %.3f s busy; want at least 0.08", mid.busy)
	}
	end := read()
	if end.expired != 25 || end.passes != 1 {
		t.Errorf("after the pass: %v expired, %v passes; want 25 and 1", end.expired, end.passes)
	}
	if end.busy < mid.busy || end.busy > took.Seconds()+0.001 {
		t.Errorf("after the pass: %.3f s busy; want between %.3f and the pass's %.3f", end.busy, mid.busy, took.Seconds())
	}
}
