package robustness

import (
	"testing"
	"time"
)

// A hand-written history: the base time, then calls at offsets in
// milliseconds.
type script struct {
	t0  int64
	ops []Op
}

func newScript() *script { return &script{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()} }

func (s *script) at(ms int64) int64 { return s.t0 + ms*int64(time.Millisecond) }

// call adds a call that ran from start to end (milliseconds; end < 0: its
// answer was lost).
func (s *script) call(worker int, start, end int64, in Input, out Output) {
	in.Start = s.at(start)
	in.End = Never
	if end >= 0 {
		in.End = s.at(end)
	}
	if in.Key == "" {
		in.Key = "k"
	}
	s.ops = append(s.ops, Op{Worker: worker, In: in, Out: out})
}

// item adds an item of batch RPC batch (numbered from 1): a call of its own
// whose interval is the RPC's.
func (s *script) item(batch int64, worker int, start, end int64, in Input, out Output) {
	s.call(worker, start, end, in, out)
	s.ops[len(s.ops)-1].Batch = batch
}

const ttl = time.Second

func claim(c string) Input { return Input{Kind: OpClaim, Claimant: c, TTL: ttl} }
func complete(tok int64, v string) Input {
	return Input{Kind: OpComplete, Token: tok, Value: v}
}
func lookup() Input { return Input{Kind: OpLookup} }
func startStep(tok int64, i int) Input {
	return Input{Kind: OpStartStep, Token: tok, Step: i}
}
func completeStep(tok int64, i int, v string) Input {
	return Input{Kind: OpCompleteStep, Token: tok, Step: i, Value: v}
}

func stepOK(phase StepPhase, v string, tok int64) Output {
	return Output{Step: StepObs{Phase: phase, Value: v, Token: tok}}
}
func finishedBy(v string, tok int64) StepObs {
	return StepObs{Phase: StepFinished, Value: v, Token: tok}
}
func startedBy(tok int64) StepObs { return StepObs{Phase: StepStarted, Token: tok} }

// withSteps is out with the record's steps, in the order of StepNames.
func withSteps(out Output, steps ...StepObs) Output {
	copy(out.Rec.Steps[:], steps)
	return out
}

func (s *script) acquired(tok int64, by string, leaseMS int64) Output {
	return Output{Outcome: OutcomeAcquired, Rec: Rec{State: RecProcessing, Token: tok, Claimant: by, Lease: s.at(leaseMS)}}
}

func (s *script) inProgress(tok int64, by string, leaseMS int64) Output {
	return Output{Outcome: OutcomeInProgress, Rec: Rec{State: RecProcessing, Token: tok, Claimant: by, Lease: s.at(leaseMS)}}
}

func done(tok int64, v string) Output {
	return Output{Rec: Rec{State: RecCompleted, Token: tok, Value: v}}
}

func (s *script) processing(tok int64, by string, leaseMS int64) Output {
	return Output{Rec: Rec{State: RecProcessing, Token: tok, Claimant: by, Lease: s.at(leaseMS)}}
}

var (
	maybe     = Output{Code: CodeMaybe}
	leaseLost = Output{Code: CodeLeaseLost}
)

func TestModel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		legal bool
		build func(s *script)
	}{
		{"claim, complete, replay", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, 15, complete(5, "r1"), done(5, "r1"))
			s.call(1, 20, 25, claim("b"), Output{Outcome: OutcomeCompleted, Rec: Rec{State: RecCompleted, Token: 5, Value: "r1"}})
		}},
		{"second grant while the lease lives", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(1, 100, 110, claim("b"), s.acquired(6, "b", 1105))
		}},
		{"takeover once the lease ran out", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(1, 500, 505, claim("b"), s.inProgress(5, "a", 1002))
			s.call(1, 1010, 1020, claim("b"), s.acquired(6, "b", 2015))
			s.call(0, 1100, 1105, complete(5, "late"), leaseLost)
			s.call(1, 1200, 1205, complete(6, "r"), done(6, "r"))
		}},
		{"a stale token's Complete acknowledged", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(1, 1010, 1020, claim("b"), s.acquired(6, "b", 2015))
			s.call(0, 1100, 1105, complete(5, "late"), done(5, "late"))
		}},
		{"token that does not grow", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(1, 1010, 1020, claim("b"), s.acquired(4, "b", 2015))
		}},
		{"acknowledged Complete lost", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, 15, complete(5, "r1"), done(5, "r1"))
			s.call(1, 2000, 2005, lookup(), s.processing(5, "a", 1002))
		}},
		{"Complete whose answer was lost, not applied", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, -1, complete(5, "r1"), maybe)
			s.call(1, 2000, 2005, lookup(), Output{Rec: Rec{State: RecExpired, Token: 5, Claimant: "a", Lease: s.at(1002)}})
		}},
		{"Complete whose answer was lost, applied", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, -1, complete(5, "r1"), maybe)
			s.call(1, 2000, 2005, lookup(), done(5, "r1"))
		}},
		{"Claim whose answer was lost, retried by the same claimant", true, func(s *script) {
			s.call(0, 0, -1, claim("a"), maybe)
			s.call(0, 100, 105, claim("a"), s.acquired(7, "a", 1003))
			s.call(1, 200, 205, claim("b"), s.inProgress(7, "a", 1003))
		}},
		{"Claim whose answer was lost took over, then its token completed", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(1, 1100, -1, claim("b"), maybe)
			s.call(2, 1200, 1205, claim("c"), s.inProgress(9, "b", 2150))
			s.call(0, 1300, 1305, complete(5, "late"), leaseLost)
		}},
		{"IN_PROGRESS long after the lease ran out", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(1, 3000, 3005, claim("b"), s.inProgress(5, "a", 1002))
		}},
		{"IN_PROGRESS naming another holder than the one that acquired", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(1, 100, 105, claim("b"), s.inProgress(5, "x", 1002))
		}},
		{"retried Complete answers the stored result", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, -1, complete(5, "r1"), maybe)
			s.call(0, 20, 25, complete(5, "r1"), done(5, "r1"))
		}},
		{"Complete after Fail: ALREADY_TERMINAL, not a new result", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, 15, Input{Kind: OpFail, Token: 5, Value: "e", Retryable: false}, Output{Rec: Rec{State: RecFailed, Token: 5, Value: "e"}})
			s.call(0, 20, 25, complete(5, "r1"), done(5, "r1"))
		}},
		{"Complete with another value after Complete: ALREADY_TERMINAL", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, 15, complete(5, "r1"), done(5, "r1"))
			s.call(0, 20, 25, complete(5, "r2"), Output{Code: CodeAlreadyTerminal})
		}},
		{"Complete with another value after Complete answered as a repeat", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, 15, complete(5, "r1"), done(5, "r1"))
			s.call(0, 20, 25, complete(5, "r2"), done(5, "r1"))
		}},
		{"retryable Fail after a permanent one: ALREADY_TERMINAL", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, 15, Input{Kind: OpFail, Token: 5, Value: "e", Retryable: false}, Output{Rec: Rec{State: RecFailed, Token: 5, Value: "e"}})
			s.call(0, 20, 25, Input{Kind: OpFail, Token: 5, Value: "e", Retryable: true}, Output{Code: CodeAlreadyTerminal})
		}},
		{"heartbeat extends the lease", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 800, 805, Input{Kind: OpHeartbeat, Token: 5, TTL: ttl}, s.processing(5, "a", 1803))
			s.call(1, 1200, 1205, claim("b"), s.inProgress(5, "a", 1803))
		}},
		{"takeover inside a heartbeat's extension", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 800, 805, Input{Kind: OpHeartbeat, Token: 5, TTL: ttl}, s.processing(5, "a", 1803))
			s.call(1, 1200, 1205, claim("b"), s.acquired(6, "b", 2203))
		}},
		{"one key twice in a batch: a Complete and its repeat", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.item(1, 0, 10, 15, complete(5, "r1"), done(5, "r1"))
			s.item(1, 0, 10, 15, complete(5, "r1"), done(5, "r1"))
		}},
		{"one key twice in a batch: a Complete, then another value ALREADY_TERMINAL", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.item(1, 0, 10, 15, complete(5, "r1"), done(5, "r1"))
			s.item(1, 0, 10, 15, complete(5, "r2"), Output{Code: CodeAlreadyTerminal})
		}},
		{"one key twice in a batch: both values acknowledged", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.item(1, 0, 10, 15, complete(5, "r1"), done(5, "r1"))
			s.item(1, 0, 10, 15, complete(5, "r2"), done(5, "r2"))
		}},
		{"one key thrice in a BatchClaim: the claimant, again, then a rival", true, func(s *script) {
			s.item(1, 0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.item(1, 0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.item(1, 0, 0, 5, claim("b"), s.inProgress(5, "a", 1002))
		}},
		{"two grants of live leases in one BatchClaim", false, func(s *script) {
			s.item(1, 0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.item(1, 0, 0, 5, claim("b"), s.acquired(6, "b", 1003))
		}},
		{"a batch item's acknowledged Complete lost", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.item(1, 0, 10, 15, complete(5, "r1"), done(5, "r1"))
			s.call(1, 2000, 2005, lookup(), s.processing(5, "a", 1002))
		}},
		{"a batch whose answer was lost: each item applied or not", true, func(s *script) {
			s.call(0, 0, 5, Input{Kind: OpClaim, Key: "k1", Claimant: "a", TTL: ttl}, s.acquired(5, "a", 1002))
			s.call(0, 0, 5, Input{Kind: OpClaim, Key: "k2", Claimant: "b", TTL: ttl}, s.acquired(3, "b", 1002))
			s.item(1, 0, 10, -1, Input{Kind: OpComplete, Key: "k1", Token: 5, Value: "r1"}, maybe)
			s.item(1, 0, 10, -1, Input{Kind: OpComplete, Key: "k2", Token: 3, Value: "r2"}, maybe)
			s.call(1, 2000, 2005, Input{Kind: OpLookup, Key: "k1"}, done(5, "r1"))
			s.call(1, 2000, 2005, Input{Kind: OpLookup, Key: "k2"}, Output{Rec: Rec{State: RecExpired, Token: 3, Claimant: "b", Lease: s.at(1002)}})
		}},
		{"a step recorded, handed over by the takeover, the other finished by the successor", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, 15, startStep(5, 0), stepOK(StepStarted, "", 5))
			s.call(0, 20, 25, completeStep(5, 0, "ch_1"), stepOK(StepFinished, "ch_1", 5))
			s.call(0, 30, 35, startStep(5, 1), stepOK(StepStarted, "", 5))
			s.call(1, 1100, 1105, claim("b"), withSteps(s.acquired(6, "b", 2100), finishedBy("ch_1", 5), startedBy(5)))
			s.call(0, 1200, 1205, completeStep(5, 1, "late"), leaseLost)
			s.call(1, 1300, 1305, completeStep(6, 1, "sent"), stepOK(StepFinished, "sent", 6))
			s.call(1, 1400, 1405, complete(6, "r"), done(6, "r"))
			s.call(2, 1500, 1505, lookup(), withSteps(done(6, "r"), finishedBy("ch_1", 5), finishedBy("sent", 6)))
		}},
		{"an acknowledged step lost by the takeover", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 20, 25, completeStep(5, 0, "ch_1"), stepOK(StepFinished, "ch_1", 5))
			s.call(1, 1100, 1105, claim("b"), s.acquired(6, "b", 2100))
		}},
		{"a fenced holder's step acknowledged", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(1, 1100, 1105, claim("b"), s.acquired(6, "b", 2100))
			s.call(0, 1200, 1205, completeStep(5, 0, "late"), stepOK(StepFinished, "late", 5))
		}},
		{"a step's repeat answered, another value refused", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 20, -1, completeStep(5, 0, "ch_1"), maybe)
			s.call(0, 30, 35, completeStep(5, 0, "ch_1"), stepOK(StepFinished, "ch_1", 5))
			s.call(0, 40, 45, completeStep(5, 0, "ch_2"), Output{Code: CodeStepFinished})
			s.call(0, 50, 55, startStep(5, 0), Output{Code: CodeStepFinished})
		}},
		{"a finished step overwritten", false, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 20, 25, completeStep(5, 0, "ch_1"), stepOK(StepFinished, "ch_1", 5))
			s.call(0, 30, 35, completeStep(5, 0, "ch_2"), stepOK(StepFinished, "ch_2", 5))
		}},
		{"a step whose answer was lost, seen by the next Claim", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 20, -1, completeStep(5, 0, "ch_1"), maybe)
			s.call(1, 1100, 1105, claim("b"), withSteps(s.acquired(6, "b", 2100), finishedBy("ch_1", 5)))
		}},
		{"released record taken over at once", true, func(s *script) {
			s.call(0, 0, 5, claim("a"), s.acquired(5, "a", 1002))
			s.call(0, 10, 15, Input{Kind: OpFail, Token: 5, Value: "e", Retryable: true}, Output{Rec: Rec{State: RecReleased, Token: 5, Value: "e"}})
			s.call(1, 20, 25, claim("b"), s.acquired(6, "b", 1022))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newScript()
			c.build(s)
			v := Check(s.ops, 10*time.Second, "", "")
			if v.OK() != c.legal || len(v.Undecided) > 0 {
				t.Errorf("want legal=%t, got %s", c.legal, v)
			}
			items := 0
			for _, op := range s.ops {
				if op.Batch != 0 {
					items++
				}
			}
			if v.BatchItems != items {
				t.Errorf("%d batch items checked, want %d", v.BatchItems, items)
			}
		})
	}
}
