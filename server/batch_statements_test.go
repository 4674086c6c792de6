package server_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store/coalesce"
	"github.com/idemhq/idem/store/postgres"
)

// poolAcquires is idem_db_pool_acquires_total in reg: the connections the
// store took from its pool, one per call.
func poolAcquires(t testing.TB, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "idem_db_pool_acquires_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no idem_db_pool_acquires_total")
	return 0
}

// batchStatements is what idem_db_batch_calls of kind holds in reg: the
// batches observed and the calls they answered.
func batchStatements(t testing.TB, reg *prometheus.Registry, kind string) (statements uint64, calls float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "idem_db_batch_calls" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

// TestBatchClaimStatements: a BatchClaim of 100 new keys on an otherwise
// idle Postgres store behind the coalescer, as idemd runs it, goes in
// ceil(100/64) = 2 batches (64 is the coalescer's default MaxRows), not one
// alone and the rest after it; so does the BatchComplete of those jobs.
func TestBatchClaimStatements(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	pg, err := postgres.OpenBackend(testContext(t), db.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	be := coalesce.NewBackend(pg, coalesce.Options{})
	t.Cleanup(func() { _ = be.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(be.Collectors()...)
	c, _ := serve(t, be, server.Config{})
	for round := range 5 {
		before, _ := batchStatements(t, reg, "claim")
		resp, err := c.BatchClaim(testContext(t), &idemv1.BatchClaimRequest{Requests: claims(keysN(fmt.Sprintf("stmt-%d", round), 100)...)})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range resp.GetResults() {
			wantItem(t, "BatchClaim", i, r, codes.OK, "")
		}
		after, _ := batchStatements(t, reg, "claim")
		if n := after - before; n != 2 {
			t.Fatalf("round %d: the 100 Claims went in %d statements; want 2", round, n)
		}
		// And the same for the Completes of the jobs.
		done := &idemv1.BatchCompleteRequest{}
		for _, r := range resp.GetResults() {
			rec := r.GetResponse().GetRecord()
			done.Requests = append(done.Requests, &idemv1.CompleteRequest{Namespace: ns, Key: rec.GetKey(), Token: rec.GetToken()})
		}
		before, _ = batchStatements(t, reg, "complete")
		completed, err := c.BatchComplete(testContext(t), done)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range completed.GetResults() {
			wantItem(t, "BatchComplete", i, r, codes.OK, "")
		}
		after, _ = batchStatements(t, reg, "complete")
		if n := after - before; n != 2 {
			t.Fatalf("round %d: the 100 Completes went in %d statements; want 2", round, n)
		}
	}
}

// TestBatchLookupStatements: a BatchLookup of 100 records, found or not,
// is one statement on one connection, not a connection per item.
func TestBatchLookupStatements(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	be, err := postgres.OpenBackend(testContext(t), db.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(be.Collectors()...)
	c, _ := serve(t, be, server.Config{})
	keys := keysN("look", 100)
	if _, err := c.BatchClaim(testContext(t), &idemv1.BatchClaimRequest{Requests: claims(keys[:50]...)}); err != nil {
		t.Fatal(err)
	}
	req := &idemv1.BatchLookupRequest{}
	for _, k := range keys {
		req.Requests = append(req.Requests, &idemv1.LookupRequest{Namespace: ns, Key: k})
	}
	before := poolAcquires(t, reg)
	resp, err := c.BatchLookup(testContext(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if n := poolAcquires(t, reg) - before; n != 1 {
		t.Fatalf("the 100 Lookups took %v connections; want 1", n)
	}
	for i, r := range resp.GetResults() {
		if i < 50 {
			wantItem(t, "BatchLookup", i, r, codes.OK, "")
			if got := r.GetResponse().GetRecord().GetKey(); got != keys[i] {
				t.Fatalf("item %d is %q; want %q", i, got, keys[i])
			}
		} else {
			wantItem(t, "BatchLookup", i, r, codes.NotFound, "NOT_FOUND")
		}
	}
}
