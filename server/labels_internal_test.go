package server

import (
	"fmt"
	"testing"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// claimSeries is how many series idem_claims_total has, and the count of
// the OtherNamespace ones.
func claimSeries(t *testing.T, m *Metrics) (series int, other float64) {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "idem_claims_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			series++
			for _, l := range s.GetLabel() {
				if l.GetName() == "namespace" && l.GetValue() == OtherNamespace {
					other += s.GetCounter().GetValue()
				}
			}
		}
	}
	return series, other
}

// TestClaimSeriesAreBounded: 20,000 Claims in distinct namespaces add at
// most DefaultNamespaceLabels series per outcome; the rest are counted
// under OtherNamespace, none lost.
func TestClaimSeriesAreBounded(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	const n = 20000
	for i := range n {
		m.countClaim(fmt.Sprintf("pay.%d", i), &idemv1.ClaimResponse{Outcome: idemv1.Outcome_OUTCOME_ACQUIRED})
	}
	series, other := claimSeries(t, m)
	if series != DefaultNamespaceLabels+1 {
		t.Errorf("%d Claims in distinct namespaces made %d series; want %d (%d namespaces and %s)",
			n, series, DefaultNamespaceLabels+1, DefaultNamespaceLabels, OtherNamespace)
	}
	if other != n-DefaultNamespaceLabels {
		t.Errorf("%s counted %v Claims; want %d", OtherNamespace, other, n-DefaultNamespaceLabels)
	}
	// A namespace that got a label keeps it.
	m.countClaim("pay.0", &idemv1.ClaimResponse{Outcome: idemv1.Outcome_OUTCOME_ACQUIRED})
	if s, o := claimSeries(t, m); s != series || o != other {
		t.Errorf("a labelled namespace's Claim: %d series, %v other; want %d and %v", s, o, series, other)
	}
}
