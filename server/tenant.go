package server

import "context"

// DefaultTenant owns every record while idemd runs without authentication.
const DefaultTenant = "default"

type tenantKey struct{}

// caller is the context value of tenantKey: the caller's tenant by name,
// and, once authenticate has resolved it, the tenant itself, so that the
// rate limit, the namespace allow-list and the admin check read it without
// looking the name up again.
type caller struct {
	name   string
	tenant *tenant
}

// ContextWithTenant returns ctx carrying the caller's tenant. The
// authentication layer sets it; the handlers read it and never take a tenant
// from a request body.
func ContextWithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, caller{name: tenant})
}

// contextWithTenant is ContextWithTenant for a tenant authenticate found.
func contextWithTenant(ctx context.Context, t *tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, caller{name: t.name, tenant: t})
}

// TenantFromContext returns the caller's tenant, DefaultTenant when none was
// set.
func TenantFromContext(ctx context.Context) string {
	if c, ok := ctx.Value(tenantKey{}).(caller); ok && c.name != "" {
		return c.name
	}
	return DefaultTenant
}

// callerTenant returns the caller's tenant: the one authenticate put in
// ctx, else the one TenantFromContext names; nil when ts has none of that
// name, or is nil.
func (ts *Tenants) callerTenant(ctx context.Context) *tenant {
	if ts == nil {
		return nil
	}
	if c, _ := ctx.Value(tenantKey{}).(caller); c.tenant != nil {
		return c.tenant
	}
	return ts.lookup(TenantFromContext(ctx))
}
