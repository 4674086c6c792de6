package doublecharge_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemhq/idem/client"
	doublecharge "github.com/idemhq/idem/examples/double-charge"
	"github.com/idemhq/idem/idemtest"
)

var payment = idemtest.CheckJob(client.Job{Namespace: "payments", Key: "order-1042"})

// The fixed handler, as a worker's test would check it: every duplicate
// delivery the kit makes charges the card once.
func TestHandlerChargesOnce(t *testing.T) {
	t.Parallel()
	p := doublecharge.NewProvider()
	idemtest.CheckHandler(t, func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return doublecharge.Handler(p, job, doublecharge.Order{ID: job.Key, AmountCents: 1250})
	}, p.ChargesApplied, payment)
}

// The naive handler: CheckHandler would fail this test with the report
// below; InspectHandler returns it, so that the test can show that the
// report names the window and the remedy.
func TestNaiveHandlerChargesTwiceWhenTheWorkerDiesAfterTheCharge(t *testing.T) {
	t.Parallel()
	p := doublecharge.NewProvider()
	r := idemtest.InspectHandler(t, func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
		return doublecharge.NaiveHandler(p, doublecharge.Order{ID: job.Key, AmountCents: 1250})
	}, p.ChargesApplied, payment)
	crash := r.Case(idemtest.CrashAfterEffect)
	t.Logf("the kit's report of the naive handler:\n%s", crash)
	for _, want := range []string{
		"crash-after-effect: the effect ran 2 times for one job; want once",
		"window: between the side effect and Complete",
		"remedy: pass the record's key (payments/order-1042.crash-after-effect) to the downstream system as its own idempotency key",
	} {
		if !strings.Contains(crash.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, crash)
		}
	}
}
