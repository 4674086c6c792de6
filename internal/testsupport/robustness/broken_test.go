package robustness

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/idemhq/idem/store"
)

// inProcessWorkload is a short workload for the in-process server.
func inProcessWorkload(addr string, seed uint64) Workload {
	return Workload{
		Targets: []string{addr}, Workers: 6, Keys: 4, Duration: 3 * time.Second, MaxCalls: 2000,
		LeaseTTL: time.Second, CallTimeout: 5 * time.Second, Profile: Mixed, BatchShare: DefaultBatchShare, Seed: seed,
	}
}

// TestCorrectServerIsLinearizable is the control of the tests below: the
// real service over a correct store passes the check.
func TestCorrectServerIsLinearizable(t *testing.T) {
	t.Parallel()
	addr := ServeInProcess(t, nil)
	res, err := Run(context.Background(), inProcessWorkload(addr, 1))
	if err != nil {
		t.Fatal(err)
	}
	v := Check(res.History.Ops(), time.Minute, t.TempDir(), "correct")
	t.Logf("%s; %s", v, res.Stats.Summary())
	if !v.OK() {
		t.Errorf("a correct server's history: %s", v)
	}
	if lost := res.LostCompletes(); len(lost) > 0 {
		t.Errorf("acknowledged Completes lost: %v", lost)
	}
}

// inBatch reports whether the store was called for an item of a batch RPC.
func inBatch(ctx context.Context) bool {
	m, _ := grpc.Method(ctx)
	return strings.HasPrefix(path.Base(m), "Batch")
}

// dropsCompletes acknowledges one Complete in three without writing it;
// with batchOnly, only Completes that are items of a BatchComplete.
type dropsCompletes struct {
	store.Store
	batchOnly   bool
	calls, lies atomic.Int64
}

func (s *dropsCompletes) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	if s.batchOnly && !inBatch(ctx) {
		return s.Store.RecordComplete(ctx, p)
	}
	if s.calls.Add(1)%3 == 0 {
		rec, err := s.RecordGet(ctx, p.RecordID)
		if err == nil && rec.Token == p.Token && (rec.State == store.StateProcessing || rec.State == store.StateExpired) {
			s.lies.Add(1)
			lie := *rec
			lie.State, lie.Result, lie.LeaseExpiresAt = store.StateCompleted, p.Result, time.Time{}
			lie.CompletedAt, lie.ExpiresAt = lie.UpdatedAt, lie.UpdatedAt.Add(lie.Retention)
			return &lie, nil
		}
	}
	return s.Store.RecordComplete(ctx, p)
}

// skipsTokenCheck lets a Complete with a superseded token through: it
// completes the successor's record with the stale worker's result and
// answers as if the stale token were current; with batchOnly, only for
// items of a BatchComplete.
type skipsTokenCheck struct {
	store.Store
	batchOnly bool
	lies      atomic.Int64
}

func (s *skipsTokenCheck) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	rec, err := s.Store.RecordComplete(ctx, p)
	if !errors.Is(err, store.ErrLeaseLost) || (s.batchOnly && !inBatch(ctx)) {
		return rec, err
	}
	cur, gerr := s.RecordGet(ctx, p.RecordID)
	if gerr != nil || (cur.State != store.StateProcessing && cur.State != store.StateExpired) {
		return rec, err
	}
	over := *p
	over.Token = cur.Token
	rec, err = s.Store.RecordComplete(ctx, &over)
	if err != nil {
		return nil, err
	}
	s.lies.Add(1)
	lie := *rec
	lie.Token = p.Token
	return &lie, nil
}

// TestCheckerCatchesBrokenStores runs the workload against the real service
// over stores broken on purpose and expects the checker to find the
// violation: a checker that passes these would prove nothing. The stores
// that lie only to batch items prove that the items are checked too.
func TestCheckerCatchesBrokenStores(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		wrap func(store.Store) store.Store
		lies func(store.Store) int64
	}{
		{"acknowledges a Complete it does not write",
			func(s store.Store) store.Store { return &dropsCompletes{Store: s} },
			func(s store.Store) int64 { return s.(*dropsCompletes).lies.Load() }},
		{"skips the token check",
			func(s store.Store) store.Store { return &skipsTokenCheck{Store: s} },
			func(s store.Store) int64 { return s.(*skipsTokenCheck).lies.Load() }},
		{"acknowledges a batch item's Complete it does not write",
			func(s store.Store) store.Store { return &dropsCompletes{Store: s, batchOnly: true} },
			func(s store.Store) int64 { return s.(*dropsCompletes).lies.Load() }},
		{"skips the token check of batch items",
			func(s store.Store) store.Store { return &skipsTokenCheck{Store: s, batchOnly: true} },
			func(s store.Store) int64 { return s.(*skipsTokenCheck).lies.Load() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var broken store.Store
			addr := ServeInProcess(t, func(s store.Store) store.Store {
				broken = c.wrap(s)
				return broken
			})
			// Bounded: a few short runs, each ended once the store has lied
			// three times.
			var lies int64
			for round := 0; round < 5 && lies == 0; round++ {
				w := inProcessWorkload(addr, uint64(10+round))
				w.Stop = func() bool { return c.lies(broken) >= 3 }
				res, err := Run(context.Background(), w)
				if err != nil {
					t.Fatal(err)
				}
				lies = c.lies(broken)
				if lies == 0 {
					continue
				}
				v := Check(res.History.Ops(), time.Minute, t.TempDir(), "broken")
				t.Logf("the store lied %d times; %s", lies, v)
				if len(v.Illegal) == 0 {
					t.Errorf("the checker found no violation in the history of a store that lied %d times: %s", lies, v)
				}
			}
			if lies == 0 {
				t.Fatal("the broken store never lied in 5 runs: the workload does not exercise what it breaks")
			}
		})
	}
}
