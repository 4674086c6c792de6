package idemtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
)

// These tests use idemtest the way a worker's own tests would: through the
// SDK only.

func TestJobDeliveredManyTimesAtOnceIsChargedOnce(t *testing.T) {
	t.Parallel()
	srv := idemtest.NewServer(t)
	provider := &fakeProvider{}
	worker := &paymentWorker{idem: srv.Client, provider: provider}
	job := payment{OrderID: "order-7", Cents: 990}

	const deliveries = 8
	receipts := make([]string, deliveries)
	errs := make([]error, deliveries)
	var wg sync.WaitGroup
	for i := range deliveries {
		wg.Go(func() { receipts[i], errs[i] = worker.handle(context.Background(), job) })
	}
	wg.Wait()
	if len(provider.charges) != 1 {
		t.Fatalf("%d deliveries at once charged %d times; want once", deliveries, len(provider.charges))
	}
	// The losers of the race find the job in progress and would be
	// redelivered; once it completed, a redelivery replays the receipt.
	const want = "ch_1 (order-7, 990 cents)"
	for i, err := range errs {
		var busy *client.InProgressError
		switch {
		case errors.As(err, &busy):
			receipts[i], err = worker.handle(context.Background(), job)
			if err != nil {
				t.Fatalf("redelivery %d: %v", i, err)
			}
		case err != nil:
			t.Fatalf("delivery %d: %v", i, err)
		}
		if receipts[i] != want {
			t.Fatalf("delivery %d got receipt %q; want the one charge's, %q", i, receipts[i], want)
		}
	}
}

func TestATakeoverFencesTheWorkerThatLostItsLease(t *testing.T) {
	t.Parallel()
	srv := idemtest.NewServer(t)
	ctx := context.Background()
	first, err := srv.Client.Claim(ctx, client.ClaimRequest{Namespace: "send_email", Key: "welcome-1", LeaseTTL: time.Second})
	if err != nil || first.Outcome != client.OutcomeAcquired {
		t.Fatalf("Claim: %+v, %v", first, err)
	}
	time.Sleep(time.Until(first.Record.LeaseExpiresAt) + 50*time.Millisecond)
	second, err := srv.Client.Claim(ctx, client.ClaimRequest{Namespace: "send_email", Key: "welcome-1"})
	if err != nil || second.Outcome != client.OutcomeAcquired || second.Record.Token <= first.Record.Token || second.Record.Attempt != 2 {
		t.Fatalf("Claim after the lease ran out: %+v, %v; want a takeover with a greater token", second, err)
	}
	_, err = srv.Client.Complete(ctx, client.CompleteRequest{Namespace: "send_email", Key: "welcome-1", Token: first.Record.Token})
	if !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("Complete with the superseded token: %v; want ErrLeaseLost", err)
	}
}

func TestEachServerHasItsOwnStore(t *testing.T) {
	t.Parallel()
	a, b := idemtest.NewServer(t), idemtest.NewServer(t)
	if a.Addr == b.Addr {
		t.Fatalf("two servers on one address %s", a.Addr)
	}
	ctx := context.Background()
	for _, srv := range []*idemtest.Server{a, b} {
		res, err := srv.Client.Claim(ctx, client.ClaimRequest{Namespace: "jobs", Key: "same-key"})
		if err != nil || res.Outcome != client.OutcomeAcquired {
			t.Fatalf("Claim on %s: %+v, %v; want ACQUIRED on each server", srv.Addr, res, err)
		}
	}
}

func TestClosedServerIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := idemtest.NewServer(t)
	c, err := client.New(srv.Addr, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: "jobs", Key: "k"}); err != nil {
		t.Fatalf("Claim through a client of the test's own: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: "jobs", Key: "k"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Claim after Close: %v; want UNAVAILABLE", err)
	}
}

func TestWithConfigAndClientOptions(t *testing.T) {
	t.Parallel()
	token, err := config.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := services.NewTenants(&config.File{Tenants: []config.Tenant{
		{Name: "payments", Tokens: []string{config.HashToken(token)}, Namespaces: []string{"process_payment"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := idemtest.NewServer(t,
		idemtest.WithConfig(server.Config{Tenants: tenants, MaxResultBytes: 8}),
		idemtest.WithClientOptions(client.WithToken(token)))
	ctx := context.Background()
	res, err := srv.Client.Claim(ctx, client.ClaimRequest{Namespace: "process_payment", Key: "k"})
	if err != nil {
		t.Fatalf("Claim with the tenant's token: %v", err)
	}
	_, err = srv.Client.Complete(ctx, client.CompleteRequest{Namespace: "process_payment", Key: "k", Token: res.Record.Token, Result: []byte("123456789")})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Complete with 9 bytes over an 8 byte limit: %v; want INVALID_ARGUMENT", err)
	}
	anonymous, err := client.New(srv.Addr, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer anonymous.Close()
	if _, err := anonymous.Lookup(ctx, client.LookupRequest{Namespace: "process_payment", Key: "k"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Lookup without a token: %v; want UNAUTHENTICATED", err)
	}
}

// TestStart is Start's contract for a TestMain: it runs outside any test and
// Close stops it.
func TestStart(t *testing.T) {
	t.Parallel()
	srv, err := idemtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.Claim(context.Background(), client.ClaimRequest{Namespace: "jobs", Key: "k"}); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
