// Package maintenance holds the work idemd does on the records besides
// answering calls: the Sweeper, which expires PROCESSING records whose lease
// ran out and purges records past their retention (DESIGN §3). idemd runs it
// beside the server, and `idemd sweep` runs it alone; the server never waits
// for it, so it has a package of its own, with its defaults named here.
package maintenance

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

// The sweeper's defaults, which a zero field of SweeperConfig means, and
// idemd's flags show.
const (
	DefaultSweepInterval  = 10 * time.Second
	DefaultSweepBatchSize = 2000
	// DefaultCountEvery: the count reads the whole table, which every
	// replica's every pass would repeat far more often than a gauge needs.
	DefaultCountEvery = time.Minute
	// DefaultSweepDuty: a pass with a backlog rests three times as long as
	// each full batch took, so that a large purge leaves the database's
	// cores to the Claims.
	DefaultSweepDuty = 0.25
	// MinSweepDuty is the lowest Duty: below it a backlog (leases to end,
	// records to purge) would wait on rests a hundred times its work.
	MinSweepDuty = 0.01
)

// Store is what a Sweeper needs of a store; every store.Store has it.
type Store interface {
	SweepExpire(ctx context.Context, limit int) (int, error)
	SweepPurge(ctx context.Context, limit int) (int, error)
	CountByState(ctx context.Context) (map[store.State]int64, error)
}

var _ Store = store.Store(nil)

// Metrics is what a Sweeper reports to; *server.Metrics is one.
type Metrics interface {
	// ObserveSweep records one pass: how long it took and whether it failed.
	ObserveSweep(took time.Duration, err error)
	// ObserveSweepProgress counts what a pass did since it last said, so
	// that a long pass over a backlog shows while it runs.
	ObserveSweepProgress(expired, purged int, busy time.Duration)
	// SetRecordCounts sets the count of records per state.
	SetRecordCounts(counts map[store.State]int64)
}

// SweeperConfig is how a Sweeper sweeps. Its zero value is the defaults.
type SweeperConfig struct {
	// Interval is the time between passes. It defaults to
	// DefaultSweepInterval.
	Interval time.Duration
	// BatchSize bounds the rows one statement (one short transaction)
	// touches. It defaults to DefaultSweepBatchSize.
	BatchSize int
	// Duty is the share of a pass's time spent in statements while it has a
	// backlog: after a full batch the pass rests for the batch's duration
	// times (1 - Duty) / Duty before the next one. 1 (or more) runs the
	// batches back to back. It defaults to DefaultSweepDuty, which is also
	// what zero, a negative value or NaN mean; below MinSweepDuty it is
	// MinSweepDuty, and a rest is never longer than Interval.
	Duty float64
	// Metrics, when set, records every pass, and after a pass the count of
	// records per state, so a scrape never runs a full count.
	Metrics Metrics
	// CountEvery bounds how often a pass counts the records per state for
	// Metrics. It defaults to DefaultCountEvery.
	CountEvery time.Duration
	// OnPass, when set, is called after every pass, for tests.
	OnPass func(SweepStats, error)
	// Logger receives a line per pass that did something or failed. None by
	// default.
	Logger *slog.Logger
}

// Sweeper expires PROCESSING records whose lease ran out and purges records
// past their retention (DESIGN §3). Correctness never waits for it: Claim
// takes over a lapsed lease by itself. Any number of replicas may sweep at
// once.
type Sweeper struct {
	store     Store
	cfg       SweeperConfig
	lastCount atomic.Int64 // UnixNano of the last count
}

// NewSweeper returns a sweeper over st, cfg's zero fields filled with the
// defaults.
func NewSweeper(st Store, cfg SweeperConfig) *Sweeper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSweepInterval
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultSweepBatchSize
	}
	if cfg.CountEvery <= 0 {
		cfg.CountEvery = DefaultCountEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{store: st, cfg: cfg}
}

// Run sweeps every Interval (with up to 10% jitter, so replicas started
// together drift apart) until ctx is done.
func (s *Sweeper) Run(ctx context.Context) {
	for {
		jitter := time.Duration(rand.Int64N(int64(s.cfg.Interval)/10 + 1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.Interval + jitter):
		}
		stats, err := s.SweepOnce(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			s.cfg.Logger.WarnContext(ctx, "sweep failed", "error", err, "expired", stats.Expired, "purged", stats.Purged)
		case stats.Expired > 0 || stats.Purged > 0:
			s.cfg.Logger.InfoContext(ctx, "swept", "expired", stats.Expired, "purged", stats.Purged, "duration", stats.Duration)
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
		if s.cfg.Metrics != nil {
			s.cfg.Metrics.ObserveSweepProgress(expired, purged, now.Sub(mark))
		}
		mark = now
	}
	defer func() {
		progress(0, 0)
		stats.Duration = time.Since(start)
		if s.cfg.Metrics != nil {
			s.cfg.Metrics.ObserveSweep(stats.Duration, err)
			if err == nil && s.countDue() {
				if counts, cerr := s.store.CountByState(ctx); cerr == nil {
					s.cfg.Metrics.SetRecordCounts(counts)
				}
			}
		}
		if s.cfg.OnPass != nil {
			s.cfg.OnPass(stats, err)
		}
	}()
	batch := s.cfg.BatchSize
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
	d := restAfter(took, s.cfg.Duty, s.cfg.Interval)
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
// duty (SweeperConfig.Duty), never longer than interval when that is set.
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
	now := time.Now().UnixNano()
	last := s.lastCount.Load()
	return (last == 0 || now-last >= int64(s.cfg.CountEvery)) && s.lastCount.CompareAndSwap(last, now)
}
