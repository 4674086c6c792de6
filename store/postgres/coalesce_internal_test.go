package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store"
)

// The coalescer's handling of followers when the leader's statement does not
// answer them, with a fake statement: no database is needed to decide who
// gets which answer, and every path must end with every caller answered, the
// queue empty and the statement slot given back.

// followerFixture is a coalescer of int calls whose statements answer
// through answer, and which records the batches it ran.
type followerFixture struct {
	c       *coalescer[int, int]
	mu      sync.Mutex
	batches [][]int // each statement's calls' params, in order
}

func newFollowerFixture(answer func(params int) (int, error)) *followerFixture {
	f := &followerFixture{}
	f.c = &coalescer[int, int]{
		run: func(_ context.Context, batch []*pending[int, int]) {
			var ran []int
			for _, call := range batch {
				ran = append(ran, call.params)
				call.res, call.err = answer(call.params)
			}
			f.mu.Lock()
			f.batches = append(f.batches, ran)
			f.mu.Unlock()
		},
		// A follower gets its leader's result plus its own params, so a
		// test can tell who answered it.
		follow: func(leader, follower *pending[int, int]) bool {
			follower.res = leader.res*1000 + follower.params
			return true
		},
		maxInFlight: 1,
		maxRows:     64,
		rows:        prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_batch_calls"}),
		kind:        "test",
	}
	return f
}

type followerAnswer struct {
	res int
	err error
}

// together queues one call per params on the one key of id, each with its
// context, while no statement may start, then lets a slot drain them, and
// returns every answer.
func (f *followerFixture) together(t *testing.T, ctxs []context.Context, params []int) []followerAnswer {
	t.Helper()
	c := f.c
	c.mu.Lock()
	c.inFlight = c.maxInFlight + maxOverflow // nobody starts a statement
	c.mu.Unlock()
	id := store.RecordID{Tenant: "acme", Namespace: "ns", Key: "one-key"}
	answers := make([]followerAnswer, len(params))
	var wg sync.WaitGroup
	for i, p := range params {
		wg.Go(func() { answers[i].res, answers[i].err = c.do(ctxs[i], id, p) })
		// In order: the first queued is the leader.
		deadline := time.Now().Add(10 * time.Second)
		for {
			c.mu.Lock()
			queued := len(c.queue)
			c.mu.Unlock()
			if queued == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d calls queued after 10s, want %d", queued, i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	c.mu.Lock()
	c.inFlight = 1 // the drain below; it gives the slot back
	c.mu.Unlock()
	go c.drain()
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		queued, inFlight := len(c.queue), c.inFlight
		c.mu.Unlock()
		if queued == 0 && inFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every answer: %d calls queued and %d slots busy, want none", queued, inFlight)
		}
		time.Sleep(time.Millisecond)
	}
	return answers
}

func background(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	return ctxs
}

// TestFollowersOfAFailedStatement: when the leader's statement fails as a
// whole (store.ErrUnavailable), its followers get the same answer at once
// instead of a statement of their own that would wait as long again.
func TestFollowersOfAFailedStatement(t *testing.T) {
	t.Parallel()
	unavailable := fmt.Errorf("%w: connection lost", store.ErrUnavailable)
	f := newFollowerFixture(func(int) (int, error) { return 0, unavailable })
	answers := f.together(t, background(4), []int{1, 2, 3, 4})
	for i, a := range answers {
		if !errors.Is(a.err, store.ErrUnavailable) {
			t.Errorf("call %d: %d, %v; want UNAVAILABLE", i+1, a.res, a.err)
		}
	}
	if len(f.batches) != 1 || len(f.batches[0]) != 1 {
		t.Errorf("statements run: %v; want one, of the leader alone", f.batches)
	}
}

// TestFollowersOfARowError: a leader answered with an error of its own row
// (a fingerprint mismatch) says nothing of its followers, which go in the
// next statement: the first of them leads it, and the rest follow that one.
func TestFollowersOfARowError(t *testing.T) {
	t.Parallel()
	f := newFollowerFixture(func(p int) (int, error) {
		if p == 1 {
			return 0, store.ErrFingerprintMismatch
		}
		return p, nil
	})
	answers := f.together(t, background(3), []int{1, 2, 3})
	if !errors.Is(answers[0].err, store.ErrFingerprintMismatch) {
		t.Errorf("leader: %d, %v; want its fingerprint mismatch", answers[0].res, answers[0].err)
	}
	if answers[1].err != nil || answers[1].res != 2 {
		t.Errorf("first follower: %d, %v; want 2, from a statement of its own", answers[1].res, answers[1].err)
	}
	if answers[2].err != nil || answers[2].res != 2*1000+3 {
		t.Errorf("second follower: %d, %v; want %d, following the first", answers[2].res, answers[2].err, 2*1000+3)
	}
	if len(f.batches) != 2 || len(f.batches[0]) != 1 || f.batches[0][0] != 1 || len(f.batches[1]) != 1 || f.batches[1][0] != 2 {
		t.Errorf("statements run: %v; want [[1] [2]]", f.batches)
	}
}

// TestAbandonedFollower: a follower whose caller stops waiting while its
// leader's statement runs gets its context's error, and the others their
// answers as if it were not there.
func TestAbandonedFollower(t *testing.T) {
	t.Parallel()
	gone, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFollowerFixture(func(p int) (int, error) {
		cancel() // the statement runs: the follower's caller leaves
		return p, nil
	})
	ctxs := background(3)
	ctxs[1] = gone
	answers := f.together(t, ctxs, []int{1, 2, 3})
	if answers[0].err != nil || answers[0].res != 1 {
		t.Errorf("leader: %d, %v; want 1", answers[0].res, answers[0].err)
	}
	if !errors.Is(answers[1].err, context.Canceled) {
		t.Errorf("abandoned follower: %d, %v; want its context's error", answers[1].res, answers[1].err)
	}
	if answers[2].err != nil || answers[2].res != 1*1000+3 {
		t.Errorf("other follower: %d, %v; want %d", answers[2].res, answers[2].err, 1*1000+3)
	}
}

// TestFollowClaim decides, without a database, which followers a leader's
// answer settles and with what: every answer a Claim that only reports
// could get, and the cases that must go in a statement of their own.
func TestFollowClaim(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	id := store.RecordID{Tenant: "acme", Namespace: "pay", Key: "k"}
	record := func(state store.State, lease time.Duration, edit func(*store.Record)) *store.Record {
		r := &store.Record{RecordID: id, State: state, Token: 7, Attempt: 1, Claimant: "leader",
			Fingerprint: []byte("f"), LeaseExpiresAt: now.Add(lease)}
		if edit != nil {
			edit(r)
		}
		return r
	}
	leaderWith := func(rec *store.Record, acquired bool) *claimCall {
		return &claimCall{id: id, res: claimRow{acquired: acquired, rec: rec, now: now}}
	}
	follower := func(claimant, fp string) *claimCall {
		return &claimCall{id: id, params: &store.ClaimParams{RecordID: id, Claimant: claimant, Fingerprint: []byte(fp)}}
	}
	for _, tc := range []struct {
		name     string
		leader   *claimCall
		f        *claimCall
		follows  bool
		outcome  store.Outcome
		wantErr  error
		retryPos bool // RetryAfter > 0
	}{
		{"the statement found no record", leaderWith(nil, false), follower("b", "f"), false, 0, nil, false},
		{"a record the leader only read", leaderWith(record(store.StateProcessing, time.Minute, nil), false), follower("b", "f"), true, store.OutcomeInProgress, nil, true},
		{"another claimant of a live lease", leaderWith(record(store.StateProcessing, time.Minute, nil), true), follower("b", "f"), true, store.OutcomeInProgress, nil, true},
		{"the leader's claimant again", leaderWith(record(store.StateProcessing, time.Minute, nil), true), follower("leader", "f"), true, store.OutcomeAcquired, nil, false},
		{"a completed record", leaderWith(record(store.StateCompleted, 0, nil), true), follower("b", ""), true, store.OutcomeCompleted, nil, false},
		{"a failed record", leaderWith(record(store.StateFailed, 0, nil), true), follower("b", "f"), true, store.OutcomeFailed, nil, false},
		{"another fingerprint", leaderWith(record(store.StateProcessing, time.Minute, nil), true), follower("b", "g"), true, 0, store.ErrFingerprintMismatch, false},
		{"a released record the follower would take over", leaderWith(record(store.StateReleased, 0, nil), true), follower("b", "f"), false, 0, nil, false},
		{"a lapsed lease the follower would take over", leaderWith(record(store.StateProcessing, -time.Second, nil), true), follower("b", "f"), false, 0, nil, false},
		{"a held lease that ran out", leaderWith(record(store.StateProcessing, -time.Second, func(r *store.Record) { r.Hold = true }), true), follower("b", "f"), false, 0, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaderRec := tc.leader.res.rec
			if got := followClaim(tc.leader, tc.f); got != tc.follows {
				t.Fatalf("followClaim = %v, want %v", got, tc.follows)
			}
			if !tc.follows {
				if tc.f.res != (claimRow{}) || tc.f.err != nil {
					t.Fatalf("a follower left to its own statement was answered: %+v, %v", tc.f.res, tc.f.err)
				}
				return
			}
			if tc.f.err != nil || tc.f.res.acquired || tc.f.res.rec == nil || !tc.f.res.now.Equal(now) {
				t.Fatalf("answer %+v, %v; want the leader's record, read at the statement's clock", tc.f.res, tc.f.err)
			}
			if tc.f.res.rec == leaderRec {
				t.Fatal("the follower shares the leader's Record; want a copy of its own")
			}
			d := store.DecideClaim(tc.f.res.rec, tc.f.params, tc.f.res.now)
			if !errors.Is(d.Err, tc.wantErr) {
				t.Fatalf("the follower's answer: error %v, want %v", d.Err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			res := d.Answer
			if res.Outcome != tc.outcome || res.Record.Token != 7 || (res.RetryAfter > 0) != tc.retryPos {
				t.Fatalf("answer %v on token %d, RetryAfter %v; want %v on token 7", res.Outcome, res.Record.Token, res.RetryAfter, tc.outcome)
			}
		})
	}
}
