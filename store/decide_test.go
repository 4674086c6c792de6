package store

import (
	"errors"
	"testing"
	"time"
)

// The decisions every store makes alike, without a store: each state a
// record can be in, and what a Claim, a token call and a resolution that
// found it so are told to do.

var decideNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func decideRecord(state State, lease time.Duration, edit func(*Record)) *Record {
	r := &Record{RecordID: RecordID{Tenant: "acme", Namespace: "pay", Key: "k"}, State: state, Token: 7, Attempt: 1,
		Claimant: "holder", Fingerprint: []byte("f"), LeaseExpiresAt: decideNow.Add(lease), Result: []byte("r"), Error: "e"}
	if edit != nil {
		edit(r)
	}
	return r
}

func TestDecideClaim(t *testing.T) {
	held := func(r *Record) { r.Hold = true }
	for _, tc := range []struct {
		name        string
		rec         *Record
		claimant    string
		fingerprint string
		action      ClaimAction
		outcome     Outcome
		err         error
	}{
		{"completed", decideRecord(StateCompleted, 0, nil), "w", "", ClaimAnswer, OutcomeCompleted, nil},
		{"failed", decideRecord(StateFailed, 0, nil), "w", "f", ClaimAnswer, OutcomeFailed, nil},
		{"unresolved", decideRecord(StateUnresolved, 0, nil), "w", "", ClaimAnswer, OutcomeUnresolved, nil},
		{"a live lease", decideRecord(StateProcessing, time.Minute, nil), "w", "", ClaimAnswer, OutcomeInProgress, nil},
		{"the holder again", decideRecord(StateProcessing, time.Minute, nil), "holder", "", ClaimAnswer, OutcomeAcquired, nil},
		{"another fingerprint", decideRecord(StateReleased, 0, nil), "w", "g", ClaimAnswer, 0, ErrFingerprintMismatch},
		{"released", decideRecord(StateReleased, 0, nil), "w", "f", ClaimAcquire, 0, nil},
		{"expired", decideRecord(StateExpired, 0, nil), "w", "", ClaimAcquire, 0, nil},
		{"a lease that ran out", decideRecord(StateProcessing, 0, nil), "holder", "", ClaimAcquire, 0, nil},
		{"a held lease that ran out", decideRecord(StateProcessing, -time.Second, held), "w", "", ClaimMakeUnresolved, 0, nil},
		{"a held live lease", decideRecord(StateProcessing, time.Minute, held), "w", "", ClaimAnswer, OutcomeInProgress, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &ClaimParams{RecordID: tc.rec.RecordID, Claimant: tc.claimant, Fingerprint: []byte(tc.fingerprint)}
			d := DecideClaim(tc.rec, p, decideNow)
			if d.Action != tc.action || !errors.Is(d.Err, tc.err) {
				t.Fatalf("decision %+v; want action %d, error %v", d, tc.action, tc.err)
			}
			switch {
			case d.Action != ClaimAnswer:
				if d.Answer != nil || d.Err != nil {
					t.Fatalf("action %d with an answer %+v, %v", d.Action, d.Answer, d.Err)
				}
			case tc.err != nil:
				if d.Answer != nil {
					t.Fatalf("a refusal with an answer %+v", d.Answer)
				}
			case d.Answer.Outcome != tc.outcome || d.Answer.Record != tc.rec || !d.Answer.Now.Equal(decideNow):
				t.Fatalf("answer %+v; want %v on the record, at the clock it was decided at", d.Answer, tc.outcome)
			case tc.outcome == OutcomeInProgress && d.Answer.RetryAfter != time.Minute:
				t.Fatalf("RetryAfter %v, want the lease's minute", d.Answer.RetryAfter)
			}
		})
	}
}

func TestTokenCallDecide(t *testing.T) {
	complete := (&CompleteParams{Token: 7, Result: []byte("r")}).Call()
	fail := (&FailParams{Token: 7, Error: "e"}).Call()
	release := (&FailParams{Token: 7, Error: "e", Retryable: true}).Call()
	beat := (&HeartbeatParams{Token: 7, LeaseTTL: time.Minute}).Call()
	byOperator := func(r *Record) { r.ResolvedByOperator = true }
	for _, tc := range []struct {
		name   string
		call   *TokenCall
		rec    *Record
		action ChangeAction
		err    error
	}{
		{"another token", complete, decideRecord(StateProcessing, time.Minute, func(r *Record) { r.Token = 8 }), ChangeRefuse, ErrLeaseLost},
		{"a Complete repeated", complete, decideRecord(StateCompleted, 0, nil), ChangeRepeat, nil},
		{"a Complete with another result", (&CompleteParams{Token: 7, Result: []byte("x")}).Call(), decideRecord(StateCompleted, 0, nil), ChangeRefuse, ErrAlreadyTerminal},
		{"a Fail repeated", fail, decideRecord(StateFailed, 0, nil), ChangeRepeat, nil},
		{"a retryable Fail repeated", release, decideRecord(StateReleased, 0, nil), ChangeRepeat, nil},
		{"the other kind of Fail", release, decideRecord(StateFailed, 0, nil), ChangeRefuse, ErrAlreadyTerminal},
		{"a Heartbeat after Complete", beat, decideRecord(StateCompleted, 0, nil), ChangeRefuse, ErrAlreadyTerminal},
		{"a Complete on a record an operator failed", complete, decideRecord(StateFailed, 0, byOperator), ChangeRefuse, ErrResolvedByOperator},
		{"a Complete with the operator's result", complete, decideRecord(StateCompleted, 0, byOperator), ChangeRepeat, nil},
		{"processing", complete, decideRecord(StateProcessing, time.Minute, nil), ChangeApplies, nil},
		{"expired", beat, decideRecord(StateExpired, 0, nil), ChangeApplies, nil},
		{"unresolved", fail, decideRecord(StateUnresolved, 0, nil), ChangeApplies, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := tc.call.Decide(tc.rec); d.Action != tc.action || !errors.Is(d.Err, tc.err) || (tc.err == nil) != (d.Err == nil) {
				t.Fatalf("decision %+v; want action %d, error %v", d, tc.action, tc.err)
			}
		})
	}
}

func TestResolveDecide(t *testing.T) {
	completed := &ResolveParams{Resolution: ResolveCompleted, Result: []byte("r")}
	failed := &ResolveParams{Resolution: ResolveFailed, Error: "e"}
	released := &ResolveParams{Resolution: ResolveReleased}
	for _, tc := range []struct {
		name   string
		p      *ResolveParams
		rec    *Record
		action ChangeAction
		err    error
	}{
		{"completed as asked", completed, decideRecord(StateCompleted, 0, nil), ChangeRepeat, nil},
		{"completed with another result", &ResolveParams{Resolution: ResolveCompleted, Result: []byte("x")}, decideRecord(StateCompleted, 0, nil), ChangeRefuse, ErrNotUnresolved},
		{"failed as asked", failed, decideRecord(StateFailed, 0, nil), ChangeRepeat, nil},
		{"a release of a released record", released, decideRecord(StateReleased, 0, nil), ChangeRefuse, ErrNotUnresolved},
		{"processing", completed, decideRecord(StateProcessing, time.Minute, nil), ChangeRefuse, ErrNotUnresolved},
		{"unresolved", failed, decideRecord(StateUnresolved, 0, nil), ChangeApplies, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := tc.p.Decide(tc.rec); d.Action != tc.action || !errors.Is(d.Err, tc.err) || (tc.err == nil) != (d.Err == nil) {
				t.Fatalf("decision %+v; want action %d, error %v", d, tc.action, tc.err)
			}
		})
	}
	if _, err := (&ResolveParams{Resolution: 9}).Target(); err == nil {
		t.Fatal("Target of resolution 9: no error")
	}
	if target, err := (&ResolveParams{Resolution: ResolveCompleted}).Target(); err != nil || target.Result == nil {
		t.Fatalf("Target of a completion without a result: %+v, %v; want an empty result, never nil", target, err)
	}
}
