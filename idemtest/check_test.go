package idemtest_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/idemtest"
)

// paymentsAPI is a fake payment provider that counts the charges it
// applied. Like real providers, it can answer a request whose idempotency
// key it has seen from its records, and refuse a write fenced by a token
// lower than one it has seen.
type paymentsAPI struct {
	mu       sync.Mutex
	applied  int
	byKey    map[string]string // idempotency key → charge id
	maxToken map[string]int64  // order → highest fencing token seen
	charged  map[string]bool   // order → charged at least once
}

func newPaymentsAPI() *paymentsAPI {
	return &paymentsAPI{byKey: map[string]string{}, maxToken: map[string]int64{}, charged: map[string]bool{}}
}

var errStaleToken = errors.New("payments: a later attempt already wrote this order")

// charge charges order once per idempotencyKey (none: every time), and,
// when token > 0, refuses a token lower than the highest seen for the order.
func (p *paymentsAPI) charge(order, idempotencyKey string, token int64) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.byKey[idempotencyKey]; ok && idempotencyKey != "" {
		return id, nil
	}
	if token > 0 {
		if token < p.maxToken[order] {
			return "", errStaleToken
		}
		p.maxToken[order] = token
	}
	p.applied++
	p.charged[order] = true
	id := fmt.Sprintf("ch_%d", p.applied)
	if idempotencyKey != "" {
		p.byKey[idempotencyKey] = id
	}
	return id, nil
}

func (p *paymentsAPI) wasCharged(order string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charged[order]
}

func (p *paymentsAPI) chargesApplied() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied
}

// Handlers of one payment, from naive to safe.
func naiveHandler(p *paymentsAPI) idemtest.Handler {
	return func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return func(ctx context.Context, a client.Attempt) ([]byte, error) {
			id, err := p.charge(job.Key, "", 0)
			return []byte(id), err
		}
	}
}

func keyedHandler(p *paymentsAPI) idemtest.Handler {
	return func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return func(ctx context.Context, a client.Attempt) ([]byte, error) {
			id, err := p.charge(job.Key, job.Namespace+"/"+job.Key, 0)
			return []byte(id), err
		}
	}
}

func fencedHandler(p *paymentsAPI) idemtest.Handler {
	return func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return func(ctx context.Context, a client.Attempt) ([]byte, error) {
			id, err := p.charge(job.Key, "", a.Token)
			return []byte(id), err
		}
	}
}

func takeoverCheckingHandler(p *paymentsAPI) idemtest.Handler {
	return func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return func(ctx context.Context, a client.Attempt) ([]byte, error) {
			if a.Takeover && p.wasCharged(job.Key) {
				return []byte("charged earlier"), nil
			}
			id, err := p.charge(job.Key, "", 0)
			return []byte(id), err
		}
	}
}

// The windows each handler leaves open, by case: a case not listed must
// make the effect once.
func TestCheckHandlerFindsTheWindowsEachHandlerLeavesOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		handler func(*paymentsAPI) idemtest.Handler
		opts    []idemtest.CheckOption
		open    []idemtest.Case
		held    []idemtest.Case
	}{
		{name: "naive", handler: naiveHandler,
			open: []idemtest.Case{idemtest.CrashAfterEffect, idemtest.LeaseLapsed, idemtest.RetryableFailure, idemtest.StepsCrashBetweenSteps, idemtest.StepsCrashInsideStep}},
		{name: "downstream key", handler: keyedHandler},
		{name: "fencing token", handler: fencedHandler,
			open: []idemtest.Case{idemtest.CrashAfterEffect, idemtest.RetryableFailure, idemtest.StepsCrashBetweenSteps, idemtest.StepsCrashInsideStep}},
		{name: "takeover check", handler: takeoverCheckingHandler,
			open: []idemtest.Case{idemtest.LeaseLapsed}},
		{name: "naive under hold", handler: naiveHandler,
			opts: []idemtest.CheckOption{
				idemtest.CheckJob(client.Job{Namespace: "payments", Key: "order-7"}),
				idemtest.CheckServer(idemtest.WithTenantsYAML("policies:\n  - namespaces: [\"payments\"]\n    on_lease_expiry: hold\n")),
			},
			open: []idemtest.Case{idemtest.RetryableFailure},
			held: []idemtest.Case{idemtest.CrashAfterEffect, idemtest.LeaseLapsed, idemtest.StepsCrashBetweenSteps, idemtest.StepsCrashInsideStep}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPaymentsAPI()
			r := idemtest.InspectHandler(t, tc.handler(api), api.chargesApplied, tc.opts...)
			if len(r.Cases) != len(idemtest.AllCases()) {
				t.Fatalf("%d cases reported; want %d:\n%s", len(r.Cases), len(idemtest.AllCases()), r)
			}
			for _, cr := range r.Cases {
				if cr.Err != nil {
					t.Errorf("%s could not run:\n%s", cr.Case, cr)
					continue
				}
				switch {
				case contains(tc.open, cr.Case):
					if cr.Effects != 2 || cr.OK() || cr.Window == "" || cr.Remedy == "" {
						t.Errorf("%s: want the effect twice, and a window and a remedy:\n%s", cr.Case, cr)
					}
				case !cr.OK():
					t.Errorf("%s: want the effect once:\n%s", cr.Case, cr)
				}
				if got := cr.Held != ""; got != contains(tc.held, cr.Case) {
					t.Errorf("%s: held note %q; want one: %v", cr.Case, cr.Held, !got)
				}
			}
			if t.Failed() {
				t.Logf("the whole report:\n%s", r)
			}
		})
	}
}

func contains(cs []idemtest.Case, c idemtest.Case) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// The report of the naive handler's crash names the window and the remedy
// in words, and the record's key to use.
func TestCrashAfterEffectReportNamesWindowAndRemedy(t *testing.T) {
	t.Parallel()
	api := newPaymentsAPI()
	r := idemtest.InspectHandler(t, naiveHandler(api), api.chargesApplied,
		idemtest.CheckJob(client.Job{Namespace: "payments", Key: "order-1042"}))
	cr := r.Case(idemtest.CrashAfterEffect)
	msg := cr.String()
	for _, want := range []string{
		"crash-after-effect: the effect ran 2 times for one job; want once",
		"delivery 1: ran the handler (attempt 1, token ",
		"the worker died before Complete, and its lease lapsed",
		"delivery 2: ran the handler (attempt 2, token ",
		"record: COMPLETED, attempt 2",
		"window: between the side effect and Complete",
		"remedy: pass the record's key (payments/order-1042.crash-after-effect) to the downstream system as its own idempotency key",
		"a.Takeover",
		"on_lease_expiry: hold",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the report does not say %q:\n%s", want, msg)
		}
	}
	if m := regexp.MustCompile(`\{[a-z_]+\}`).FindString(r.String()); m != "" {
		t.Errorf("the report has %s unfilled:\n%s", m, r)
	}
}

// failRecorder is a test as CheckHandler sees it, that records what
// CheckHandler reports instead of failing.
type failRecorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (f *failRecorder) Error(args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprint(args...))
}

func (f *failRecorder) Log(args ...any) {}

func TestCheckHandlerFailsWithTheReportOfEachOpenWindow(t *testing.T) {
	t.Parallel()
	api := newPaymentsAPI()
	rec := &failRecorder{TB: t}
	idemtest.CheckHandler(rec, naiveHandler(api), api.chargesApplied)
	open := []idemtest.Case{idemtest.CrashAfterEffect, idemtest.LeaseLapsed, idemtest.RetryableFailure, idemtest.StepsCrashBetweenSteps, idemtest.StepsCrashInsideStep}
	if len(rec.errors) != len(open) {
		t.Fatalf("CheckHandler failed the test %d times; want once per open window (%d):\n%s", len(rec.errors), len(open), strings.Join(rec.errors, "\n"))
	}
	for i, c := range open {
		if msg := rec.errors[i]; !strings.HasPrefix(msg, string(c)+": the effect ran 2 times") || !strings.Contains(msg, "\n  window: ") || !strings.Contains(msg, "\n  remedy: ") {
			t.Errorf("failure %d: want %s's window and remedy:\n%s", i, c, msg)
		}
	}

	safe := newPaymentsAPI()
	rec = &failRecorder{TB: t}
	idemtest.CheckHandler(rec, keyedHandler(safe), safe.chargesApplied)
	if len(rec.errors) != 0 {
		t.Errorf("CheckHandler failed a handler with a downstream idempotency key:\n%s", strings.Join(rec.errors, "\n"))
	}
}

// What the kit says when the handler or the counter is not what it needs.
func TestCheckHandlerFindings(t *testing.T) {
	t.Parallel()
	t.Run("counter that counts nothing", func(t *testing.T) {
		t.Parallel()
		api := newPaymentsAPI()
		r := idemtest.InspectHandler(t, keyedHandler(api), func() int { return 0 })
		for _, cr := range r.Cases {
			if cr.OK() || !strings.Contains(cr.Finding, "the effect counter saw nothing") || !strings.HasPrefix(cr.String(), string(cr.Case)+": the effect counter saw no effect") {
				t.Errorf("%s:\n%s", cr.Case, cr)
			}
		}
	})
	t.Run("two effects in one run", func(t *testing.T) {
		t.Parallel()
		api := newPaymentsAPI()
		r := idemtest.InspectHandler(t, func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
			return func(ctx context.Context, a client.Attempt) ([]byte, error) {
				_, _ = api.charge(job.Key, "", 0) // a retry loop that retried an applied charge
				id, err := api.charge(job.Key, "", 0)
				return []byte(id), err
			}
		}, api.chargesApplied)
		cr := r.Case(idemtest.TwiceInSequence)
		if cr.OK() || cr.Runs != 1 || cr.Effects != 2 || !strings.Contains(cr.Finding, "the handler made 2 effects in 1 runs") || cr.Window != "" {
			t.Errorf("want a finding of more effects than runs, no window:\n%s", cr)
		}
	})
	t.Run("handler that fails", func(t *testing.T) {
		t.Parallel()
		r := idemtest.InspectHandler(t, func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
			return func(ctx context.Context, a client.Attempt) ([]byte, error) {
				return nil, errors.New("no route to the provider")
			}
		}, func() int { return 1 })
		for _, cr := range r.Cases {
			if cr.Err == nil || !strings.Contains(cr.String(), "the case could not run: the handler failed on a delivery that should succeed: no route to the provider") {
				t.Errorf("%s:\n%s", cr.Case, cr)
			}
		}
	})
	t.Run("handler that panics", func(t *testing.T) {
		t.Parallel()
		r := idemtest.InspectHandler(t, func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
			return func(ctx context.Context, a client.Attempt) ([]byte, error) { panic("nil map") }
		}, func() int { return 1 })
		if cr := r.Case(idemtest.TwiceInSequence); cr.Err == nil || !strings.Contains(cr.Err.Error(), "the handler panicked: nil map") {
			t.Errorf("want the panic reported:\n%s", cr)
		}
	})
}

// The kit runs on the tenants of a config: the token, the allow-list and
// the tenant's policy apply to every delivery.
func TestCheckHandlerWithTenants(t *testing.T) {
	t.Parallel()
	const token = "idem_test-token-of-payments"
	api := newPaymentsAPI()
	r := idemtest.CheckHandler(t, keyedHandler(api), api.chargesApplied,
		idemtest.CheckJob(client.Job{Namespace: "payments.card", Key: "order-9"}),
		idemtest.CheckServer(
			idemtest.WithTenantsYAML(`
tenants:
  - name: payments
    tokens: ["`+hashToken(token)+`"]
    namespaces: ["payments.*"]
    policies:
      - namespaces: ["payments.*"]
        on_lease_expiry: hold
`),
			idemtest.WithClientOptions(client.WithToken(token))))
	if cr := r.Case(idemtest.CrashAfterEffect); cr.Held == "" || cr.Record == nil || cr.Record.State != client.StateUnresolved || !cr.Record.Hold {
		t.Errorf("the tenant's hold policy did not apply:\n%s", cr)
	}
}

func hashToken(token string) string { return config.HashToken(token) }

// completesFirst is a handler that completes its own record (a Complete
// with its token, through its worker's client) and then charges; with
// chargeFirst, it charges first. The charge carries the record's key, so
// that no other window is open.
func completesFirst(p *paymentsAPI, chargeFirst bool) idemtest.Handler {
	return func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return func(ctx context.Context, a client.Attempt) ([]byte, error) {
			charge := func() error {
				_, err := p.charge(job.Key, job.Namespace+"/"+job.Key, 0)
				return err
			}
			if chargeFirst {
				if err := charge(); err != nil {
					return nil, err
				}
			}
			if _, err := idemtest.WorkerClient(ctx).Complete(ctx, client.CompleteRequest{Namespace: job.Namespace, Key: job.Key, Token: a.Token, Result: []byte("done")}); err != nil {
				return nil, err
			}
			if !chargeFirst {
				if err := charge(); err != nil {
					return nil, err
				}
			}
			return []byte("done"), nil
		}
	}
}

// A handler that completes its own record before its effect loses the
// effect when its worker dies in between: the kit stops the worker there,
// and names the window and the remedy.
func TestCheckHandlerCatchesACompleteBeforeTheEffect(t *testing.T) {
	t.Parallel()
	api := newPaymentsAPI()
	rec := &failRecorder{TB: t}
	r := idemtest.CheckHandler(rec, completesFirst(api, false), api.chargesApplied,
		idemtest.CheckJob(client.Job{Namespace: "payments", Key: "order-1042"}))
	cr := r.Case(idemtest.CrashAfterComplete)
	msg := cr.String()
	if cr.OK() || cr.Err != nil || cr.Effects != 0 || cr.Finding != "" {
		t.Fatalf("want the effect lost, reported as a window:\n%s", msg)
	}
	for _, want := range []string{
		"crash-after-complete: the effect never ran, and the record says the job is done; want once",
		"delivery 1: ran the handler (attempt 1, token ",
		"the handler completed the record itself (Complete with its token), and the worker died right there",
		"delivery 2: replayed the stored result; the handler did not run",
		"record: COMPLETED, attempt 1",
		"window: between the handler's own Complete and its side effect",
		"The effect is lost.",
		"remedy: make the side effect before anything records the job as done: return the result from the handler and let do() send the Complete",
		"instead of completing with a.Token yourself",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the report does not say %q:\n%s", want, msg)
		}
	}
	if m := regexp.MustCompile(`\{[a-z_]+\}`).FindString(msg); m != "" {
		t.Errorf("the report has %s unfilled:\n%s", m, msg)
	}
	failed := false
	for _, e := range rec.errors {
		failed = failed || strings.HasPrefix(e, "crash-after-complete: ")
	}
	if !failed {
		t.Errorf("CheckHandler did not fail the test for crash-after-complete:\n%s", strings.Join(rec.errors, "\n"))
	}

	// The same handler, charging before its own Complete, loses nothing.
	api = newPaymentsAPI()
	r = idemtest.InspectHandler(t, completesFirst(api, true), api.chargesApplied)
	if cr := r.Case(idemtest.CrashAfterComplete); !cr.OK() || !strings.Contains(cr.String(), "the handler completed the record itself") {
		t.Errorf("want the effect once, the worker stopped after the handler's Complete:\n%s", cr)
	}
	// A handler that leaves the Complete to Do loses nothing either.
	api = newPaymentsAPI()
	r = idemtest.InspectHandler(t, keyedHandler(api), api.chargesApplied)
	if cr := r.Case(idemtest.CrashAfterComplete); !cr.OK() || !strings.Contains(cr.String(), "; Complete applied, and the worker died before it heard back") {
		t.Errorf("want the effect once, the worker stopped after Do's Complete:\n%s", cr)
	}
}

// The retryable-failure case tells what became of the record: after the
// handler completed it, its failure is not recorded and the job is not
// released.
func TestCheckHandlerRetryableFailureAfterTheHandlersOwnComplete(t *testing.T) {
	t.Parallel()
	api := newPaymentsAPI()
	r := idemtest.InspectHandler(t, completesFirst(api, true), api.chargesApplied)
	cr := r.Case(idemtest.RetryableFailure)
	msg := cr.String()
	if cr.Record == nil || cr.Record.State != client.StateCompleted {
		t.Fatalf("want the record COMPLETED by the handler:\n%s", msg)
	}
	if strings.Contains(msg, "released") && !strings.Contains(msg, "not released") || strings.Contains(msg, "recorded as retryable") {
		t.Errorf("the report says the job was released, while the record is COMPLETED:\n%s", msg)
	}
	if want := "then failed, but the failure was not recorded (ALREADY_TERMINAL), so the job was not released"; !strings.Contains(msg, want) {
		t.Errorf("the report does not say %q:\n%s", want, msg)
	}
	if !cr.OK() {
		t.Errorf("want the effect once:\n%s", msg)
	}
}

// A handler whose effect runs while it is built, outside Do, is told to
// move the effect into the handler, and nothing else.
func TestCheckHandlerNamesAnEffectOutsideTheHandler(t *testing.T) {
	t.Parallel()
	api := newPaymentsAPI()
	r := idemtest.InspectHandler(t, func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		id, err := api.charge(job.Key, "", 0) // before Do claimed the job
		return func(context.Context, client.Attempt) ([]byte, error) { return []byte(id), err }
	}, api.chargesApplied)
	for _, cr := range r.Cases {
		msg := cr.String()
		if cr.OK() || cr.Err != nil || cr.Outside != cr.Effects || cr.Window != "" || cr.Remedy != "" {
			t.Errorf("%s: want every effect found outside the handler, and no window:\n%s", cr.Case, msg)
		}
		for _, want := range []string{"effects happened while the kit built the handler of a delivery, before do() claimed the job", "Move it into the function the worker passes to do()"} {
			if !strings.Contains(cr.Finding, want) {
				t.Errorf("%s: the finding does not say %q:\n%s", cr.Case, want, msg)
			}
		}
		for _, wrong := range []string{"retry loop", "idempotency key", "remedy:"} {
			if strings.Contains(msg, wrong) {
				t.Errorf("%s: the report says %q:\n%s", cr.Case, wrong, msg)
			}
		}
	}
	// One effect per delivery: the 8 at once, and the redelivery of each
	// that found the job in progress.
	cr := r.Case(idemtest.Concurrent)
	if want := fmt.Sprintf("%d of the %[1]d effects happened while the kit built the handler of a delivery, before do() claimed the job (%[1]d deliveries, 1 of which ran the handler)", cr.Effects); cr.Effects < 8 || !strings.Contains(cr.Finding, want) {
		t.Errorf("concurrent: want the count of effects made outside the handler, one per delivery:\n%s", cr)
	}
}

// Handlers of a job with two effects, a charge and a receipt, counted by
// one counter.
func stepsHandler(p *paymentsAPI, keyed, receiptAsStep bool) idemtest.Handler {
	return func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return func(ctx context.Context, a client.Attempt) ([]byte, error) {
			charge, err := a.Step(ctx, "charge", func(_ context.Context, stepKey string) ([]byte, error) {
				if !keyed {
					stepKey = ""
				}
				id, err := p.charge(job.Key+"/charge", stepKey, 0)
				return []byte(id), err
			})
			if err != nil {
				return nil, err
			}
			sendReceipt := func(_ context.Context, stepKey string) ([]byte, error) {
				id, err := p.charge(job.Key+"/receipt", stepKey, 0)
				return []byte(id), err
			}
			var receipt []byte
			if receiptAsStep {
				receipt, err = a.Step(ctx, "receipt", sendReceipt)
			} else {
				receipt, err = sendReceipt(ctx, "")
			}
			return append(charge, receipt...), err
		}
	}
}

// The kit judges each step's effect on its own, and names the step whose
// effect repeated and the remedy: record it as a step, or pass the step key
// downstream.
func TestCheckHandlerJudgesEachStep(t *testing.T) {
	t.Parallel()
	stepHold := idemtest.CheckServer(idemtest.WithTenantsYAML("policies:\n  - namespaces: [\"payments\"]\n    on_unfinished_step: hold\n"))
	for _, tc := range []struct {
		name          string
		keyed, asStep bool
		opts          []idemtest.CheckOption
		repeatedStep  map[idemtest.Case]string // "" for an effect outside every step
		held          []idemtest.Case
		remedy        string
	}{
		{name: "both steps, keyed", keyed: true, asStep: true},
		{name: "both steps, not keyed", asStep: true,
			repeatedStep: map[idemtest.Case]string{idemtest.StepsCrashInsideStep: "charge"}, remedy: "pass the step key downstream"},
		{name: "both steps, not keyed, held", asStep: true,
			opts: []idemtest.CheckOption{idemtest.CheckJob(client.Job{Namespace: "payments", Key: "order-9"}), stepHold},
			held: []idemtest.Case{idemtest.StepsCrashInsideStep}},
		{name: "receipt outside the steps", keyed: true,
			repeatedStep: map[idemtest.Case]string{idemtest.CrashAfterEffect: "", idemtest.RetryableFailure: "", idemtest.StepsCrashBetweenSteps: ""},
			remedy:       "record it as a step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPaymentsAPI()
			r := idemtest.InspectHandler(t, stepsHandler(api, tc.keyed, tc.asStep), api.chargesApplied, tc.opts...)
			for _, cr := range r.Cases {
				if cr.Err != nil {
					t.Errorf("%s could not run:\n%s", cr.Case, cr)
					continue
				}
				if cr.StepEffects == nil || cr.StepEffects["charge"] == 0 {
					t.Errorf("%s: step effects %v; want the charge's counted", cr.Case, cr.StepEffects)
				}
				step, repeated := tc.repeatedStep[cr.Case]
				switch {
				case repeated:
					if cr.OK() || cr.RepeatedStep != step || cr.RepeatedUnrecorded != (step == "") ||
						!strings.Contains(cr.Remedy, tc.remedy) || !strings.HasPrefix(cr.String(), string(cr.Case)+": the effect ran 2 times") {
						t.Errorf("%s: want the effect of step %q repeated, and the remedy %q:\n%s", cr.Case, step, tc.remedy, cr)
					}
					if step != "" && !strings.Contains(cr.Window, `inside the step `+step) {
						t.Errorf("%s: the window does not name the step %s:\n%s", cr.Case, step, cr)
					}
				case !cr.OK():
					t.Errorf("%s: want each effect once:\n%s", cr.Case, cr)
				}
				if got := cr.Held != ""; got != contains(tc.held, cr.Case) {
					t.Errorf("%s: held note %q; want one: %v", cr.Case, cr.Held, !got)
				}
			}
			if m := regexp.MustCompile(`\{[a-z_]+\}`).FindString(r.String()); m != "" {
				t.Errorf("the report has %s unfilled:\n%s", m, r)
			}
			if t.Failed() {
				t.Logf("the whole report:\n%s", r)
			}
		})
	}
}

// The resolver case: a resolver that looks the charge up by its step key
// decides the held job right; one that releases it blindly makes the
// charge twice; one that cannot tell leaves it held; and without a hold
// policy there is nothing to decide.
func TestCheckResolver(t *testing.T) {
	t.Parallel()
	stepHold := idemtest.CheckServer(idemtest.WithTenantsYAML("policies:\n  - namespaces: [\"payments\"]\n    on_unfinished_step: hold\n"))
	job := idemtest.CheckJob(client.Job{Namespace: "payments", Key: "order-11"})
	lookingUp := func(api *paymentsAPI) func(context.Context, client.Record) (client.Resolution, error) {
		return func(_ context.Context, rec client.Record) (client.Resolution, error) {
			api.mu.Lock()
			id, found := api.byKey[rec.StepKey("charge")]
			api.mu.Unlock()
			if found {
				return client.Completed([]byte(id)).Because("charge " + id + " found"), nil
			}
			return client.Release().Because("no charge"), nil
		}
	}
	releasing := func(*paymentsAPI) func(context.Context, client.Record) (client.Resolution, error) {
		return func(context.Context, client.Record) (client.Resolution, error) { return client.Release(), nil }
	}
	unsure := func(*paymentsAPI) func(context.Context, client.Record) (client.Resolution, error) {
		return func(context.Context, client.Record) (client.Resolution, error) {
			return client.CantTell(), errors.New("the provider is down")
		}
	}
	for _, tc := range []struct {
		name     string
		keyed    bool
		resolver func(*paymentsAPI) func(context.Context, client.Record) (client.Resolution, error)
		opts     []idemtest.CheckOption
		ok       bool
		want     string // in the case's report
	}{
		{name: "looks the charge up", keyed: true, resolver: lookingUp, opts: []idemtest.CheckOption{stepHold}, ok: true, want: "the effect ran once"},
		{name: "releases blindly", resolver: releasing, opts: []idemtest.CheckOption{stepHold}, want: "remedy: look the effect up downstream by the step's key (a.StepKey(name)"},
		{name: "cannot tell", keyed: true, resolver: unsure, opts: []idemtest.CheckOption{stepHold}, want: "the resolver left the record UNRESOLVED"},
		{name: "not held", keyed: true, resolver: lookingUp, want: "the namespace's policy did not hold the record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newPaymentsAPI()
			opts := append([]idemtest.CheckOption{job, idemtest.CheckResolver(tc.resolver(api))}, tc.opts...)
			r := idemtest.InspectHandler(t, stepsHandler(api, tc.keyed, true), api.chargesApplied, opts...)
			cr := r.Case(idemtest.StepsHeldResolver)
			if cr == nil {
				t.Fatalf("no %s case in the report:\n%s", idemtest.StepsHeldResolver, r)
			}
			if cr.Err != nil || cr.OK() != tc.ok || !strings.Contains(cr.String(), tc.want) {
				t.Errorf("want OK %v and %q:\n%s", tc.ok, tc.want, cr)
			}
			if !tc.ok && tc.name == "releases blindly" && cr.RepeatedStep != "charge" {
				t.Errorf("repeated step %q; want charge:\n%s", cr.RepeatedStep, cr)
			}
		})
	}
}
