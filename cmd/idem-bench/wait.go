package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/idemhq/idem/client"
)

// The wait scenario measures how soon a waiting duplicate hears that the job
// it waits for is done: the time from a Complete sent to one idemd replica
// (A) to the answer of a Claim waiting (ClaimRequest.wait) on another replica
// (B) of the same database. Each of --concurrency workers runs one job after
// another: it acquires a new key on A, starts a waiting Claim of the key on
// B, gives it --wait-settle to start waiting, then sends the Complete to A
// and times the waiter's answer from the moment the Complete was sent. The
// answer must be COMPLETED; anything else counts as an error.
const scenarioWait = "wait"

// waitSample is one job of the wait scenario.
type waitSample struct {
	wake     time.Duration // Complete sent → waiting Claim answered
	complete time.Duration // Complete sent → Complete answered
	err      error
}

// waitReport is the wait scenario's result.
type waitReport struct {
	Scenario    string    `json:"scenario"`
	Concurrency int       `json:"concurrency"`
	Jobs        int64     `json:"jobs"`
	Errors      int64     `json:"errors"`
	Replicas    string    `json:"replicas"`
	WakeP50Ms   float64   `json:"wake_p50_ms"`
	WakeP90Ms   float64   `json:"wake_p90_ms"`
	WakeP99Ms   float64   `json:"wake_p99_ms"`
	WakeMaxMs   float64   `json:"wake_max_ms"`
	CompP50Ms   float64   `json:"complete_p50_ms"`
	CompP99Ms   float64   `json:"complete_p99_ms"`
	SettleMs    float64   `json:"settle_ms"`
	NumCPU      int       `json:"num_cpu"`
	LoadBefore  []float64 `json:"load_before,omitempty"`
	FirstError  string    `json:"first_error,omitempty"`
	StartedAtUT string    `json:"started_at"`
}

// benchWait runs the wait scenario.
func (c *cli) benchWait(ctx context.Context, stdout, stderr io.Writer) error {
	rep := waitReport{Scenario: scenarioWait, Concurrency: c.Concurrency, NumCPU: runtime.NumCPU(),
		LoadBefore: loadAverage(), SettleMs: float64(c.WaitSettle.Microseconds()) / 1000,
		StartedAtUT: time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)}
	addrA, addrB := c.Addr, c.WaitAddr
	if addrB == "" {
		addrB = addrA
	}
	if c.StartIdemd {
		a, b, err := c.startReplicas(ctx, stderr)
		if a != nil {
			defer a.close(context.WithoutCancel(ctx))
		}
		if b != nil {
			defer b.close(context.WithoutCancel(ctx))
		}
		if err != nil {
			return err
		}
		addrA, addrB = a.addr, b.addr
	}
	rep.Replicas = "Complete on " + addrA + ", waiting Claims on " + addrB
	if addrA == addrB {
		rep.Replicas = "Complete and waiting Claims on one idemd, " + addrA
	}
	ca, err := c.dialService(addrA)
	if err != nil {
		return err
	}
	defer ca.Close()
	cb, err := c.dialService(addrB)
	if err != nil {
		return err
	}
	defer cb.Close()

	runID := newRunID()
	var (
		mu      sync.Mutex
		wake    = newHistogram()
		comp    = newHistogram()
		jobs    int64
		errs    int64
		firstEr error
	)
	deadline := time.Now().Add(c.Duration)
	var wg sync.WaitGroup
	for w := range c.Concurrency {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				mu.Lock()
				done := (c.Ops > 0 && jobs+errs >= c.Ops) || (c.Ops == 0 && time.Now().After(deadline))
				mu.Unlock()
				if done {
					return
				}
				key := fmt.Sprintf("%s-wait-%d-%d", runID, w, n)
				s := c.waitJob(ctx, ca, cb, key)
				mu.Lock()
				if s.err != nil {
					errs++
					if firstEr == nil {
						firstEr = s.err
					}
				} else {
					jobs++
					recordLatency(wake, s.wake)
					recordLatency(comp, s.complete)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.Jobs, rep.Errors = jobs, errs
	if firstEr != nil {
		rep.FirstError = firstEr.Error()
	}
	rep.WakeP50Ms, rep.WakeP90Ms, rep.WakeP99Ms = ms(wake, 50), ms(wake, 90), ms(wake, 99)
	rep.WakeMaxMs = round3(float64(wake.Max()) / 1000)
	rep.CompP50Ms, rep.CompP99Ms = ms(comp, 50), ms(comp, 99)
	if c.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeWaitReport(stdout, &rep, wake)
	if errs > 0 {
		return fmt.Errorf("%d of %d jobs failed; the first: %v", errs, jobs+errs, firstEr)
	}
	return nil
}

// waitJob runs one job of the wait scenario on key.
func (c *cli) waitJob(ctx context.Context, ca, cb *client.Client, key string) waitSample {
	held, err := ca.Claim(ctx, client.ClaimRequest{Namespace: c.Namespace, Key: key, LeaseTTL: time.Minute})
	if err != nil {
		return waitSample{err: fmt.Errorf("holder's Claim: %w", err)}
	}
	type answer struct {
		res client.ClaimResult
		err error
		at  time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := cb.Claim(ctx, client.ClaimRequest{Namespace: c.Namespace, Key: key, Wait: 30 * time.Second})
		answered <- answer{res, err, time.Now()}
	}()
	select {
	case a := <-answered:
		return waitSample{err: fmt.Errorf("the waiting Claim was answered before the Complete: %v, %v", a.res.Outcome, a.err)}
	case <-time.After(c.WaitSettle):
	}
	sent := time.Now()
	if _, err := ca.Complete(ctx, client.CompleteRequest{Namespace: c.Namespace, Key: key, Token: held.Record.Token, Result: []byte("done")}); err != nil {
		<-answered
		return waitSample{err: fmt.Errorf("complete: %w", err)}
	}
	completed := time.Since(sent)
	a := <-answered
	switch {
	case a.err != nil:
		return waitSample{err: fmt.Errorf("waiting Claim: %w", a.err)}
	case a.res.Outcome != client.OutcomeCompleted:
		return waitSample{err: fmt.Errorf("waiting Claim answered %v, want COMPLETED", a.res.Outcome)}
	}
	return waitSample{wake: a.at.Sub(sent), complete: completed}
}

// startReplicas starts the two idemds of the wait scenario on one schema:
// A creates it and drops it when closed, B only uses it.
func (c *cli) startReplicas(ctx context.Context, stderr io.Writer) (a, b *localIdemd, err error) {
	if c.IdemdBin == "" {
		dir, err := os.MkdirTemp("", "idem-bench-")
		if err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(dir) // the running processes keep their binary
		if c.IdemdBin, err = buildIdemd(ctx, dir, stderr); err != nil {
			return nil, nil, err
		}
	}
	logw := stderr
	if c.IdemdLog != "-" {
		f, err := os.OpenFile(c.IdemdLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("--idemd-log: %w", err)
		}
		c.closers = append(c.closers, f.Close)
		logw = f
	}
	runID := newRunID()
	opts := idemdOptions{
		bin: c.IdemdBin, baseURL: c.DatabaseURL, schema: "idem_bench_" + runID, appName: "idem-bench-idemd-a-" + runID,
		poolMaxConns: c.IdemdPoolMaxConns, sweepInterval: c.SweepInterval, logLevel: c.IdemdLogLevel, log: logw,
	}
	if a, err = startIdemd(ctx, opts); err != nil {
		return a, nil, fmt.Errorf("--start-idemd (replica A): %w", err)
	}
	opts.appName, opts.sharedSchema = "idem-bench-idemd-b-"+runID, true
	if b, err = startIdemd(ctx, opts); err != nil {
		return a, b, fmt.Errorf("--start-idemd (replica B): %w", err)
	}
	return a, b, nil
}

func writeWaitReport(w io.Writer, r *waitReport, wake *hdrhistogram.Histogram) {
	fmt.Fprintf(w, "scenario wait: %s\n", r.Replicas)
	fmt.Fprintf(w, "%d workers, %d jobs, %d errors; each waiting Claim had %s to start waiting; %d CPUs, load before %s\n\n",
		r.Concurrency, r.Jobs, r.Errors, time.Duration(r.SettleMs*float64(time.Millisecond)), r.NumCPU, fmt.Sprint(r.LoadBefore))
	fmt.Fprintf(w, "%-40s %8s %8s %8s %8s\n", "ms", "p50", "p90", "p99", "max")
	fmt.Fprintf(w, "%-40s %8.2f %8.2f %8.2f %8.2f\n", "Complete sent → waiting Claim answered", r.WakeP50Ms, r.WakeP90Ms, r.WakeP99Ms, r.WakeMaxMs)
	fmt.Fprintf(w, "%-40s %8.2f %8s %8.2f %8s\n", "Complete sent → Complete answered", r.CompP50Ms, "", r.CompP99Ms, "")
	if wake.TotalCount() == 0 {
		fmt.Fprintln(w, "(no job finished)")
	}
}

// errWaitAlone: the wait scenario measures something else than the others
// and runs by itself.
var errWaitAlone = errors.New("--scenario wait runs alone, against the service (two replicas with --start-idemd, or --addr and --wait-addr)")
