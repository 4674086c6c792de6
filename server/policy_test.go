package server_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/sqlite"
)

// onBothStores runs fn against a service over a fresh Postgres schema and
// over a fresh SQLite file.
func onBothStores(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, postgres.New(testdb.New(t).Pool))
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"))
		if err != nil {
			t.Fatalf("open sqlite: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		fn(t, st)
	})
}

// testPolicies are the default tenant's policies of the policy tests.
var testPolicies = []config.Policy{
	{Namespaces: []string{"payments.*"}, LeaseTTL: 30 * time.Second, MaxLeaseTTL: 10 * time.Minute, Retention: 720 * time.Hour},
	{Namespaces: []string{"payments.refund", "mail"}, LeaseTTL: time.Minute}, // shadowed for payments.refund
	{Namespaces: []string{"capped"}, MaxLeaseTTL: time.Minute},
}

func TestPolicyDefaultsAndBounds(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		c, _ := serve(t, st, server.Config{Policies: testPolicies})
		ctx := testContext(t)

		// The first match wins: payments.refund gets payments.*.
		rec := mustAcquire(t, c, &idemv1.ClaimRequest{Namespace: "payments.refund", Key: "k1"})
		if rec.GetPolicy() != "payments.*" {
			t.Errorf("policy %q; want payments.*", rec.GetPolicy())
		}
		wantSpan(t, "policy lease", rec.GetLeaseExpiresAt(), rec.GetUpdatedAt(), 30*time.Second)
		done, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "payments.refund", Key: "k1", Token: rec.GetToken()})
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		wantSpan(t, "policy retention", done.GetRecord().GetExpiresAt(), done.GetRecord().GetCompletedAt(), 720*time.Hour)
		if done.GetRecord().GetPolicy() != "payments.*" {
			t.Errorf("policy after Complete %q; want payments.*", done.GetRecord().GetPolicy())
		}

		// The Claim's own values win within the bounds.
		rec = mustAcquire(t, c, &idemv1.ClaimRequest{Namespace: "payments.card", Key: "k2",
			LeaseTtl: dur(10 * time.Minute), Retention: dur(time.Hour)})
		wantSpan(t, "own lease", rec.GetLeaseExpiresAt(), rec.GetUpdatedAt(), 10*time.Minute)
		done, err = c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "payments.card", Key: "k2", Token: rec.GetToken()})
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		wantSpan(t, "own retention", done.GetRecord().GetExpiresAt(), done.GetRecord().GetCompletedAt(), time.Hour)

		// Beyond max_lease_ttl: Claim and Heartbeat are refused, nothing written.
		_, err = c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "payments.card", Key: "k3", LeaseTtl: dur(11 * time.Minute)})
		requireStatus(t, err, codes.InvalidArgument, "INVALID_LEASE_TTL")
		if _, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: "payments.card", Key: "k3"}); err == nil {
			t.Error("a refused Claim wrote a record")
		}
		rec = mustAcquire(t, c, &idemv1.ClaimRequest{Namespace: "payments.card", Key: "k3"})
		_, err = c.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: "payments.card", Key: "k3", Token: rec.GetToken(), LeaseTtl: dur(time.Hour)})
		requireStatus(t, err, codes.InvalidArgument, "INVALID_LEASE_TTL")
		hb, err := c.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: "payments.card", Key: "k3", Token: rec.GetToken()})
		if err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		wantSpan(t, "heartbeat policy lease", hb.GetRecord().GetLeaseExpiresAt(), hb.GetRecord().GetUpdatedAt(), 30*time.Second)

		// Only a bound: the server's default lease, lowered to it.
		rec = mustAcquire(t, c, &idemv1.ClaimRequest{Namespace: "capped", Key: "k4"})
		wantSpan(t, "capped lease", rec.GetLeaseExpiresAt(), rec.GetUpdatedAt(), time.Minute)
		if rec.GetPolicy() != "capped" {
			t.Errorf("policy %q; want capped", rec.GetPolicy())
		}

		// No policy matches: the server's defaults, and no name.
		rec = mustAcquire(t, c, &idemv1.ClaimRequest{Namespace: "other", Key: "k5"})
		wantSpan(t, "default lease", rec.GetLeaseExpiresAt(), rec.GetUpdatedAt(), server.DefaultConfig().DefaultLeaseTTL)
		if rec.GetPolicy() != "" {
			t.Errorf("policy %q; want none", rec.GetPolicy())
		}
	})
}

// TestPoliciesArePerTenant: each tenant's own policies apply to its records,
// and the top-level ones of Config.Policies do not.
func TestPoliciesArePerTenant(t *testing.T) {
	t.Parallel()
	f := tenancyFile()
	f.Tenants[0].Policies = []config.Policy{{Namespaces: []string{"refund.*"}, LeaseTTL: 20 * time.Second}}
	srv, _ := startTenancy(t, f, testserver.Options{Config: server.Config{Policies: testPolicies}})
	ctx := testContext(t)

	resp, err := srv.Client.Claim(asTenant(ctx, paymentsToken), &idemv1.ClaimRequest{Namespace: "refund.card", Key: "k"})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	rec := resp.GetRecord()
	if rec.GetPolicy() != "refund.*" {
		t.Errorf("payments: policy %q; want refund.*", rec.GetPolicy())
	}
	wantSpan(t, "payments lease", rec.GetLeaseExpiresAt(), rec.GetUpdatedAt(), 20*time.Second)

	resp, err = srv.Client.Claim(asTenant(ctx, billingToken), &idemv1.ClaimRequest{Namespace: "refund.card", Key: "k"})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	rec = resp.GetRecord()
	if rec.GetPolicy() != "" {
		t.Errorf("billing: policy %q; want none", rec.GetPolicy())
	}
	wantSpan(t, "billing lease", rec.GetLeaseExpiresAt(), rec.GetUpdatedAt(), server.DefaultConfig().DefaultLeaseTTL)
}
