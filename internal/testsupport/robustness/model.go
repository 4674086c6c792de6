// Package robustness checks idem's promise under faults: workers call real
// idemd processes while the harness kills them, restarts or fails over
// Postgres and cuts connections; every call is recorded with its start, end
// and answer, and the history is checked for linearizability with porcupine
// against a model of the record state machine, one key at a time.
//
// The model and its rules are written down in docs/RELIABILITY.md; this file
// is their executable form. The scenarios themselves are behind the
// robustness build tag (make robustness, make soak); the model's own tests and
// the proof that the checker catches a broken server run with go test ./....
package robustness

import (
	"fmt"
	"math"
	"time"
)

// Never is the end time of a call whose answer was lost: it may take effect
// at any moment after it started.
const Never = math.MaxInt64

// ClockSlack is how far the model lets a time comparison be off. The database
// and the harness read the same machine's clock, so the database's now() for
// a call lies inside the call's [Start, End]; the slack covers rounding to
// microseconds and the order in which clocks are read.
const ClockSlack = int64(20 * time.Millisecond)

// OpKind is the RPC a call made.
type OpKind uint8

// The RPCs of IdempotencyService that the workers make.
const (
	OpClaim OpKind = iota + 1
	OpComplete
	OpFail
	OpHeartbeat
	OpLookup
	OpStartStep
	OpCompleteStep
)

func (k OpKind) String() string {
	switch k {
	case OpClaim:
		return "Claim"
	case OpComplete:
		return "Complete"
	case OpFail:
		return "Fail"
	case OpHeartbeat:
		return "Heartbeat"
	case OpLookup:
		return "Lookup"
	case OpStartStep:
		return "StartStep"
	case OpCompleteStep:
		return "CompleteStep"
	}
	return "?"
}

// The steps of every job of the workloads, by index: a step call names one
// (Input.Step), and a record's steps are kept in this order, whatever order
// they were recorded in, so that states compare equal.
var StepNames = [NumSteps]string{"charge", "receipt"}

// NumSteps is how many steps a job of the workloads has.
const NumSteps = 2

// StepPhase is where a step is.
type StepPhase uint8

// The phases of a step.
const (
	StepNone StepPhase = iota
	StepStarted
	StepFinished
)

func (p StepPhase) String() string { return [...]string{"none", "started", "finished"}[p] }

// StepObs is a step as an answer reports it, or as the model holds it:
// its phase, its result when FINISHED, and the token that last wrote it.
type StepObs struct {
	Phase StepPhase
	Value string
	Token int64
}

func (o StepObs) String() string {
	switch o.Phase {
	case StepStarted:
		return fmt.Sprintf("started by %d", o.Token)
	case StepFinished:
		return fmt.Sprintf("%q by %d", o.Value, o.Token)
	}
	return "-"
}

// Input is one call as a worker made it.
type Input struct {
	Kind     OpKind
	Key      string
	Claimant string        // Claim
	Token    int64         // Complete, Fail, Heartbeat
	TTL      time.Duration // Claim, Heartbeat
	// Value is Complete's result, Fail's error or CompleteStep's result;
	// each call sends its own, so that a record's value names the call that
	// wrote it.
	Value     string
	Retryable bool // Fail
	Step      int  // StartStep, CompleteStep: the index in StepNames
	// Start and End are the harness's wall clock, in Unix nanoseconds, just
	// before the call was sent and just after its answer arrived; End is
	// Never when the answer was lost.
	Start, End int64
}

// Code is how a call ended.
type Code uint8

// The codes the model knows. Any other error (UNAVAILABLE, DEADLINE_EXCEEDED,
// a transport error, and anything unexpected) is CodeMaybe: the call may or
// may not have been applied.
const (
	CodeOK Code = iota
	CodeMaybe
	CodeNotFound
	CodeLeaseLost
	CodeAlreadyTerminal
	CodeStepFinished
)

func (c Code) String() string {
	switch c {
	case CodeOK:
		return "ok"
	case CodeMaybe:
		return "maybe"
	case CodeNotFound:
		return "NOT_FOUND"
	case CodeLeaseLost:
		return "LEASE_LOST"
	case CodeAlreadyTerminal:
		return "ALREADY_TERMINAL"
	case CodeStepFinished:
		return "STEP_ALREADY_FINISHED"
	}
	return "?"
}

// Outcome is a Claim's answer.
type Outcome uint8

// Claim's outcomes.
const (
	OutcomeNone Outcome = iota
	OutcomeAcquired
	OutcomeInProgress
	OutcomeCompleted
	OutcomeFailed
)

func (o Outcome) String() string {
	return [...]string{"-", "ACQUIRED", "IN_PROGRESS", "COMPLETED", "FAILED"}[o]
}

// RecState is a record's state as an answer reports it.
type RecState uint8

// The record states of the API.
const (
	RecUnknown RecState = iota
	RecProcessing
	RecCompleted
	RecFailed
	RecReleased
	RecExpired
)

func (s RecState) String() string {
	return [...]string{"?", "PROCESSING", "COMPLETED", "FAILED", "RELEASED", "EXPIRED"}[s]
}

// Rec is the part of a returned record the model checks.
type Rec struct {
	State    RecState
	Token    int64
	Claimant string
	Lease    int64  // lease_expires_at in Unix nanoseconds; 0 when unset
	Value    string // result when COMPLETED, error when FAILED or RELEASED
	// Steps are the record's steps (Claim, Lookup); Unknown is true when
	// the answer had a step the workload does not name.
	Steps        [NumSteps]StepObs
	UnknownSteps bool
}

// Output is a call's answer.
type Output struct {
	Code    Code
	Outcome Outcome // Claim
	Rec     Rec     // when Code is CodeOK, but for a step call
	Step    StepObs // a step call's, when Code is CodeOK
}

// phase is where the model holds a record. PROCESSING and EXPIRED are one
// phase: they differ only in whether the sweeper has passed, and every call
// treats them alike (a Claim takes over once the lease ran out either way;
// token-bearing calls succeed in both).
type phase uint8

const (
	absent phase = iota
	held
	completed
	failed
	released
)

func (p phase) String() string {
	return [...]string{"absent", "held", "completed", "failed", "released"}[p]
}

// keyState is one record in the model. It is comparable, so that porcupine
// can merge equal states.
type keyState struct {
	Phase phase
	// Token is the current token when TokenKnown; otherwise a lower bound of
	// it: a Claim whose answer was lost may have handed out a token nobody
	// saw.
	Token      int64
	TokenKnown bool
	Claimant   string
	// LeaseMin and LeaseMax bound the lease's end (database clock, Unix
	// nanoseconds) while held; LeaseMax is Never when unbounded.
	LeaseMin, LeaseMax int64
	Value              string
	// Steps are the record's steps: a takeover keeps them, and every
	// Claim's and Lookup's answer shows them.
	Steps [NumSteps]StepObs
}

func (s keyState) String() string {
	desc := s.describe()
	if s.Steps != ([NumSteps]StepObs{}) {
		for i, st := range s.Steps {
			desc += fmt.Sprintf(" %s=%s", StepNames[i], st)
		}
	}
	return desc
}

func (s keyState) describe() string {
	tok := fmt.Sprint(s.Token)
	if !s.TokenKnown {
		tok = fmt.Sprintf("≥%d", s.Token)
	}
	switch s.Phase {
	case absent:
		return "absent"
	case held:
		lease := time.Unix(0, s.LeaseMin).UTC().Format("15:04:05.000")
		if s.LeaseMax != s.LeaseMin {
			hi := "∞"
			if s.LeaseMax != Never {
				hi = time.Unix(0, s.LeaseMax).UTC().Format("15:04:05.000")
			}
			lease += "…" + hi
		}
		return fmt.Sprintf("held tok=%s by %s until %s", tok, short(s.Claimant), lease)
	}
	return fmt.Sprintf("%s tok=%s %q", s.Phase, tok, s.Value)
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// tokenMay reports whether t may be the current token.
func (s keyState) tokenMay(t int64) bool {
	if s.TokenKnown {
		return t == s.Token
	}
	return t >= s.Token
}

// tokenMayNot reports whether t may be a superseded token.
func (s keyState) tokenMayNot(t int64) bool { return !s.TokenKnown || t != s.Token }

func (s keyState) reveal(t int64) keyState {
	s.Token, s.TokenKnown = t, true
	return s
}

// mayBeLive reports whether the lease may still run at some moment from
// start on.
func (s keyState) mayBeLive(start int64) bool {
	return s.LeaseMax == Never || start-ClockSlack < s.LeaseMax
}

// mayHaveRunOut reports whether the lease may have run out by end.
func (s keyState) mayHaveRunOut(end int64) bool {
	return end == Never || end+ClockSlack >= s.LeaseMin
}

// leaseFits reports whether an observed lease end x is within the bounds.
func (s keyState) leaseFits(x int64) bool {
	return x >= s.LeaseMin-ClockSlack && (s.LeaseMax == Never || x <= s.LeaseMax+ClockSlack)
}

// narrow pins the lease to an observed value.
func (s keyState) narrow(x int64) keyState {
	s.LeaseMin, s.LeaseMax = x, x
	return s
}

// newLeaseFits reports whether x can be the lease a call set: its now() plus
// the TTL, now() inside the call's window.
func newLeaseFits(in Input, x int64) bool {
	ttl := int64(in.TTL)
	if x < in.Start+ttl-ClockSlack {
		return false
	}
	return in.End == Never || x <= in.End+ttl+ClockSlack
}

// terminal makes the record s finished by token t with value v; its steps
// stay.
func (s keyState) terminal(p phase, t int64, v string) keyState {
	return keyState{Phase: p, Token: t, TokenKnown: true, Value: v, Steps: s.Steps}
}

func (s keyState) canTakeOver(end int64) bool {
	return s.Phase == absent || s.Phase == released || (s.Phase == held && s.mayHaveRunOut(end))
}

// step returns every state the record can be in after the call, given what
// it answered; none when the answer is impossible.
func step(s keyState, in Input, out Output) []keyState {
	switch in.Kind {
	case OpClaim:
		return stepClaim(s, in, out)
	case OpComplete:
		return stepFinish(s, in, out, completed)
	case OpFail:
		p := failed
		if in.Retryable {
			p = released
		}
		return stepFinish(s, in, out, p)
	case OpHeartbeat:
		return stepHeartbeat(s, in, out)
	case OpLookup:
		return stepLookup(s, in, out)
	case OpStartStep, OpCompleteStep:
		return stepStep(s, in, out)
	}
	return nil
}

func stepClaim(s keyState, in Input, out Output) []keyState {
	reentrant := s.Phase == held && in.Claimant != "" && s.Claimant == in.Claimant
	if out.Code == CodeMaybe {
		next := []keyState{s} // not applied, or an answer that writes nothing
		if s.canTakeOver(Never) {
			next = append(next, keyState{Phase: held, Token: s.Token + 1, Claimant: in.Claimant,
				LeaseMin: in.Start + int64(in.TTL) - ClockSlack, LeaseMax: Never, Steps: s.Steps})
		}
		return next
	}
	if out.Code != CodeOK {
		return nil // a Claim of the workload has no definite error
	}
	r := out.Rec
	// Every answer shows the record's steps: a step recorded is never lost,
	// and a takeover hands over every step recorded before it.
	if !s.stepsAre(r) {
		return nil
	}
	var next []keyState
	switch out.Outcome {
	case OutcomeAcquired:
		if r.State != RecProcessing || r.Claimant != in.Claimant {
			return nil
		}
		// The same claimant asking again while its lease lives: same token.
		if reentrant && s.tokenMay(r.Token) && s.mayBeLive(in.Start) && s.leaseFits(r.Lease) {
			next = append(next, s.reveal(r.Token).narrow(r.Lease))
		}
		// A new grant: a token above every earlier one, a fresh lease.
		if s.canTakeOver(in.End) && r.Token > s.Token && newLeaseFits(in, r.Lease) {
			next = append(next, keyState{Phase: held, Token: r.Token, TokenKnown: true, Claimant: in.Claimant,
				LeaseMin: r.Lease, LeaseMax: r.Lease, Steps: s.Steps})
		}
	case OutcomeInProgress:
		if s.Phase == held && !reentrant && r.State == RecProcessing && r.Claimant == s.Claimant &&
			s.tokenMay(r.Token) && s.mayBeLive(in.Start) && s.leaseFits(r.Lease) && r.Lease+ClockSlack > in.Start {
			next = append(next, s.reveal(r.Token).narrow(r.Lease))
		}
	case OutcomeCompleted:
		if s.Phase == completed && r.State == RecCompleted && s.tokenMay(r.Token) && r.Value == s.Value {
			next = append(next, s.reveal(r.Token))
		}
	case OutcomeFailed:
		if s.Phase == failed && r.State == RecFailed && s.tokenMay(r.Token) && r.Value == s.Value {
			next = append(next, s.reveal(r.Token))
		}
	}
	return next
}

// stepFinish is Complete (to completed) and Fail (to failed or released).
func stepFinish(s keyState, in Input, out Output, to phase) []keyState {
	t := in.Token
	canApply := s.Phase == held && s.tokenMay(t)
	switch out.Code {
	case CodeMaybe:
		next := []keyState{s}
		if canApply {
			next = append(next, s.terminal(to, t, in.Value))
		}
		return next
	case CodeNotFound:
		if s.Phase == absent {
			return []keyState{s}
		}
	case CodeLeaseLost:
		if s.Phase != absent && s.tokenMayNot(t) {
			return []keyState{s}
		}
	case CodeAlreadyTerminal:
		// Current token, record finished by another call: another kind, or
		// the same kind with another value.
		if s.Phase != absent && s.Phase != held && !s.finishedBy(to, in.Value) && s.tokenMay(t) {
			return []keyState{s.reveal(t)}
		}
	case CodeOK:
		r := out.Rec
		if r.Token != t {
			return nil
		}
		rp := recPhase(r.State)
		var next []keyState
		if canApply && rp == to && r.Value == in.Value {
			next = append(next, s.terminal(to, t, in.Value))
		}
		// A repeat of the call that finished the record, with its value,
		// answers the stored record unchanged.
		if s.finishedBy(to, in.Value) && s.tokenMay(t) && rp == s.Phase && r.Value == s.Value {
			next = append(next, s.reveal(t))
		}
		return next
	}
	return nil
}

// finishedBy reports whether the record is what a call that leaves phase
// to with value made it: a repeat of that call. Complete leaves completed;
// Fail leaves failed, or released when retryable.
func (s keyState) finishedBy(to phase, value string) bool {
	return s.Phase != absent && s.Phase != held && s.Phase == to && s.Value == value
}

func recPhase(s RecState) phase {
	switch s {
	case RecProcessing, RecExpired:
		return held
	case RecCompleted:
		return completed
	case RecFailed:
		return failed
	case RecReleased:
		return released
	}
	return absent
}

func stepHeartbeat(s keyState, in Input, out Output) []keyState {
	t := in.Token
	canApply := s.Phase == held && s.tokenMay(t)
	switch out.Code {
	case CodeMaybe:
		next := []keyState{s}
		if canApply {
			n := s.reveal(t)
			n.LeaseMin, n.LeaseMax = in.Start+int64(in.TTL)-ClockSlack, Never
			next = append(next, n)
		}
		return next
	case CodeNotFound:
		if s.Phase == absent {
			return []keyState{s}
		}
	case CodeLeaseLost:
		if s.Phase != absent && s.tokenMayNot(t) {
			return []keyState{s}
		}
	case CodeAlreadyTerminal:
		if s.Phase != absent && s.Phase != held && s.tokenMay(t) {
			return []keyState{s.reveal(t)}
		}
	case CodeOK:
		r := out.Rec
		if canApply && r.State == RecProcessing && r.Token == t && r.Claimant == s.Claimant && newLeaseFits(in, r.Lease) {
			return []keyState{s.reveal(t).narrow(r.Lease)}
		}
	}
	return nil
}

func stepLookup(s keyState, in Input, out Output) []keyState {
	switch out.Code {
	case CodeMaybe:
		return []keyState{s}
	case CodeNotFound:
		if s.Phase == absent {
			return []keyState{s}
		}
	case CodeOK:
		r := out.Rec
		if s.Phase == absent || !s.tokenMay(r.Token) || !s.stepsAre(r) {
			return nil
		}
		if s.Phase == held {
			ok := r.State == RecProcessing || (r.State == RecExpired && s.mayHaveRunOut(in.End))
			if ok && r.Claimant == s.Claimant && s.leaseFits(r.Lease) {
				return []keyState{s.reveal(r.Token).narrow(r.Lease)}
			}
			return nil
		}
		if recPhase(r.State) == s.Phase && r.Value == s.Value {
			return []keyState{s.reveal(r.Token)}
		}
	}
	return nil
}

// stepsAre reports whether an answer's record shows s's steps.
func (s keyState) stepsAre(r Rec) bool { return !r.UnknownSteps && r.Steps == s.Steps }

// stepStep is StartStep and CompleteStep: under the record's current token
// while it is held, a step that is new or STARTED becomes STARTED or
// FINISHED by that token; a FINISHED one never changes. A repeat (a finish
// with the value the step holds; a start of the step the token started) is
// answered with the stored step.
func stepStep(s keyState, in Input, out Output) []keyState {
	t, i := in.Token, in.Step
	cur := s.Steps[i]
	finish := in.Kind == OpCompleteStep
	want := StepObs{Phase: StepStarted, Token: t}
	if finish {
		want = StepObs{Phase: StepFinished, Value: in.Value, Token: t}
	}
	repeat := cur.Phase == StepFinished && finish && cur.Value == in.Value ||
		cur.Phase == StepStarted && !finish && cur.Token == t
	canApply := s.Phase == held && s.tokenMay(t) && cur.Phase != StepFinished && !repeat
	applied := func() keyState {
		n := s.reveal(t)
		n.Steps[i] = want
		return n
	}
	switch out.Code {
	case CodeMaybe:
		next := []keyState{s}
		if canApply {
			next = append(next, applied())
		}
		return next
	case CodeNotFound:
		if s.Phase == absent {
			return []keyState{s}
		}
	case CodeLeaseLost:
		if s.Phase != absent && s.tokenMayNot(t) {
			return []keyState{s}
		}
	case CodeAlreadyTerminal:
		if s.Phase != absent && s.Phase != held && !repeat && s.tokenMay(t) {
			return []keyState{s.reveal(t)}
		}
	case CodeStepFinished:
		if s.Phase == held && cur.Phase == StepFinished && !repeat && s.tokenMay(t) {
			return []keyState{s.reveal(t)}
		}
	case CodeOK:
		var next []keyState
		if canApply && out.Step == want {
			next = append(next, applied())
		}
		if repeat && s.Phase != absent && s.tokenMay(t) && out.Step == cur {
			next = append(next, s.reveal(t))
		}
		return next
	}
	return nil
}
