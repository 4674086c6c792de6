package store

import (
	"errors"
	"testing"
	"time"
)

// withSteps gives a record the steps charge (FINISHED by token 6 with
// "ch_1") and receipt (STARTED by token 7).
func withSteps(r *Record) {
	r.Steps = []Step{
		{Name: "charge", State: StepFinished, Result: []byte("ch_1"), Token: 6},
		{Name: "receipt", State: StepStarted, Token: 7},
	}
}

func TestDecideClaimWithSteps(t *testing.T) {
	holdUnfinished := func(r *Record) { withSteps(r); r.HoldUnfinished = true }
	allFinished := func(r *Record) {
		holdUnfinished(r)
		r.Steps[1] = Step{Name: "receipt", State: StepFinished, Result: []byte{}, Token: 7}
	}
	releasedByOperator := func(r *Record) { holdUnfinished(r); r.ResolvedByOperator = true }
	for _, tc := range []struct {
		name   string
		rec    *Record
		action ClaimAction
	}{
		{"a lapsed lease with a started step, rerun", decideRecord(StateProcessing, -time.Second, withSteps), ClaimAcquire},
		{"a lapsed lease with a started step, hold", decideRecord(StateProcessing, -time.Second, holdUnfinished), ClaimMakeUnresolved},
		{"expired with a started step, hold", decideRecord(StateExpired, 0, holdUnfinished), ClaimMakeUnresolved},
		{"released with a started step, hold", decideRecord(StateReleased, 0, holdUnfinished), ClaimMakeUnresolved},
		{"released by an operator with a started step, hold", decideRecord(StateReleased, 0, releasedByOperator), ClaimAcquire},
		{"expired with every step finished, hold", decideRecord(StateExpired, 0, allFinished), ClaimAcquire},
		{"a live lease with a started step, hold", decideRecord(StateProcessing, time.Minute, holdUnfinished), ClaimAnswer},
		{"completed with a started step, hold", decideRecord(StateCompleted, 0, holdUnfinished), ClaimAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &ClaimParams{RecordID: tc.rec.RecordID, Claimant: "w"}
			if d := DecideClaim(tc.rec, p, decideNow); d.Action != tc.action {
				t.Fatalf("decision %+v; want action %d", d, tc.action)
			}
		})
	}
}

func TestStepDecide(t *testing.T) {
	finish := func(name, result string) *StepParams {
		return &StepParams{Token: 7, Name: name, Finish: true, Result: []byte(result), MaxSteps: 3, MaxStepBytes: 64}
	}
	start := func(name string) *StepParams {
		return &StepParams{Token: 7, Name: name, MaxSteps: 3, MaxStepBytes: 64}
	}
	byOperator := func(r *Record) { withSteps(r); r.ResolvedByOperator = true }
	full := func(r *Record) {
		withSteps(r)
		r.Steps = append(r.Steps, Step{Name: "audit", State: StepStarted, Token: 7})
	}
	for _, tc := range []struct {
		name   string
		p      *StepParams
		rec    *Record
		action ChangeAction
		err    error
	}{
		{"another token", finish("new", "x"), decideRecord(StateProcessing, time.Minute, func(r *Record) { withSteps(r); r.Token = 8 }), ChangeRefuse, ErrLeaseLost},
		{"another token repeating a finished step", finish("charge", "ch_1"), decideRecord(StateProcessing, time.Minute, func(r *Record) { withSteps(r); r.Token = 8 }), ChangeRefuse, ErrLeaseLost},
		{"a finish repeated", finish("charge", "ch_1"), decideRecord(StateProcessing, time.Minute, withSteps), ChangeRepeat, nil},
		{"a finish repeated after Complete", finish("charge", "ch_1"), decideRecord(StateCompleted, 0, withSteps), ChangeRepeat, nil},
		{"a finish with another result", finish("charge", "ch_2"), decideRecord(StateProcessing, time.Minute, withSteps), ChangeRefuse, ErrStepFinished},
		{"a start of a finished step", start("charge"), decideRecord(StateProcessing, time.Minute, withSteps), ChangeRefuse, ErrStepFinished},
		{"a start repeated", start("receipt"), decideRecord(StateProcessing, time.Minute, withSteps), ChangeRepeat, nil},
		{"a start of a step a predecessor started", start("receipt"), decideRecord(StateProcessing, time.Minute, func(r *Record) { withSteps(r); r.Steps[1].Token = 5 }), ChangeApplies, nil},
		{"a finish of a started step", finish("receipt", "sent"), decideRecord(StateProcessing, time.Minute, withSteps), ChangeApplies, nil},
		{"a new step on a completed record", finish("new", "x"), decideRecord(StateCompleted, 0, withSteps), ChangeRefuse, ErrAlreadyTerminal},
		{"a new step on a record an operator resolved", finish("new", "x"), decideRecord(StateCompleted, 0, byOperator), ChangeRefuse, ErrResolvedByOperator},
		{"a new step on an expired record", start("new"), decideRecord(StateExpired, 0, withSteps), ChangeApplies, nil},
		{"a new step on an unresolved record", start("new"), decideRecord(StateUnresolved, 0, withSteps), ChangeApplies, nil},
		{"a new step past the count", start("new"), decideRecord(StateProcessing, time.Minute, full), ChangeRefuse, ErrTooManySteps},
		{"finishing a started step at the count", finish("audit", "ok"), decideRecord(StateProcessing, time.Minute, full), ChangeApplies, nil},
		// charge (6+4) and receipt (7) hold 17 bytes; 17 + 3 + 44 = 64.
		{"a step to the byte bound", finish("new", string(make([]byte, 44))), decideRecord(StateProcessing, time.Minute, withSteps), ChangeApplies, nil},
		{"a step past the byte bound", finish("new", string(make([]byte, 45))), decideRecord(StateProcessing, time.Minute, withSteps), ChangeRefuse, ErrStepsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, stored := tc.p.Decide(tc.rec)
			if d.Action != tc.action || !errors.Is(d.Err, tc.err) || (tc.err == nil) != (d.Err == nil) {
				t.Fatalf("decision %+v; want action %d, error %v", d, tc.action, tc.err)
			}
			if (d.Action == ChangeRepeat) != (stored != nil) || (stored != nil && stored.Name != tc.p.Name) {
				t.Fatalf("decision %+v with the stored step %+v", d, stored)
			}
		})
	}
}
