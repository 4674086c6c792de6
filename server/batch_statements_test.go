package server_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store/postgres"
)

// batchStatements is what idem_db_batch_calls of kind holds in reg: the
// statements observed and the calls they answered.
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
// idle Postgres store goes in ceil(100/64) = 2 many-row statements (64 is
// the coalescer's default MaxRows), not one alone and the rest after it.
func TestBatchClaimStatements(t *testing.T) {
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
	}
}
