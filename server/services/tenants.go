package services

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"fmt"
	"math"
	"path"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

// Tenants, callers and policies: who may do what. middleware authenticates
// a call against Tenants (ByToken, ByCertificate) and puts its tenant in
// the context (ContextWithCaller); the services hold it to its namespaces,
// policies and limits.

// Tenants is the set of tenants from the configuration file, built once at
// start for lookups on every request: a token's hash, a client
// certificate's subject or a tenant's name each find the tenant with one map
// lookup and no allocation.
type Tenants struct {
	byName    map[string]*Tenant
	byToken   map[[sha256.Size]byte]*Credential
	bySubject map[string]*Tenant // RFC 2253 subject from the config file

	// subjects caches which tenant a certificate's raw DER subject names, so
	// that Subject.String() runs once per distinct certificate subject, not
	// once per request. Only certificates the client CA verified get here,
	// and the cache stops growing at maxCachedSubjects.
	subjectsMu sync.RWMutex
	subjects   map[string]*Tenant
}

const maxCachedSubjects = 4096

// Tenant is one tenant of idemd's config, as the services apply it.
type Tenant struct {
	name string
	// tokens are the hashes of its tokens, for the constant-time comparison.
	tokens [][sha256.Size]byte
	// namespaces is the allow-list of globs; nil allows every namespace.
	namespaces []string
	// limiter is its token bucket; nil means no limit.
	limiter *rate.Limiter
	// maxResultBytes is its result limit; 0 means the server's.
	maxResultBytes int
	// admin admits it to AdminService (AdminOnly).
	admin bool
	// policies are its namespaces' policies, first match wins.
	policies []*policy
	// operator lets its AdminService calls name other tenants
	// (AdminService.targetTenants).
	operator bool
	// cert is the credential of its client certificates.
	cert *Credential
}

// Credential is what a caller authenticated with: one of a tenant's bearer
// tokens, with the name idemd's config gives it (named_tokens), or the
// tenant's client certificates. Each is built once, at start, so that a
// caller's credential is one pointer.
type Credential struct {
	tenant *Tenant
	// operator is the name of who holds the token; "" for a token without
	// one, and for a certificate.
	operator string
}

// Tenant is the tenant the credential authenticates as.
func (c *Credential) Tenant() *Tenant { return c.tenant }

// Operator is the name of who holds the token; "" for none.
func (c *Credential) Operator() string { return c.operator }

// NewTenants builds the tenant set of a configuration file. It validates f
// again, so that a File built in code gets the same checks as a file read
// from disk.
func NewTenants(f *config.File) (*Tenants, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	ts := &Tenants{
		byName:    make(map[string]*Tenant, len(f.Tenants)),
		byToken:   map[[sha256.Size]byte]*Credential{},
		bySubject: map[string]*Tenant{},
		subjects:  map[string]*Tenant{},
	}
	for _, c := range f.Tenants {
		t := &Tenant{name: c.Name, namespaces: c.Namespaces, maxResultBytes: c.MaxResultBytes,
			admin: c.IsAdmin(), operator: c.Operator, policies: newPolicies(c.Policies)}
		t.cert = &Credential{tenant: t}
		if c.RateLimit != nil {
			t.limiter = rate.NewLimiter(rate.Limit(c.RateLimit.PerSecond), c.RateLimit.Burst)
		}
		addToken := func(h, operator string) error {
			sum, ok := config.ParseTokenHash(h)
			if !ok { // Validate checked it
				return fmt.Errorf("tenant %q: bad token hash", c.Name)
			}
			t.tokens = append(t.tokens, sum)
			ts.byToken[sum] = &Credential{tenant: t, operator: operator}
			return nil
		}
		for _, h := range c.Tokens {
			if err := addToken(h, ""); err != nil {
				return nil, err
			}
		}
		for _, nt := range c.NamedTokens {
			if err := addToken(nt.Token, nt.Name); err != nil {
				return nil, err
			}
		}
		for _, s := range c.ClientCertSubjects {
			ts.bySubject[s] = t
		}
		ts.byName[c.Name] = t
	}
	return ts, nil
}

// Namespaces are the patterns of every tenant's namespace allow-list.
func (ts *Tenants) Namespaces() []string {
	var patterns []string
	for _, t := range ts.byName {
		patterns = append(patterns, t.namespaces...)
	}
	return patterns
}

// names returns the tenants' names in order.
func (ts *Tenants) names() []string {
	names := make([]string, 0, len(ts.byName))
	for name := range ts.byName {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// lookup returns the tenant named name, nil when there is none (or no
// tenants at all: a nil ts).
func (ts *Tenants) lookup(name string) *Tenant {
	if ts == nil {
		return nil
	}
	return ts.byName[name]
}

// ByToken returns the credential of a bearer token, nil when no tenant has
// it. The map lookup works on a SHA-256 of the token, so its timing tells
// nothing usable about the token; the final comparison is constant-time all
// the same.
func (ts *Tenants) ByToken(token string) *Credential {
	sum := sha256.Sum256([]byte(token))
	c := ts.byToken[sum]
	if c == nil {
		return nil
	}
	match := 0
	for i := range c.tenant.tokens {
		match |= subtle.ConstantTimeCompare(c.tenant.tokens[i][:], sum[:])
	}
	if match != 1 {
		return nil
	}
	return c
}

// ByCertificate returns the credential of a client certificate, which TLS
// verified against the client CA: that of the tenant it names; nil when
// none does.
func (ts *Tenants) ByCertificate(cert *x509.Certificate) *Credential {
	if len(ts.bySubject) == 0 {
		return nil
	}
	ts.subjectsMu.RLock()
	t, ok := ts.subjects[string(cert.RawSubject)]
	ts.subjectsMu.RUnlock()
	if !ok {
		t = ts.bySubject[cert.Subject.String()]
		ts.subjectsMu.Lock()
		if len(ts.subjects) < maxCachedSubjects {
			ts.subjects[string(cert.RawSubject)] = t
		}
		ts.subjectsMu.Unlock()
	}
	if t == nil {
		return nil
	}
	return t.cert
}

// Name is the tenant's name.
func (t *Tenant) Name() string { return t.name }

// allows reports whether the tenant may use namespace.
func (t *Tenant) allows(namespace string) bool {
	if t.namespaces == nil {
		return true
	}
	for _, pattern := range t.namespaces {
		// The patterns were checked at load, so Match cannot fail here.
		if ok, _ := path.Match(pattern, namespace); ok {
			return true
		}
	}
	return false
}

// DefaultTenant owns every record while idemd runs without authentication.
const DefaultTenant = "default"

type tenantKey struct{}

// caller is the context value of tenantKey: the caller's tenant by name,
// and, once authentication has resolved it, the tenant itself, so that the
// rate limit, the namespace allow-list and the admin check read it without
// looking the name up again.
type caller struct {
	name   string
	tenant *Tenant
	cred   *Credential
}

// ContextWithTenant returns ctx carrying the caller's tenant by name. The
// handlers read it and never take a tenant from a request body.
func ContextWithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, caller{name: tenant})
}

// ContextWithCaller returns ctx carrying c, the credential the
// authentication layer found for the call, and its tenant.
func ContextWithCaller(ctx context.Context, c *Credential) context.Context {
	return context.WithValue(ctx, tenantKey{}, caller{name: c.tenant.name, tenant: c.tenant, cred: c})
}

// OperatorFromContext returns the name idemd's config gives the caller's
// token (named_tokens); "" for none.
func OperatorFromContext(ctx context.Context) string {
	if c, _ := ctx.Value(tenantKey{}).(caller); c.cred != nil {
		return c.cred.operator
	}
	return ""
}

// credentialFromContext is the caller's credential; nil when it came
// without one (no config file).
func credentialFromContext(ctx context.Context) *Credential {
	c, _ := ctx.Value(tenantKey{}).(caller)
	return c.cred
}

// actorOf is who makes the call of ctx, for a record's timeline: its tenant
// and the name its token carries; resolver is the name a resolver gave.
func actorOf(ctx context.Context, resolver string) store.Actor {
	return store.Actor{Tenant: TenantFromContext(ctx), Operator: OperatorFromContext(ctx), Resolver: resolver}
}

// TenantFromContext returns the caller's tenant, DefaultTenant when none was
// set.
func TenantFromContext(ctx context.Context) string {
	if c, ok := ctx.Value(tenantKey{}).(caller); ok && c.name != "" {
		return c.name
	}
	return DefaultTenant
}

// callerTenant returns the caller's tenant: the one ContextWithCaller put
// in ctx, else the one TenantFromContext names; nil when ts has none of that
// name, or is nil.
func (ts *Tenants) callerTenant(ctx context.Context) *Tenant {
	if ts == nil {
		return nil
	}
	if c, _ := ctx.Value(tenantKey{}).(caller); c.tenant != nil {
		return c.tenant
	}
	return ts.lookup(TenantFromContext(ctx))
}

// authorize returns the caller's tenant and checks that it may use
// namespace. Without tenants (no config file) every caller is
// DefaultTenant, which may use every namespace, and it returns nil.
func (s *Service) authorize(ctx context.Context, namespace string) (*Tenant, error) {
	return s.cfg.Tenants.authorize(ctx, namespace)
}

// authorize is Service.authorize for any service of the tenants ts: nil
// without tenants.
func (ts *Tenants) authorize(ctx context.Context, namespace string) (*Tenant, error) {
	t, err := ts.caller(ctx)
	if err != nil || t == nil {
		return nil, err
	}
	if !t.allows(namespace) {
		return nil, namespaceNotAllowed(t.name, namespace)
	}
	return t, nil
}

// caller returns the caller's tenant; nil without tenants (no config
// file).
func (ts *Tenants) caller(ctx context.Context) (*Tenant, error) {
	if ts == nil {
		return nil, nil
	}
	t := ts.callerTenant(ctx)
	if t == nil {
		// Only a service used without middleware's authentication gets
		// here; refuse rather than serve a tenant nobody configured.
		return nil, Unauthenticated("the call carries no authenticated tenant")
	}
	return t, nil
}

// namespaceNotAllowed is PERMISSION_DENIED / NAMESPACE_NOT_ALLOWED for a
// namespace outside the tenant's allow-list.
func namespaceNotAllowed(tenant, namespace string) error {
	return NewError(codes.PermissionDenied, idemv1.ErrorReason_ERROR_REASON_NAMESPACE_NOT_ALLOWED,
		fmt.Sprintf("tenant %q may not use namespace %q: it is not in the tenant's namespaces in idemd's config", tenant, namespace),
		map[string]string{"tenant": tenant, "namespace": namespace})
}

// checkResult checks a result of n bytes against the tenant's limit when it
// has one below the server's, against the server's otherwise; the message
// names whose limit it is.
func (s *Service) checkResult(t *Tenant, n int) error {
	return checkResultLimit(t, n, s.cfg.MaxResultBytes)
}

// checkResultLimit checks a result of n bytes against tenant t's limit when
// it is below the server's, limit.
func checkResultLimit(t *Tenant, n, limit int) error {
	if t != nil && t.maxResultBytes > 0 && t.maxResultBytes < limit {
		if n > t.maxResultBytes {
			return invalid("result", idemv1.ErrorReason_ERROR_REASON_INVALID_RESULT, "result is %d bytes; tenant %q's limit is %d (max_result_bytes in idemd's config)", n, t.name, t.maxResultBytes)
		}
		return nil
	}
	if n > limit {
		return invalid("result", idemv1.ErrorReason_ERROR_REASON_INVALID_RESULT, "result is %d bytes; the limit is %d (idemd's --max-result-bytes)", n, limit)
	}
	return nil
}

// AdminOnly admits callers whose tenant has admin: true (or operator: true)
// in idemd's config, before every AdminService call, and refuses every other
// tenant with PERMISSION_DENIED / NOT_ADMIN. A nil Tenants (no config file,
// one unauthenticated tenant) admits every caller.
func (ts *Tenants) AdminOnly(ctx context.Context) error {
	if ts == nil {
		return nil
	}
	if t := ts.callerTenant(ctx); t == nil || !t.admin {
		name := TenantFromContext(ctx)
		return NewError(codes.PermissionDenied, idemv1.ErrorReason_ERROR_REASON_NOT_ADMIN,
			fmt.Sprintf("tenant %q may not call AdminService: it has no admin: true in idemd's config", name),
			map[string]string{"tenant": name})
	}
	return nil
}

// TakeToken takes a token of the caller's rate limit, and returns
// RESOURCE_EXHAUSTED / RATE_LIMITED, with the time until the bucket holds
// one again, when it has none. One tenant's flood empties its own bucket
// only.
func (ts *Tenants) TakeToken(ctx context.Context) (wait time.Duration, err error) {
	if t := ts.callerTenant(ctx); t != nil && t.limiter != nil && !t.limiter.Allow() {
		return rateLimited(t)
	}
	return 0, nil
}

// rateLimited is RESOURCE_EXHAUSTED with the time until the bucket holds a
// token again as a RetryInfo; it returns that wait too.
func rateLimited(t *Tenant) (time.Duration, error) {
	lim := t.limiter
	secs := (1 - lim.Tokens()) / float64(lim.Limit())
	wait := time.Millisecond
	if secs > 0 {
		wait = time.Duration(math.Min(math.Ceil(secs*1000), float64(24*time.Hour/time.Millisecond))) * time.Millisecond
	}
	return wait, NewError(codes.ResourceExhausted, idemv1.ErrorReason_ERROR_REASON_RATE_LIMITED,
		fmt.Sprintf("tenant %q is over its rate limit (%g requests per second, burst %d); retry after %s",
			t.name, float64(lim.Limit()), lim.Burst(), wait),
		map[string]string{"tenant": t.name},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
}

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
	// holdUnfinished: a Claim that would take over a record with a STARTED
	// step makes it UNRESOLVED (on_unfinished_step: hold).
	holdUnfinished bool
}

// newPolicies turns the config file's policies into what a Claim looks up.
func newPolicies(ps []config.Policy) []*policy {
	out := make([]*policy, 0, len(ps))
	for i := range ps {
		p := &ps[i]
		out = append(out, &policy{name: p.PolicyName(), globs: p.Namespaces, leaseTTL: p.LeaseTTL,
			maxLease: p.MaxLeaseTTL, retention: p.Retention,
			hold:           p.OnLeaseExpiry == config.OnLeaseExpiryHold,
			holdUnfinished: p.OnUnfinishedStep == config.OnUnfinishedStepHold})
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
func (s *Service) policyFor(t *Tenant, namespace string) *policy {
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

// holdsUnfinished reports whether p holds its records' STARTED steps for
// resolution rather than letting a successor run them again.
func (p *policy) holdsUnfinished() bool { return p != nil && p.holdUnfinished }

// name is the policy's name, "" for none.
func (p *policy) nameOf() string {
	if p == nil {
		return ""
	}
	return p.name
}
