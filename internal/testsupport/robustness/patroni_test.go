//go:build robustness && unix

package robustness

// The Patroni scenarios of make robustness: a 3-member Patroni cluster with
// a 1-member etcd, idemd on a multi-host URL, and the faults an HA manager
// exists for, under the mixed workload, every history checked.

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// patroniFault is one kind of fault a Patroni scenario injects.
type patroniFault struct {
	name     string
	injected func(sync bool) string
	// inject runs the fault at (or from) the times the scenario chose; it
	// appends the moment of each fault to at. heal undoes what is left.
	inject func(ctx context.Context, pc *Patroni, w Workload, sync bool, at *faultTimes) error
	heal   func(pc *Patroni) error
}

// faultTimes are the moments the faults of a run began.
type faultTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (f *faultTimes) add(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, t)
}

func (f *faultTimes) list() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.at...)
}

var patroniFaults = []patroniFault{
	{
		name: "leader-kill",
		injected: func(sync bool) string {
			if sync {
				return "leader's Patroni and PostgreSQL killed -9 at 1/3 of the run (a machine that dies); Patroni promotes the synchronous standby once the leader key's TTL runs out"
			}
			return "replication from the leader cut at 1/3 of the run, the leader's Patroni and PostgreSQL killed -9 1 s later; Patroni promotes a replica once the leader key's TTL runs out"
		},
		inject: func(ctx context.Context, pc *Patroni, w Workload, sync bool, at *faultTimes) error {
			pause(ctx, w.Duration/3)
			leader, err := pc.Leader()
			if err != nil {
				return err
			}
			if !sync {
				// On one machine an asynchronous replica is never behind when
				// its leader dies: hold it back for a second first.
				leader.PGProxy.Cut()
				time.Sleep(time.Second)
			}
			at.add(time.Now())
			return leader.Kill()
		},
		heal: func(pc *Patroni) error {
			for _, m := range pc.Members {
				m.PGProxy.Restore()
				if !m.Running() {
					if err := m.Restart(); err != nil {
						return err
					}
				}
			}
			return nil
		},
	},
	{
		name: "switchover",
		injected: func(bool) string {
			return "planned switchover (patronictl switchover --force) to a replica (the synchronous standby in synchronous mode) at 1/4 of the run, and back at 2/3"
		},
		inject: func(ctx context.Context, pc *Patroni, w Workload, sync bool, at *faultTimes) error {
			for _, when := range []time.Duration{w.Duration / 4, w.Duration * 2 / 3} {
				pause(ctx, when-time.Since(runStart(ctx)))
				if ctx.Err() != nil {
					return nil
				}
				leader, err := pc.Leader()
				if err != nil {
					return err
				}
				candidate := pc.SyncStandby()
				if candidate == nil {
					for _, m := range pc.Members {
						if m != leader {
							candidate = m
							break
						}
					}
				}
				at.add(time.Now())
				if err := pc.Switchover(leader, candidate); err != nil {
					return err
				}
				// The old leader rejoins as a replica before the next one.
				if err := pc.HealthyWithin(90 * time.Second); err != nil {
					return err
				}
			}
			return nil
		},
		heal: func(*Patroni) error { return nil },
	},
	{
		name: "leader-partition",
		injected: func(sync bool) string {
			return "at 1/3 of the run the leader is cut off from etcd and from the other members (its proxies cut) while idemd still reaches its PostgreSQL; Patroni demotes it and promotes a replica; healed at 2/3"
		},
		inject: func(ctx context.Context, pc *Patroni, w Workload, sync bool, at *faultTimes) error {
			pause(ctx, w.Duration/3)
			leader, err := pc.Leader()
			if err != nil {
				return err
			}
			at.add(time.Now())
			leader.Isolate()
			pause(ctx, w.Duration/3)
			leader.Rejoin()
			return nil
		},
		heal: func(pc *Patroni) error {
			for _, m := range pc.Members {
				m.Rejoin()
			}
			return nil
		},
	},
}

type runStartKey struct{}

// runStart is when the run whose context ctx is began.
func runStart(ctx context.Context) time.Time {
	t, _ := ctx.Value(runStartKey{}).(time.Time)
	return t
}

// TestRobustnessPatroni runs every Patroni fault with synchronous_mode on,
// where it must lose nothing, and then off, where it reports what it lost.
// One cluster serves them all: each scenario starts once it is healthy
// again, every member back and caught up.
func TestRobustnessPatroni(t *testing.T) {
	if !*full {
		t.Skip("the Patroni scenarios run in make robustness only (a cluster takes tens of seconds to start and each failover waits out a TTL)")
	}
	started := time.Now()
	pc, err := StartPatroni("", 3, true)
	if err != nil {
		t.Fatalf("start the Patroni cluster: %v", err)
	}
	t.Cleanup(pc.Remove)
	t.Logf("the Patroni cluster (3 members, etcd) was up in %s", time.Since(started).Round(100*time.Millisecond))
	seed := uint64(100)
	for _, sync := range []bool{true, false} {
		if !sync {
			if err := pc.SetSynchronousMode(false); err != nil {
				t.Fatalf("turn synchronous_mode off: %v", err)
			}
		}
		for _, f := range patroniFaults {
			seed++
			mode := "async"
			if sync {
				mode = "sync"
			}
			name := "patroni-" + f.name + "-" + mode
			t.Run(name, func(t *testing.T) {
				if err := pc.HealthyWithin(3 * time.Minute); err != nil {
					t.Fatalf("before %s: %v", name, err)
				}
				patroniScenario(t, pc, name, f, sync, seed)
			})
		}
	}
}

func patroniScenario(t *testing.T, pc *Patroni, name string, f patroniFault, sync bool, seed uint64) {
	sc := scenario{name: name, injected: f.injected(sync) + "; idemd, never restarted, on a multi-host URL with target_session_attrs=read-write", strict: sync}
	if sync {
		sc.injected = "synchronous_mode: true; " + sc.injected
	} else {
		sc.injected = "asynchronous replication; " + sc.injected
	}
	db := "robust_" + strings.ReplaceAll(name, "-", "_")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	err := pc.CreateDatabase(ctx, db)
	cancel()
	if err != nil {
		t.Fatalf("create the database: %v", err)
	}
	d := startIdemd(t, name, "--database-url", pc.URL(db)+"&pool_max_conns=8")
	w := workload(addrs(d), seed)
	runCtx, cancel := context.WithTimeout(context.WithValue(t.Context(), runStartKey{}, time.Now()), w.Duration)
	defer cancel()
	var at faultTimes
	done := false
	w.Settle = faultLoop(runCtx, t, seed, func(*mrand.Rand) error {
		if done {
			pause(runCtx, w.Duration)
			return nil
		}
		done = true
		if err := f.inject(runCtx, pc, w, sync, &at); err != nil {
			var logs []string
			for _, m := range pc.Members {
				logs = append(logs, m.Name+": "+m.Log())
			}
			return fmt.Errorf("%v; Patroni logs: %s", err, strings.Join(logs, " || "))
		}
		return nil
	}, func() error { return f.heal(pc) })
	sc.run(t, w, func(res *Result) string {
		faults := at.list()
		if len(faults) == 0 {
			t.Errorf("%s: no fault was injected", name)
			return "no fault injected"
		}
		back := writesBack(res.History.Ops(), faults)
		var parts []string
		for i, b := range back {
			if b < 0 {
				t.Errorf("%s: idemd answered no write after fault %d", name, i+1)
				parts = append(parts, "never")
				continue
			}
			parts = append(parts, fmt.Sprintf("%.1f s", b.Seconds()))
			recordFirstWrite(name, b)
		}
		reused := res.ReusedTokens()
		if sync && len(reused) > 0 {
			t.Errorf("%s: %d tokens handed out twice: %v", name, len(reused), first64(reused, 5))
		}
		return fmt.Sprintf("writes acknowledged again %s after the fault%s; %d acknowledged Completes lost; %d tokens handed out twice",
			strings.Join(parts, ", "), plural(len(parts)), len(res.LostCompletes()), len(reused))
	})
}

// writesBack returns, for each fault, how long after it writes were
// acknowledged again: the end of the first acknowledged write (a Claim
// that acquired, a Complete, Fail or Heartbeat that succeeded) that began
// after the last write whose answer was lost between that fault and the
// next. Writes that an isolated leader still acknowledged before it was
// demoted do not count as back. -1 when no write came back.
func writesBack(ops []Op, faults []time.Time) []time.Duration {
	sort.Slice(faults, func(i, j int) bool { return faults[i].Before(faults[j]) })
	out := make([]time.Duration, len(faults))
	for i, f := range faults {
		from := f.UnixNano()
		until := int64(Never)
		if i+1 < len(faults) {
			until = faults[i+1].UnixNano()
		}
		lastLost := from
		for _, op := range ops {
			if op.In.Kind != OpLookup && op.Out.Code == CodeMaybe && op.In.Start >= from && op.In.Start < until {
				lastLost = max(lastLost, op.In.Start)
			}
		}
		firstBack := int64(Never)
		for _, op := range ops {
			if isWrite(op) && op.In.Start > lastLost && op.In.Start < until {
				firstBack = min(firstBack, op.In.End)
			}
		}
		out[i] = -1
		if firstBack != Never {
			out[i] = time.Duration(firstBack - from)
		}
	}
	return out
}

// isWrite reports whether op is an acknowledged write.
func isWrite(op Op) bool {
	if op.Out.Code != CodeOK {
		return false
	}
	switch op.In.Kind {
	case OpClaim:
		return op.Out.Outcome == OutcomeAcquired
	case OpLookup:
		return false
	}
	return true
}

// recordFirstWrite adds a time-to-first-write to the scenario's report.
func recordFirstWrite(scenario string, d time.Duration) {
	firstWritesMu.Lock()
	defer firstWritesMu.Unlock()
	if firstWrites == nil {
		firstWrites = map[string][]float64{}
	}
	firstWrites[scenario] = append(firstWrites[scenario], d.Seconds())
}

func first64(s []int64, n int) []int64 {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
