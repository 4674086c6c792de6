package main

import "runtime"

// setProcs sets how many threads run idemd's Go code at once (GOMAXPROCS)
// when the environment does not set GOMAXPROCS and the store's work runs in
// another process (Postgres): half of what the runtime chose, at least one.
//
// On Postgres, idemd's own work per call is small (decode, check, queue the
// call for the coalescer, encode) and the rest is waiting. With as many Ps as
// cores, a call's goroutines wake on one P and are stolen by another, and idle
// Ps spin looking for work: at C=32 on two cores, one P instead of two cut
// idemd's CPU per job by 23% and, because more calls reach a coalescer in
// the same wave, Postgres's by 14%; throughput rose 16% (docs/BENCHMARKS.md).
// On SQLite the store runs inside idemd and its readers run in parallel, so
// idemd keeps every P (one P halved replay throughput there).
//
// Setting GOMAXPROCS this way stops the runtime from following a change of
// the container's CPU limit; GOMAXPROCS in the environment wins.
func setProcs(getenv func(string) string, storeInProcess bool) int {
	n := runtime.GOMAXPROCS(0)
	if getenv("GOMAXPROCS") != "" || storeInProcess {
		return n
	}
	n = max(1, n/2)
	runtime.GOMAXPROCS(n)
	return n
}
