package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// StepState is where a step is. The values match idem.v1.StepState; String
// gives the name without the prefix ("FINISHED").
type StepState int32

// States of a step.
const (
	StepStateUnspecified StepState = iota
	StepStarted                    // its effect may or may not have happened
	StepFinished                   // its effect happened; Result is recorded and never changes
)

func (s StepState) String() string {
	return strings.TrimPrefix(idemv1.StepState(s).String(), "STEP_STATE_")
}

// Step is one named effect of a job, as the server holds it.
type Step struct {
	Name   string
	State  StepState
	Result []byte // FINISHED only
	// Token is the token of the holder that last wrote the step.
	Token      int64
	StartedAt  time.Time
	FinishedAt time.Time // unset while STARTED
}

func stepFromProto(s *idemv1.Step) Step {
	return Step{
		Name:       s.GetName(),
		State:      StepState(s.GetState()),
		Result:     s.GetResult(),
		Token:      s.GetToken(),
		StartedAt:  timeFromProto(s.GetStartedAt()),
		FinishedAt: timeFromProto(s.GetFinishedAt()),
	}
}

func stepsFromProto(steps []*idemv1.Step) []Step {
	if len(steps) == 0 {
		return nil
	}
	out := make([]Step, len(steps))
	for i, s := range steps {
		out[i] = stepFromProto(s)
	}
	return out
}

// StepKey is the idempotency key to give a downstream system for one step
// of a job: "idem-" and the lowercase hex SHA-256 of namespace, a zero
// byte, key, a zero byte and step. Every idem SDK derives the same one, so
// a successor that repeats the step sends the key its predecessor sent.
func StepKey(namespace, key, step string) string {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(step))
	return "idem-" + hex.EncodeToString(h.Sum(nil))
}

// StepRequest names a step of a held job.
type StepRequest struct {
	Namespace string
	Key       string
	// Token is the token of the ACQUIRED Claim.
	Token int64
	// Step is the step's name: 1 to 128 bytes of UTF-8 without control
	// characters, unique in the job.
	Step string
	// Result is the step's result (CompleteStep only).
	Result []byte
}

// StartStep marks a step STARTED before its effect, in one RPC without
// retries, so that a successor can tell "finished" from "may have
// happened". Errors: ErrLeaseLost, ErrAlreadyTerminal,
// ErrResolvedByOperator, ErrStepAlreadyFinished, ErrNotFound, and the
// reasons INVALID_STEP_NAME, TOO_MANY_STEPS and STEPS_TOO_LARGE.
func (c *Client) StartStep(ctx context.Context, req StepRequest, opts ...grpc.CallOption) (Step, error) {
	resp, err := c.service.StartStep(ctx, &idemv1.StartStepRequest{Namespace: req.Namespace, Key: req.Key, Token: req.Token, Step: req.Step}, opts...)
	if err != nil {
		return Step{}, decodeError(ctx, err)
	}
	return stepFromProto(resp.GetStep()), nil
}

// CompleteStep records a step FINISHED with req.Result, in one RPC without
// retries; repeating it with the same result returns the stored step. Its
// errors are StartStep's.
func (c *Client) CompleteStep(ctx context.Context, req StepRequest, opts ...grpc.CallOption) (Step, error) {
	if err := checkResultSize(len(req.Result)); err != nil {
		return Step{}, err
	}
	resp, err := c.service.CompleteStep(ctx, &idemv1.CompleteStepRequest{Namespace: req.Namespace, Key: req.Key, Token: req.Token, Step: req.Step, Result: req.Result}, opts...)
	if err != nil {
		return Step{}, resultRefused(decodeError(ctx, err), len(req.Result))
	}
	return stepFromProto(resp.GetStep()), nil
}

// attemptSteps is what an attempt knows of its job's steps: those the Claim
// returned and those it finished since. Attempt is passed by value, so it
// holds a pointer to one of these.
type attemptSteps struct {
	c        *Client
	ns, key  string
	claimed  []Step
	mu       sync.Mutex
	finished map[string][]byte
}

// finish notes step name finished with result; the map is made by the first
// step, so that a job without steps costs no map. s.mu is held or s unshared.
func (s *attemptSteps) finish(name string, result []byte) {
	if s.finished == nil {
		s.finished = map[string][]byte{}
	}
	s.finished[name] = result
}

// newAttempt is the Attempt of fn for the acquired record rec.
func newAttempt(c *Client, rec Record) Attempt {
	s := &attemptSteps{c: c, ns: rec.Namespace, key: rec.Key, claimed: rec.Steps}
	for _, st := range rec.Steps {
		if st.State == StepFinished {
			s.finish(st.Name, st.Result)
		}
	}
	return Attempt{Token: rec.Token, Number: rec.Attempt, Takeover: rec.Attempt > 1, steps: s}
}

// Steps are the job's steps as the Claim found them: a FINISHED one is
// done, and Step returns its result without running it again; a STARTED
// one may or may not have happened.
func (a Attempt) Steps() []Step {
	if a.steps == nil {
		return nil
	}
	return a.steps.claimed
}

// StepKey is the step's idempotency key for a downstream system (see the
// package function StepKey): the same on every attempt of the job.
func (a Attempt) StepKey(name string) string {
	if a.steps == nil {
		return ""
	}
	return StepKey(a.steps.ns, a.steps.key, name)
}

// Step runs one named effect of the job at most once across its attempts,
// as far as the downstream system dedupes by the step key. For a step that
// a Claim of this job or this attempt found FINISHED it returns the
// recorded result without calling fn. Otherwise it marks the step STARTED
// (StartStep), calls fn with the step's key (pass it to the downstream API
// as its idempotency key), records fn's result (CompleteStep) and returns
// it. An error from fn is returned as it is and leaves the step STARTED;
// what a successor then does is the namespace's on_unfinished_step policy.
// A refusal of StartStep or CompleteStep is returned as the SDK's typed
// error (ErrLeaseLost, ErrStepAlreadyFinished, …), and fn's result is then
// not returned. Use it from Do's or DoBatch's fn, with fn's context.
func (a Attempt) Step(ctx context.Context, name string, fn func(ctx context.Context, stepKey string) ([]byte, error)) ([]byte, error) {
	s := a.steps
	if s == nil {
		panic("idem: Attempt.Step called on an Attempt that Do or DoBatch did not make")
	}
	s.mu.Lock()
	result, done := s.finished[name]
	s.mu.Unlock()
	if done {
		return result, nil
	}
	req := StepRequest{Namespace: s.ns, Key: s.key, Token: a.Token, Step: name}
	if _, err := retry(ctx, s.c, retryLimit{attempts: s.c.retry.MaxAttempts}, func(ctx context.Context) (Step, error) {
		return s.c.StartStep(ctx, req)
	}); err != nil {
		return nil, err
	}
	result, err := fn(ctx, a.StepKey(name))
	if err != nil {
		return nil, err
	}
	req.Result = result
	if _, err := retry(ctx, s.c, retryLimit{attempts: s.c.retry.MaxAttempts}, func(ctx context.Context) (Step, error) {
		return s.c.CompleteStep(ctx, req)
	}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.finish(name, result)
	s.mu.Unlock()
	return result, nil
}
