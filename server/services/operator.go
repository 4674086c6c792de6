package services

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// targetTenants is the one authorization rule for whose records an
// AdminService call acts on, from the request's tenant and all_tenants
// fields: the caller's own tenant when both are empty; the named tenant; or,
// with all, every tenant of idemd's config in name order. Naming a tenant
// other than the caller's, or all of them, takes a tenant with operator:
// true; any other gets PERMISSION_DENIED / NOT_OPERATOR naming the field. A
// tenant the config does not have, or both fields at once, is
// INVALID_ARGUMENT / INVALID_TENANT.
//
// A call that reaches beyond the caller's tenant is logged with the
// operator, the name its token carries, the tenant (or all_tenants) and
// method, the RPC's name; never a key or a token: at info the first time
// its credential reaches that tenant in this process, at debug after
// (crossTenantLog), so that a console refreshing a page does not repeat the
// line. Call it after authorize has admitted the caller.
func (a *AdminService) targetTenants(ctx context.Context, method, tenant string, all bool) ([]string, error) {
	caller := TenantFromContext(ctx)
	if tenant == "" && !all {
		return []string{caller}, nil
	}
	if tenant != "" && all {
		return nil, invalid("tenant", idemv1.ErrorReason_ERROR_REASON_INVALID_TENANT, "tenant and all_tenants are both set; name one tenant, or ask for all of them")
	}
	if tenant != "" {
		if err := validateText("tenant", tenant); err != nil {
			return nil, err
		}
		if err := config.CheckTenantName(tenant); err != nil {
			return nil, invalid("tenant", idemv1.ErrorReason_ERROR_REASON_INVALID_TENANT, "tenant %v", err)
		}
		if tenant == caller {
			return []string{caller}, nil
		}
	}
	field := "tenant"
	if all {
		field = "all_tenants"
	}
	if a.tenants == nil {
		// Without a config file every caller is the one tenant, default,
		// and there is nobody else to name.
		if all {
			return []string{caller}, nil
		}
		return nil, invalid("tenant", idemv1.ErrorReason_ERROR_REASON_INVALID_TENANT,
			"tenant %q does not exist: idemd runs without a config file, so its only tenant is %q", tenant, DefaultTenant)
	}
	if t := a.tenants.callerTenant(ctx); t == nil || !t.operator {
		what := fmt.Sprintf("name tenant %q", tenant)
		if all {
			what = "ask for all_tenants"
		}
		return nil, NewError(codes.PermissionDenied, idemv1.ErrorReason_ERROR_REASON_NOT_OPERATOR,
			fmt.Sprintf("%s: tenant %q may not %s, which takes operator: true in idemd's config; leave %s out to act on its own records", field, caller, what, field),
			map[string]string{"tenant": caller, "field": field})
	}
	if all {
		a.crossTenant.log(ctx, a.logger, method, "", true)
		return a.tenants.names(), nil
	}
	if a.tenants.lookup(tenant) == nil {
		return nil, invalid("tenant", idemv1.ErrorReason_ERROR_REASON_INVALID_TENANT, "tenant %q is not in idemd's config", tenant)
	}
	a.crossTenant.log(ctx, a.logger, method, tenant, false)
	return []string{tenant}, nil
}

// targetTenant is targetTenants for a call on one record (DeleteRecord,
// ResolveRecord), which names at most one tenant.
func (a *AdminService) targetTenant(ctx context.Context, method, tenant string) (string, error) {
	tenants, err := a.targetTenants(ctx, method, tenant, false)
	if err != nil {
		return "", err
	}
	return tenants[0], nil
}
