package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRatiosToKeys: in the steps scenario, each form with steps is given
// its store CPU and WAL per job over its own target's form with keys, and
// nothing else is.
func TestRatiosToKeys(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	results := []result{
		{Scenario: scenarioSteps, Target: "service-steps", StoreCPUUsPerOp: 60, storeRead: true, WALBytesPerOp: f(700), pgStore: true},
		{Scenario: scenarioSteps, Target: "service-steps-started", StoreCPUUsPerOp: 90, storeRead: true, WALBytesPerOp: f(1400), pgStore: true},
		{Scenario: scenarioSteps, Target: "service-keys", StoreCPUUsPerOp: 100, storeRead: true, WALBytesPerOp: f(1000), pgStore: true},
		// SQLite: the WAL others wrote to Postgres meanwhile is no ratio of its.
		{Scenario: scenarioSteps, Target: "service-sqlite-steps", WALBytesPerOp: f(50)},
		{Scenario: scenarioSteps, Target: "service-sqlite-keys", WALBytesPerOp: f(100)},
		{Scenario: scenarioUnique, Target: "service-steps", StoreCPUUsPerOp: 1, storeRead: true, WALBytesPerOp: f(1), pgStore: true},
	}
	ratiosToKeys(results)
	for i, want := range []struct{ cpu, wal *float64 }{
		{f(0.6), f(0.7)}, {f(0.9), f(1.4)}, {}, {}, {}, {},
	} {
		got := results[i]
		if !sameRatio(got.StoreCPURatioToKeys, want.cpu) || !sameRatio(got.WALRatioToKeys, want.wal) {
			t.Errorf("%s/%s: CPU ratio %v, WAL ratio %v; want %v, %v", got.Scenario, got.Target,
				deref(got.StoreCPURatioToKeys), deref(got.WALRatioToKeys), deref(want.cpu), deref(want.wal))
		}
	}
	if got := keysTarget("service-sqlite-steps-started"); got != "service-sqlite-keys" {
		t.Errorf("keysTarget = %q", got)
	}
}

func sameRatio(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref(x *float64) any {
	if x == nil {
		return nil
	}
	return *x
}

// TestStepsScenario runs the steps scenario on idemds of its own, on
// Postgres and on SQLite, and checks its report: the three forms of each
// target, every job done, and on Postgres the forms with steps given as
// ratios of the form with keys. A smoke test: it asserts nothing about the
// ratios' values.
func TestStepsScenario(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, smokeArgs(t, "--start-idemd", "--target", "service,service-sqlite", "--scenario", "steps", "--steps", "3", "--json"))
	var raw struct {
		Steps   int  `json:"steps"`
		Local   bool `json:"postgres_local"`
		Results []struct {
			Target   string           `json:"target"`
			Scenario string           `json:"scenario"`
			Ops      int64            `json:"ops"`
			Errors   int64            `json:"errors"`
			First    string           `json:"first_error"`
			Outcomes map[string]int64 `json:"outcomes"`
			CPU      *float64         `json:"store_cpu_ratio_to_keys"`
			WAL      *float64         `json:"wal_ratio_to_keys"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if raw.Steps != 3 {
		t.Errorf("steps %d; want 3", raw.Steps)
	}
	var targets []string
	for _, r := range raw.Results {
		targets = append(targets, r.Target)
		if r.Scenario != scenarioSteps || r.Ops <= 0 || r.Errors != 0 || r.Outcomes["acquired"] != r.Ops {
			t.Errorf("%s/%s: %d ops, %d errors (%s), outcomes %v; want every job acquired and done", r.Scenario, r.Target, r.Ops, r.Errors, r.First, r.Outcomes)
		}
		_, form, _ := stepsFormOf(r.Target)
		onPostgres := !strings.HasPrefix(r.Target, "service-sqlite")
		// CPU is read in ticks of 10 ms, which a few jobs may not fill: a
		// CPU ratio may be missing, but never where it makes no sense.
		if wantRatio := onPostgres && form != formKeys; (r.WAL != nil) != wantRatio || (r.CPU != nil && !wantRatio) {
			t.Errorf("%s: CPU ratio %v, WAL ratio %v; want them on the forms with steps on Postgres only", r.Target, r.CPU, r.WAL)
		}
	}
	want := []string{"service-steps", "service-steps-started", "service-keys", "service-sqlite-steps", "service-sqlite-steps-started", "service-sqlite-keys"}
	if strings.Join(targets, ",") != strings.Join(want, ",") {
		t.Errorf("targets %v; want %v", targets, want)
	}
}
