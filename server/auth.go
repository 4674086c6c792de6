package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// needsTenant selects the calls that must authenticate: all but the health
// service (load balancers probe it without credentials) and server
// reflection (the API's schema, which is public). Anything registered later
// is authenticated unless it is added here.
var needsTenant = selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
	switch c.Service {
	case healthpb.Health_ServiceDesc.ServiceName,
		reflectionv1.ServerReflection_ServiceDesc.ServiceName,
		reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName:
		return false
	}
	return true
})

func unauthenticated(msg string) error {
	return newError(codes.Unauthenticated, idemv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, msg, nil)
}

// authenticate is the AuthFunc of go-grpc-middleware's auth interceptor: it
// names the caller's tenant from an "authorization: Bearer <token>" header
// or a verified client certificate, and puts it in the context. The request
// body is never consulted.
func (ts *Tenants) authenticate(ctx context.Context) (context.Context, error) {
	var byToken, byCert *tenant
	switch vals := metadata.ValueFromIncomingContext(ctx, "authorization"); len(vals) {
	case 0:
	case 1:
		scheme, token, ok := strings.Cut(vals[0], " ")
		if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
			return nil, unauthenticated(`the authorization header must be "Bearer <token>"`)
		}
		sum := sha256.Sum256([]byte(token))
		if byToken = ts.byTokenHash(&sum); byToken == nil {
			return nil, unauthenticated("the bearer token is not valid: it is unknown, revoked, or for another idem")
		}
	default:
		return nil, unauthenticated("send one authorization header, not several")
	}
	if cert := verifiedClientCert(ctx); cert != nil {
		byCert = ts.byCertificate(cert)
	}
	var t *tenant
	switch {
	case byToken != nil && byCert != nil && byToken != byCert:
		return nil, unauthenticated("the bearer token and the client certificate name different tenants; send the credentials of one")
	case byToken != nil:
		t = byToken
	case byCert != nil:
		t = byCert
	default:
		return nil, unauthenticated(`no credentials: send "authorization: Bearer <token>" metadata, or a client certificate that idemd's config names`)
	}
	// The logging interceptor, outside this one, prints the tenant on the
	// call's line.
	logTenant(ctx, t.name)
	return contextWithTenant(ctx, t), nil
}

// rateLimit refuses a call when its tenant's token bucket is empty. It runs
// after authenticate, so the bucket is the authenticated tenant's: one
// tenant's flood empties its own bucket only. A batch call takes a token
// per item, in the service (takeTokens), so that the items over the limit are
// refused one by one and the others run.
func (ts *Tenants) rateLimit(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if batchMethods[info.FullMethod] {
		return handler(ctx, req)
	}
	if t := ts.callerTenant(ctx); t != nil && t.limiter != nil && !t.limiter.Allow() {
		wait, err := rateLimited(t)
		// The wait also as a response header in whole seconds, rounded up:
		// the HTTP/JSON API's callers read it as Retry-After. Only refused
		// calls pay for it.
		_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10)))
		return nil, err
	}
	return handler(ctx, req)
}

// rateLimited is RESOURCE_EXHAUSTED with the time until the bucket holds a
// token again as a RetryInfo; it returns that wait too.
func rateLimited(t *tenant) (time.Duration, error) {
	lim := t.limiter
	secs := (1 - lim.Tokens()) / float64(lim.Limit())
	wait := time.Millisecond
	if secs > 0 {
		wait = time.Duration(math.Min(math.Ceil(secs*1000), float64(24*time.Hour/time.Millisecond))) * time.Millisecond
	}
	return wait, newError(codes.ResourceExhausted, idemv1.ErrorReason_ERROR_REASON_RATE_LIMITED,
		fmt.Sprintf("tenant %q is over its rate limit (%g requests per second, burst %d); retry after %s",
			t.name, float64(lim.Limit()), lim.Burst(), wait),
		map[string]string{"tenant": t.name},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
}

// verifiedClientCert returns the client's certificate when TLS verified it
// against the client CA, nil otherwise. PeerCertificates alone prove
// nothing: only a verified chain does.
func verifiedClientCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// authorize returns the caller's tenant and checks that it may use
// namespace. Without tenants (no config file) every caller is
// DefaultTenant, which may use every namespace, and it returns nil.
func (s *Service) authorize(ctx context.Context, namespace string) (*tenant, error) {
	if s.cfg.Tenants == nil {
		return nil, nil
	}
	t := s.cfg.Tenants.callerTenant(ctx)
	if t == nil {
		// Only a Service used without NewGRPCServer's interceptors gets
		// here; refuse rather than serve a tenant nobody configured.
		return nil, unauthenticated("the call carries no authenticated tenant")
	}
	if !t.allows(namespace) {
		return nil, namespaceNotAllowed(t.name, namespace)
	}
	return t, nil
}

// namespaceNotAllowed is PERMISSION_DENIED / NAMESPACE_NOT_ALLOWED for a
// namespace outside the tenant's allow-list.
func namespaceNotAllowed(tenant, namespace string) error {
	return newError(codes.PermissionDenied, idemv1.ErrorReason_ERROR_REASON_NAMESPACE_NOT_ALLOWED,
		fmt.Sprintf("tenant %q may not use namespace %q: it is not in the tenant's namespaces in idemd's config", tenant, namespace),
		map[string]string{"tenant": tenant, "namespace": namespace})
}

// checkResult checks a result of n bytes against the tenant's limit when it
// has one below the server's, against the server's otherwise; the message
// names whose limit it is.
func (s *Service) checkResult(t *tenant, n int) error {
	return checkResultLimit(t, n, s.cfg.MaxResultBytes)
}

// checkResultLimit checks a result of n bytes against tenant t's limit when
// it is below the server's, limit.
func checkResultLimit(t *tenant, n, limit int) error {
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

// unaryInterceptors are authentication, then the rate limit, both skipped
// for the health service and reflection; none without tenants.
func (ts *Tenants) unaryInterceptors() []grpc.UnaryServerInterceptor {
	if ts == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{
		selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(ts.authenticate), needsTenant),
		selector.UnaryServerInterceptor(ts.rateLimit, needsTenant),
	}
}

// streamInterceptors authenticate streaming calls. idem's own RPCs are
// unary; this keeps any streaming service registered later from being open.
func (ts *Tenants) streamInterceptors() []grpc.StreamServerInterceptor {
	if ts == nil {
		return nil
	}
	return []grpc.StreamServerInterceptor{
		selector.StreamServerInterceptor(auth.StreamServerInterceptor(ts.authenticate), needsTenant),
	}
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
		return newError(codes.PermissionDenied, idemv1.ErrorReason_ERROR_REASON_NOT_ADMIN,
			fmt.Sprintf("tenant %q may not call AdminService: it has no admin: true in idemd's config", name),
			map[string]string{"tenant": name})
	}
	return nil
}
