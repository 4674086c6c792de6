package server

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// messageHeadroom is what a request carries besides its result: namespace,
// key, token and framing, with room to spare.
const messageHeadroom = 16 << 10

// NewGRPCServer returns a gRPC server with idem's interceptor chain and the
// IdempotencyService, AdminService, standard health service and server
// reflection registered. The chain is metrics → logging → auth → rate limit →
// recovery: recovery innermost, so a panic becomes Internal and is still
// logged and counted; auth inside logging, so a refused caller is logged too.
// Extra options are appended.
func NewGRPCServer(svc *Service, logger *slog.Logger, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	recoveryHandler := func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
		return newError(codes.Internal, ReasonInternal, "internal error", nil)
	}
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(codeToLevel)}
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if m := svc.cfg.Metrics; m != nil {
		// Outermost, so that every call is counted, refused ones included.
		unary = append(unary, m.GRPC.UnaryServerInterceptor())
		stream = append(stream, m.GRPC.StreamServerInterceptor())
	}
	unary = append(unary,
		// One line per RPC; health probes, which arrive every few seconds
		// from every load balancer, only at debug.
		selector.UnaryServerInterceptor(
			logging.UnaryServerInterceptor(interceptorLogger(logger), logOpts...),
			selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
				return c.Service != healthpb.Health_ServiceDesc.ServiceName
			})),
		selector.UnaryServerInterceptor(
			logging.UnaryServerInterceptor(interceptorLogger(logger), logging.WithLogOnEvents(logging.FinishCall),
				logging.WithLevels(func(codes.Code) logging.Level { return logging.LevelDebug })),
			selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
				return c.Service == healthpb.Health_ServiceDesc.ServiceName
			})),
	)
	// Then authentication and the tenant's rate limit (none without tenants;
	// health and reflection skip both): a caller without credentials is
	// refused before it costs a store call, and is still logged and counted.
	unary = append(unary, svc.cfg.Tenants.unaryInterceptors()...)
	stream = append(stream, svc.cfg.Tenants.streamInterceptors()...)
	unary = append(unary, recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(recoveryHandler)))

	base := []grpc.ServerOption{
		// A Complete carries at most MaxResultBytes of result; grpc-go's own
		// default (4 MiB) would let a caller make the server buffer far more.
		grpc.MaxRecvMsgSize(svc.cfg.MaxResultBytes + messageHeadroom),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
	srv := grpc.NewServer(append(base, opts...)...)
	idemv1.RegisterIdempotencyServiceServer(srv, svc)
	admin := NewAdminService(svc.store, logger)
	admin.Authorize = svc.cfg.Tenants.AdminOnly // admits every caller without tenants
	idemv1.RegisterAdminServiceServer(srv, admin)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)
	reflection.Register(srv)
	if m := svc.cfg.Metrics; m != nil {
		m.GRPC.InitializeMetrics(srv)
	}
	return srv, healthSrv
}

// interceptorLogger adapts slog to go-grpc-middleware's logging interface.
func interceptorLogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// codeToLevel gives every RPC one line at info: answered calls, the answers a
// worker expects (lease lost, not found, …), a cancelled call or a passed
// deadline. A store outage logs at warn, a bug at error. Refused credentials
// and rate-limited calls log at debug: a flood of them, the case they exist
// for, must not cost a log line per call.
func codeToLevel(code codes.Code) logging.Level {
	switch code {
	case codes.Unauthenticated, codes.ResourceExhausted:
		return logging.LevelDebug
	case codes.OK, codes.NotFound, codes.Aborted, codes.FailedPrecondition, codes.AlreadyExists,
		codes.Canceled, codes.DeadlineExceeded, codes.InvalidArgument, codes.PermissionDenied:
		return logging.LevelInfo
	case codes.Unavailable:
		return logging.LevelWarn
	}
	return logging.LevelError
}
