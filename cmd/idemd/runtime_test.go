package main

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// runtimeDefaultProcs is the GOMAXPROCS the Go runtime chose for this test
// process, read before `go test -cpu` can change it.
var runtimeDefaultProcs = runtime.GOMAXPROCS(0)

// TestServeLeavesTheGoRuntimeItsDefaults: idemd serve on Postgres runs with
// the GC target, memory limit and GOMAXPROCS the Go runtime chooses, and
// with those GOGC, GOMEMLIMIT and GOMAXPROCS set in its environment.
func TestServeLeavesTheGoRuntimeItsDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                 string
		env                  []string
		gogc, memLimit, proc float64
	}{
		// An empty variable is one the runtime ignores.
		{"unset", []string{"GOGC=", "GOMEMLIMIT=", "GOMAXPROCS="}, 100, math.MaxInt64, float64(runtimeDefaultProcs)},
		{"from the environment", []string{"GOGC=300", "GOMEMLIMIT=256MiB", "GOMAXPROCS=1"}, 300, 256 << 20, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t, testdb.Unmigrated())
			p := startServeEnv(t, t.TempDir(), append([]string{"IDEM_DATABASE_URL=" + db.URL}, c.env...))
			_, body := p.get(t, "/metrics")
			want := map[string]float64{"go_gc_gogc_percent": c.gogc, "go_gc_gomemlimit_bytes": c.memLimit, "go_sched_gomaxprocs_threads": c.proc}
			if c.name == "unset" && os.Getenv("GOMAXPROCS") != "" {
				delete(want, "go_sched_gomaxprocs_threads") // this process's own is not the runtime's choice
			}
			for name, v := range want {
				if got := sample(t, body, name); got != v {
					t.Errorf("%s is %v; want %v", name, got, v)
				}
			}
		})
	}
}

// sample returns the value of the unlabelled metric name in a /metrics
// body.
func sample(t *testing.T, body, name string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}
