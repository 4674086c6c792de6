package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/idemhq/idem/internal/maintenance"
)

type sweepCmd struct {
	databaseFlags
	logFlags
	Once      bool          `help:"Run one pass and exit, printing what it did."`
	Interval  time.Duration `default:"${sweep_interval}" env:"IDEM_SWEEP_INTERVAL" help:"Time between passes, without --once."`
	BatchSize int           `default:"${sweep_batch_size}" help:"Rows one statement touches at most (1 to 100000)."`
	Duty      float64       `default:"${sweep_duty}" env:"IDEM_SWEEP_DUTY" help:"Share of its time a pass with a backlog spends in statements (0.01 to 1): after each full batch it rests until the share is kept, at most --interval (also with --once); 1 runs the batches back to back."`
}

// checkDuty checks a sweeper's duty flag: a share of time, from
// maintenance.MinSweepDuty to 1.
func checkDuty(flag string, duty float64) error {
	if !(duty >= maintenance.MinSweepDuty && duty <= 1) {
		return fmt.Errorf("%s is %g; it must be between %g and 1 (1 runs the batches back to back)", flag, duty, maintenance.MinSweepDuty)
	}
	return nil
}

func (c *sweepCmd) Run(ctx context.Context) error {
	if c.BatchSize < 1 || c.BatchSize > 100000 {
		return fmt.Errorf("--batch-size is %d; it must be between 1 and 100000", c.BatchSize)
	}
	if err := checkDuty("--duty", c.Duty); err != nil {
		return err
	}
	if !c.Once && c.Interval <= 0 {
		return fmt.Errorf("--interval is %s; it must be positive", c.Interval)
	}
	logger := c.logger(os.Stderr)
	db, err := c.open(ctx, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.checkSchema(ctx, "run `idemd migrate` first"); err != nil {
		return err
	}
	sw := maintenance.NewSweeper(db, maintenance.SweeperConfig{Interval: c.Interval, BatchSize: c.BatchSize, Duty: c.Duty, Logger: logger})
	if !c.Once {
		logger.Info("sweeping", "interval", c.Interval)
		sw.Run(ctx)
		return nil
	}
	stats, err := sw.SweepOnce(ctx)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	fmt.Printf("expired %d, purged %d in %s\n", stats.Expired, stats.Purged, stats.Duration.Round(time.Millisecond))
	return nil
}
