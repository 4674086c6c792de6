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
// failed after it was applied.
func TestPaymentHandlerWithoutProviderKeyChargesTwiceInThreeWindows(t *testing.T) {
	t.Parallel()
	r := checkPaymentHandler(t, idemtest.InspectHandler, false)
	want := map[idemtest.Case]string{
		idemtest.CrashAfterEffect: "window: between the side effect and Complete",
		idemtest.LeaseLapsed:      "window: while the handler ran",
		idemtest.RetryableFailure: "window: between the side effect and the handler's return",
	}
	for _, cr := range r.Cases {
		w, open := want[cr.Case]
		switch {
		case open && (cr.Effects != 2 || !strings.Contains(cr.String(), w) || !strings.Contains(cr.Remedy, "(payments/order-1042."+string(cr.Case)+") to the downstream system as its own idempotency key")):
			t.Errorf("want two charges, %q and the provider's key as the remedy:\n%s", w, cr)
		case !open && !cr.OK():
			t.Errorf("want one charge:\n%s", cr)
		}
	}
}
