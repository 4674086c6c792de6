package server_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
)

// TestClaimMetricLabelsAreBounded: a tenant whose allow-list is a glob
// claims in 200 distinct namespaces; idem_claims_total labels the first 10
// (LimitNamespaceLabels), the namespace its allow-list names literally even
// though it came last, and counts the rest under _other.
func TestClaimMetricLabelsAreBounded(t *testing.T) {
	t.Parallel()
	f := &config.File{Tenants: []config.Tenant{
		{Name: "payments", Tokens: []string{config.HashToken(paymentsToken)}, Namespaces: []string{"pay.*", "billing"}},
	}}
	metrics := server.NewMetrics()
	metrics.LimitNamespaceLabels(10)
	ts, _ := startTenancy(t, f, testserver.Options{Config: server.Config{Metrics: metrics}})
	ctx := asTenant(testContext(t), paymentsToken)
	const n = 200
	for i := range n {
		if _, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: fmt.Sprintf("pay.%d", i), Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "billing", Key: "k"}); err != nil {
		t.Fatal(err)
	}

	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, fam := range families {
		if fam.GetName() != "idem_claims_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" {
					counts[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	var labels []string
	for ns := range counts {
		labels = append(labels, ns)
	}
	slices.Sort(labels)
	want := []string{server.OtherNamespace, "billing"}
	for i := range 10 {
		want = append(want, fmt.Sprintf("pay.%d", i))
	}
	slices.Sort(want)
	if !slices.Equal(labels, want) {
		t.Fatalf("%d Claims in distinct namespaces: namespace labels %v; want %v", n+1, labels, want)
	}
	if counts[server.OtherNamespace] != n-10 {
		t.Errorf("%s counts %v Claims; want %d", server.OtherNamespace, counts[server.OtherNamespace], n-10)
	}
}
