package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

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
		return &claimCall{ID: id, Res: claimRow{acquired: acquired, rec: rec, now: now}}
	}
	follower := func(claimant, fp string) *claimCall {
		return &claimCall{ID: id, Params: &store.ClaimParams{RecordID: id, Claimant: claimant, Fingerprint: []byte(fp)}}
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
			leaderRec := tc.leader.Res.rec
			if got := followClaim(tc.leader, tc.f); got != tc.follows {
				t.Fatalf("followClaim = %v, want %v", got, tc.follows)
			}
			if !tc.follows {
				if tc.f.Res != (claimRow{}) || tc.f.Err != nil {
					t.Fatalf("a follower left to its own statement was answered: %+v, %v", tc.f.Res, tc.f.Err)
				}
				return
			}
			if tc.f.Err != nil || tc.f.Res.acquired || tc.f.Res.rec == nil || !tc.f.Res.now.Equal(now) {
				t.Fatalf("answer %+v, %v; want the leader's record, read at the statement's clock", tc.f.Res, tc.f.Err)
			}
			if tc.f.Res.rec == leaderRec {
				t.Fatal("the follower shares the leader's Record; want a copy of its own")
			}
			d := store.DecideClaim(tc.f.Res.rec, tc.f.Params, tc.f.Res.now)
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
