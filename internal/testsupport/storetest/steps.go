package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/idemhq/idem/store"
)

// The steps of a job (DESIGN §1, "Steps"): recorded under the job's token,
// kept across a takeover, refused to a fenced holder, bounded, and gone
// with the record.

var stepTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"StepsStartAndFinish", testStepsStartAndFinish},
	{"StepRepeatsAndConflicts", testStepRepeatsAndConflicts},
	{"StepsSurviveTakeover", testStepsSurviveTakeover},
	{"StepTokenRules", testStepTokenRules},
	{"StepBounds", testStepBounds},
	{"StepHoldUnfinished", testStepHoldUnfinished},
	{"StepsGoWithRecord", testStepsGoWithRecord},
	{"StepManyAnswersEachAsAlone", testStepManyAnswersEachAsAlone},
	{"StepsRaceAcrossTakeover", testStepsRaceAcrossTakeover},
	{"StepsOfManyJobsAtOnce", testStepsOfManyJobsAtOnce},
}

// Bounds large enough for every test but StepBounds.
const (
	testMaxSteps     = 64
	testMaxStepBytes = 1 << 20
)

func stepParams(id store.RecordID, token int64, name string) *store.StepParams {
	return &store.StepParams{RecordID: id, Token: token, Name: name, MaxSteps: testMaxSteps, MaxStepBytes: testMaxStepBytes}
}

func finishParams(id store.RecordID, token int64, name, result string) *store.StepParams {
	p := stepParams(id, token, name)
	p.Finish, p.Result = true, []byte(result)
	return p
}

// step runs RecordStep and fails the test on an error.
func (b *bundle) step(t *testing.T, p *store.StepParams) *store.Step {
	t.Helper()
	s, err := b.store.RecordStep(b.ctx, p)
	if err != nil {
		t.Fatalf("RecordStep(%q, token %d, step %q, finish %v): %v", p.Key, p.Token, p.Name, p.Finish, err)
	}
	return s
}

// stepWant is a step a test expects: name, FINISHED with result, or
// STARTED.
type stepWant struct {
	name, result string
	started      bool
}

func finished(name, result string) stepWant { return stepWant{name: name, result: result} }
func started(name string) stepWant          { return stepWant{name: name, started: true} }

// requireSteps fails unless steps are, in order, what want says, and
// written by tokens (as many as given).
func requireSteps(t *testing.T, what string, steps []store.Step, want []stepWant, tokens ...int64) {
	t.Helper()
	if len(steps) != len(want) {
		t.Fatalf("%s: %d steps %+v, want %d", what, len(steps), steps, len(want))
	}
	for i, w := range want {
		s := steps[i]
		state, result := store.StepFinished, []byte(w.result)
		if w.started {
			state, result = store.StepStarted, nil
		}
		if s.Name != w.name || s.State != state || !bytes.Equal(s.Result, result) || (s.Result == nil) != (result == nil) {
			t.Fatalf("%s: step %d is %+v, want %+v", what, i, s, w)
		}
		if i < len(tokens) && s.Token != tokens[i] {
			t.Fatalf("%s: step %s written by token %d, want %d", what, s.Name, s.Token, tokens[i])
		}
		if s.StartedAt.IsZero() || w.started != s.FinishedAt.IsZero() || (!w.started && s.FinishedAt.Before(s.StartedAt)) {
			t.Fatalf("%s: step %s started %v, finished %v", what, s.Name, s.StartedAt, s.FinishedAt)
		}
	}
}

func testStepsStartAndFinish(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("two-effects")
	rec := b.acquire(t, id, "worker-1")
	if rec.Steps != nil {
		t.Fatalf("a new record has steps: %+v", rec.Steps)
	}

	before := b.now(t)
	started := b.step(t, stepParams(id, rec.Token, "charge"))
	after := b.now(t)
	if started.Name != "charge" || started.State != store.StepStarted || started.Result != nil || started.Token != rec.Token ||
		!started.FinishedAt.IsZero() {
		t.Fatalf("started step: %+v", started)
	}
	requireBetween(t, "started_at", started.StartedAt, before, after)

	charged := b.step(t, finishParams(id, rec.Token, "charge", "ch_1"))
	if charged.State != store.StepFinished || string(charged.Result) != "ch_1" || !charged.StartedAt.Equal(started.StartedAt) {
		t.Fatalf("finished step: %+v; want FINISHED with ch_1, started when it was started (%v)", charged, started.StartedAt)
	}
	requireBetween(t, "finished_at", charged.FinishedAt, started.StartedAt, b.now(t))
	// A step recorded FINISHED without a start, with an empty result.
	receipt := b.step(t, finishParams(id, rec.Token, "receipt", ""))
	if receipt.Result == nil || len(receipt.Result) != 0 || !receipt.StartedAt.Equal(receipt.FinishedAt) {
		t.Fatalf("a step finished at once: %+v; want an empty result, started when it finished", receipt)
	}

	got := b.get(t, id)
	requireSteps(t, "RecordGet", got.Steps, []stepWant{finished("charge", "ch_1"), finished("receipt", "")}, rec.Token, rec.Token)
	if !reflect.DeepEqual(got.Steps[0], *charged) {
		t.Fatalf("stored step %+v, answered %+v", got.Steps[0], *charged)
	}
	for _, s := range got.Steps {
		if s.StartedAt.Location().String() != "UTC" || s.FinishedAt.Location().String() != "UTC" {
			t.Fatalf("step times not in UTC: %+v", s)
		}
	}
	// Another worker's Claim (IN_PROGRESS) and the holder's own Claim again
	// see the record with its steps, as a read does.
	res := b.claim(t, claimParams(id, "worker-2"))
	if res.Outcome != store.OutcomeInProgress {
		t.Fatalf("outcome %v, want in_progress", res.Outcome)
	}
	requireSameRecord(t, "IN_PROGRESS answer", res.Record, got)
	res = b.claim(t, claimParams(id, "worker-1"))
	if res.Outcome != store.OutcomeAcquired || res.Record.Token != rec.Token {
		t.Fatalf("the holder's Claim again: %v, token %d", res.Outcome, res.Record.Token)
	}
	requireSameRecord(t, "the holder's ACQUIRED again", res.Record, got)
	// A step is a change of the record.
	if !got.UpdatedAt.Equal(receipt.FinishedAt) {
		t.Fatalf("updated_at %v after the steps, want the last step's time %v", got.UpdatedAt, receipt.FinishedAt)
	}
}

func testStepRepeatsAndConflicts(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("repeats")
	rec := b.acquire(t, id, "w")
	first := b.step(t, finishParams(id, rec.Token, "charge", "ch_1"))
	started := b.step(t, stepParams(id, rec.Token, "receipt"))
	stored := b.get(t, id)

	// The same call again (its answer was lost) is answered with the
	// stored step, unchanged.
	if again := b.step(t, finishParams(id, rec.Token, "charge", "ch_1")); !reflect.DeepEqual(again, first) {
		t.Fatalf("a finish repeated: %+v, want the stored %+v", again, first)
	}
	if again := b.step(t, stepParams(id, rec.Token, "receipt")); !reflect.DeepEqual(again, started) {
		t.Fatalf("a start repeated: %+v, want the stored %+v", again, started)
	}
	_, err := b.store.RecordStep(b.ctx, finishParams(id, rec.Token, "charge", "ch_2"))
	requireErr(t, "a finished step with another result", err, store.ErrStepFinished)
	_, err = b.store.RecordStep(b.ctx, stepParams(id, rec.Token, "charge"))
	requireErr(t, "a start of a finished step", err, store.ErrStepFinished)
	requireSameRecord(t, "after repeats and refusals", b.get(t, id), stored)
}

func testStepsSurviveTakeover(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("taken-over")
	first := b.acquire(t, id, "first")
	b.step(t, finishParams(id, first.Token, "charge", "ch_1"))
	receipt := b.step(t, stepParams(id, first.Token, "receipt"))
	b.lapse(t, id)

	res := b.claim(t, claimParams(id, "second"))
	if res.Outcome != store.OutcomeAcquired || !res.Takeover {
		t.Fatalf("Claim of a lapsed lease: %v, takeover %v", res.Outcome, res.Takeover)
	}
	second := res.Record
	requireSteps(t, "the takeover's answer", second.Steps, []stepWant{finished("charge", "ch_1"), started("receipt")}, first.Token, first.Token)
	requireSameRecord(t, "RecordGet after the takeover", b.get(t, id), second)

	// The fenced holder can record nothing more, and its repeat of a step
	// it finished is refused as a stale Complete is.
	for _, p := range []*store.StepParams{finishParams(id, first.Token, "receipt", "sent"), stepParams(id, first.Token, "audit"),
		finishParams(id, first.Token, "charge", "ch_1")} {
		_, err := b.store.RecordStep(b.ctx, p)
		requireErr(t, fmt.Sprintf("the fenced holder's step %s", p.Name), err, store.ErrLeaseLost)
	}
	// The successor finishes the step its predecessor started: it keeps its
	// start, and names the successor's token.
	done := b.step(t, finishParams(id, second.Token, "receipt", "sent"))
	if done.Token != second.Token || !done.StartedAt.Equal(receipt.StartedAt) {
		t.Fatalf("the successor's finish: %+v; want token %d, started %v", done, second.Token, receipt.StartedAt)
	}
	// A successor that starts again a step its predecessor started takes
	// it over: its token, a new start.
	audit := b.step(t, stepParams(id, second.Token, "audit"))
	b.lapse(t, id)
	third := b.claim(t, claimParams(id, "third")).Record
	requireSteps(t, "the second takeover's answer", third.Steps, []stepWant{finished("charge", "ch_1"), finished("receipt", "sent"), started("audit")},
		first.Token, second.Token, second.Token)
	again := b.step(t, stepParams(id, third.Token, "audit"))
	if again.Token != third.Token || !again.StartedAt.After(audit.StartedAt) {
		t.Fatalf("a step started again by a successor: %+v; want token %d, started after %v", again, third.Token, audit.StartedAt)
	}
}

func testStepTokenRules(t *testing.T, h Harness) {
	b := setup(t, h)
	_, err := b.store.RecordStep(b.ctx, finishParams(recordID("nobody"), 1, "charge", "x"))
	requireErr(t, "a step of no record", err, store.ErrNotFound)

	// The current token applies while the record is EXPIRED or UNRESOLVED,
	// as a late Complete does, and the step changes nothing else.
	expired := recordID("expired")
	exp := b.acquire(t, expired, "w")
	b.expire(t, expired)
	b.step(t, finishParams(expired, exp.Token, "charge", "ch_1"))
	if got := b.get(t, expired); got.State != store.StateExpired || len(got.Steps) != 1 {
		t.Fatalf("a step on an EXPIRED record: %s with %d steps; want it EXPIRED still, with the step", got.State, len(got.Steps))
	}
	held := recordID("held")
	p := claimParams(held, "w")
	p.Hold = true
	hold := b.claim(t, p).Record
	b.lapse(t, held)
	if res := b.claim(t, claimParams(held, "other")); res.Outcome != store.OutcomeUnresolved {
		t.Fatalf("Claim of a lapsed held lease: %v", res.Outcome)
	}
	b.step(t, finishParams(held, hold.Token, "charge", "ch_1"))
	if got := b.get(t, held); got.State != store.StateUnresolved || len(got.Steps) != 1 {
		t.Fatalf("a step on an UNRESOLVED record: %s with %d steps; want it UNRESOLVED still, with the step", got.State, len(got.Steps))
	}

	// Once the job is over: no new step and no other value, but the repeat
	// of a step it finished is answered.
	b.complete(t, expired, exp.Token, "done")
	stored := b.get(t, expired)
	_, err = b.store.RecordStep(b.ctx, finishParams(expired, exp.Token, "receipt", "sent"))
	requireErr(t, "a new step after Complete", err, store.ErrAlreadyTerminal)
	_, err = b.store.RecordStep(b.ctx, stepParams(expired, exp.Token, "receipt"))
	requireErr(t, "a start after Complete", err, store.ErrAlreadyTerminal)
	_, err = b.store.RecordStep(b.ctx, finishParams(expired, exp.Token, "charge", "ch_2"))
	requireErr(t, "another value after Complete", err, store.ErrAlreadyTerminal)
	b.step(t, finishParams(expired, exp.Token, "charge", "ch_1"))
	requireSameRecord(t, "after the step calls on a COMPLETED record", b.get(t, expired), stored)

	// An operator's resolution ends the holder's steps as it ends its
	// Complete.
	if _, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: held, Resolution: store.ResolveFailed, Error: "refunded"}); err != nil {
		t.Fatalf("RecordResolve: %v", err)
	}
	_, err = b.store.RecordStep(b.ctx, finishParams(held, hold.Token, "receipt", "sent"))
	requireErr(t, "a step after an operator resolved the record", err, store.ErrResolvedByOperator)
	b.step(t, finishParams(held, hold.Token, "charge", "ch_1"))
}

func testStepBounds(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("bounded")
	rec := b.acquire(t, id, "w")
	bounded := func(p *store.StepParams) *store.StepParams {
		p.MaxSteps, p.MaxStepBytes = 2, 20
		return p
	}
	b.step(t, bounded(stepParams(id, rec.Token, "a")))              // 1 byte
	b.step(t, bounded(finishParams(id, rec.Token, "b", "0123456"))) // 8 bytes
	stored := b.get(t, id)

	_, err := b.store.RecordStep(b.ctx, bounded(stepParams(id, rec.Token, "c")))
	requireErr(t, "a third step of two", err, store.ErrTooManySteps)
	_, err = b.store.RecordStep(b.ctx, bounded(finishParams(id, rec.Token, "a", "0123456789ab")))
	requireErr(t, "a finish past the bytes", err, store.ErrStepsTooLarge)
	requireSameRecord(t, "after the refused steps", b.get(t, id), stored)
	// Exactly at the bound: 1 + 8 + 11.
	b.step(t, bounded(finishParams(id, rec.Token, "a", "0123456789a")))
	// A bound is the job's, not the call's: the next holder finds it spent.
	b.lapse(t, id)
	next := b.claim(t, claimParams(id, "next")).Record
	_, err = b.store.RecordStep(b.ctx, bounded(stepParams(id, next.Token, "c")))
	requireErr(t, "a successor's third step", err, store.ErrTooManySteps)
}

func testStepHoldUnfinished(t *testing.T, h Harness) {
	b := setup(t, h)
	holding := func(p *store.StepParams) *store.StepParams {
		p.HoldUnfinished = true
		return p
	}

	// A Claim that would take over a lapsed lease with a STARTED step makes
	// the record UNRESOLVED instead, and answers it with its steps.
	lapsed := recordID("lapsed")
	rec := b.acquire(t, lapsed, "w")
	b.step(t, holding(finishParams(lapsed, rec.Token, "charge", "ch_1")))
	b.step(t, holding(stepParams(lapsed, rec.Token, "receipt")))
	if got := b.get(t, lapsed); !got.HoldUnfinished {
		t.Fatal("the policy of the step calls is not stored")
	}
	b.lapse(t, lapsed)
	for range 2 {
		res := b.claim(t, claimParams(lapsed, "other"))
		if res.Outcome != store.OutcomeUnresolved || res.Record.State != store.StateUnresolved || res.Record.Token != rec.Token {
			t.Fatalf("Claim of a lapsed lease with a started step: %v, %s, token %d", res.Outcome, res.Record.State, res.Record.Token)
		}
		requireSteps(t, "the UNRESOLVED answer", res.Record.Steps, []stepWant{finished("charge", "ch_1"), started("receipt")})
	}

	// The sweeper does the same; a record whose steps all finished expires
	// as any other.
	swept, finished := recordID("swept"), recordID("finished")
	s1 := b.acquire(t, swept, "w")
	b.step(t, holding(stepParams(swept, s1.Token, "charge")))
	f1 := b.acquire(t, finished, "w")
	b.step(t, holding(stepParams(finished, f1.Token, "charge")))
	b.step(t, holding(finishParams(finished, f1.Token, "charge", "ch_1")))
	b.lapse(t, swept)
	b.lapse(t, finished)
	if n, err := b.store.SweepExpire(b.ctx, 100); err != nil || n != 2 {
		t.Fatalf("SweepExpire: %d, %v; want 2", n, err)
	}
	if got := b.get(t, swept); got.State != store.StateUnresolved || !got.ExpiresAt.IsZero() {
		t.Fatalf("swept with a started step: %s, expires_at %v; want unresolved without expiry", got.State, got.ExpiresAt)
	}
	if got := b.get(t, finished); got.State != store.StateExpired {
		t.Fatalf("swept with every step finished: %s, want expired", got.State)
	}
	if res := b.claim(t, claimParams(finished, "other")); res.Outcome != store.OutcomeAcquired {
		t.Fatalf("Claim of an expired record whose steps finished: %v, want acquired", res.Outcome)
	}

	// A holder that gives the job back with a step STARTED leaves it held
	// too (the effect may have happened), until an operator releases it:
	// then the next Claim takes it over, started step and all.
	given := recordID("given-back")
	g := b.acquire(t, given, "w")
	b.step(t, holding(stepParams(given, g.Token, "charge")))
	b.fail(t, given, g.Token, "timeout", true)
	res := b.claim(t, claimParams(given, "other"))
	if res.Outcome != store.OutcomeUnresolved || !res.Record.ExpiresAt.IsZero() {
		t.Fatalf("Claim of a released record with a started step: %v, expires_at %v; want unresolved without expiry", res.Outcome, res.Record.ExpiresAt)
	}
	if _, err := b.store.RecordResolve(b.ctx, &store.ResolveParams{RecordID: given, Resolution: store.ResolveReleased}); err != nil {
		t.Fatalf("RecordResolve released: %v", err)
	}
	res = b.claim(t, claimParams(given, "other"))
	if res.Outcome != store.OutcomeAcquired {
		t.Fatalf("Claim after an operator's release: %v, want acquired", res.Outcome)
	}
	requireSteps(t, "after an operator's release", res.Record.Steps, []stepWant{started("charge")})

	// Without the policy, a started step is taken over like any lapse.
	rerun := recordID("rerun")
	r := b.acquire(t, rerun, "w")
	b.step(t, stepParams(rerun, r.Token, "charge"))
	b.lapse(t, rerun)
	if res := b.claim(t, claimParams(rerun, "other")); res.Outcome != store.OutcomeAcquired {
		t.Fatalf("Claim of a lapsed lease with a started step, no hold: %v, want acquired", res.Outcome)
	}
}

func testStepsGoWithRecord(t *testing.T, h Harness) {
	b := setup(t, h)
	done, deleted := recordID("done"), recordID("deleted")
	d := b.acquire(t, done, "w")
	b.step(t, finishParams(done, d.Token, "charge", "ch_1"))
	b.complete(t, done, d.Token, "ok")
	// A replay carries the job's result and its steps.
	res := b.claim(t, claimParams(done, "other"))
	if res.Outcome != store.OutcomeCompleted {
		t.Fatalf("Claim of a completed job: %v", res.Outcome)
	}
	requireSteps(t, "the replay", res.Record.Steps, []stepWant{finished("charge", "ch_1")})
	list, err := b.store.RecordList(b.ctx, &store.ListParams{Tenant: done.Tenant, Limit: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("RecordList: %d records, %v", len(list), err)
	}
	requireSameRecord(t, "the listed record", list[0], b.get(t, done))

	x := b.acquire(t, deleted, "w")
	b.step(t, stepParams(deleted, x.Token, "charge"))
	gone, err := b.store.RecordDelete(b.ctx, &store.DeleteParams{RecordID: deleted})
	if err != nil {
		t.Fatalf("RecordDelete: %v", err)
	}
	requireSteps(t, "the deleted record", gone.Steps, []stepWant{started("charge")})

	// The key claimed again, after a delete or a purge, starts with no
	// steps.
	b.h.AgeOut(t, b.store, done)
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepPurge: %d, %v", n, err)
	}
	for _, id := range []store.RecordID{done, deleted} {
		if again := b.acquire(t, id, "w"); again.Steps != nil || again.Attempt != 1 {
			t.Fatalf("%s claimed again: attempt %d, steps %+v; want a new record without steps", id.Key, again.Attempt, again.Steps)
		}
		if got := b.get(t, id); got.Steps != nil {
			t.Fatalf("%s read again: steps %+v", id.Key, got.Steps)
		}
	}
}

func testStepManyAnswersEachAsAlone(t *testing.T, h Harness) {
	b := setup(t, h)
	a, c, none := recordID("a"), recordID("c"), recordID("none")
	ra := b.acquire(t, a, "w")
	rc := b.acquire(t, c, "w")
	b.step(t, finishParams(c, rc.Token, "charge", "ch_1"))
	// Two calls of c, whose answers do not depend on their order: calls of
	// one key in one call of RecordStepMany may run in any order.
	calls := []*store.StepParams{
		finishParams(c, rc.Token, "charge", "ch_2"),  // another value
		stepParams(a, ra.Token, "charge"),            // new
		finishParams(none, 1, "charge", "x"),         // no record
		finishParams(c, rc.Token, "charge", "ch_1"),  // a repeat
		finishParams(c, rc.Token+99, "receipt", "x"), // another token
		{RecordID: recordID("bad\x00"), Token: 1, Name: "charge", MaxSteps: 1, MaxStepBytes: 1},
		{RecordID: a, Token: ra.Token, Name: "bad\x00", MaxSteps: 1, MaxStepBytes: 1},
	}
	steps, errs := b.store.RecordStepMany(b.ctx, calls)
	want := []error{store.ErrStepFinished, nil, store.ErrNotFound, nil, store.ErrLeaseLost, store.ErrInvalidText, store.ErrInvalidText}
	for i, w := range want {
		if !errors.Is(errs[i], w) || (w == nil) != (errs[i] == nil) || (w == nil) == (steps[i] == nil) {
			t.Fatalf("call %d: %+v, %v; want error %v", i, steps[i], errs[i], w)
		}
	}
	var textErr *store.TextError
	if !errors.As(errs[6], &textErr) || textErr.Field != "step" {
		t.Fatalf("a step name with a NUL: %v; want the step's TextError", errs[6])
	}
	if steps[1].State != store.StepStarted || string(steps[3].Result) != "ch_1" {
		t.Fatalf("answers %+v, %+v", steps[1], steps[3])
	}
	requireSteps(t, "a after the batch", b.get(t, a).Steps, []stepWant{started("charge")})
}

// testStepsRaceAcrossTakeover runs a holder's step calls against its
// successor's, across the takeover: each step is finished once, by one of
// them; the fenced holder's calls after the takeover are refused; and
// every step the first holder was told it finished is in the takeover's
// answer, so that the successor skips it.
func testStepsRaceAcrossTakeover(t *testing.T, h Harness) {
	const workers, names = 16, 4
	b := setup(t, h, workers)
	id := recordID("race")
	first := b.acquire(t, id, "first")
	b.lapse(t, id)

	type answer struct {
		p    *store.StepParams
		step *store.Step
		err  error
	}
	answers := make([]answer, workers)
	var takeover *store.ClaimResult
	var takeoverErr error
	taken := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(taken)
		takeover, takeoverErr = b.store.RecordClaim(b.ctx, claimParams(id, "second"))
	})
	for i := range workers {
		wg.Go(func() {
			token := first.Token
			if i%2 == 1 { // the successor's calls
				<-taken
				if takeoverErr != nil {
					return
				}
				token = takeover.Record.Token
			}
			p := finishParams(id, token, fmt.Sprintf("s%d", i/2%names), fmt.Sprintf("w%d", i))
			s, err := b.store.RecordStep(b.ctx, p)
			answers[i] = answer{p, s, err}
		})
	}
	wg.Wait()
	if takeoverErr != nil || takeover.Outcome != store.OutcomeAcquired {
		t.Fatalf("the takeover: %+v, %v", takeover, takeoverErr)
	}

	final := b.get(t, id)
	if len(final.Steps) != names {
		t.Errorf("%d steps after the race, want %d: %+v", len(final.Steps), names, final.Steps)
	}
	winners := map[string]int{}
	for i, a := range answers {
		successor := i%2 == 1
		switch {
		case a.err == nil:
			winners[a.p.Name]++
			stored := final.Step(a.p.Name)
			if stored == nil || !bytes.Equal(stored.Result, a.p.Result) || stored.Token != a.p.Token {
				t.Errorf("call %d was told it finished %s with %q; the record holds %+v", i, a.p.Name, a.p.Result, stored)
			}
			inTakeover := takeover.Record.Step(a.p.Name)
			switch {
			case !successor && (inTakeover == nil || !bytes.Equal(inTakeover.Result, a.p.Result)):
				t.Errorf("the first holder finished %s with %q before the takeover, whose answer has %+v", a.p.Name, a.p.Result, inTakeover)
			case successor && inTakeover != nil && inTakeover.State == store.StepFinished:
				t.Errorf("the successor finished %s, which the takeover's answer had finished: %+v", a.p.Name, inTakeover)
			}
		case errors.Is(a.err, store.ErrStepFinished):
		case errors.Is(a.err, store.ErrLeaseLost) && !successor:
		default:
			t.Errorf("call %d (token %d, step %s): %v", i, a.p.Token, a.p.Name, a.err)
		}
	}
	for _, s := range final.Steps {
		if s.State != store.StepFinished || winners[s.Name] != 1 {
			t.Errorf("step %s: %s, told %d callers they finished it; want finished, by one", s.Name, s.State, winners[s.Name])
		}
	}
}

// testStepsOfManyJobsAtOnce records the steps of many jobs at once, as
// many workers do (and a coalescer batches them): each job ends with its
// own steps, in its order, and a stale token among them is refused alone.
func testStepsOfManyJobsAtOnce(t *testing.T, h Harness) {
	const jobs, steps = 8, 3
	b := setup(t, h, 16)
	recs := make([]*store.Record, jobs)
	for i := range recs {
		recs[i] = b.acquire(t, recordID(fmt.Sprintf("job-%d", i)), "w")
	}
	var wg sync.WaitGroup
	errs := make([]error, jobs)
	stale := make([]error, jobs)
	for i, rec := range recs {
		wg.Go(func() {
			for k := range steps {
				name, result := fmt.Sprintf("s%d", k), fmt.Sprintf("r%d-%d", i, k)
				if k%2 == 0 {
					if _, errs[i] = b.store.RecordStep(b.ctx, stepParams(rec.RecordID, rec.Token, name)); errs[i] != nil {
						return
					}
				}
				if _, errs[i] = b.store.RecordStep(b.ctx, finishParams(rec.RecordID, rec.Token, name, result)); errs[i] != nil {
					return
				}
			}
		})
		wg.Go(func() {
			_, stale[i] = b.store.RecordStep(b.ctx, finishParams(rec.RecordID, rec.Token-1, "stale", "x"))
		})
	}
	wg.Wait()
	for i, rec := range recs {
		if errs[i] != nil {
			t.Fatalf("job %d: %v", i, errs[i])
		}
		requireErr(t, fmt.Sprintf("job %d's stale step", i), stale[i], store.ErrLeaseLost)
		var want []stepWant
		for k := range steps {
			want = append(want, finished(fmt.Sprintf("s%d", k), fmt.Sprintf("r%d-%d", i, k)))
		}
		requireSteps(t, fmt.Sprintf("job %d", i), b.get(t, rec.RecordID).Steps, want)
	}
}
