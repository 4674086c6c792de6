package server_test

import (
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// TestBatchTenancy: a batch's items are held to the caller's namespaces one
// by one, and each item takes a token of the tenant's rate limit: the items
// past what the bucket holds are RATE_LIMITED with a RetryInfo, in their
// own results, and write nothing, while the others run.
func TestBatchTenancy(t *testing.T) {
	t.Parallel()
	const limitedToken = "idem_batch-test-limited"
	f := tenancyFile()
	f.Tenants = append(f.Tenants, config.Tenant{Name: "limited", Tokens: []string{config.HashToken(limitedToken)},
		RateLimit: &config.RateLimit{PerSecond: 0.001, Burst: 3}})
	ts, _ := startTenancy(t, f, testserver.Options{})
	ctx := testContext(t)

	resp, err := ts.Client.BatchClaim(asTenant(ctx, paymentsToken), &idemv1.BatchClaimRequest{Requests: []*idemv1.ClaimRequest{
		{Namespace: "process_payment", Key: "k1"},
		{Namespace: "billing", Key: "k1"},
		{Namespace: "refund.card", Key: "k1"},
	}})
	if err != nil {
		t.Fatalf("BatchClaim: %v", err)
	}
	wantItem(t, "BatchClaim", 0, resp.Results[0], codes.OK, "")
	wantItem(t, "BatchClaim", 1, resp.Results[1], codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")
	wantItem(t, "BatchClaim", 2, resp.Results[2], codes.OK, "")
	_, unary := ts.Client.Claim(asTenant(ctx, paymentsToken), &idemv1.ClaimRequest{Namespace: "billing", Key: "k1"})
	sameAsUnary(t, "BatchClaim", 1, resp.Results[1], unary)

	limited := asTenant(ctx, limitedToken)
	var reqs []*idemv1.ClaimRequest
	for i := range 5 {
		reqs = append(reqs, &idemv1.ClaimRequest{Namespace: ns, Key: fmt.Sprintf("lim-%d", i)})
	}
	resp, err = ts.Client.BatchClaim(limited, &idemv1.BatchClaimRequest{Requests: reqs})
	if err != nil {
		t.Fatalf("BatchClaim over the limit: %v; want each item answered", err)
	}
	for i, r := range resp.GetResults() {
		if i < 3 {
			wantItem(t, "BatchClaim", i, r, codes.OK, "")
			continue
		}
		wantItem(t, "BatchClaim", i, r, codes.ResourceExhausted, "RATE_LIMITED")
		var retry *errdetails.RetryInfo
		for _, d := range status.FromProto(r.GetError()).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				retry = ri
			}
		}
		if retry.GetRetryDelay().AsDuration() <= 0 {
			t.Fatalf("item %d: RetryInfo %v; want a positive delay", i, retry)
		}
	}
	// The bucket is empty: the next call, unary or batch, is refused, the
	// batch item by item.
	_, err = ts.Client.Lookup(limited, &idemv1.LookupRequest{Namespace: ns, Key: "lim-0"})
	requireStatus(t, err, codes.ResourceExhausted, "RATE_LIMITED")
	look, err := ts.Client.BatchLookup(limited, &idemv1.BatchLookupRequest{Requests: []*idemv1.LookupRequest{
		{Namespace: ns, Key: "lim-0"}, {Namespace: ns, Key: "lim-3"},
	}})
	if err != nil {
		t.Fatalf("BatchLookup: %v", err)
	}
	for i, r := range look.GetResults() {
		wantItem(t, "BatchLookup", i, r, codes.ResourceExhausted, "RATE_LIMITED")
	}
	// What the refused items would have claimed was not written.
	var n int
	if err := ts.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM idem_records WHERE tenant = 'limited'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d records of the limited tenant; want 3", n)
	}
}
