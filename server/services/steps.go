package services

import (
	"context"
	"errors"
	"fmt"
	"unicode"

	"google.golang.org/grpc/codes"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/store"
)

// Steps: StartStep and CompleteStep record a named step of a job under the
// job's token (DESIGN §1, Steps). A worker records a job's steps one at a
// time, as each effect happens, so there is no batch form: concurrent steps
// of many jobs reach the store together through its coalescer anyway.

// StartStep implements idem.v1.IdempotencyService.
func (s *Service) StartStep(ctx context.Context, req *idemv1.StartStepRequest) (*idemv1.StartStepResponse, error) {
	p, err := s.stepParams(ctx, req.GetNamespace(), req.GetKey(), req.GetToken(), req.GetStep(), false, nil)
	if err != nil {
		return nil, err
	}
	step, err := s.store.RecordStep(ctx, p)
	if err != nil {
		return nil, s.stepError(ctx, p, err)
	}
	return &idemv1.StartStepResponse{Step: stepToProto(step)}, nil
}

// CompleteStep implements idem.v1.IdempotencyService.
func (s *Service) CompleteStep(ctx context.Context, req *idemv1.CompleteStepRequest) (*idemv1.CompleteStepResponse, error) {
	p, err := s.stepParams(ctx, req.GetNamespace(), req.GetKey(), req.GetToken(), req.GetStep(), true, req.GetResult())
	if err != nil {
		return nil, err
	}
	step, err := s.store.RecordStep(ctx, p)
	if err != nil {
		return nil, s.stepError(ctx, p, err)
	}
	return &idemv1.CompleteStepResponse{Step: stepToProto(step)}, nil
}

// stepParams is what the store is asked for a step call (a finish with its
// result, or a start), after its validation, the namespace allow-list, the
// result limit and the namespace's policy. Its errors are statuses.
func (s *Service) stepParams(ctx context.Context, namespace, key string, token int64, name string, finish bool, result []byte) (*store.StepParams, error) {
	if err := validateID(namespace, key); err != nil {
		return nil, err
	}
	if err := validateToken(token); err != nil {
		return nil, err
	}
	if err := validateStepName(name); err != nil {
		return nil, err
	}
	t, err := s.authorize(ctx, namespace)
	if err != nil {
		return nil, err
	}
	if err := s.checkResult(t, len(result)); err != nil {
		return nil, err
	}
	return &store.StepParams{
		RecordID:       s.id(ctx, namespace, key),
		Token:          token,
		Name:           name,
		Finish:         finish,
		Result:         result,
		HoldUnfinished: s.policyFor(t, namespace).holdsUnfinished(),
		MaxSteps:       s.cfg.MaxSteps,
		MaxStepBytes:   s.cfg.MaxStepBytes,
	}, nil
}

// validateStepName applies a key's rules to a step's name, with its own
// bound and reason.
func validateStepName(name string) error {
	const reason = idemv1.ErrorReason_ERROR_REASON_INVALID_STEP_NAME
	switch {
	case name == "":
		return invalid("step", reason, "step is empty; it must be 1 to %d bytes", limits.MaxStepNameBytes)
	case len(name) > limits.MaxStepNameBytes:
		return invalid("step", reason, "step is %d bytes; the limit is %d", len(name), limits.MaxStepNameBytes)
	}
	if err := validateText("step", name); err != nil {
		return err
	}
	for i, r := range name {
		if unicode.IsControl(r) {
			return invalid("step", reason, "step has a control character (%U) at byte %d; step names are printable UTF-8", r, i)
		}
	}
	return nil
}

// stepError is the status of a step call's store error: the job's bounds,
// named with their flags, or what rewriteError makes of any other.
func (s *Service) stepError(ctx context.Context, p *store.StepParams, err error) error {
	switch {
	case errors.Is(err, store.ErrTooManySteps):
		return NewError(codes.ResourceExhausted, idemv1.ErrorReason_ERROR_REASON_TOO_MANY_STEPS,
			fmt.Sprintf("the job has %d steps, as many as idemd allows (--max-steps); record fewer, larger steps", p.MaxSteps), nil)
	case errors.Is(err, store.ErrStepsTooLarge):
		return NewError(codes.ResourceExhausted, idemv1.ErrorReason_ERROR_REASON_STEPS_TOO_LARGE,
			fmt.Sprintf("the job's steps would hold more than %d bytes of names and results, the limit (--max-step-bytes); keep a step's result small (an id, a status)", p.MaxStepBytes), nil)
	}
	return rewriteError(ctx, s.logger, err)
}

var stepStateToProto = map[store.StepState]idemv1.StepState{
	store.StepStarted:  idemv1.StepState_STEP_STATE_STARTED,
	store.StepFinished: idemv1.StepState_STEP_STATE_FINISHED,
}

func stepToProto(st *store.Step) *idemv1.Step {
	return &idemv1.Step{
		Name:       st.Name,
		State:      stepStateToProto[st.State],
		Result:     st.Result,
		Token:      st.Token,
		StartedAt:  timestamp(st.StartedAt),
		FinishedAt: timestamp(st.FinishedAt),
	}
}

// stepsToProto is a record's steps, nil when it has none.
func stepsToProto(steps []store.Step) []*idemv1.Step {
	if len(steps) == 0 {
		return nil
	}
	out := make([]*idemv1.Step, len(steps))
	for i := range steps {
		out[i] = stepToProto(&steps[i])
	}
	return out
}
