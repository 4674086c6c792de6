package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// report is the run's outcome; --json prints it as is.
type report struct {
	Results []result  `json:"results"`
	Skipped []skipped `json:"skipped,omitempty"`
	// Prefill and Purge are the growth runs' fills (service-prefilled,
	// --purge).
	Prefill *prefillReport `json:"prefill,omitempty"`
	Purge   *purgeReport   `json:"purge,omitempty"`
	// BatchSize is --batch-size when the batch scenario ran: its messages
	// per delivery; 0 (left out) otherwise.
	BatchSize int `json:"batch_size,omitempty"`
	// Steps is --steps when the steps scenario ran: its effects per job; 0
	// (left out) otherwise.
	Steps int `json:"steps,omitempty"`

	Concurrency int `json:"concurrency"`
	// Rate is --rate: jobs per second of a fixed-rate (open-loop) run; 0
	// (left out) for the closed loop.
	Rate              float64 `json:"rate,omitempty"`
	Rounds            int     `json:"rounds"`
	Compare           bool    `json:"compare"`
	DurationPerTarget string  `json:"duration_per_target,omitempty"`
	OpsPerTarget      int64   `json:"ops_per_target,omitempty"`
	ResultBytes       int     `json:"result_bytes"`
	IdemdAddr         string  `json:"idemd,omitempty"`
	IdemdPoolMaxConns int32   `json:"idemd_pool_max_conns,omitempty"`
	// IdemdReplicas is how many idemds --start-idemd ran for each service
	// target on Postgres (--idemd-replicas).
	IdemdReplicas int `json:"idemd_replicas,omitempty"`
	// Coalesce is --coalesce: the service targets' client coalesces its
	// Claims and Completes into batch RPCs.
	Coalesce bool `json:"coalesce,omitempty"`
	// PostgresLocal is true when Postgres's processes could be read from
	// /proc, so that its CPU time is in the results.
	PostgresLocal   bool      `json:"postgres_local"`
	SQLPoolMaxConns int32     `json:"sql_pool_max_conns,omitempty"`
	NumCPU          int       `json:"num_cpu"`
	GOMAXPROCS      int       `json:"gomaxprocs"`
	LoadBefore      []float64 `json:"load_average_before"`
	LoadAfter       []float64 `json:"load_average_after"`
	StartedAt       time.Time `json:"started_at"`
}

// result is one target in one scenario. Latencies are in milliseconds.
type result struct {
	Target      string  `json:"target"`
	Scenario    string  `json:"scenario"`
	Concurrency int     `json:"concurrency"`
	Ops         int64   `json:"ops"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50Ms       float64 `json:"p50_ms"`
	P95Ms       float64 `json:"p95_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	// RatioToSQL is OpsPerSec over the sql target's in the same scenario;
	// null when the sql target did not run.
	RatioToSQL *float64 `json:"ratio_to_sql"`
	// The Claim alone (for sql the INSERT, for redis the SET NX).
	ClaimP50Ms  float64 `json:"claim_p50_ms"`
	ClaimP95Ms  float64 `json:"claim_p95_ms"`
	ClaimP99Ms  float64 `json:"claim_p99_ms"`
	ClaimP999Ms float64 `json:"claim_p999_ms"`

	// CPU time per op, in microseconds, by process: this process (the load
	// generator, with the Go SDK or pgx), the idemd that --start-idemd
	// started (null otherwise), and the processes serving the target's
	// store on this machine: the Postgres backends (the target's own plus
	// those that exited during its rounds) or redis-server, 0 where they
	// cannot be read.
	CPUUsPerOp      float64  `json:"cpu_us_per_op"`
	IdemdCPUUsPerOp *float64 `json:"idemd_cpu_us_per_op"`
	StoreCPUUsPerOp float64  `json:"store_cpu_us_per_op"`
	// Postgres, per op, read per round (pgMonitor): the CPU time of the
	// target's own backends (by application_name), of backends that exited
	// during its rounds (the postmaster's reaped children, anyone's), of
	// Postgres's background processes (walwriter, checkpointer, …), and the
	// WAL written (pg_current_wal_lsn() before and after each round, by
	// anyone). Null when Postgres could not be read: the CPU fields when it
	// runs on another machine, all of them when the run has no Postgres.
	PostgresCPUUsPerOp           *float64 `json:"postgres_cpu_us_per_op"`
	PostgresOwnCPUUsPerOp        *float64 `json:"postgres_own_cpu_us_per_op"`
	PostgresExitedCPUUsPerOp     *float64 `json:"postgres_exited_cpu_us_per_op"`
	PostgresBackgroundCPUUsPerOp *float64 `json:"postgres_background_cpu_us_per_op"`
	// PostgresReapedCPUUsPerOp is the CPU time of every backend that exited
	// during the target's rounds, anyone's, per op (for context: the part
	// charged to the target is PostgresExitedCPUUsPerOp, all of a round's
	// when PostgresBackendsExited shows one of its own exited in it).
	PostgresReapedCPUUsPerOp *float64 `json:"postgres_reaped_cpu_us_per_op"`
	PostgresBackendsExited   *int     `json:"postgres_backends_exited"`
	WALBytesPerOp            *float64 `json:"wal_bytes_per_op"`
	// storeRead is true when the store's CPU was read: false for SQLite,
	// which runs inside idemd, and for a Postgres or Redis elsewhere.
	storeRead bool
	pgStore   bool // the target's store is Postgres
	// TotalCPUUsPerOp is bench + idemd + store.
	TotalCPUUsPerOp float64 `json:"total_cpu_us_per_op"`
	// StoreCPURatioToSQL and WALRatioToSQL are this target's store CPU and
	// WAL per op over the sql target's in the same scenario.
	StoreCPURatioToSQL *float64 `json:"store_cpu_ratio_to_sql"`
	WALRatioToSQL      *float64 `json:"wal_ratio_to_sql"`
	// StoreCPURatioToKeys and WALRatioToKeys are, in the steps scenario,
	// a form with steps' store CPU and WAL per job over its target's form
	// with a key per effect (TARGET-keys), in the same rounds.
	StoreCPURatioToKeys *float64 `json:"store_cpu_ratio_to_keys,omitempty"`
	WALRatioToKeys      *float64 `json:"wal_ratio_to_keys,omitempty"`
	// What the machine's cores did during the target's rounds, in percent
	// of their time, from /proc/stat: running anything (every process, the
	// kernel's interrupts), idle, idle while a task waited for I/O (an
	// fsync), and stolen by the hypervisor. Absent off Linux, or when a
	// round ended within one of its 10 ms ticks. A closed loop that leaves
	// the cores idle is bound by latency, not by CPU.
	MachineBusyPct   *float64 `json:"machine_busy_pct,omitempty"`
	MachineIdlePct   *float64 `json:"machine_idle_pct,omitempty"`
	MachineIOWaitPct *float64 `json:"machine_iowait_pct,omitempty"`
	MachineStealPct  *float64 `json:"machine_steal_pct,omitempty"`
	// PoolWaitMs is the mean wait for a connection of the target's own
	// Postgres pool (sql; service with --start-idemd), in milliseconds.
	PoolWaitMs *float64 `json:"pool_wait_ms,omitempty"`

	Errors     int64            `json:"errors"`
	FirstError string           `json:"first_error,omitempty"`
	Outcomes   map[string]int64 `json:"outcomes"`
	Seconds    float64          `json:"seconds"`
	// RoundOpsPerSec is each round's throughput, to show the spread.
	RoundOpsPerSec []float64 `json:"round_ops_per_sec"`
	// RoundRatiosToSQL is each round's throughput over the sql target's in
	// the same round (with --compare, rounds of the targets alternate, so
	// round i of each ran within seconds of the other): the spread of
	// RatioToSQL. Absent without the sql target or with rounds of another
	// number.
	RoundRatiosToSQL []float64 `json:"round_ratios_to_sql,omitempty"`

	// Fixed rate (--rate) only: the rate asked for (OpsPerSec is the rate
	// achieved), the jobs that started more than 1 ms after their intended
	// start, and the jobs due within the run that never started.
	TargetRate float64 `json:"target_rate,omitempty"`
	Late       *int64  `json:"late,omitempty"`
	Missed     *int64  `json:"missed,omitempty"`
	// Also fixed rate only: percentiles of how late jobs started (the wait
	// for a free worker, and this process's own scheduling delay), and of
	// the Claim's latency from when its job did start, which leaves the
	// start lag out. The claim columns count it in.
	StartLagP50Ms *float64 `json:"start_lag_p50_ms,omitempty"`
	StartLagP99Ms *float64 `json:"start_lag_p99_ms,omitempty"`
	ClaimRunP50Ms *float64 `json:"claim_from_start_p50_ms,omitempty"`
	ClaimRunP99Ms *float64 `json:"claim_from_start_p99_ms,omitempty"`
}

type skipped struct {
	Target string `json:"target"`
	Reason string `json:"reason"`
}

func ms(h *hdrhistogram.Histogram, q float64) float64 {
	return round3(float64(h.ValueAtQuantile(q)) / 1000)
}

func round3(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 3, 64), 64)
	return v
}

// add appends one scenario's tallies, with ratios to its sql tally.
func (r *report) add(tallies []*tally) {
	var sqlRate float64
	var sqlRounds []float64
	results := make([]result, len(tallies))
	for i, t := range tallies {
		rate := 0.0
		if t.elapsed > 0 {
			rate = float64(t.ops) / t.elapsed.Seconds()
		}
		res := result{
			Target: t.target, Scenario: t.scenario, Concurrency: r.Concurrency,
			Ops: t.ops, OpsPerSec: round3(rate),
			P50Ms: ms(t.op, 50), P95Ms: ms(t.op, 95), P99Ms: ms(t.op, 99), P999Ms: ms(t.op, 99.9),
			MaxMs:      round3(float64(t.op.Max()) / 1000),
			ClaimP50Ms: ms(t.claim, 50), ClaimP95Ms: ms(t.claim, 95), ClaimP99Ms: ms(t.claim, 99), ClaimP999Ms: ms(t.claim, 99.9),
			Errors: t.errors, Outcomes: map[string]int64{}, Seconds: round3(t.elapsed.Seconds()),
			pgStore: t.pgStore,
		}
		if t.firstErr != nil {
			res.FirstError = t.firstErr.Error()
		}
		if t.ops > 0 {
			perOp := func(d time.Duration) float64 { return round3(float64(d.Microseconds()) / float64(t.ops)) }
			res.CPUUsPerOp = perOp(t.selfCPU)
			res.StoreCPUUsPerOp, res.storeRead = perOp(t.serverCPU), t.serverRead
			if t.hasIdemd {
				v := perOp(t.idemdCPU)
				res.IdemdCPUUsPerOp = &v
			}
			if t.pgRead {
				wal := round3(float64(t.pg.wal) / float64(t.ops))
				res.WALBytesPerOp = &wal
				if r.PostgresLocal {
					own, exited, bg, reaped := perOp(t.pg.own), perOp(t.pg.exited), perOp(t.pg.background), perOp(t.pg.reaped)
					all := perOp(t.pg.own + t.pg.exited)
					n := t.pg.ownExited
					res.PostgresOwnCPUUsPerOp, res.PostgresExitedCPUUsPerOp, res.PostgresBackgroundCPUUsPerOp = &own, &exited, &bg
					res.PostgresReapedCPUUsPerOp, res.PostgresBackendsExited = &reaped, &n
					res.PostgresCPUUsPerOp = &all
					if t.pgStore {
						res.StoreCPUUsPerOp, res.storeRead = all, true
					}
				}
			}
			res.TotalCPUUsPerOp = round3(res.CPUUsPerOp + res.StoreCPUUsPerOp)
			if res.IdemdCPUUsPerOp != nil {
				res.TotalCPUUsPerOp = round3(res.TotalCPUUsPerOp + *res.IdemdCPUUsPerOp)
			}
		}
		m := t.machine
		if all := m.busy + m.idle + m.iowait + m.steal; t.machineRounds == len(t.rounds) && all > 0 {
			pct := func(d time.Duration) *float64 { v := round3(100 * float64(d) / float64(all)); return &v }
			res.MachineBusyPct, res.MachineIdlePct = pct(m.busy), pct(m.idle)
			res.MachineIOWaitPct, res.MachineStealPct = pct(m.iowait), pct(m.steal)
		}
		if t.acquires > 0 {
			wait := round3(float64(t.acquireWait.Microseconds()) / 1000 / float64(t.acquires))
			res.PoolWaitMs = &wait
		}
		if r.Rate > 0 {
			late, missed := t.late, t.missed
			res.TargetRate, res.Late, res.Missed = r.Rate, &late, &missed
			lag50, lag99 := ms(t.lag, 50), ms(t.lag, 99)
			run50, run99 := ms(t.claimRun, 50), ms(t.claimRun, 99)
			res.StartLagP50Ms, res.StartLagP99Ms = &lag50, &lag99
			res.ClaimRunP50Ms, res.ClaimRunP99Ms = &run50, &run99
		}
		for o, n := range t.outcomes {
			if n > 0 {
				res.Outcomes[outcomeNames[o]] = n
			}
		}
		for _, x := range t.rounds {
			res.RoundOpsPerSec = append(res.RoundOpsPerSec, round3(x))
		}
		if t.target == "sql" {
			sqlRate, sqlRounds = rate, t.rounds
		}
		results[i] = res
	}
	if sqlRate > 0 {
		for i := range results {
			ratio := round3(results[i].OpsPerSec / sqlRate)
			results[i].RatioToSQL = &ratio
			results[i].RoundRatiosToSQL = roundRatios(results[i].RoundOpsPerSec, sqlRounds)
		}
	}
	for _, sq := range results {
		if sq.Target != "sql" {
			continue
		}
		for i := range results {
			if sq.StoreCPUUsPerOp > 0 && results[i].storeRead && results[i].Target != "redis" {
				ratio := round3(results[i].StoreCPUUsPerOp / sq.StoreCPUUsPerOp)
				results[i].StoreCPURatioToSQL = &ratio
			}
			if sq.WALBytesPerOp != nil && *sq.WALBytesPerOp > 0 && results[i].WALBytesPerOp != nil {
				ratio := round3(*results[i].WALBytesPerOp / *sq.WALBytesPerOp)
				results[i].WALRatioToSQL = &ratio
			}
		}
	}
	ratiosToKeys(results)
	r.Results = append(r.Results, results...)
}

// ratiosToKeys sets, in the steps scenario, each form with steps' ratios
// to its target's form with a key per effect.
func ratiosToKeys(results []result) {
	keys := map[string]*result{}
	for i := range results {
		if label, form, ok := stepsFormOf(results[i].Target); ok && form == formKeys && results[i].Scenario == scenarioSteps {
			keys[label] = &results[i]
		}
	}
	for i := range results {
		res := &results[i]
		label, form, ok := stepsFormOf(res.Target)
		k := keys[label]
		// The ratios are Postgres's: SQLite runs inside idemd and writes
		// no WAL of Postgres's, whatever others write meanwhile.
		if !ok || form == formKeys || res.Scenario != scenarioSteps || k == nil || !res.pgStore || !k.pgStore {
			continue
		}
		if res.storeRead && k.storeRead && k.StoreCPUUsPerOp > 0 {
			ratio := round3(res.StoreCPUUsPerOp / k.StoreCPUUsPerOp)
			res.StoreCPURatioToKeys = &ratio
		}
		if res.WALBytesPerOp != nil && k.WALBytesPerOp != nil && *k.WALBytesPerOp > 0 {
			ratio := round3(*res.WALBytesPerOp / *k.WALBytesPerOp)
			res.WALRatioToKeys = &ratio
		}
	}
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "concurrency %d, %d round(s) per target", r.Concurrency, r.Rounds)
	if r.DurationPerTarget != "" {
		fmt.Fprintf(w, ", %s measured per target and scenario", r.DurationPerTarget)
	} else {
		fmt.Fprintf(w, ", %d jobs per target and scenario", r.OpsPerTarget)
	}
	fmt.Fprintf(w, ", result %d bytes\n", r.ResultBytes)
	if r.Rate > 0 {
		fmt.Fprintf(w, "open loop at %g jobs/s per target, at most %d in flight; latencies from each job's intended start\n", r.Rate, r.Concurrency)
	}
	if r.BatchSize > 0 {
		fmt.Fprintf(w, "batch: deliveries of %d messages; ops count messages, the latencies are a whole delivery's (claim: its BatchClaim, or sql's and redis's Claims one after another, added up)\n", r.BatchSize)
	}
	if r.Steps > 0 {
		fmt.Fprintf(w, "steps: jobs of %d effects; TARGET-steps claims one key and records a CompleteStep per effect, TARGET-steps-started a StartStep before each too, TARGET-keys claims and completes a key per effect; ops count jobs (claim: the first Claim)\n", r.Steps)
	}
	fmt.Fprintf(w, "%d CPUs (GOMAXPROCS %d); load average %s at the start, %s at the end\n",
		r.NumCPU, r.GOMAXPROCS, formatLoad(r.LoadBefore), formatLoad(r.LoadAfter))
	if r.IdemdAddr != "" {
		fmt.Fprintf(w, "idemd: %s", r.IdemdAddr)
		if r.IdemdReplicas > 1 {
			fmt.Fprintf(w, ", %d replicas per target on Postgres, worker i on replica i mod %d, their CPU added up", r.IdemdReplicas, r.IdemdReplicas)
		}
		if r.IdemdPoolMaxConns > 0 {
			fmt.Fprintf(w, ", pool of %d connections", r.IdemdPoolMaxConns)
			if r.IdemdReplicas > 1 {
				fmt.Fprint(w, " each")
			}
		}
		fmt.Fprintln(w)
	}
	if r.Coalesce {
		fmt.Fprintln(w, "service targets: the SDK coalesces concurrent Claims and Completes into batch RPCs (--coalesce)")
	}
	if r.SQLPoolMaxConns > 0 {
		fmt.Fprintf(w, "sql: pool of %d connections\n", r.SQLPoolMaxConns)
	}
	if p := r.Prefill; p != nil {
		fmt.Fprintf(w, "service-prefilled: %s records in its table before the first round, inserted in %.1f s (ANALYZE and CHECKPOINT %.1f s)\n",
			formatCount(p.Records), p.FillSeconds, p.AnalyzeSeconds)
	}
	if p := r.Purge; p != nil {
		state := "purged them in"
		if !p.Finished {
			state = "had not purged them after"
		}
		fmt.Fprintf(w, "purge: %s records past their retention inserted in %.1f s; idemd's sweeper (every %s) %s %.1f s from the insert's commit; service-purging is the %.1f s rounds until then, service the rounds before and after\n",
			formatCount(p.Records), p.FillSeconds, p.SweepInterval, state, p.PurgeSeconds, p.RoundSeconds)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\ttarget\tops\tops/s\t×sql\tp50 ms\tp95 ms\tp99 ms\tp99.9 ms\tclaim p50\tclaim p99\tclaim p99.9\terrors\t")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t\n",
			res.Scenario, res.Target, res.Ops, res.OpsPerSec, ratioCell(res.RatioToSQL),
			res.P50Ms, res.P95Ms, res.P99Ms, res.P999Ms, res.ClaimP50Ms, res.ClaimP99Ms, res.ClaimP999Ms,
			res.Errors)
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU µs per job by process (store: the target's Postgres backends, or redis-server), WAL bytes per job; docs/BENCHMARKS.md says how each is counted")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\ttarget\tbench\tidemd\tstore\t(exited)\ttotal\tstore ×sql\tpg bg\tpg reaped\tWAL B/op\tWAL ×sql\t")
	for _, res := range r.Results {
		pg := func(x *float64) *float64 { // Postgres figures only for targets on Postgres
			if res.pgStore {
				return x
			}
			return nil
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n",
			res.Scenario, res.Target, res.CPUUsPerOp, numCell(res.IdemdCPUUsPerOp, 0),
			storeCell(res), numCell(pg(res.PostgresExitedCPUUsPerOp), 0), res.TotalCPUUsPerOp,
			ratioCell(res.StoreCPURatioToSQL), numCell(pg(res.PostgresBackgroundCPUUsPerOp), 0),
			numCell(pg(res.PostgresReapedCPUUsPerOp), 0),
			numCell(pg(res.WALBytesPerOp), 0), ratioCell(pg(res.WALRatioToSQL)))
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	for _, res := range r.Results {
		var parts []string
		for _, name := range outcomeNames {
			if n := res.Outcomes[name]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", name, n))
			}
		}
		var rounds []string
		for _, x := range res.RoundOpsPerSec {
			rounds = append(rounds, fmt.Sprintf("%.0f", x))
		}
		wait := ""
		if res.PoolWaitMs != nil {
			wait = fmt.Sprintf("; mean wait for a pool connection %.2f ms", *res.PoolWaitMs)
		}
		sched := ""
		if res.Late != nil && res.Missed != nil {
			sched = fmt.Sprintf("; %d started over 1 ms late, %d never started", *res.Late, *res.Missed)
			if res.StartLagP99Ms != nil && res.ClaimRunP99Ms != nil {
				sched += fmt.Sprintf("; start lag p50 %.2f ms, p99 %.2f ms; Claim from its job's actual start p50 %.2f ms, p99 %.2f ms",
					*res.StartLagP50Ms, *res.StartLagP99Ms, *res.ClaimRunP50Ms, *res.ClaimRunP99Ms)
			}
		}
		cores := ""
		if res.MachineBusyPct != nil {
			cores = fmt.Sprintf("; cores %.0f%% busy, %.0f%% idle, %.0f%% waiting for I/O, %.0f%% stolen",
				*res.MachineBusyPct, *res.MachineIdlePct, *res.MachineIOWaitPct, *res.MachineStealPct)
		}
		spread := ""
		if len(res.RoundRatiosToSQL) > 1 && res.Target != "sql" {
			spread = " (×sql " + spreadCell(res.RoundRatiosToSQL) + ")"
		}
		fmt.Fprintf(w, "%s/%s: %s; ops/s per round: %s%s%s%s%s\n", res.Scenario, res.Target, strings.Join(parts, ", "), strings.Join(rounds, " "), spread, cores, wait, sched)
		if res.FirstError != "" {
			fmt.Fprintf(w, "  first error: %s\n", res.FirstError)
		}
	}
	for _, res := range r.Results {
		if res.StoreCPURatioToKeys == nil && res.WALRatioToKeys == nil {
			continue
		}
		fmt.Fprintf(w, "%s/%s: per job, Postgres CPU %s and WAL %s of %s's\n", res.Scenario, res.Target,
			ratioCell(res.StoreCPURatioToKeys), ratioCell(res.WALRatioToKeys), keysTarget(res.Target))
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "%s: skipped: %s\n", s.Target, s.Reason)
	}
}

// keysTarget is the name of the form with a key per effect of the steps
// scenario's target name.
func keysTarget(name string) string {
	label, _, _ := stepsFormOf(name)
	return label + formKeys.suffix()
}

// roundRatios is each round's throughput over the sql target's in the same
// round, or nil when the two ran different numbers of rounds or a round of
// sql did nothing.
func roundRatios(rounds, sqlRounds []float64) []float64 {
	if len(rounds) == 0 || len(rounds) != len(sqlRounds) {
		return nil
	}
	ratios := make([]float64, len(rounds))
	for i, x := range rounds {
		if sqlRounds[i] <= 0 {
			return nil
		}
		ratios[i] = round3(x / sqlRounds[i])
	}
	return ratios
}

// spreadCell is the lowest and highest of ratios, as "0.81–0.95".
func spreadCell(ratios []float64) string {
	return fmt.Sprintf("%.2f–%.2f", slices.Min(ratios), slices.Max(ratios))
}

// ratioCell is a ratio with two decimals, or "-".
func ratioCell(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *x)
}

// numCell is a number with prec decimals, or "-".
func numCell(x *float64, prec int) string {
	if x == nil {
		return "-"
	}
	return strconv.FormatFloat(*x, 'f', prec, 64)
}

// storeCell is the store's CPU per op: "-" for a service target on SQLite,
// whose store is inside idemd, and for Postgres that cannot be read.
func storeCell(res result) string {
	if !res.storeRead {
		return "-"
	}
	return fmt.Sprintf("%.0f", res.StoreCPUUsPerOp)
}

func formatLoad(l []float64) string {
	if len(l) != 3 {
		return "(unknown)"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2])
}

// loadAverage reads the 1, 5 and 15 minute load averages; nil where
// /proc/loadavg does not exist.
func loadAverage() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	fields := strings.Fields(string(b))
	if len(fields) < 3 {
		return nil
	}
	out := make([]float64, 3)
	for i := range out {
		out[i], _ = strconv.ParseFloat(fields[i], 64)
	}
	return out
}

// progress draws a one-line progress bar on stderr while the rounds run,
// only when stderr is a terminal (or --progress always).
type progress struct {
	w        io.Writer
	enabled  bool
	rounds   int           // measured rounds in the whole run
	opsEach  int64         // jobs per target and scenario with --ops
	perRound time.Duration // length of a round without --ops
	done     atomic.Int64  // jobs since the phase began

	mu        sync.Mutex
	label     string
	measured  bool
	finished  int // measured rounds finished
	phaseFrom time.Time
	stopOnce  sync.Once
	quit      chan struct{}
	exited    chan struct{}
}

func newProgress(w io.Writer, mode string, rounds int, opsEach int64, perRound time.Duration) *progress {
	p := &progress{w: w, rounds: rounds, opsEach: opsEach, perRound: perRound}
	switch mode {
	case "always":
		p.enabled = true
	case "auto":
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				p.enabled = true
			}
		}
	}
	if !p.enabled {
		return p
	}
	p.quit, p.exited = make(chan struct{}), make(chan struct{})
	go p.loop()
	return p
}

func (p *progress) add(n int64) { p.done.Add(n) }

// phase starts the next round (round 0: a warm-up).
func (p *progress) phase(scenario, target string, round, rounds int) {
	if !p.enabled {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.measured {
		p.finished++
	}
	p.measured = round > 0
	if round > 0 {
		p.label = fmt.Sprintf("%s · round %d/%d · %s", scenario, round, rounds, target)
	} else {
		p.label = fmt.Sprintf("warm-up · %s", target)
	}
	p.phaseFrom = time.Now()
	p.done.Store(0)
}

func (p *progress) loop() {
	defer close(p.exited)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.quit:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-tick.C:
			p.draw()
		}
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	label, finished, measured, from := p.label, p.finished, p.measured, p.phaseFrom
	p.mu.Unlock()
	done := p.done.Load()
	elapsed := time.Since(from)
	var within float64 // how far the current round is
	switch {
	case !measured:
	case p.opsEach > 0:
		within = float64(done) / (float64(p.opsEach) / float64(max(p.rounds, 1)))
	case p.perRound > 0:
		within = elapsed.Seconds() / p.perRound.Seconds()
	}
	frac := (float64(finished) + min(within, 1)) / float64(max(p.rounds, 1))
	const width = 30
	filled := int(frac * width)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %3.0f%%  %s  %.0f ops/s",
		strings.Repeat("#", filled), strings.Repeat("-", width-filled), frac*100, label, rate)
}

func (p *progress) stop() {
	if !p.enabled {
		return
	}
	p.stopOnce.Do(func() {
		close(p.quit)
		<-p.exited
	})
}
