package robustness

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
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
	t.Logf("%s; %s; %s", v, res.Stats.Summary(), res.Stats.Batched())
	if !v.OK() {
		t.Errorf("a correct server's history: %s", v)
	}
	if lost := res.LostCompletes(); len(lost) > 0 {
		t.Errorf("acknowledged Completes lost: %v", lost)
	}
}

// lieLog counts a broken store's lies and the keys it told them about.
type lieLog struct {
	mu   sync.Mutex
	keys map[string]bool
	n    int64
}

func (l *lieLog) add(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]bool{}
	}
	l.keys[key] = true
	l.n++
}

func (l *lieLog) count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *lieLog) about(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys[key]
}

// dropsCompletes acknowledges one Complete in three without writing it, and
// every repeat of one it dropped; with batchOnly, only Completes that are
// items of a BatchComplete (those reach the store through
// RecordCompleteMany).
type dropsCompletes struct {
	store.Store
	batchOnly bool
	calls     atomic.Int64
	lies      *lieLog
	mu        sync.Mutex
	dropped   map[droppedComplete]bool
}

// droppedComplete is a Complete dropsCompletes acknowledged unwritten.
type droppedComplete struct {
	id     store.RecordID
	token  int64
	result string
}

func (s *dropsCompletes) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	if !s.batchOnly {
		if lie, ok := s.lie(ctx, p); ok {
			return lie, nil
		}
	}
	return s.Store.RecordComplete(ctx, p)
}

func (s *dropsCompletes) RecordCompleteMany(ctx context.Context, ps []*store.CompleteParams) ([]*store.Record, []error) {
	recs, errs := make([]*store.Record, len(ps)), make([]error, len(ps))
	var honest []*store.CompleteParams
	var at []int
	for i, p := range ps {
		if lie, ok := s.lie(ctx, p); ok {
			recs[i] = lie
			continue
		}
		honest, at = append(honest, p), append(at, i)
	}
	if len(honest) > 0 {
		r, e := s.Store.RecordCompleteMany(ctx, honest)
		for j, i := range at {
			recs[i], errs[i] = r[j], e[j]
		}
	}
	return recs, errs
}

// lie returns, for one call in three that could succeed and for every
// repeat of a call it lied to, the record the Complete would have written,
// unwritten. A repeat written would store what the lie acknowledged, and
// leave a history with nothing wrong in it.
func (s *dropsCompletes) lie(ctx context.Context, p *store.CompleteParams) (*store.Record, bool) {
	d := droppedComplete{p.RecordID, p.Token, string(p.Result)}
	s.mu.Lock()
	repeat := s.dropped[d]
	s.mu.Unlock()
	if !repeat && s.calls.Add(1)%3 != 0 {
		return nil, false
	}
	rec, err := s.RecordGet(ctx, p.RecordID)
	if err != nil || rec.Token != p.Token || (rec.State != store.StateProcessing && rec.State != store.StateExpired) {
		return nil, false
	}
	s.mu.Lock()
	if s.dropped == nil {
		s.dropped = map[droppedComplete]bool{}
	}
	s.dropped[d] = true
	s.mu.Unlock()
	s.lies.add(p.RecordID.Key)
	lie := *rec
	lie.State, lie.Result, lie.LeaseExpiresAt = store.StateCompleted, p.Result, time.Time{}
	lie.CompletedAt, lie.ExpiresAt = lie.UpdatedAt, lie.UpdatedAt.Add(lie.Retention)
	return &lie, true
}

// skipsTokenCheck lets a Complete with a superseded token through: it
// completes the successor's record with the stale worker's result and
// answers as if the stale token were current; with batchOnly, only for
// items of a BatchComplete.
type skipsTokenCheck struct {
	store.Store
	batchOnly bool
	lies      *lieLog
}

func (s *skipsTokenCheck) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	rec, err := s.Store.RecordComplete(ctx, p)
	if s.batchOnly {
		return rec, err
	}
	return s.overrule(ctx, p, rec, err)
}

func (s *skipsTokenCheck) RecordCompleteMany(ctx context.Context, ps []*store.CompleteParams) ([]*store.Record, []error) {
	recs, errs := s.Store.RecordCompleteMany(ctx, ps)
	for i, p := range ps {
		recs[i], errs[i] = s.overrule(ctx, p, recs[i], errs[i])
	}
	return recs, errs
}

// overrule turns a Complete's LEASE_LOST on a record that a successor holds
// into a success, completing the successor's record. When the successor
// finishes or loses the record between the read and the write, the stale
// call gets the store's own LEASE_LOST: the refusal of the successor's token
// (ALREADY_TERMINAL, most often) would be a lie of another kind, told
// without being counted.
func (s *skipsTokenCheck) overrule(ctx context.Context, p *store.CompleteParams, rec *store.Record, err error) (*store.Record, error) {
	if !errors.Is(err, store.ErrLeaseLost) {
		return rec, err
	}
	cur, gerr := s.RecordGet(ctx, p.RecordID)
	if gerr != nil || (cur.State != store.StateProcessing && cur.State != store.StateExpired) {
		return rec, err
	}
	over := *p
	over.Token = cur.Token
	orec, oerr := s.Store.RecordComplete(ctx, &over)
	if errors.Is(oerr, store.ErrAlreadyTerminal) || errors.Is(oerr, store.ErrLeaseLost) {
		return rec, err
	}
	// Any other answer may have written the stale worker's result.
	s.lies.add(p.RecordID.Key)
	if oerr != nil {
		return nil, oerr
	}
	lie := *orec
	lie.Token = p.Token
	return &lie, nil
}

// grantsHeldRecords answers one in three of a batch's Claims that found the
// record held under a live lease ACQUIRED, with a token of its own, without
// writing it: two holders at once. A batch's Claims reach the store through
// RecordClaimMany, which a broken RecordClaim would not see.
type grantsHeldRecords struct {
	store.Store
	calls atomic.Int64
	lies  *lieLog
}

func (s *grantsHeldRecords) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	res, errs := s.Store.RecordClaimMany(ctx, ps)
	for i, r := range res {
		// Well inside the lease, so that the grant cannot pass for a
		// takeover at its end.
		if errs[i] != nil || r.Outcome != store.OutcomeInProgress || r.RetryAfter < 200*time.Millisecond || s.calls.Add(1)%3 != 0 {
			continue
		}
		s.lies.add(ps[i].Key)
		lie := *r.Record
		lie.Token += 1000
		lie.Claimant, lie.LeaseExpiresAt = ps[i].Claimant, time.Now().Add(ps[i].LeaseTTL).UTC()
		res[i] = &store.ClaimResult{Outcome: store.OutcomeAcquired, Record: &lie, Takeover: true}
	}
	return res, errs
}

// forgetsSteps answers one in three Claims that take a record with steps
// over without its steps: a successor that would run a finished step
// again.
type forgetsSteps struct {
	store.Store
	calls atomic.Int64
	lies  *lieLog
}

func (s *forgetsSteps) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	res, err := s.Store.RecordClaim(ctx, p)
	return s.forget(p, res, err), err
}

func (s *forgetsSteps) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	res, errs := s.Store.RecordClaimMany(ctx, ps)
	for i := range res {
		res[i] = s.forget(ps[i], res[i], errs[i])
	}
	return res, errs
}

func (s *forgetsSteps) forget(p *store.ClaimParams, res *store.ClaimResult, err error) *store.ClaimResult {
	if err != nil || res.Outcome != store.OutcomeAcquired || !res.Takeover || len(res.Record.Steps) == 0 || s.calls.Add(1)%3 != 0 {
		return res
	}
	s.lies.add(p.Key)
	lie := *res.Record
	lie.Steps = nil
	return &store.ClaimResult{Outcome: res.Outcome, Record: &lie, Takeover: true, Now: res.Now}
}

// acknowledgesFencedSteps answers a step call with a superseded token as
// if it were recorded, and records nothing: a fenced holder told its step
// counts.
type acknowledgesFencedSteps struct {
	store.Store
	lies *lieLog
}

func (s *acknowledgesFencedSteps) RecordStep(ctx context.Context, p *store.StepParams) (*store.Step, error) {
	step, err := s.Store.RecordStep(ctx, p)
	if !errors.Is(err, store.ErrLeaseLost) {
		return step, err
	}
	s.lies.add(p.Key)
	lie := &store.Step{Name: p.Name, State: store.StepStarted, Token: p.Token, StartedAt: time.Now().UTC()}
	if p.Finish {
		lie.State, lie.Result, lie.FinishedAt = store.StepFinished, p.StepResult(), lie.StartedAt
	}
	return lie, nil
}

func (s *acknowledgesFencedSteps) RecordStepMany(ctx context.Context, ps []*store.StepParams) ([]*store.Step, []error) {
	steps, errs := make([]*store.Step, len(ps)), make([]error, len(ps))
	for i, p := range ps {
		steps[i], errs[i] = s.RecordStep(ctx, p)
	}
	return steps, errs
}

// TestCheckerCatchesBrokenStores runs the workload against the real service
// over stores broken on purpose and expects the checker to find the
// violation, and only on keys the store lied about: a checker that passes
// these would prove nothing. The stores that lie only to batch items prove
// that the items are checked too.
func TestCheckerCatchesBrokenStores(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		wrap func(store.Store, *lieLog) store.Store
		// batchOnly: the store lies to batch items only, and the workload
		// sends nothing but batches, to give it the chance.
		batchOnly bool
	}{
		{"acknowledges a Complete it does not write",
			func(s store.Store, l *lieLog) store.Store { return &dropsCompletes{Store: s, lies: l} }, false},
		{"skips the token check",
			func(s store.Store, l *lieLog) store.Store { return &skipsTokenCheck{Store: s, lies: l} }, false},
		{"acknowledges a batch item's Complete it does not write",
			func(s store.Store, l *lieLog) store.Store { return &dropsCompletes{Store: s, batchOnly: true, lies: l} }, true},
		{"skips the token check of batch items",
			func(s store.Store, l *lieLog) store.Store {
				return &skipsTokenCheck{Store: s, batchOnly: true, lies: l}
			}, true},
		{"grants a batch item's Claim of a record held under a live lease",
			func(s store.Store, l *lieLog) store.Store { return &grantsHeldRecords{Store: s, lies: l} }, true},
		{"forgets a job's steps at a takeover",
			func(s store.Store, l *lieLog) store.Store { return &forgetsSteps{Store: s, lies: l} }, false},
		{"acknowledges a fenced holder's step",
			func(s store.Store, l *lieLog) store.Store { return &acknowledgesFencedSteps{Store: s, lies: l} }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Bounded: a few short runs, each on a store of its own (the
			// next run's keys would find the last one's records) and ended
			// once the store has lied three times.
			var lies int64
			const runs = 8
			for round := 0; round < runs && lies == 0; round++ {
				log := &lieLog{}
				addr := ServeInProcess(t, func(s store.Store) store.Store { return c.wrap(s, log) })
				w := inProcessWorkload(addr, uint64(10+round))
				if c.batchOnly {
					w.BatchShare = 1
				}
				w.Stop = func() bool { return log.count() >= 3 }
				res, err := Run(context.Background(), w)
				if err != nil {
					t.Fatal(err)
				}
				lies = log.count()
				if lies == 0 {
					continue
				}
				v := Check(res.History.Ops(), time.Minute, t.TempDir(), "broken")
				t.Logf("run %d: the store lied %d times; %s", round+1, lies, v)
				if len(v.Illegal) == 0 {
					t.Errorf("the checker found no violation in the history of a store that lied %d times: %s", lies, v)
				}
				for _, k := range v.Illegal {
					if !log.about(k) {
						t.Errorf("the checker found %s not linearizable, where the store told no lie; its calls:\n%s", k, KeyHistory(res.History.Ops(), k))
					}
				}
			}
			if lies == 0 {
				t.Fatalf("the broken store never lied in %d runs: the workload does not exercise what it breaks", runs)
			}
		})
	}
}

// finishesOnRead finishes the record with its current token, by finish,
// right after the first RecordGet of it: a successor that finishes between
// a broken store's read and its write.
type finishesOnRead struct {
	store.Store
	finish func(ctx context.Context, st store.Store, rec *store.Record) error
	once   sync.Once
	err    error
}

func (s *finishesOnRead) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	rec, err := s.Store.RecordGet(ctx, id)
	if err == nil {
		s.once.Do(func() { s.err = s.finish(ctx, s.Store, rec) })
	}
	return rec, err
}

// TestSkipsTokenCheckCountsEveryLie holds the broken store of "skips the
// token check" to its word: a stale Complete whose overruling the successor
// overtakes gets the store's own LEASE_LOST, or else the key is counted as
// lied about, so that the checker is never blamed for a lie nobody counted.
func TestSkipsTokenCheckCountsEveryLie(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		finish func(ctx context.Context, st store.Store, rec *store.Record) error
	}{
		{"the successor completes", func(ctx context.Context, st store.Store, rec *store.Record) error {
			_, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: rec.RecordID, Token: rec.Token, Result: []byte("successor")})
			return err
		}},
		{"the successor releases", func(ctx context.Context, st store.Store, rec *store.Record) error {
			_, err := st.RecordFail(ctx, &store.FailParams{RecordID: rec.RecordID, Token: rec.Token, Error: "successor", Retryable: true})
			return err
		}},
	} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, batch %t", c.name, batch), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
				if err != nil {
					t.Fatalf("open SQLite: %v", err)
				}
				t.Cleanup(func() { _ = st.Close() })
				id := store.RecordID{Namespace: Namespace, Key: "k"}
				claim := func(claimant string) int64 {
					res, err := st.RecordClaim(ctx, &store.ClaimParams{RecordID: id, Claimant: claimant, LeaseTTL: time.Minute, Retention: time.Hour})
					if err != nil || res.Outcome != store.OutcomeAcquired {
						t.Fatalf("claim by %s: %+v, %v", claimant, res, err)
					}
					return res.Record.Token
				}
				stale := claim("first")
				if _, err := st.RecordFail(ctx, &store.FailParams{RecordID: id, Token: stale, Error: "again", Retryable: true}); err != nil {
					t.Fatalf("release: %v", err)
				}
				claim("successor")

				racing := &finishesOnRead{Store: st, finish: c.finish}
				log := &lieLog{}
				broken := &skipsTokenCheck{Store: racing, batchOnly: batch, lies: log}
				p := &store.CompleteParams{RecordID: id, Token: stale, Result: []byte("stale")}
				var rec *store.Record
				if batch {
					recs, errs := broken.RecordCompleteMany(ctx, []*store.CompleteParams{p})
					rec, err = recs[0], errs[0]
				} else {
					rec, err = broken.RecordComplete(ctx, p)
				}
				if racing.err != nil {
					t.Fatalf("the successor's finish: %v", racing.err)
				}
				if !errors.Is(err, store.ErrLeaseLost) && !log.about(id.Key) {
					t.Errorf("a stale Complete answered %+v, %v, and no lie was counted; want the store's LEASE_LOST", rec, err)
				}
			})
		}
	}
}

// TestDropsCompletesDropsRepeats holds the broken store of "acknowledges a
// Complete it does not write" to a lie the checker can see: a repeat of a
// dropped Complete (a batch that names the item twice runs the second in a
// wave of its own) must not write what the first acknowledged, or the
// history is legal and a run whose lies were all repeated finds nothing.
func TestDropsCompletesDropsRepeats(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch %t", batch), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
			if err != nil {
				t.Fatalf("open SQLite: %v", err)
			}
			t.Cleanup(func() { _ = st.Close() })
			id := store.RecordID{Namespace: Namespace, Key: "k"}
			res, err := st.RecordClaim(ctx, &store.ClaimParams{RecordID: id, Claimant: "w", LeaseTTL: time.Minute, Retention: time.Hour})
			if err != nil || res.Outcome != store.OutcomeAcquired {
				t.Fatalf("claim: %+v, %v", res, err)
			}
			log := &lieLog{}
			broken := &dropsCompletes{Store: st, batchOnly: batch, lies: log}
			broken.calls.Store(2) // the next Complete is the one in three it drops
			p := &store.CompleteParams{RecordID: id, Token: res.Record.Token, Result: []byte("done")}
			complete := func() (*store.Record, error) {
				if batch {
					recs, errs := broken.RecordCompleteMany(ctx, []*store.CompleteParams{p})
					return recs[0], errs[0]
				}
				return broken.RecordComplete(ctx, p)
			}
			for try := 1; try <= 2; try++ {
				rec, err := complete()
				if err != nil || rec.State != store.StateCompleted || string(rec.Result) != "done" {
					t.Fatalf("Complete %d: %+v, %v; want it acknowledged", try, rec, err)
				}
			}
			if log.count() == 0 {
				t.Fatal("the store told no lie")
			}
			got, err := st.RecordGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != store.StateProcessing {
				t.Errorf("after a dropped Complete and its repeat, both acknowledged, the record is %s: the repeat wrote what the lie acknowledged", got.State)
			}
		})
	}
}
