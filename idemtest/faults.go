package idemtest

import (
	"context"
	"maps"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// faults is what the kit does to one worker's calls, in that worker's
// client connection (a gRPC interceptor): the server sees only what a real
// worker that stalled, died or lost an answer would have sent it. Once the
// worker died, it sends nothing more.
type faults struct {
	// holdHeartbeats keeps every Heartbeat from the server: it is held
	// until the call's context ends (Do ends it when the handler returns).
	holdHeartbeats bool
	// dieBeforeComplete stands for a worker that died before its first
	// Complete went out (the handler's own, or Do's once the handler
	// returned): that Complete never goes out.
	dieBeforeComplete bool
	// dieAfterComplete stands for a worker that died as soon as its first
	// Complete was applied (the handler's own, or Do's): it never hears the
	// answer.
	dieAfterComplete bool
	// dieBetweenSteps stands for a worker that died between two of the
	// job's effects: at the first StartStep, CompleteStep or Complete that
	// goes out after a CompleteStep was applied, or at Complete when none
	// was.
	dieBetweenSteps bool
	// dieInStep stands for a worker that died inside a step, after its
	// effect: its first CompleteStep never goes out (nor, when the handler
	// records no step, its Complete).
	dieInStep bool
	// loseCompleteAnswer lets the first Complete reach the server and, once
	// the server applied it, answers the worker UNAVAILABLE instead.
	loseCompleteAnswer bool
	// effects is the effect counter, read when the worker dies.
	effects func() int

	mu         sync.Mutex
	running    bool // the handler runs
	ownCall    bool // the handler sent a Complete or Fail through the worker
	died       bool
	diedIn     bool // the worker died while the handler ran
	atDeath    int  // the effect counter when the worker died
	answerLost bool
	// What the effect counter saw while the handler ran, by the step that
	// was open then ("" outside every step), in the order steps opened.
	stepDone    bool // a CompleteStep was applied
	stepsSeen   bool
	openStep    string
	mark        int
	stepEffects map[string]int
	stepOrder   []string
}

func (f *faults) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	f.mu.Lock()
	dead, running := f.died, f.running
	if running && (method == idemv1.IdempotencyService_Complete_FullMethodName || method == idemv1.IdempotencyService_Fail_FullMethodName) {
		f.ownCall = true
	}
	f.mu.Unlock()
	if dead {
		// Not UNAVAILABLE: Do would retry it.
		return status.Error(codes.Canceled, "idemtest: the worker is dead and sends nothing")
	}
	switch method {
	case idemv1.IdempotencyService_StartStep_FullMethodName:
		if f.stepsDone() && f.dieBetweenSteps {
			f.die(running)
			return status.Error(codes.Canceled, "idemtest: the worker died between two steps")
		}
		f.openStepNamed(req.(*idemv1.StartStepRequest).GetStep())
	case idemv1.IdempotencyService_CompleteStep_FullMethodName:
		f.openStepNamed(req.(*idemv1.CompleteStepRequest).GetStep())
		if f.dieInStep || f.dieBetweenSteps && f.stepsDone() {
			f.die(running)
			return status.Error(codes.Canceled, "idemtest: the worker died before its CompleteStep went out")
		}
		if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		f.closeStep()
		return nil
	case idemv1.IdempotencyService_Heartbeat_FullMethodName:
		if f.holdHeartbeats {
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
	case idemv1.IdempotencyService_Complete_FullMethodName:
		switch {
		case f.dieBeforeComplete, f.dieBetweenSteps, f.dieInStep:
			f.die(running)
			return status.Error(codes.Canceled, "idemtest: the worker died before its Complete went out")
		case f.dieAfterComplete:
			if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
				return err // not applied: the worker lives on
			}
			f.die(running)
			return status.Error(codes.Canceled, "idemtest: the worker died once its Complete was applied")
		}
		f.mu.Lock()
		lose := f.loseCompleteAnswer && !f.answerLost
		f.mu.Unlock()
		if lose {
			if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
				return err // not applied: the next try is the one whose answer is lost
			}
			f.mu.Lock()
			f.answerLost = true
			f.mu.Unlock()
			return status.Error(codes.Unavailable, "idemtest: the server applied the Complete, and its answer was lost")
		}
	}
	return invoke(ctx, method, req, reply, cc, opts...)
}

// die marks the worker dead, and what the effect counter saw then:
// anything a handler still running does after it is not the worker's.
func (f *faults) die(inHandler bool) {
	at := f.effects()
	f.mu.Lock()
	defer f.mu.Unlock()
	if inHandler {
		f.attribute(at)
	}
	f.died, f.diedIn, f.atDeath = true, inHandler, at
}

func (f *faults) setRunning(running bool) {
	at := f.effects()
	f.mu.Lock()
	defer f.mu.Unlock()
	if running {
		f.mark = at
	} else if !f.died {
		f.attribute(at)
	}
	f.running = running
}

// attribute charges what the effect counter saw since the last mark, at,
// to the open step. f.mu must be held.
func (f *faults) attribute(at int) {
	if d := at - f.mark; d != 0 && f.running {
		if f.stepEffects == nil {
			f.stepEffects = map[string]int{}
		}
		if _, seen := f.stepEffects[f.openStep]; !seen {
			f.stepOrder = append(f.stepOrder, f.openStep)
		}
		f.stepEffects[f.openStep] += d
	}
	f.mark = at
}

// openStepNamed opens the step name: what the counter sees from now on is
// its effect.
func (f *faults) openStepNamed(name string) {
	at := f.effects()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.openStep != name {
		f.attribute(at)
	}
	f.openStep, f.stepsSeen = name, true
}

// closeStep closes the open step once its CompleteStep was applied.
func (f *faults) closeStep() {
	at := f.effects()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attribute(at)
	f.openStep, f.stepDone = "", true
}

func (f *faults) stepsDone() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stepDone
}

// steps returns what the counter saw by step, the order the steps opened
// in, and whether the handler called a step RPC.
func (f *faults) steps() (byStep map[string]int, order []string, seen bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.stepEffects), slices.Clone(f.stepOrder), f.stepsSeen
}

func (f *faults) dead() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.died
}

// deathInHandler returns the effect counter when the worker died, and
// whether it died while the handler ran.
func (f *faults) deathInHandler() (atDeath int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.atDeath, f.died && f.diedIn
}

func (f *faults) ownCallSeen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ownCall
}

func (f *faults) lostAnswer() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answerLost
}
