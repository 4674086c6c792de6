package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCoalesce runs the service target with the SDK's coalescing on: the
// header says so, the JSON report has it, and the jobs go through without
// errors.
func TestCoalesce(t *testing.T) {
	t.Parallel()
	stdout, _ := runBench(t, smokeArgs(t, "--start-idemd", "--target", "service", "--scenario", "unique,hot", "--coalesce"))
	if !strings.Contains(stdout, "the SDK coalesces concurrent Claims and Completes into batch RPCs (--coalesce)") {
		t.Errorf("the header does not mention --coalesce:\n%s", stdout)
	}
	stdout, _ = runBench(t, smokeArgs(t, "--start-idemd", "--target", "service", "--scenario", "unique", "--coalesce", "--json"))
	var rep struct {
		Coalesce bool             `json:"coalesce"`
		Results  []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if !rep.Coalesce || len(rep.Results) != 1 {
		t.Fatalf("coalesce %v with %d results; want true and 1:\n%s", rep.Coalesce, len(rep.Results), stdout)
	}
	if ops, _ := rep.Results[0]["ops"].(float64); ops <= 0 {
		t.Errorf("ops %v; want > 0", rep.Results[0]["ops"])
	}
	if errs, _ := rep.Results[0]["errors"].(float64); errs != 0 {
		t.Errorf("%v errors, the first: %v", errs, rep.Results[0]["first_error"])
	}
}
