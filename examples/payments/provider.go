package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// chargeRequest is what a worker sends the payment provider.
type chargeRequest struct {
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
	// Token is idem's fencing token of the attempt that charges: the
	// provider only records it, so that the report can tell attempts apart.
	Token int64 `json:"token"`
}

// chargeResponse is the provider's answer.
type chargeResponse struct {
	ID          string `json:"id"`
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
	// Replayed is true when the provider answered from its idempotency
	// records instead of charging.
	Replayed bool `json:"replayed"`
}

// receivedCharge is one charge request as the provider saw it.
type receivedCharge struct {
	OrderID        string
	Token          int64
	IdempotencyKey string
	Applied        bool // false: answered from the provider's idempotency records
}

// provider is a fake payment provider: an HTTP server that records every
// charge it receives and, like real processors (Stripe's Idempotency-Key
// header, Adyen's, …), honours its own idempotency key: a second request
// with a key it has seen gets the first answer back and moves no money.
type provider struct {
	mu       sync.Mutex
	received []receivedCharge
	byKey    map[string]chargeResponse
	applied  map[string]int // order id → charges applied
	nextID   int

	srv *http.Server
	url string
}

// startProvider serves the provider on a loopback port until close.
func startProvider() (*provider, error) {
	p := &provider{byKey: map[string]chargeResponse{}, applied: map[string]int{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", p.charge)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	p.url = "http://" + lis.Addr().String()
	go func() { _ = p.srv.Serve(lis) }()
	return p, nil
}

func (p *provider) close() { _ = p.srv.Close() }

func (p *provider) charge(w http.ResponseWriter, r *http.Request) {
	var req chargeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.OrderID == "" {
		http.Error(w, "bad charge request", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")

	p.mu.Lock()
	resp, seen := p.byKey[key]
	if key == "" || !seen {
		p.nextID++
		resp = chargeResponse{ID: fmt.Sprintf("ch_%06d", p.nextID), OrderID: req.OrderID, AmountCents: req.AmountCents}
		p.applied[req.OrderID]++
		if key != "" {
			p.byKey[key] = resp
		}
	} else {
		resp.Replayed = true
	}
	p.received = append(p.received, receivedCharge{OrderID: req.OrderID, Token: req.Token, IdempotencyKey: key, Applied: !resp.Replayed})
	p.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// snapshot returns copies of what the provider recorded.
func (p *provider) snapshot() ([]receivedCharge, map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	applied := make(map[string]int, len(p.applied))
	for k, v := range p.applied {
		applied[k] = v
	}
	return append([]receivedCharge(nil), p.received...), applied
}

// providerClient is the worker's side of the provider.
type providerClient struct {
	url     string
	sendKey bool // send the Idempotency-Key header (the second layer)
	http    *http.Client
}

// charge asks the provider to charge the order. With sendKey, the order id is
// the provider's idempotency key, so a retry after a crash moves no money.
func (c *providerClient) charge(ctx context.Context, req chargeRequest) (chargeResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return chargeResponse{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return chargeResponse{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.sendKey {
		hreq.Header.Set("Idempotency-Key", "payment-"+req.OrderID)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return chargeResponse{}, fmt.Errorf("charge %s: %w", req.OrderID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return chargeResponse{}, fmt.Errorf("charge %s: provider answered %s", req.OrderID, resp.Status)
	}
	var out chargeResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return chargeResponse{}, fmt.Errorf("charge %s: %w", req.OrderID, err)
	}
	return out, nil
}
