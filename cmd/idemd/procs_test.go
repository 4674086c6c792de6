package main

import (
	"runtime"
	"testing"
)

// TestSetProcs: on Postgres idemd halves the Ps the runtime chose (at least
// one); on SQLite, or with GOMAXPROCS in the environment, it keeps them.
func TestSetProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	noEnv := func(string) string { return "" }
	for _, c := range []struct{ procs, want int }{{1, 1}, {2, 1}, {3, 1}, {8, 4}} {
		runtime.GOMAXPROCS(c.procs)
		if got := setProcs(noEnv, false); got != c.want || runtime.GOMAXPROCS(0) != c.want {
			t.Errorf("Postgres with %d Ps: set %d, in force %d; want %d", c.procs, got, runtime.GOMAXPROCS(0), c.want)
		}
	}
	runtime.GOMAXPROCS(4)
	if got := setProcs(noEnv, true); got != 4 || runtime.GOMAXPROCS(0) != 4 {
		t.Errorf("SQLite with 4 Ps: %d, in force %d; want 4 kept", got, runtime.GOMAXPROCS(0))
	}
	env := func(k string) string {
		if k == "GOMAXPROCS" {
			return "4"
		}
		return ""
	}
	if got := setProcs(env, false); got != 4 || runtime.GOMAXPROCS(0) != 4 {
		t.Errorf("Postgres with GOMAXPROCS=4: %d, in force %d; want 4 kept", got, runtime.GOMAXPROCS(0))
	}
}
