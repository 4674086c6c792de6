package server

import "context"

// DefaultTenant owns every record while idemd runs without authentication.
const DefaultTenant = "default"

type tenantKey struct{}

// ContextWithTenant returns ctx carrying the caller's tenant. The
// authentication layer sets it; the handlers read it and never take a tenant
// from a request body.
func ContextWithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFromContext returns the caller's tenant, DefaultTenant when none was
// set.
func TenantFromContext(ctx context.Context) string {
	if t, ok := ctx.Value(tenantKey{}).(string); ok && t != "" {
		return t
	}
	return DefaultTenant
}
