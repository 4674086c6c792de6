// Command http-payments is a payments API in Go whose POST /payments is
// guarded by idem's Idempotency-Key middleware (client/idemhttp): a client
// that retries a payment after a timeout, with the same key, gets the first
// response back and is charged once. docs/idempotent-http.md walks through
// it; the Node and Python examples beside it serve the same API.
//
//	go run ./examples/http-payments/go --listen 127.0.0.1:8080 --idem 127.0.0.1:7070
//
// Callers authenticate with an API key (Authorization: Bearer sk_test_alice
// or sk_test_bob); the account it names is the middleware's caller, so that
// two accounts' keys never meet. GET /charges says how many charges this
// process made; GET /healthz answers ok.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/client/idemhttp"
)

// accounts are the API keys this example knows, and the account of each.
var accounts = map[string]string{"sk_test_alice": "alice", "sk_test_bob": "bob"}

type ctxKey struct{}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "the address to serve the API on")
	idemAddr := flag.String("idem", envOr("IDEM_ADDR", "127.0.0.1:7070"), "idemd's gRPC address (IDEM_ADDR)")
	flag.Parse()
	if err := run(*listen, *idemAddr, os.Getenv("IDEM_TOKEN")); err != nil {
		fmt.Fprintln(os.Stderr, "http-payments:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(listen, idemAddr, token string) error {
	opts := []client.Option{client.WithInsecure()}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	c, err := client.New(idemAddr, opts...)
	if err != nil {
		return err
	}
	defer c.Close()

	idempotent, err := idemhttp.New(c, idemhttp.Config{
		Namespace: "payments-api",
		Caller: func(r *http.Request) (string, error) {
			return r.Context().Value(ctxKey{}).(string), nil // set by authenticate, in front
		},
		RequireKey: true,
	})
	if err != nil {
		return err
	}
	var p payments
	mux := http.NewServeMux()
	mux.Handle("POST /payments", authenticate(idempotent(http.HandlerFunc(p.create))))
	mux.HandleFunc("GET /charges", p.count)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })

	srv := &http.Server{Addr: listen, Handler: mux}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	go func() { <-stop; _ = srv.Close() }()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// authenticate answers 401 to a request without a known API key, and puts
// the key's account in the request's context.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account, ok := accounts[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if !ok {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unknown API key"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, account)))
	})
}

// payments charges cards: here, a counter stands for the card network.
type payments struct {
	mu      sync.Mutex
	charges int
}

func (p *payments) create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Amount   int    `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Amount <= 0 || in.Currency == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "send a positive amount and a currency"})
		return
	}
	p.mu.Lock()
	p.charges++ // the side effect that must happen once per payment
	id := fmt.Sprintf("pay_%d", p.charges)
	p.mu.Unlock()
	w.Header().Set("Location", "/payments/"+id)
	writeJSON(w, http.StatusCreated, map[string]any{"id": id, "amount": in.Amount, "currency": in.Currency})
}

func (p *payments) count(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]int{"charges": p.charges})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
