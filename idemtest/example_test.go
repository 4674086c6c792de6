package idemtest_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/idemtest"
)

// payment is one job on the queue.
type payment struct {
	OrderID string `json:"order_id"`
	Cents   int    `json:"cents"`
}

// paymentWorker charges a card for every payment its queue delivers. The
// queue delivers at least once, so a job can come twice; the worker runs the
// charge through idem's client.Do so that the card is charged once.
type paymentWorker struct {
	idem     *client.Client
	provider *fakeProvider
}

// handle processes one delivery and returns the charge's receipt.
func (w *paymentWorker) handle(ctx context.Context, p payment) (string, error) {
	fingerprint, err := client.FingerprintJSON(p)
	if err != nil {
		return "", err
	}
	job := client.Job{Namespace: "process_payment", Key: p.OrderID, Fingerprint: fingerprint, LeaseTTL: 30 * time.Second}
	res, err := w.idem.Do(ctx, job, func(ctx context.Context, a client.Attempt) ([]byte, error) {
		return []byte(w.provider.charge(p.OrderID, p.Cents)), nil
	})
	if err != nil {
		return "", err // nack: the queue delivers the job again
	}
	return string(res.Value), nil
}

// fakeProvider stands in for the payment provider and counts its charges.
type fakeProvider struct {
	mu      sync.Mutex
	charges []string
}

func (f *fakeProvider) charge(orderID string, cents int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.charges = append(f.charges, orderID)
	return fmt.Sprintf("ch_%d (%s, %d cents)", len(f.charges), orderID, cents)
}

// A worker's test: the same job delivered twice charges the card once, and
// the second delivery gets the first one's receipt.
func Example() {
	// In a test function, srv := idemtest.NewServer(t) does the same and
	// stops the server when the test ends.
	srv, err := idemtest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	provider := &fakeProvider{}
	worker := &paymentWorker{idem: srv.Client, provider: provider}
	job := payment{OrderID: "order-1042", Cents: 1250}
	for delivery := 1; delivery <= 2; delivery++ {
		receipt, err := worker.handle(context.Background(), job)
		fmt.Printf("delivery %d: %s, error %v\n", delivery, receipt, err)
	}
	fmt.Println("charges:", len(provider.charges))
	// Output:
	// delivery 1: ch_1 (order-1042, 1250 cents), error <nil>
	// delivery 2: ch_1 (order-1042, 1250 cents), error <nil>
	// charges: 1
}
