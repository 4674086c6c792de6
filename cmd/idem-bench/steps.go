package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
)

// scenarioSteps is a job of --steps effects, done three ways on each
// service target in the same rounds: one key whose effects are recorded as
// steps (CompleteStep after each), the same with a StartStep before each
// effect too, and, to compare with, one key per effect (a Claim and a
// Complete each), which is what a job of several effects costs without
// steps.
const scenarioSteps = "steps"

// The forms of the steps scenario's job.
type stepsForm int

const (
	formSteps        stepsForm = iota // one key, a CompleteStep per effect
	formStepsStarted                  // the same, with a StartStep before each
	formKeys                          // a key per effect
)

// suffix names the form in the target's name: service-steps, ….
func (f stepsForm) suffix() string {
	return [...]string{"-steps", "-steps-started", "-keys"}[f]
}

// stepsFormOf splits the name of a steps scenario's target into its
// service target's label and its form.
func stepsFormOf(name string) (label string, form stepsForm, ok bool) {
	for _, f := range []stepsForm{formSteps, formStepsStarted, formKeys} {
		if label, ok := strings.CutSuffix(name, f.suffix()); ok {
			return label, f, true
		}
	}
	return "", 0, false
}

// maxSteps bounds --steps: idemd's default --max-steps.
const maxSteps = limits.DefaultMaxSteps

// stepsTarget is a service target doing the steps scenario's job in one
// form.
type stepsTarget struct {
	*serviceTarget
	form  stepsForm
	steps int
}

// stepsTargets are the steps scenario's targets: the three forms of each
// service target among targets, in that order.
func stepsTargets(targets []target, steps int) []target {
	var out []target
	for _, t := range targets {
		st, ok := t.(*serviceTarget)
		if !ok {
			continue
		}
		for _, f := range []stepsForm{formSteps, formStepsStarted, formKeys} {
			out = append(out, &stepsTarget{serviceTarget: st, form: f, steps: steps})
		}
	}
	return out
}

func (t *stepsTarget) name() string { return t.label + t.form.suffix() }

// worker keeps the form on the replica worker i uses.
func (t *stepsTarget) worker(i int) target {
	return &stepsTarget{serviceTarget: t.serviceTarget.worker(i).(*serviceTarget), form: t.form, steps: t.steps}
}

// close leaves the service target to the run's own list of targets.
func (t *stepsTarget) close(context.Context) error { return nil }

func (t *stepsTarget) job(ctx context.Context, key string) (outcome, time.Duration, error) {
	if t.form == formKeys {
		// Each effect a job of its own; the Claim time is the first's.
		var first time.Duration
		for i := range t.steps {
			o, took, err := t.serviceTarget.job(ctx, key+"-"+strconv.Itoa(i))
			if i == 0 {
				first = took
			}
			if err != nil || o != outcomeAcquired {
				return o, first, err
			}
		}
		return outcomeAcquired, first, nil
	}
	start := time.Now()
	res, err := t.client.Claim(ctx, client.ClaimRequest{Namespace: t.namespace, Key: key, LeaseTTL: t.leaseTTL})
	claimTook := time.Since(start)
	if _, ok := errors.AsType[*client.InProgressError](err); ok {
		return outcomeInProgress, claimTook, nil
	}
	if err != nil {
		return 0, claimTook, fmt.Errorf("claim: %w", err)
	}
	switch res.Outcome {
	case client.OutcomeAcquired:
	case client.OutcomeCompleted, client.OutcomeFailed:
		return outcomeReplayed, claimTook, nil
	default:
		return 0, claimTook, fmt.Errorf("claim answered %v", res.Outcome)
	}
	token := res.Record.Token
	// The effects themselves are nothing, as in the other scenarios.
	svc := t.client.IdempotencyService()
	for i := range t.steps {
		step := "step-" + strconv.Itoa(i+1)
		if t.form == formStepsStarted {
			if _, err := svc.StartStep(ctx, &idemv1.StartStepRequest{Namespace: t.namespace, Key: key, Token: token, Step: step}); err != nil {
				return 0, claimTook, fmt.Errorf("StartStep: %w", err)
			}
		}
		if _, err := svc.CompleteStep(ctx, &idemv1.CompleteStepRequest{Namespace: t.namespace, Key: key, Token: token, Step: step, Result: t.result}); err != nil {
			return 0, claimTook, fmt.Errorf("CompleteStep: %w", err)
		}
	}
	if _, err := t.client.Complete(ctx, client.CompleteRequest{Namespace: t.namespace, Key: key, Token: token, Result: t.result}); err != nil {
		return 0, claimTook, fmt.Errorf("complete: %w", err)
	}
	return outcomeAcquired, claimTook, nil
}
