package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/idemtest"
)

// checkPaymentHandler runs the worker's own handler (worker.charge, what
// handle passes to client.Do) through idemtest's duplicate deliveries,
// against the fake provider over HTTP, with or without the provider's
// idempotency key. The effect is a charge the provider applied.
func checkPaymentHandler(t *testing.T, check func(testing.TB, idemtest.Handler, func() int, ...idemtest.CheckOption) *idemtest.Report, providerKey bool) *idemtest.Report {
	t.Helper()
	p, err := startProvider()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	w := &worker{
		cfg:      workerConfig{providerKey: providerKey},
		ev:       &events{},
		reached:  map[string]int{},
		provider: &providerClient{url: p.url, sendKey: providerKey, http: &http.Client{Timeout: 10 * time.Second}},
	}
	handler := func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return w.charge(paymentJob{OrderID: job.Key, AmountCents: 1250, Customer: "cus_42"})
	}
	chargesApplied := func() int {
		_, applied := p.snapshot()
		n := 0
		for _, c := range applied {
			n += c
		}
		return n
	}
	return check(t, handler, chargesApplied, idemtest.CheckJob(client.Job{Namespace: namespace, Key: "order-1042"}))
}

// With the provider's idempotency key (the demo's default), every duplicate
// delivery the kit makes charges the card once.
func TestPaymentHandlerChargesOnce(t *testing.T) {
	t.Parallel()
	checkPaymentHandler(t, idemtest.CheckHandler, true)
}

// Without it (the demo's -provider-key=false), the kit finds the windows the
// demo's report accounts for: a worker killed between the charge and
// Complete, a lease lost under a stalled worker, a charge whose answer
// failed after it was applied; and, since the handler records no step, the
// two crash windows of a job with steps are the first of those again.
func TestPaymentHandlerWithoutProviderKeyChargesTwiceInFiveWindows(t *testing.T) {
	t.Parallel()
	r := checkPaymentHandler(t, idemtest.InspectHandler, false)
	keyRemedy := func(c idemtest.Case) string {
		return "(payments/order-1042." + string(c) + ") to the downstream system as its own idempotency key"
	}
	want := map[idemtest.Case][2]string{ // the window, and what the remedy says
		idemtest.CrashAfterEffect:       {"window: between the side effect and Complete", keyRemedy(idemtest.CrashAfterEffect)},
		idemtest.LeaseLapsed:            {"window: while the handler ran", keyRemedy(idemtest.LeaseLapsed)},
		idemtest.RetryableFailure:       {"window: between the side effect and the handler's return", keyRemedy(idemtest.RetryableFailure)},
		idemtest.StepsCrashBetweenSteps: {"window: between two of the job's effects", keyRemedy(idemtest.StepsCrashBetweenSteps)},
		idemtest.StepsCrashInsideStep:   {"window: between the side effect and Complete", "record it as a step"},
	}
	for _, cr := range r.Cases {
		w, open := want[cr.Case]
		switch {
		case open && (cr.Effects != 2 || !strings.Contains(cr.String(), w[0]) || !strings.Contains(cr.Remedy, w[1])):
			t.Errorf("want two charges, %q and a remedy that says %q:\n%s", w[0], w[1], cr)
		case !open && !cr.OK():
			t.Errorf("want one charge:\n%s", cr)
		}
	}
}
