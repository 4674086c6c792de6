package main

import "runtime/debug"

// defaultGCPercent is the garbage collector's target (GOGC) idemd runs with
// when the environment does not set GOGC. idemd's live heap is small (a few
// MiB: connections, the coalescers' queues, calls in flight) and it
// allocates per call, so at Go's default of 100 it collected several times
// a second under load and the collector took about a tenth of its CPU.
// At 400 the heap may grow to five times the live heap before a collection,
// tens of MiB more, and idemd spent 11% less CPU per job in an A/B run
// (docs/BENCHMARKS.md). GOGC (and GOMEMLIMIT) in the environment win.
const defaultGCPercent = 400

// setGCPercent applies defaultGCPercent unless GOGC is set, and reports the
// target in force (-1 for a collector turned off with GOGC=off).
func setGCPercent(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		old := debug.SetGCPercent(100)
		debug.SetGCPercent(old)
		return old
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}
