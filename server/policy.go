package server

import (
	"path"
	"time"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// policy is one of the config file's policies as the server applies it.
type policy struct {
	name     string   // config.Policy.PolicyName, stored with each record
	globs    []string // checked at load
	leaseTTL time.Duration
	maxLease time.Duration
	// retention is 0 for the server's default.
	retention time.Duration
	// hold: a lease that runs out makes the record UNRESOLVED.
	hold bool
}

// newPolicies turns the config file's policies into what a Claim looks up.
func newPolicies(ps []config.Policy) []*policy {
	out := make([]*policy, 0, len(ps))
	for i := range ps {
		p := &ps[i]
		out = append(out, &policy{name: p.PolicyName(), globs: p.Namespaces, leaseTTL: p.LeaseTTL,
			maxLease: p.MaxLeaseTTL, retention: p.Retention,
			hold: p.OnLeaseExpiry == config.OnLeaseExpiryHold})
	}
	return out
}

// policyFor returns the first policy whose globs match namespace, nil when
// none does.
func policyFor(policies []*policy, namespace string) *policy {
	for _, p := range policies {
		for _, g := range p.globs {
			// The globs were checked at load, so Match cannot fail here.
			if ok, _ := path.Match(g, namespace); ok {
				return p
			}
		}
	}
	return nil
}

// policyFor returns the policy of namespace for tenant t (nil when idemd
// runs without tenants), nil when none applies.
func (s *Service) policyFor(t *tenant, namespace string) *policy {
	if t != nil {
		return policyFor(t.policies, namespace)
	}
	return policyFor(s.policies, namespace)
}

// lease returns the lease of a Claim or Heartbeat under p: the one asked
// for (asked), already checked against the server's bounds, or p's default
// when the call asked for none; INVALID_ARGUMENT when it asks for more than
// p's max_lease_ttl.
func (p *policy) lease(asked bool, leaseTTL time.Duration) (time.Duration, error) {
	if p == nil {
		return leaseTTL, nil
	}
	if !asked {
		switch {
		case p.leaseTTL != 0:
			return p.leaseTTL, nil
		case p.maxLease != 0 && leaseTTL > p.maxLease:
			return p.maxLease, nil
		}
		return leaseTTL, nil
	}
	if p.maxLease != 0 && leaseTTL > p.maxLease {
		return 0, invalid("lease_ttl", idemv1.ErrorReason_ERROR_REASON_INVALID_LEASE_TTL,
			"lease_ttl is %s; the policy %q that applies to this namespace allows at most %s (its max_lease_ttl)", leaseTTL, p.name, p.maxLease)
	}
	return leaseTTL, nil
}

// retention returns the retention of a Claim under p: the one asked for, or
// p's default when the Claim asked for none.
func (p *policy) retentionOf(asked bool, retention time.Duration) time.Duration {
	if p == nil || asked || p.retention == 0 {
		return retention
	}
	return p.retention
}

// holds reports whether p holds its records for resolution.
func (p *policy) holds() bool { return p != nil && p.hold }

// name is the policy's name, "" for none.
func (p *policy) nameOf() string {
	if p == nil {
		return ""
	}
	return p.name
}
