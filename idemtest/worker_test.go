package idemtest_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/idemtest"
)

// A worker's test as docs/workers.md shows it: the same payment delivered twice
// charges the card once, and the second delivery gets the first receipt.
// paymentWorker and fakeProvider are in example_test.go.
func TestDuplicateDeliveryChargesOnce(t *testing.T) {
	t.Parallel()
	srv := idemtest.NewServer(t) // srv.Client is a ready *client.Client; srv.Addr for a worker process
	provider := &fakeProvider{}
	w := &paymentWorker{idem: srv.Client, provider: provider}
	ctx := context.Background()
	job := payment{OrderID: "order-1042", Cents: 1250}

	first, err := w.handle(ctx, job)
	if err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	second, err := w.handle(ctx, job) // the queue delivered it again
	if err != nil {
		t.Fatalf("second delivery: %v", err)
	}
	if len(provider.charges) != 1 || second != first {
		t.Fatalf("charges %v, receipts %q and %q; want one charge and the same receipt twice", provider.charges, first, second)
	}
}

// The same test with the tenants of production: the config file's YAML
// (here with a test token's hash) and the worker on that tenant's token.
func TestDuplicateDeliveryChargesOnceWithTenants(t *testing.T) {
	t.Parallel()
	const token = "idem_test-token-of-payments"
	srv := idemtest.NewServer(t,
		idemtest.WithTenantsYAML(`
tenants:
  - name: payments
    tokens: ["`+config.HashToken(token)+`"]
    namespaces: ["process_payment"]
`),
		idemtest.WithClientOptions(client.WithToken(token)))
	provider := &fakeProvider{}
	w := &paymentWorker{idem: srv.Client, provider: provider}
	ctx := context.Background()
	job := payment{OrderID: "order-1042", Cents: 1250}
	for range 2 {
		if _, err := w.handle(ctx, job); err != nil {
			t.Fatalf("delivery: %v", err)
		}
	}
	if len(provider.charges) != 1 {
		t.Fatalf("charges %v; want one", provider.charges)
	}

	// The config is enforced: another namespace is denied, and a client
	// without the token is not let in.
	if _, err := srv.Client.Claim(ctx, client.ClaimRequest{Namespace: "refund", Key: "k"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Claim outside the tenant's namespaces: %v; want PERMISSION_DENIED", err)
	}
	anonymous, err := client.New(srv.Addr, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer anonymous.Close()
	if _, err := anonymous.Lookup(ctx, client.LookupRequest{Namespace: "process_payment", Key: "order-1042"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Lookup without a token: %v; want UNAUTHENTICATED", err)
	}
}

// TestWithTenantsYAMLRefusesWhatIdemdRefuses: a config idemd would not
// start with does not start a server either, and says why.
func TestWithTenantsYAMLRefusesWhatIdemdRefuses(t *testing.T) {
	t.Parallel()
	for yaml, want := range map[string]string{
		"tenants:\n  - name: a\n    tokens: [\"idem_plaintext\"]\n":                                             `tenants[0].tokens[0]`,
		"tenants:\n  - name: a\n    client_cert_subjects: [\"CN=a\"]\n":                                         "client_cert_subjects need TLS",
		"tenants:\n  - name: a\n    tokens: [\"" + config.HashToken("t") + "\"]\n    max_result_bytes: 70000\n": "max_result_bytes",
		"policies:\n  - namespaces: [\"payments\"]\n    on_lease_expiry: later\n":                               "policies[0].on_lease_expiry",
	} {
		srv, err := idemtest.Start(idemtest.WithTenantsYAML(yaml))
		if err == nil {
			srv.Close()
			t.Errorf("Start with %q: no error; want one naming %s", yaml, want)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "WithTenantsYAML") || !strings.Contains(msg, want) {
			t.Errorf("Start with %q: %v; want an error naming %s", yaml, err, want)
		}
	}
}
