// Package middleware is what runs around each gRPC call of idem: logging,
// authentication, the tenants' rate limits and recovery, which package
// server chains in that order; and what bounds the transports — the limits
// of a client connection, the TLS files.
package middleware

import (
	"context"
	"crypto/x509"
	"math"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/idemhq/idem/server/services"
)

// needsTenant selects the calls that must come from a tenant: all but the
// health service (load balancers probe it without credentials) and server
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

// Auth authenticates every call that needs a tenant (needsTenant) as one of
// ts, before it costs a store call.
func Auth(ts *services.Tenants) grpc.UnaryServerInterceptor {
	return selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(authenticate(ts)), needsTenant)
}

// StreamAuth is Auth for streaming calls. idem's own RPCs are unary; it
// keeps any streaming service registered later from being open.
func StreamAuth(ts *services.Tenants) grpc.StreamServerInterceptor {
	return selector.StreamServerInterceptor(auth.StreamServerInterceptor(authenticate(ts)), needsTenant)
}

// authenticate names the caller's tenant from an "authorization: Bearer
// <token>" header or a verified client certificate, and puts it in the
// context. The request body is never consulted.
func authenticate(ts *services.Tenants) auth.AuthFunc {
	return func(ctx context.Context) (context.Context, error) {
		var byToken, byCert *services.Credential
		switch vals := metadata.ValueFromIncomingContext(ctx, "authorization"); len(vals) {
		case 0:
		case 1:
			scheme, token, ok := strings.Cut(vals[0], " ")
			if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
				return nil, services.Unauthenticated(`the authorization header must be "Bearer <token>"`)
			}
			if byToken = ts.ByToken(token); byToken == nil {
				return nil, services.Unauthenticated("the bearer token is not valid: it is unknown, revoked, or for another idem")
			}
		default:
			return nil, services.Unauthenticated("send one authorization header, not several")
		}
		if cert := verifiedClientCert(ctx); cert != nil {
			byCert = ts.ByCertificate(cert)
		}
		c := byToken
		switch {
		case byToken != nil && byCert != nil && byToken.Tenant() != byCert.Tenant():
			return nil, services.Unauthenticated("the bearer token and the client certificate name different tenants; send the credentials of one")
		case byToken == nil && byCert == nil:
			return nil, services.Unauthenticated(`no credentials: send "authorization: Bearer <token>" metadata, or a client certificate that idemd's config names`)
		case byToken == nil:
			c = byCert
		}
		logCaller(ctx, c) // on the call's line, which Logging writes
		return services.ContextWithCaller(ctx, c), nil
	}
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

// RateLimit refuses a call when its tenant's token bucket is empty. It runs
// after Auth, so that the bucket is the authenticated tenant's. A batch
// call takes a token per item, in the service, so that the items over the
// limit are refused one by one and the others run.
func RateLimit(ts *services.Tenants) grpc.UnaryServerInterceptor {
	return selector.UnaryServerInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if services.IsBatch(info.FullMethod) {
			return handler(ctx, req)
		}
		if wait, err := ts.TakeToken(ctx); err != nil {
			// The wait also as a response header in whole seconds, rounded
			// up: the HTTP/JSON API's callers read it as Retry-After. Only
			// refused calls pay for it.
			_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10)))
			return nil, err
		}
		return handler(ctx, req)
	}, needsTenant)
}
