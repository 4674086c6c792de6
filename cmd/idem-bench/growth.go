package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Growth: idem on a table that already holds millions of
// records, and while its sweeper purges a million of them.

// prefillReport says how the service-prefilled target's table was filled.
type prefillReport struct {
	Records int64 `json:"records"`
	// FillSeconds is the INSERT … SELECT generate_series; AnalyzeSeconds the
	// ANALYZE and CHECKPOINT after it, so that the rounds start with
	// statistics and without the fill's dirty buffers.
	FillSeconds    float64 `json:"fill_seconds"`
	AnalyzeSeconds float64 `json:"analyze_seconds"`
}

// purgeReport says how long the sweeper of the idemd under test took to
// purge --purge expired records while the rounds ran.
type purgeReport struct {
	Records     int64   `json:"records"`
	FillSeconds float64 `json:"fill_seconds"`
	// PurgeSeconds runs from the fill's commit to the moment the idemd's
	// idem_sweeper_purged_total had grown by Records (read every 100 ms);
	// it includes the wait for the sweeper's next pass (at most
	// --sweep-interval and its 10% jitter).
	PurgeSeconds float64 `json:"purge_seconds"`
	// Finished is false when the purge had not finished after purgeLimit.
	Finished      bool    `json:"finished"`
	SweepInterval string  `json:"sweep_interval"`
	RoundSeconds  float64 `json:"round_seconds"`
}

// fillRecords inserts n records into schema's table in namespace, the
// benchmark's own, so that they share the primary key's tenant and namespace
// prefix with the jobs. The keys are tag and the zero-padded row number: in
// the primary key's order, so that the fill appends to the index rather than
// splitting pages all over it, which makes 5 million rows a matter of a
// minute or two rather than many.
//
// The records are what a busy deployment holds: COMPLETED with a 64-byte
// result and retention left (--prefill), or past their retention
// (--purge: expires_at an hour ago, for the sweeper to purge).
func fillRecords(ctx context.Context, url, schema, namespace string, n int64, expired bool, tag string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("cannot reach the database at %s: %w", redactURL(url), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	table := pgx.Identifier{schema, "idem_records"}.Sanitize()
	seq := pgx.Identifier{schema, "idem_token_seq"}.Sanitize()
	expires := "now() + interval '24 hours'"
	if expired {
		expires = "now() - interval '1 hour'"
	}
	// Tokens i, then the sequence moves past them, as if each record had
	// drawn its own.
	_, err = conn.Exec(ctx, `INSERT INTO `+table+` (tenant, namespace, key, state, token, attempt, claimant,
			fingerprint, lease_expires_at, retention, result, created_at, updated_at, completed_at, expires_at)
		SELECT 'default', $1::text, $2::text || lpad(i::text, 10, '0'), 'completed', i, 1, '', '',
			NULL, interval '24 hours', decode(repeat('ab', 64), 'hex'),
			now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', `+expires+`
		FROM generate_series(1::bigint, $3::bigint) AS i`, namespace, tag, n)
	if err != nil {
		return fmt.Errorf("fill %s with %d records: %w", table, n, err)
	}
	if _, err := conn.Exec(ctx, `SELECT setval($1::regclass, greatest((SELECT last_value FROM `+seq+`), $2::bigint))`, seq, n); err != nil {
		return fmt.Errorf("move %s past the filled tokens: %w", seq, err)
	}
	return nil
}

// analyzeAndCheckpoint runs ANALYZE on the filled table and a CHECKPOINT, so
// that the rounds that follow run with the table's statistics (autovacuum may
// be off) and do not pay for writing out the fill.
func analyzeAndCheckpoint(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("cannot reach the database at %s: %w", redactURL(url), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "idem_records"}.Sanitize()); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// prefill fills the service-prefilled target's table with --prefill records
// before its warm-up.
func (c *cli) prefill(ctx context.Context, d *localIdemd, rep *report, stderr io.Writer) error {
	fmt.Fprintf(stderr, "idem-bench: filling service-prefilled's table with %d records…\n", c.Prefill)
	start := time.Now()
	if err := fillRecords(ctx, c.DatabaseURL, d.schema, c.Namespace, c.Prefill, false, "prefill-"); err != nil {
		return err
	}
	filled := time.Since(start)
	start = time.Now()
	if err := analyzeAndCheckpoint(ctx, c.DatabaseURL, d.schema); err != nil {
		return err
	}
	rep.Prefill = &prefillReport{Records: c.Prefill, FillSeconds: round3(filled.Seconds()), AnalyzeSeconds: round3(time.Since(start).Seconds())}
	fmt.Fprintf(stderr, "idem-bench: filled in %s, ANALYZE and CHECKPOINT in %s\n", filled.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return nil
}

// purgeLimit bounds how long the purge run waits for the sweeper.
const purgeLimit = 30 * time.Minute

// purgeRun is --purge: the service target's rounds for one scenario without
// a purge (half of --rounds), then --purge expired records filled into its
// table and rounds while the idemd's sweeper purges them (until it is done,
// each round at most a second), then the other half without. It returns the
// two tallies: without (before and after) and during the purge.
func (c *cli) purgeRun(ctx context.Context, r *runner, t *serviceTarget, scenario, runID string, rounds int, rep *report) ([]*tally, error) {
	d := t.idemds[0] // --purge runs one (Validate)
	without := newTally(t.name(), scenario)
	during := newTally(t.name()+"-purging", scenario)
	for _, tl := range []*tally{without, during} {
		tl.hasIdemd, tl.pgStore = true, true
	}
	wl := newWorkload(scenario, runID+"-"+scenario, c.Concurrency)
	perRound := c.Duration / time.Duration(rounds)
	run := func(into *tally, d time.Duration) error {
		r.progress.phase(scenario, into.target, len(into.rounds)+1, rounds)
		r.round(ctx, t, wl, d, 0, c.Rate, into)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if into.ops == 0 && into.errors > 0 {
			return fmt.Errorf("%s target, %s scenario: every job failed; the first error: %w", into.target, scenario, into.firstErr)
		}
		return nil
	}
	for range rounds / 2 {
		if err := run(without, perRound); err != nil {
			return nil, err
		}
	}

	const purged = "idem_sweeper_purged_total"
	m, err := d.metrics(ctx, purged)
	if err != nil {
		return nil, fmt.Errorf("--purge: read idemd's /metrics: %w", err)
	}
	base := m[purged]
	fillStart := time.Now()
	if err := fillRecords(ctx, c.DatabaseURL, d.schema, c.Namespace, c.Purge, true, "purge-"); err != nil {
		return nil, err
	}
	filled := time.Now()
	pr := &purgeReport{Records: c.Purge, FillSeconds: round3(filled.Sub(fillStart).Seconds()), SweepInterval: c.SweepInterval.String()}
	rep.Purge = pr

	// A poller notes when the sweeper is done, to 100 ms.
	done := make(chan time.Duration, 1)
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-pollCtx.Done():
				return
			case <-tick.C:
			}
			if m, err := d.metrics(pollCtx, purged); err == nil && m[purged]-base >= float64(c.Purge) {
				done <- time.Since(filled)
				return
			}
		}
	}()
	roundLen := min(perRound, time.Second)
	pr.RoundSeconds = round3(roundLen.Seconds())
purging:
	for time.Since(filled) < purgeLimit {
		if err := run(during, roundLen); err != nil {
			return nil, err
		}
		select {
		case took := <-done:
			pr.PurgeSeconds, pr.Finished = round3(took.Seconds()), true
			break purging
		default:
		}
	}
	if !pr.Finished {
		pr.PurgeSeconds = round3(time.Since(filled).Seconds())
	}
	for range rounds - rounds/2 {
		if err := run(without, perRound); err != nil {
			return nil, err
		}
	}
	return []*tally{without, during}, nil
}

func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
