package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/internal/testsupport/testbin"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// idemdBinary is idemd, built once for --start-idemd.
var idemdBinary string

func TestMain(m *testing.M) { testbin.MainOf(m, "../idemd", "idemd", &idemdBinary) }

// These are smoke tests: they run the tool's whole loop for a few jobs per
// target so that it cannot rot, and check the shape of what it prints. They
// assert nothing about speed.

// smokeArgs are a tiny run: 40 jobs per target and scenario, in two rounds.
func smokeArgs(t *testing.T, extra ...string) []string {
	return append([]string{
		"--database-url", testdb.BaseURL(t),
		"--ops", "40", "--rounds", "2", "--concurrency", "4", "--warmup", "0s",
		"--progress", "never", "--sweep-interval", "0s", "--idemd-bin", idemdBinary,
	}, extra...)
}

func runBench(t *testing.T, args []string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(t.Context(), args, &out, &errOut); err != nil {
		t.Fatalf("idem-bench %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestCompareJSON drives a test server and the sql target (and Redis when one
// answers) through every scenario and checks the JSON report.
func TestCompareJSON(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	stdout, stderr := runBench(t, smokeArgs(t, "--addr", srv.Addr, "--compare",
		"--target", "service,sql,redis", "--scenario", "unique,hot,replay", "--json"))

	var raw struct {
		Results []map[string]any `json:"results"`
		Skipped []skipped        `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	wantTargets := []string{"service", "sql", "redis"}
	if len(raw.Skipped) > 0 {
		if len(raw.Skipped) != 1 || raw.Skipped[0].Target != "redis" || !strings.Contains(stderr, "skipping the redis target") {
			t.Fatalf("skipped %+v, stderr %q; only redis may be skipped, and it must say so", raw.Skipped, stderr)
		}
		wantTargets = wantTargets[:2]
	}
	if got, want := len(raw.Results), 3*len(wantTargets); got != want {
		t.Fatalf("%d results, want %d (3 scenarios × %v):\n%s", got, want, wantTargets, stdout)
	}
	fields := []string{"target", "scenario", "concurrency", "ops", "ops_per_sec",
		"p50_ms", "p95_ms", "p99_ms", "p999_ms", "ratio_to_sql", "claim_p99_ms"}
	for i, res := range raw.Results {
		for _, f := range fields {
			if _, ok := res[f]; !ok {
				t.Errorf("result %d has no %q: %v", i, f, res)
			}
		}
		target, _ := res["target"].(string)
		scenario, _ := res["scenario"].(string)
		if want := wantTargets[i%len(wantTargets)]; target != want {
			t.Errorf("result %d is target %q, want %q", i, target, want)
		}
		if want := []string{"unique", "hot", "replay"}[i/len(wantTargets)]; scenario != want {
			t.Errorf("result %d is scenario %q, want %q", i, scenario, want)
		}
		if ops, _ := res["ops"].(float64); ops <= 0 {
			t.Errorf("%s/%s: ops %v, want > 0", scenario, target, res["ops"])
		}
		if rate, _ := res["ops_per_sec"].(float64); rate <= 0 {
			t.Errorf("%s/%s: ops_per_sec %v, want > 0", scenario, target, res["ops_per_sec"])
		}
		if errs, _ := res["errors"].(float64); errs != 0 {
			t.Errorf("%s/%s: %v errors, the first: %v", scenario, target, errs, res["first_error"])
		}
		if c, _ := res["concurrency"].(float64); c != 4 {
			t.Errorf("%s/%s: concurrency %v, want 4", scenario, target, res["concurrency"])
		}
		if ratio, ok := res["ratio_to_sql"].(float64); !ok || ratio <= 0 || (target == "sql" && ratio != 1) {
			t.Errorf("%s/%s: ratio_to_sql %v, want a positive number (1 for sql)", scenario, target, res["ratio_to_sql"])
		}
		// What the cores did: four shares of their time, or none when
		// the rounds were too short for /proc/stat's 10 ms ticks to move
		// (these tiny ones can be; TestMachineShares covers the numbers).
		if _, ok := res["machine_busy_pct"]; ok {
			sum := 0.0
			for _, f := range []string{"machine_busy_pct", "machine_idle_pct", "machine_iowait_pct", "machine_steal_pct"} {
				x, ok := res[f].(float64)
				if !ok || x < 0 || x > 100 {
					t.Errorf("%s/%s: %s %v, want a share between 0 and 100", scenario, target, f, res[f])
				}
				sum += x
			}
			if math.Abs(sum-100) > 0.01 {
				t.Errorf("%s/%s: the cores' shares add up to %v, want 100", scenario, target, sum)
			}
		}
		// Each round's ratio: its throughput over sql's in the same round.
		rounds, _ := res["round_ops_per_sec"].([]any)
		ratios, _ := res["round_ratios_to_sql"].([]any)
		if len(rounds) != 2 || len(ratios) != 2 {
			t.Errorf("%s/%s: round_ops_per_sec %v, round_ratios_to_sql %v: want two of each", scenario, target, rounds, ratios)
			continue
		}
		for k, r := range ratios {
			if x, _ := r.(float64); x <= 0 || (target == "sql" && x != 1) {
				t.Errorf("%s/%s: round %d's ratio %v, want a positive number (1 for sql)", scenario, target, k, r)
			}
		}
	}
}

// TestStartIdemd starts idemd processes on Postgres and on SQLite next to
// the sql target and prints both tables.
func TestStartIdemd(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, smokeArgs(t, "--start-idemd", "--target", "service,service-sqlite,service-b,sql",
		"--idemd-bin-b", idemdBinary, "--scenario", "unique"))
	rows := map[string][]string{}
	for line := range strings.Lines(stdout) {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "unique" {
			if _, seen := rows[f[1]]; !seen { // the first table's row
				rows[f[1]] = f
			}
		}
	}
	if !strings.Contains(stdout, "a process of its own") || !strings.Contains(stdout, "CPU µs per job by process") {
		t.Fatalf("no mention of the idemd process, or no CPU table:\n%s", stdout)
	}
	for _, target := range []string{"service", "service-sqlite", "service-b", "sql"} {
		if f := rows[target]; f == nil || f[2] == "0" {
			t.Errorf("no unique/%s row, or no jobs in it:\n%s", target, stdout)
		}
	}
}

// TestHTTPTargets runs the http target (client/idemhttp in front of a
// handler that does nothing, on an idemd of its own) and http-plain (the
// same server without it) next to service, first requests and replays.
func TestHTTPTargets(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, smokeArgs(t, "--start-idemd", "--target", "service,http,http-plain", "--scenario", "unique,replay", "--json"))
	var raw struct {
		Results []struct {
			Target   string           `json:"target"`
			Scenario string           `json:"scenario"`
			Ops      int64            `json:"ops"`
			Errors   int64            `json:"errors"`
			First    string           `json:"first_error"`
			Outcomes map[string]int64 `json:"outcomes"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	seen := map[string]bool{}
	for _, r := range raw.Results {
		seen[r.Scenario+"/"+r.Target] = true
		if r.Ops <= 0 || r.Errors != 0 {
			t.Errorf("%s/%s: %d ops, %d errors (%s)", r.Scenario, r.Target, r.Ops, r.Errors, r.First)
		}
		if r.Scenario == "replay" && r.Target == "http" && r.Outcomes["replayed"] == 0 {
			t.Errorf("replay/http: no request was replayed: %v", r.Outcomes)
		}
	}
	for _, want := range []string{"unique/service", "unique/http", "unique/http-plain", "replay/http"} {
		if !seen[want] {
			t.Errorf("no %s result:\n%s", want, stdout)
		}
	}
}

// TestWaitScenario runs the wait scenario over two started replicas and
// checks its JSON report: every waiting Claim was answered COMPLETED.
func TestWaitScenario(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, []string{
		"--database-url", testdb.BaseURL(t), "--idemd-bin", idemdBinary, "--start-idemd",
		"--scenario", "wait", "--ops", "20", "--concurrency", "4", "--sweep-interval", "0s", "--json",
	})
	var rep waitReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout)
	}
	if rep.Jobs < 20 || rep.Errors != 0 || rep.WakeP50Ms <= 0 || rep.WakeP99Ms < rep.WakeP50Ms || !strings.Contains(rep.Replicas, "waiting Claims on") {
		t.Fatalf("report %+v", rep)
	}
}

// TestCPUAndWALByProcess checks the JSON fields of the CPU and WAL
// accounting: idemd's CPU is there for started idemds only, Postgres's for
// targets on it, and jobs that write give WAL.
func TestCPUAndWALByProcess(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, smokeArgs(t, "--start-idemd", "--target", "service,service-sqlite,sql",
		"--scenario", "unique", "--json"))
	var raw struct {
		PostgresLocal bool             `json:"postgres_local"`
		Results       []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if len(raw.Results) != 3 {
		t.Fatalf("%d results, want 3:\n%s", len(raw.Results), stdout)
	}
	for _, res := range raw.Results {
		target := res["target"].(string)
		number := func(f string) bool { _, ok := res[f].(float64); return ok }
		if got, want := number("idemd_cpu_us_per_op"), target != "sql"; got != want {
			t.Errorf("%s: idemd_cpu_us_per_op %v, want a number: %v", target, res["idemd_cpu_us_per_op"], want)
		}
		for _, f := range []string{"cpu_us_per_op", "store_cpu_us_per_op", "total_cpu_us_per_op", "wal_bytes_per_op"} {
			if !number(f) {
				t.Errorf("%s: %s is %v, want a number", target, f, res[f])
			}
		}
		if raw.PostgresLocal {
			for _, f := range []string{"postgres_cpu_us_per_op", "postgres_own_cpu_us_per_op", "postgres_exited_cpu_us_per_op",
				"postgres_background_cpu_us_per_op", "postgres_reaped_cpu_us_per_op", "postgres_backends_exited"} {
				if !number(f) {
					t.Errorf("%s: %s is %v, want a number", target, f, res[f])
				}
			}
		}
		// Every job of unique inserts a row: WAL is written, whoever else
		// writes too. SQLite's jobs write none of Postgres's, but a
		// neighbour may, so nothing is asserted for it.
		if wal, _ := res["wal_bytes_per_op"].(float64); target != "service-sqlite" && wal <= 0 {
			t.Errorf("%s: wal_bytes_per_op %v, want > 0", target, wal)
		}
		if target == "sql" {
			if r, _ := res["wal_ratio_to_sql"].(float64); r != 1 {
				t.Errorf("sql: wal_ratio_to_sql %v, want 1", res["wal_ratio_to_sql"])
			}
		}
	}
}

// TestBatchScenario runs the batch scenario on idemd (Postgres and SQLite)
// and the sql target: every message of every delivery counts as a job and is
// acquired once, and the CPU and WAL per job are there for it as for the
// other scenarios.
func TestBatchScenario(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, smokeArgs(t, "--start-idemd", "--target", "service,service-sqlite,sql",
		"--scenario", "batch", "--batch-size", "10", "--ops", "200", "--json"))
	var raw struct {
		BatchSize     int              `json:"batch_size"`
		PostgresLocal bool             `json:"postgres_local"`
		Results       []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if raw.BatchSize != 10 || len(raw.Results) != 3 {
		t.Fatalf("batch_size %d and %d results, want 10 and 3:\n%s", raw.BatchSize, len(raw.Results), stdout)
	}
	for _, res := range raw.Results {
		target := res["target"].(string)
		// --ops counts messages: 100 per round, ten deliveries of ten.
		outcomes, _ := res["outcomes"].(map[string]any)
		if ops, _ := res["ops"].(float64); ops != 200 || outcomes["acquired"] != 200.0 {
			t.Errorf("%s: ops %v, outcomes %v; want 200 messages, each acquired", target, res["ops"], outcomes)
		}
		if errs, _ := res["errors"].(float64); errs != 0 {
			t.Errorf("%s: %v errors, the first: %v", target, errs, res["first_error"])
		}
		if p50, _ := res["p50_ms"].(float64); p50 <= 0 {
			t.Errorf("%s: p50 %v ms, want the deliveries' latency", target, res["p50_ms"])
		}
		for _, f := range []string{"cpu_us_per_op", "total_cpu_us_per_op", "wal_bytes_per_op"} {
			if _, ok := res[f].(float64); !ok {
				t.Errorf("%s: %s is %v, want a number", target, f, res[f])
			}
		}
		if _, ok := res["idemd_cpu_us_per_op"].(float64); ok != (target != "sql") {
			t.Errorf("%s: idemd_cpu_us_per_op %v", target, res["idemd_cpu_us_per_op"])
		}
		if wal, _ := res["wal_bytes_per_op"].(float64); target != "service-sqlite" && wal <= 0 {
			t.Errorf("%s: wal_bytes_per_op %v, want > 0: every message inserts a row", target, wal)
		}
		if ratio, _ := res["ratio_to_sql"].(float64); ratio <= 0 {
			t.Errorf("%s: ratio_to_sql %v, want a positive number", target, res["ratio_to_sql"])
		}
	}
}

// TestFixedRate runs the open loop (--rate) against the in-process idemd and
// the sql target and checks the JSON report's shape; nothing about timing.
func TestFixedRate(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, smokeArgs(t, "--start-idemd", "--target", "service,sql",
		"--scenario", "unique", "--rate", "200", "--json"))
	var raw struct {
		Rate    float64          `json:"rate"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if raw.Rate != 200 || len(raw.Results) != 2 {
		t.Fatalf("rate %v and %d results, want 200 and 2:\n%s", raw.Rate, len(raw.Results), stdout)
	}
	for _, res := range raw.Results {
		for _, f := range []string{"ops_per_sec", "claim_p99_ms", "target_rate", "late", "missed",
			"start_lag_p50_ms", "start_lag_p99_ms", "claim_from_start_p50_ms", "claim_from_start_p99_ms"} {
			if _, ok := res[f].(float64); !ok {
				t.Errorf("%v: %q is %v, want a number", res["target"], f, res[f])
			}
		}
		// The Claim from its job's actual start leaves the start lag out of
		// the same Claims, so none of its percentiles can be higher.
		for _, q := range []string{"p50", "p99"} {
			run, _ := res["claim_from_start_"+q+"_ms"].(float64)
			all, _ := res["claim_"+q+"_ms"].(float64)
			if run > all {
				t.Errorf("%v: Claim %s from its job's start %v ms, above the Claim's %v ms from its intended start", res["target"], q, run, all)
			}
		}
		if ops, _ := res["ops"].(float64); ops <= 0 {
			t.Errorf("%v: ops %v, want > 0", res["target"], res["ops"])
		}
		if errs, _ := res["errors"].(float64); errs != 0 {
			t.Errorf("%v: %v errors, the first: %v", res["target"], errs, res["first_error"])
		}
	}
}

// TestPrefill fills service-prefilled's table and runs it next to an empty
// one; the fill is in the report and the records are in the table while the
// rounds run (the smoke run's jobs come on top of them).
func TestPrefill(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, smokeArgs(t, "--start-idemd", "--target", "service,service-prefilled",
		"--prefill", "3000", "--scenario", "unique", "--json"))
	var raw struct {
		Prefill *prefillReport   `json:"prefill"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if raw.Prefill == nil || raw.Prefill.Records != 3000 || raw.Prefill.FillSeconds <= 0 {
		t.Fatalf("prefill %+v, want 3000 records and the fill's time:\n%s", raw.Prefill, stdout)
	}
	if len(raw.Results) != 2 || raw.Results[1]["target"] != "service-prefilled" {
		t.Fatalf("results %v, want service and service-prefilled", raw.Results)
	}
	for _, res := range raw.Results {
		if ops, _ := res["ops"].(float64); ops <= 0 || res["errors"].(float64) != 0 {
			t.Errorf("%v: ops %v, errors %v (%v)", res["target"], res["ops"], res["errors"], res["first_error"])
		}
	}
}

// TestFillRecords: the fill inserts n records that idem reads as COMPLETED
// (Lookup through a real idemd finds one), and moves the token sequence past
// their tokens.
func TestFillRecords(t *testing.T) {
	t.Parallel()
	d, err := startIdemd(t.Context(), idemdOptions{
		bin: idemdBinary, baseURL: testdb.BaseURL(t), schema: "idem_bench_fill_" + newRunID(),
		appName: "idem-bench-test", sweepInterval: 0, logLevel: "warn", log: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.close(context.WithoutCancel(t.Context())) })
	if err := fillRecords(t.Context(), testdb.BaseURL(t), d.schema, "ns", 500, false, "k-"); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(d.addr, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec, err := cl.Lookup(t.Context(), client.LookupRequest{Namespace: "ns", Key: "k-0000000500"})
	if err != nil {
		t.Fatalf("Lookup of a filled record: %v", err)
	}
	if rec.State != client.StateCompleted || rec.Token != 500 {
		t.Fatalf("filled record %+v, want COMPLETED with token 500", rec)
	}
	res, err := cl.Claim(t.Context(), client.ClaimRequest{Namespace: "ns", Key: "new"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Record.Token <= 500 {
		t.Fatalf("a new Claim got token %d; the sequence must be past the filled tokens (500)", res.Record.Token)
	}
}

// TestPurge runs --purge with a few hundred records and a fast sweeper: the
// sweeper purges them all, and both the rounds without and during the purge
// are reported.
func TestPurge(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, []string{
		"--database-url", testdb.BaseURL(t), "--idemd-bin", idemdBinary, "--start-idemd",
		"--target", "service", "--purge", "500", "--sweep-interval", "100ms",
		"--duration", "1s", "--rounds", "2", "--concurrency", "4", "--warmup", "0s",
		"--progress", "never", "--json",
	})
	var raw struct {
		Purge   *purgeReport     `json:"purge"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if p := raw.Purge; p == nil || p.Records != 500 || !p.Finished || p.PurgeSeconds <= 0 {
		t.Fatalf("purge %+v, want 500 records purged, and how long it took:\n%s", raw.Purge, stdout)
	}
	if len(raw.Results) != 2 || raw.Results[0]["target"] != "service" || raw.Results[1]["target"] != "service-purging" {
		t.Fatalf("results %v, want service and service-purging", raw.Results)
	}
	for _, res := range raw.Results {
		if ops, _ := res["ops"].(float64); ops <= 0 || res["errors"].(float64) != 0 {
			t.Errorf("%v: ops %v, errors %v (%v)", res["target"], res["ops"], res["errors"], res["first_error"])
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, []string{"--help"})
	for _, flag := range []string{"--compare", "--start-idemd", "--json", "--result-bytes", "--rate", "intended start"} {
		if !strings.Contains(stdout, flag) {
			t.Errorf("--help does not mention %s", flag)
		}
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--concurrency", "0"},
		{"--target", "memcached"},
		{"--scenario", "cold"},
		{"--rate", "-1"},
		{"--target", "service-sqlite"}, // without --start-idemd
		{"--idemd-cpuprofile", "x.prof"},
		{"--target", "service-prefilled"}, // without --start-idemd
		{"--start-idemd", "--purge", "10", "--target", "service,sql"},
		{"--start-idemd", "--purge", "10", "--sweep-interval", "0s"},
		{"--prefill", "0"},
		{"--start-idemd", "--target", "service-b"}, // without --idemd-bin-b
		{"--scenario", "wait,unique"},              // wait runs alone
		{"--scenario", "wait", "--compare"},
		{"--scenario", "wait", "--target", "sql"},
		{"--scenario", "batch", "--rate", "100"}, // batch runs a closed loop
		{"--batch-size", "0"},
		{"--batch-size", "501"},
		{"--idemd-replicas", "2"}, // without --start-idemd
		{"--start-idemd", "--idemd-replicas", "0"},
		{"--start-idemd", "--idemd-replicas", "9"},
		{"--start-idemd", "--idemd-replicas", "2", "--scenario", "wait"},
		{"--start-idemd", "--idemd-replicas", "2", "--purge", "10", "--sweep-interval", "1s"},
	} {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), args, &out, &errOut); err == nil {
			t.Errorf("idem-bench %s: no error", strings.Join(args, " "))
		}
	}
}

// TestWorkloadHotCycles: in the hot scenario, completing a key moves its slot
// to the next generation, so the workers keep finding fresh keys.
func TestWorkloadHotCycles(t *testing.T) {
	t.Parallel()
	wl := newWorkload(scenarioHot, "p", 1)
	first := wl.key(0)
	wl.finished(0, first, outcomeAcquired)
	seen := map[string]bool{first: true}
	for range 200 {
		k := wl.key(0)
		if seen[k] {
			t.Fatalf("key %s came back after it was completed", k)
		}
		seen[k] = true
		wl.finished(0, k, outcomeAcquired)
	}
}

// TestWorkloadReplayShare: after the first job, about replayShare of the
// replay scenario's keys are ones completed before.
func TestWorkloadReplayShare(t *testing.T) {
	t.Parallel()
	wl := newWorkload(scenarioReplay, "p", 1)
	done := map[string]bool{}
	replays := 0
	const n = 5000
	for range n {
		k := wl.key(0)
		if done[k] {
			replays++
		}
		done[k] = true
		wl.finished(0, k, outcomeAcquired)
	}
	if share := float64(replays) / n; share < replayShare-0.03 || share > replayShare+0.03 {
		t.Fatalf("%.3f of the keys were replays, want about %.2f", share, replayShare)
	}
}

func TestRoundRatios(t *testing.T) {
	got := roundRatios([]float64{300, 450, 100}, []float64{400, 300, 100})
	if want := []float64{0.75, 1.5, 1}; !slices.Equal(got, want) {
		t.Errorf("roundRatios = %v, want %v", got, want)
	}
	if got := spreadCell([]float64{0.75, 1.5, 1}); got != "0.75–1.50" {
		t.Errorf("spreadCell = %q, want %q", got, "0.75–1.50")
	}
	for _, c := range []struct{ rounds, sql []float64 }{
		{[]float64{1, 2}, []float64{1}}, // another number of rounds
		{[]float64{1}, []float64{0}},    // a round of sql that did nothing
		{nil, nil},
	} {
		if got := roundRatios(c.rounds, c.sql); got != nil {
			t.Errorf("roundRatios(%v, %v) = %v, want nil", c.rounds, c.sql, got)
		}
	}
}

// TestMachineShares checks the cores' shares that a target's rounds report,
// and that they are left out when a round could not be read.
func TestMachineShares(t *testing.T) {
	tl := newTally("service", "unique")
	tl.ops, tl.elapsed, tl.rounds = 100, time.Second, []float64{50, 50}
	tl.machine = machineCPU{busy: 1500 * time.Millisecond, idle: 400 * time.Millisecond, iowait: 80 * time.Millisecond, steal: 20 * time.Millisecond}
	tl.machineRounds = 2
	var r report
	r.add([]*tally{tl})
	res := r.Results[0]
	for name, c := range map[string]struct {
		got  *float64
		want float64
	}{
		"busy": {res.MachineBusyPct, 75}, "idle": {res.MachineIdlePct, 20},
		"iowait": {res.MachineIOWaitPct, 4}, "steal": {res.MachineStealPct, 1},
	} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("%s: %v, want %v", name, c.got, c.want)
		}
	}
	var out bytes.Buffer
	r.writeTable(&out)
	if want := "cores 75% busy, 20% idle, 4% waiting for I/O, 1% stolen"; !strings.Contains(out.String(), want) {
		t.Errorf("the table does not say %q:\n%s", want, out.String())
	}

	// One round of two read: no shares, rather than one round's as if it
	// were both.
	tl.machineRounds = 1
	r = report{}
	r.add([]*tally{tl})
	if res := r.Results[0]; res.MachineBusyPct != nil {
		t.Errorf("busy %v with one round of two read, want none", *res.MachineBusyPct)
	}
}

// TestReadMachineCPU checks that /proc/stat is read, and that CPU this
// process burns shows up as busy time.
func TestReadMachineCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/stat is Linux's")
	}
	before, ok := readMachineCPU()
	if !ok {
		t.Fatal("readMachineCPU: /proc/stat could not be read")
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for start := time.Now(); time.Since(start) < 20*time.Millisecond; {
		}
		after, ok := readMachineCPU()
		if !ok {
			t.Fatal("readMachineCPU: /proc/stat could not be read the second time")
		}
		if after.busy < before.busy {
			t.Fatalf("the machine's busy time went back: %v, then %v", before.busy, after.busy)
		}
		if after.busy > before.busy {
			return
		}
	}
	t.Fatal("5 s of spinning did not move the machine's busy time")
}
