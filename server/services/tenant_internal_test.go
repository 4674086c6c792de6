package services

import (
	"context"
	"testing"

	"github.com/idemhq/idem/config"
)

// TestCallerTenantIsResolvedOnce: after authentication the context holds the
// tenant itself, so the rate limit, the allow-list and the admin check do
// not look its name up again; a context that only names a tenant still
// finds it by name.
func TestCallerTenantIsResolvedOnce(t *testing.T) {
	t.Parallel()
	ts, err := NewTenants(&config.File{Tenants: []config.Tenant{{Name: "payments", Tokens: []string{config.HashToken("idem_x")}}}})
	if err != nil {
		t.Fatal(err)
	}
	payments := ts.byName["payments"]
	authed := ContextWithCaller(context.Background(), payments.cert)
	named := ContextWithTenant(context.Background(), "payments")
	delete(ts.byName, "payments") // a lookup by name now finds nothing
	if got := ts.callerTenant(authed); got != payments {
		t.Errorf("callerTenant(authenticated) = %v; want the tenant in the context", got)
	}
	if got := ts.callerTenant(named); got != nil {
		t.Errorf("callerTenant(named only) = %v; want a lookup by name, which finds nothing now", got)
	}
	if got := TenantFromContext(authed); got != "payments" {
		t.Errorf("TenantFromContext = %q", got)
	}
	var none *Tenants
	if got := none.callerTenant(authed); got != nil {
		t.Errorf("nil Tenants: callerTenant = %v", got)
	}
}
