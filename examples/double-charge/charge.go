// Package doublecharge is one payment handler written twice: naively, as a
// first version often is, and fixed. Its tests run both through
// idemtest.CheckHandler, which catches the naive one charging a card twice
// when its worker dies between the charge and Complete, and passes the
// fixed one, which gives the provider the idem record's key as its own
// idempotency key.
package doublecharge

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/idemhq/idem/client"
)

// Order is a payment job's payload.
type Order struct {
	ID          string `json:"id"`
	AmountCents int    `json:"amount_cents"`
}

// Charge is the provider's receipt, the job's result.
type Charge struct {
	ID          string `json:"id"`
	AmountCents int    `json:"amount_cents"`
}

// Provider is a fake payment provider that counts the charges it applied.
// Like Stripe's API, it answers a request whose Idempotency-Key it has seen
// with the first answer, and moves no money.
type Provider struct {
	mu      sync.Mutex
	applied int
	byKey   map[string]Charge
}

// NewProvider returns a provider that has charged nothing.
func NewProvider() *Provider { return &Provider{byKey: map[string]Charge{}} }

// Charge charges amountCents, or, when idempotencyKey is one it has seen,
// returns that request's charge. An empty idempotencyKey charges every time.
func (p *Provider) Charge(_ context.Context, amountCents int, idempotencyKey string) (Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.byKey[idempotencyKey]; ok && idempotencyKey != "" {
		return ch, nil
	}
	p.applied++
	ch := Charge{ID: fmt.Sprintf("ch_%d", p.applied), AmountCents: amountCents}
	if idempotencyKey != "" {
		p.byKey[idempotencyKey] = ch
	}
	return ch, nil
}

// ChargesApplied is how many charges moved money.
func (p *Provider) ChargesApplied() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied
}

// NaiveHandler is the function a worker passes to client.Do for order: it
// charges the card and returns the receipt. idem makes sure that two
// deliveries of the order do not both run it, but a worker that dies after
// the charge and before Complete leaves idem no way to know the charge
// happened: the next delivery takes the job over and charges again.
func NaiveHandler(p *Provider, o Order) func(context.Context, client.Attempt) ([]byte, error) {
	return func(ctx context.Context, a client.Attempt) ([]byte, error) {
		ch, err := p.Charge(ctx, o.AmountCents, "")
		if err != nil {
			return nil, err
		}
		return json.Marshal(ch)
	}
}

// Handler is NaiveHandler fixed: the provider's idempotency key is the idem
// record's namespace and key, the same for every delivery and every attempt
// of the job, so the provider answers a takeover's repeated charge from its
// records.
func Handler(p *Provider, job client.Job, o Order) func(context.Context, client.Attempt) ([]byte, error) {
	return func(ctx context.Context, a client.Attempt) ([]byte, error) {
		ch, err := p.Charge(ctx, o.AmountCents, job.Namespace+"/"+job.Key)
		if err != nil {
			return nil, err
		}
		return json.Marshal(ch)
	}
}
