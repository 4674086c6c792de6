package server

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
)

// SweepStats is what one sweep pass did.
type SweepStats struct {
	Expired  int
	Purged   int
	Duration time.Duration
}

// The sweeper's defaults, used by NewSweeper, by a Sweeper whose fields are
// zero, and by idemd's flags.
const (
	DefaultSweepInterval  = 10 * time.Second
	DefaultSweepBatchSize = 2000
	// DefaultCountEvery: the count reads the whole table, which a 10 s sweep
	// interval on every replica would repeat far more often than a gauge
	// needs.
	DefaultCountEvery = time.Minute
	// DefaultSweepDuty: a pass with a backlog rests three times as long as
	// each full batch took. Back to back, the batches of a large purge took
	// a core of the database for seconds and, on two cores, tripled the
	// Claims' p99 while they ran; paced, the purge takes four times as long
	// and the Claims barely notice (docs/BENCHMARKS.md).
	DefaultSweepDuty = 0.25
	// MinSweepDuty is the lowest Duty: below it a backlog (leases to end,
	// records to purge) would wait on rests a hundred times its work.
	MinSweepDuty = 0.01
)

// Sweeper expires PROCESSING records whose lease ran out and purges records
// past their retention (DESIGN §3). Correctness never waits for it: Claim
// takes over a lapsed lease by itself. Any number of replicas may sweep at
// once.
type Sweeper struct {
	store store.Store
	// Interval is the time between passes. It defaults to
	// DefaultSweepInterval, 10 seconds.
	Interval time.Duration
	// BatchSize bounds the rows one statement (one short transaction)
	// touches. It defaults to DefaultSweepBatchSize, 2000.
	BatchSize int
	// OnPass, when set, is called after every pass, for tests.
	OnPass func(SweepStats, error)
	// Metrics, when set, records every pass, and after a pass the count of
	// records per state (idem_records), so a scrape never runs a full count.
	Metrics *Metrics
	// CountEvery bounds how often a pass counts the records per state for
	// Metrics. It defaults to DefaultCountEvery, 1 minute.
	CountEvery time.Duration
	// Duty is the share of a pass's time spent in statements while it has a
	// backlog: after a full batch the pass rests for the batch's duration
	// times (1 - Duty) / Duty before the next one. 1 (or more) runs the
	// batches back to back. It defaults to DefaultSweepDuty, 0.25, which is
	// also what zero, a negative value or NaN mean; below MinSweepDuty it is
	// MinSweepDuty, and a rest is never longer than Interval.
	Duty      float64
	logger    *slog.Logger
	lastCount atomic.Int64 // UnixNano of the last count
}

// NewSweeper returns a sweeper over st with the default interval and batch
// size.
func NewSweeper(st store.Store, logger *slog.Logger) *Sweeper {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{store: st, Interval: DefaultSweepInterval, BatchSize: DefaultSweepBatchSize,
		CountEvery: DefaultCountEvery, Duty: DefaultSweepDuty, logger: logger}
}

// Run sweeps every Interval (with up to 10% jitter, so replicas started
// together drift apart) until ctx is done.
func (s *Sweeper) Run(ctx context.Context) {
	for {
		jitter := time.Duration(rand.Int64N(int64(s.Interval)/10 + 1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.Interval + jitter):
		}
		stats, err := s.SweepOnce(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			s.logger.WarnContext(ctx, "sweep failed", "error", err, "expired", stats.Expired, "purged", stats.Purged)
		case stats.Expired > 0 || stats.Purged > 0:
			s.logger.InfoContext(ctx, "swept", "expired", stats.Expired, "purged", stats.Purged, "duration", stats.Duration)
		}
	}
}

// SweepOnce runs one pass: batches of expiry until a batch comes back short,
// then batches of purge likewise, resting between full batches (Duty).
func (s *Sweeper) SweepOnce(ctx context.Context) (stats SweepStats, err error) {
	start := time.Now()
	// progress counts the records and the time as the pass goes
	// (idem_sweeper_*_total), so that a pass that works off a backlog for an
	// hour shows in the metrics while it runs.
	mark := start
	progress := func(expired, purged int) {
		now := time.Now()
		s.Metrics.observeSweepProgress(expired, purged, now.Sub(mark))
		mark = now
	}
	defer func() {
		progress(0, 0)
		stats.Duration = time.Since(start)
		if s.Metrics != nil {
			s.Metrics.ObserveSweep(stats, err)
			if err == nil && s.countDue() {
				if counts, cerr := s.store.CountByState(ctx); cerr == nil {
					s.Metrics.SetRecordCounts(counts)
				}
			}
		}
		if s.OnPass != nil {
			s.OnPass(stats, err)
		}
	}()
	batch := s.BatchSize
	if batch <= 0 {
		batch = DefaultSweepBatchSize
	}
	for _, step := range []struct {
		sweep  func(context.Context, int) (int, error)
		count  *int
		expire bool
	}{{s.store.SweepExpire, &stats.Expired, true}, {s.store.SweepPurge, &stats.Purged, false}} {
		for {
			began := time.Now()
			n, err := step.sweep(ctx, batch)
			*step.count += n
			if step.expire {
				progress(n, 0)
			} else {
				progress(0, n)
			}
			if err != nil {
				return stats, err
			}
			if n < batch {
				break
			}
			err = s.rest(ctx, time.Since(began))
			progress(0, 0)
			if err != nil {
				return stats, err
			}
		}
	}
	return stats, nil
}

// rest waits between two full batches of a pass, so that a backlog is
// worked off at Duty of the database's time instead of all of it.
func (s *Sweeper) rest(ctx context.Context, took time.Duration) error {
	d := restAfter(took, s.Duty, s.Interval)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// restAfter is how long a pass rests after a full batch that took took, at
// duty (Sweeper.Duty), never longer than interval when that is set.
func restAfter(took time.Duration, duty float64, interval time.Duration) time.Duration {
	switch {
	case !(duty > 0): // zero, negative or NaN
		duty = DefaultSweepDuty
	case duty >= 1:
		return 0
	case duty < MinSweepDuty:
		duty = MinSweepDuty
	}
	d := time.Duration(float64(took) * (1 - duty) / duty)
	if interval > 0 && d > interval {
		d = interval // a slow batch never parks the backlog longer than a pass interval
	}
	return d
}

// countDue reports whether CountEvery has passed since the last count, and
// if so claims this pass for the next one.
func (s *Sweeper) countDue() bool {
	every := s.CountEvery
	if every <= 0 {
		every = DefaultCountEvery
	}
	now := time.Now().UnixNano()
	last := s.lastCount.Load()
	return (last == 0 || now-last >= int64(every)) && s.lastCount.CompareAndSwap(last, now)
}
