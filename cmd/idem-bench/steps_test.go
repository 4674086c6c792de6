package main

import "testing"

// TestRatiosToKeys: in the steps scenario, each form with steps is given
// its store CPU and WAL per job over its own target's form with keys, and
// nothing else is.
func TestRatiosToKeys(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	results := []result{
		{Scenario: scenarioSteps, Target: "service-steps", StoreCPUUsPerOp: 60, storeRead: true, WALBytesPerOp: f(700)},
		{Scenario: scenarioSteps, Target: "service-steps-started", StoreCPUUsPerOp: 90, storeRead: true, WALBytesPerOp: f(1400)},
		{Scenario: scenarioSteps, Target: "service-keys", StoreCPUUsPerOp: 100, storeRead: true, WALBytesPerOp: f(1000)},
		{Scenario: scenarioSteps, Target: "service-sqlite-steps", StoreCPUUsPerOp: 0, WALBytesPerOp: nil},
		{Scenario: scenarioSteps, Target: "service-sqlite-keys", StoreCPUUsPerOp: 0, WALBytesPerOp: nil},
		{Scenario: scenarioUnique, Target: "service-steps", StoreCPUUsPerOp: 1, storeRead: true, WALBytesPerOp: f(1)},
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
