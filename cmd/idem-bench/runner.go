package main

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// target is one way of doing a job: Claim, then Complete when the Claim
// acquired the key.
type target interface {
	// name is the target's name in flags and reports.
	name() string
	// job runs one job on key and returns how it ended and how long its
	// Claim (the first round trip) took.
	job(ctx context.Context, key string) (outcome, time.Duration, error)
	// close releases what the target holds; ctx bounds the clean-up.
	close(ctx context.Context) error
}

// batchTarget is a target with a batch form of its job, for the batch
// scenario: it claims keys together and completes together those it
// acquired. Targets without one run a job per key, one after another.
type batchTarget interface {
	// jobs runs a job on each of keys, sets outs[i] or errs[i] for each,
	// and returns how long the Claims took.
	jobs(ctx context.Context, keys []string, outs []outcome, errs []error) time.Duration
}

// runJobs runs one delivery of the batch scenario on t: its batch form, or
// a job per key, in which case the Claims' time is the sum of each job's.
func runJobs(ctx context.Context, t target, keys []string, outs []outcome, errs []error) time.Duration {
	if bt, ok := t.(batchTarget); ok {
		return bt.jobs(ctx, keys, outs, errs)
	}
	var claims time.Duration
	for i, key := range keys {
		var took time.Duration
		outs[i], took, errs[i] = t.job(ctx, key)
		claims += took
	}
	return claims
}

// Latencies are recorded in microseconds, from 1 µs to a minute, with three
// significant digits.
const (
	histMin    = 1
	histMax    = int64(time.Minute / time.Microsecond)
	histDigits = 3
)

func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

func recordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	_ = h.RecordValue(us) // in range by construction
}

// tally is what the rounds of one target in one scenario add up to.
type tally struct {
	target   string
	scenario string
	op       *hdrhistogram.Histogram // the whole job
	claim    *hdrhistogram.Histogram // its Claim alone
	ops      int64
	errors   int64
	firstErr error
	outcomes [numOutcomes]int64
	elapsed  time.Duration // measured wall time, summed over the rounds
	rounds   []float64     // ops/s of each round
	selfCPU  time.Duration // CPU time of this process during the rounds
	// machine is what the machine's cores did during the rounds
	// machineRounds of which /proc/stat could be read before and after.
	machine       machineCPU
	machineRounds int
	// idemdCPU is the CPU time of the idemd processes --start-idemd
	// started for the target, all its replicas'.
	idemdCPU time.Duration
	// serverCPU is the CPU time of redis-server, and serverRead whether it
	// could be read.
	serverCPU  time.Duration
	serverRead bool
	// pg is what Postgres did during the rounds (pgMonitor.round), and
	// pgRead whether it could be read at all.
	pg     pgRound
	pgRead bool
	// pgStore is true when the target's store is Postgres (its store CPU is
	// the Postgres backends'); hasIdemd when it has an idemd process.
	pgStore  bool
	hasIdemd bool
	// The pool's acquisitions and the time they waited for a connection,
	// for targets that have a pool of their own (sql; service with
	// --start-idemd on Postgres).
	acquires    int64
	acquireWait time.Duration
	// Fixed rate (--rate) only: jobs that started more than lateAfter after
	// their intended start time, and jobs scheduled within the rounds that
	// never started because every worker was busy until the round ended.
	late   int64
	missed int64
	// Fixed rate only: how late each job started (lag), and its Claim's
	// latency from when it did start (claimRun), which leaves out the wait
	// for a free worker and the load generator's own scheduling delay that
	// claim counts in.
	lag, claimRun *hdrhistogram.Histogram
}

// served is a target whose store runs in processes on this machine that it
// can name, so that their CPU time can be charged to it: redis-server.
type served interface {
	// serverPIDs returns the processes serving the target's store. Called
	// between rounds.
	serverPIDs(ctx context.Context) []uint32
}

// onPostgres is a target whose connections to Postgres carry an
// application_name of their own, so that pgMonitor can tell its backends.
type onPostgres interface {
	// pgApp returns the application_name, "" when the target has none.
	pgApp() string
}

// withProcess is a target that runs in processes of its own: the idemds of
// --start-idemd.
type withProcess interface {
	// processPIDs returns their process ids, none when there are none to
	// read.
	processPIDs() []uint32
}

// perWorker is a target whose workers each keep to one of its servers: the
// service target over idemd replicas.
type perWorker interface {
	// worker returns the target worker i runs its jobs on.
	worker(i int) target
}

// workerTarget is the target worker i of t runs its jobs on.
func workerTarget(t target, i int) target {
	if pw, ok := t.(perWorker); ok {
		return pw.worker(i)
	}
	return t
}

// pooled is a target with a Postgres pool of its own.
type pooled interface {
	// poolAcquires returns how many connections the pool handed out so far
	// and how long the callers waited for them in all.
	poolAcquires(ctx context.Context) (n int64, wait time.Duration)
}

func newTally(target, scenario string) *tally {
	return &tally{target: target, scenario: scenario, op: newHistogram(), claim: newHistogram(),
		lag: newHistogram(), claimRun: newHistogram()}
}

// workerSlot is one worker's private histograms, reused from round to round.
type workerSlot struct {
	op, claim *hdrhistogram.Histogram
	// Fixed rate only: start lag and Claim latency from the actual start.
	lag, claimRun *hdrhistogram.Histogram
	ops           int64
	errors        int64
	firstErr      error
	outcomes      [numOutcomes]int64
	late          int64 // fixed rate: jobs that started more than lateAfter after their intended start
	// The batch scenario's delivery in flight.
	keys []string
	outs []outcome
	errs []error
}

// runner runs rounds with a fixed set of workers.
type runner struct {
	concurrency int
	slots       []workerSlot
	progress    *progress
	// pg, when not nil, accounts for Postgres's CPU and WAL per round.
	pg *pgMonitor
}

func newRunner(concurrency int, p *progress, pg *pgMonitor) *runner {
	r := &runner{concurrency: concurrency, slots: make([]workerSlot, concurrency), progress: p, pg: pg}
	for i := range r.slots {
		r.slots[i].op, r.slots[i].claim = newHistogram(), newHistogram()
		r.slots[i].lag, r.slots[i].claimRun = newHistogram(), newHistogram()
	}
	return r
}

// errorBackoff keeps a worker whose target fails from spinning.
const errorBackoff = 10 * time.Millisecond

// lateAfter is how far behind its intended start time a job of a fixed-rate
// round may start and still count as on time.
const lateAfter = time.Millisecond

// round runs t with the runner's workers until duration has passed or, when
// ops > 0, until ops jobs have started, then adds what it measured to into
// (when into is nil, the round is a warm-up and is thrown away). Jobs in
// flight at the deadline are finished and counted.
//
// With rate == 0 the workers run a closed loop: each starts its next job when
// the last one is answered. With rate > 0 the loop is open: job k of the round
// is due at begin + k/rate, the next free worker takes it (sleeping until it
// is due), and its latencies are measured from that intended start, not from
// when a worker got to it, so that time spent waiting for a free worker (at
// most concurrency jobs are in flight) counts as latency instead of being
// hidden by coordinated omission. Jobs due before the deadline that no worker
// reached by then are counted as missed.
func (r *runner) round(ctx context.Context, t target, wl *workload, duration time.Duration, ops int64, rate float64, into *tally) {
	for i := range r.slots {
		s := &r.slots[i]
		s.op.Reset()
		s.claim.Reset()
		s.lag.Reset()
		s.claimRun.Reset()
		s.ops, s.errors, s.firstErr, s.outcomes, s.late = 0, 0, nil, [numOutcomes]int64{}, 0
	}
	var (
		started  atomic.Int64
		next     atomic.Int64 // fixed rate: the index of the next job due
		wg       sync.WaitGroup
		deadline time.Time
	)
	// perJob is the messages of one job: a delivery of batchSize in the
	// batch scenario, which --ops counts in messages too.
	perJob := int64(1)
	if wl.batchSize > 0 {
		perJob = int64(wl.batchSize)
	}
	interval := 0.0 // fixed rate: nanoseconds between intended starts
	if rate > 0 {
		interval = float64(time.Second) / rate
	}
	// Everything read before and after the round is read outside its
	// measured time.
	var serverBefore map[uint32]time.Duration
	srv, isServed := t.(served)
	if isServed && into != nil {
		serverBefore = processCPU(srv.serverPIDs(ctx))
	}
	var acqBefore int64
	var waitBefore time.Duration
	p, isPooled := t.(pooled)
	if isPooled && into != nil {
		acqBefore, waitBefore = p.poolAcquires(ctx)
	}
	var idemdPIDs []uint32
	var idemdBefore map[uint32]time.Duration
	if wp, ok := t.(withProcess); ok && into != nil {
		idemdPIDs = wp.processPIDs()
		idemdBefore = processCPU(idemdPIDs)
	}
	var pgBefore pgSnapshot
	pgOK := false
	if r.pg != nil && into != nil {
		var err error
		pgBefore, err = r.pg.snapshot(ctx)
		pgOK = err == nil
	}
	selfBefore := selfCPU()
	machineBefore, machineOK := readMachineCPU()
	begin := time.Now()
	if ops <= 0 {
		deadline = begin.Add(duration)
	}
	for i := range r.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &r.slots[i]
			t := workerTarget(t, i)
			for ctx.Err() == nil {
				var intended time.Time
				if rate > 0 {
					k := next.Add(1) - 1
					if ops > 0 && k >= ops {
						return
					}
					intended = begin.Add(time.Duration(float64(k) * interval))
					if ops <= 0 && (!intended.Before(deadline) || !time.Now().Before(deadline)) {
						return
					}
					if wait := time.Until(intended); wait > 0 {
						time.Sleep(wait)
					}
				} else if ops > 0 {
					if started.Add(perJob)-perJob >= ops {
						return
					}
				} else if !time.Now().Before(deadline) {
					return
				}
				if wl.batchSize > 0 {
					if !r.delivery(ctx, t, wl, i) {
						return
					}
					continue
				}
				key := wl.key(i)
				t0 := time.Now()
				o, claimTook, err := t.job(ctx, key)
				took := time.Since(t0)
				var lag time.Duration
				if rate > 0 {
					// Measured from the intended start: the wait for a
					// free worker is part of the latency.
					lag = max(t0.Sub(intended), 0)
					if lag > lateAfter {
						s.late++
					}
					took += lag
					claimTook += lag
				}
				if err != nil {
					if ctx.Err() != nil {
						return // interrupted: not the target's fault
					}
					s.errors++
					if s.firstErr == nil {
						s.firstErr = err
					}
					r.progress.add(1)
					time.Sleep(errorBackoff)
					continue
				}
				wl.finished(i, key, o)
				recordLatency(s.op, took)
				recordLatency(s.claim, claimTook)
				if rate > 0 {
					recordLatency(s.lag, lag)
					recordLatency(s.claimRun, claimTook-lag)
				}
				s.ops++
				s.outcomes[o]++
				r.progress.add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	machineAfter, machineAfterOK := readMachineCPU()
	if into == nil {
		return
	}
	into.selfCPU += selfCPU() - selfBefore
	if machineOK && machineAfterOK {
		// Linux's iowait counter can step back (its documentation of
		// /proc/stat says so); a step back counts as none.
		into.machine.busy += max(machineAfter.busy-machineBefore.busy, 0)
		into.machine.idle += max(machineAfter.idle-machineBefore.idle, 0)
		into.machine.iowait += max(machineAfter.iowait-machineBefore.iowait, 0)
		into.machine.steal += max(machineAfter.steal-machineBefore.steal, 0)
		into.machineRounds++
	}
	// Every replica's CPU is the target's.
	for pid, cpu := range processCPU(idemdPIDs) {
		if before, ok := idemdBefore[pid]; ok {
			into.idemdCPU += cpu - before
		}
	}
	if pgOK {
		if pgAfter, err := r.pg.snapshot(ctx); err == nil {
			app := ""
			if op, ok := t.(onPostgres); ok {
				app = op.pgApp()
			}
			into.pg.add(r.pg.round(pgBefore, pgAfter, app))
			into.pgRead = true
		}
	}
	if isServed {
		// Backends the pool opened during the round count from zero.
		for pid, cpu := range processCPU(srv.serverPIDs(ctx)) {
			into.serverRead = true
			into.serverCPU += cpu - serverBefore[pid]
		}
	}
	if isPooled {
		acq, wait := p.poolAcquires(ctx)
		into.acquires += acq - acqBefore
		into.acquireWait += wait - waitBefore
	}
	var roundOps, roundStarted int64
	for i := range r.slots {
		s := &r.slots[i]
		roundStarted += s.ops + s.errors
		into.late += s.late
		into.op.Merge(s.op)
		into.claim.Merge(s.claim)
		into.lag.Merge(s.lag)
		into.claimRun.Merge(s.claimRun)
		into.ops += s.ops
		roundOps += s.ops
		into.errors += s.errors
		if into.firstErr == nil {
			into.firstErr = s.firstErr
		}
		for o, n := range s.outcomes {
			into.outcomes[o] += n
		}
	}
	if rate > 0 && ops <= 0 {
		// Jobs due before the deadline: k/rate < duration.
		due := int64(math.Ceil(duration.Seconds() * rate))
		into.missed += max(due-roundStarted, 0)
	}
	into.elapsed += elapsed
	into.rounds = append(into.rounds, float64(roundOps)/elapsed.Seconds())
}

// delivery runs one delivery of the batch scenario on worker i: batchSize
// new keys, claimed and completed together (runJobs). Each message counts as
// an op, as do its outcome and error; the latencies are the delivery's, one
// sample each. It returns false when ctx ended the delivery.
func (r *runner) delivery(ctx context.Context, t target, wl *workload, i int) bool {
	s := &r.slots[i]
	n := wl.batchSize
	if len(s.keys) != n {
		s.keys, s.outs, s.errs = make([]string, n), make([]outcome, n), make([]error, n)
	}
	for j := range n {
		s.keys[j] = wl.key(i)
		s.errs[j] = nil
	}
	t0 := time.Now()
	claimTook := runJobs(ctx, t, s.keys, s.outs, s.errs)
	took := time.Since(t0)
	failed := 0
	for j, err := range s.errs {
		if err != nil {
			if ctx.Err() != nil {
				return false // interrupted: not the target's fault
			}
			failed++
			s.errors++
			if s.firstErr == nil {
				s.firstErr = err
			}
			continue
		}
		wl.finished(i, s.keys[j], s.outs[j])
		s.ops++
		s.outcomes[s.outs[j]]++
	}
	if failed < n {
		recordLatency(s.op, took)
		recordLatency(s.claim, claimTook)
	}
	r.progress.add(int64(n))
	if failed > 0 {
		time.Sleep(errorBackoff)
	}
	return true
}
