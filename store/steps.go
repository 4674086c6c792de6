package store

import (
	"bytes"
	"errors"
	"time"
)

// Steps. A job with several side effects records each one, by name, under
// the job's token: STARTED before its effect (optional), FINISHED with its
// result after it. The steps belong to the record: a takeover keeps them, so
// that the successor skips what finished; Complete and Fail leave them in
// place, to be read and replayed with the job's result; they go when the
// record goes (purge, delete). DESIGN §1 "Steps" has the rules.

// StepState is where a step is.
type StepState string

// The states of a step.
const (
	// StepStarted: a holder said it was about to perform the step's effect;
	// the effect may or may not have happened.
	StepStarted StepState = "started"
	// StepFinished: the step's effect happened and its result is recorded.
	// A FINISHED step is never changed again.
	StepFinished StepState = "finished"
)

// Step is one named step of a job.
type Step struct {
	Name  string
	State StepState
	// Result is what the step finished with; nil while STARTED, never nil
	// once FINISHED (an empty result is empty, not nil).
	Result []byte
	// Token is the token of the holder that last wrote the step: the one
	// that finished it, or that started it while it is STARTED.
	Token int64
	// StartedAt is when the step was started, or when it was recorded
	// FINISHED if it never was; FinishedAt is zero while STARTED.
	StartedAt  time.Time
	FinishedAt time.Time
}

// Step returns the step of rec named name, nil when rec has none (or its
// steps were not read).
func (rec *Record) Step(name string) *Step {
	for i := range rec.Steps {
		if rec.Steps[i].Name == name {
			return &rec.Steps[i]
		}
	}
	return nil
}

// StepBytes is what rec's steps count against the per-job bound: their
// names' and results' bytes.
func (rec *Record) StepBytes() int {
	n := 0
	for i := range rec.Steps {
		n += len(rec.Steps[i].Name) + len(rec.Steps[i].Result)
	}
	return n
}

// holdsUnfinished reports whether a Claim must not take rec over because of
// its steps: it has a STARTED step, its policy says on_unfinished_step:
// hold, and no operator released it since (an operator's release says run
// it again, started steps included).
func (rec *Record) holdsUnfinished() bool {
	if !rec.HoldUnfinished || rec.ResolvedByOperator {
		return false
	}
	for i := range rec.Steps {
		if rec.Steps[i].State == StepStarted {
			return true
		}
	}
	return false
}

// StepParams are the inputs of RecordStep. The server has validated them
// and filled in the bounds.
type StepParams struct {
	RecordID
	Token int64
	Name  string
	// Finish records the step FINISHED with Result (nil is stored as an
	// empty result); otherwise the call marks it STARTED.
	Finish bool
	Result []byte
	// HoldUnfinished is the namespace's policy (on_unfinished_step: hold),
	// stored with the record: a Claim that would take over a record with a
	// STARTED step makes it UNRESOLVED instead.
	HoldUnfinished bool
	// MaxSteps and MaxStepBytes bound a job's steps: how many, and their
	// names' and results' bytes together (Record.StepBytes).
	MaxSteps     int
	MaxStepBytes int
}

// StepResult is what p finishes its step with: never nil.
func (p *StepParams) StepResult() []byte {
	if p.Result == nil {
		return []byte{}
	}
	return p.Result
}

// CheckText checks the text of p: its RecordID and the step's name.
func (p *StepParams) CheckText() error {
	return checkTexts("tenant", p.Tenant, "namespace", p.Namespace, "key", p.Key, "step", p.Name)
}

// Decide answers a step call whose change applied to nothing, from rec, the
// record as it stands with its steps. In this order:
//   - another token: ErrLeaseLost, whatever the state, as for Complete;
//   - the step as this call would leave it (a repeat after a lost
//     response): ChangeRepeat, answered with the stored step. For a finish,
//     FINISHED with the same result, whoever finished it; for a start,
//     STARTED by this very token;
//   - a record no longer PROCESSING, EXPIRED or UNRESOLVED:
//     ErrResolvedByOperator or ErrAlreadyTerminal, as for Complete;
//   - a FINISHED step (another result, or a start): ErrStepFinished;
//   - a step past the job's bounds: ErrTooManySteps, ErrStepsTooLarge;
//   - anything else: ChangeApplies (the statement saw an older version).
func (p *StepParams) Decide(rec *Record) (ChangeDecision, *Step) {
	refuse := func(err error) (ChangeDecision, *Step) { return ChangeDecision{Action: ChangeRefuse, Err: err}, nil }
	if rec.Token != p.Token {
		return refuse(ErrLeaseLost)
	}
	stored := rec.Step(p.Name)
	if stored != nil && p.repeats(stored) {
		s := *stored
		return ChangeDecision{Action: ChangeRepeat}, &s
	}
	switch {
	case rec.State != StateProcessing && rec.State != StateExpired && rec.State != StateUnresolved:
		if rec.ResolvedByOperator {
			return refuse(ErrResolvedByOperator)
		}
		return refuse(ErrAlreadyTerminal)
	case stored != nil && stored.State == StepFinished:
		return refuse(ErrStepFinished)
	case stored == nil && len(rec.Steps) >= p.MaxSteps:
		return refuse(ErrTooManySteps)
	case rec.StepBytes()+p.addedBytes(stored) > p.MaxStepBytes:
		return refuse(ErrStepsTooLarge)
	}
	return ChangeDecision{Action: ChangeApplies}, nil
}

// repeats reports whether stored is what this call leaves.
func (p *StepParams) repeats(stored *Step) bool {
	if p.Finish {
		return stored.State == StepFinished && bytes.Equal(stored.Result, p.StepResult())
	}
	return stored.State == StepStarted && stored.Token == p.Token
}

// addedBytes is what the call adds to Record.StepBytes when it applies to
// stored (nil: a new step).
func (p *StepParams) addedBytes(stored *Step) int {
	n := 0
	if stored == nil {
		n = len(p.Name)
	}
	if p.Finish {
		n += len(p.Result)
	}
	return n
}

// Step errors. Callers test them with errors.Is.
var (
	// ErrStepFinished: the step is FINISHED with another result than the
	// call's, or the call would start it again. A FINISHED step is never
	// changed.
	ErrStepFinished = errors.New("step already finished")
	// ErrTooManySteps: the job has StepParams.MaxSteps steps, and the call
	// would add one.
	ErrTooManySteps = errors.New("the job has as many steps as it may")
	// ErrStepsTooLarge: the job's steps would hold more than
	// StepParams.MaxStepBytes.
	ErrStepsTooLarge = errors.New("the job's steps would be over their size limit")
)
