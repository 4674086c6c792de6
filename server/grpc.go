package server

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
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

// NewGRPCServer returns a gRPC server with idem's interceptor chain, the
// service, the standard health service and server reflection registered.
// The chain is metrics (when added) → logging → auth → rate limit →
// recovery: recovery innermost, so a panic becomes Internal and is still
// logged; auth inside logging, so a refused caller is logged too. Extra
// options are appended.
func NewGRPCServer(svc *Service, logger *slog.Logger, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	recoveryHandler := func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
		return newError(codes.Internal, ReasonInternal, "internal error", nil)
	}
	base := []grpc.ServerOption{
		// A Complete carries at most MaxResultBytes of result; grpc-go's own
		// default (4 MiB) would let a caller make the server buffer far more.
		grpc.MaxRecvMsgSize(svc.cfg.MaxResultBytes + messageHeadroom),
		grpc.ChainUnaryInterceptor(
			// Metrics go here, outermost, so that every call is counted,
			// refused ones included (and their stream interceptor in a
			// ChainStreamInterceptor before the one of auth below).
			logging.UnaryServerInterceptor(interceptorLogger(logger),
				logging.WithLogOnEvents(logging.FinishCall),
				logging.WithLevels(codeToLevel)),
		),
		// Then authentication and the tenant's rate limit (none without
		// tenants; health and reflection skip both): a caller without
		// credentials is refused before it costs a store call, and is still
		// logged and counted. Repeated ChainUnaryInterceptor options append
		// to one chain in order.
		grpc.ChainUnaryInterceptor(svc.cfg.Tenants.unaryInterceptors()...),
		grpc.ChainStreamInterceptor(svc.cfg.Tenants.streamInterceptors()...),
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(recoveryHandler)),
		),
	}
	srv := grpc.NewServer(append(base, opts...)...)
	idemv1.RegisterIdempotencyServiceServer(srv, svc)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)
	reflection.Register(srv)
	return srv, healthSrv
}

// interceptorLogger adapts slog to go-grpc-middleware's logging interface.
func interceptorLogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// codeToLevel keeps the hot path quiet: successful calls and the answers a
// worker expects (lease lost, not found, …) log at debug; a cancelled call or
// a passed deadline at info; a store outage at warn; a bug at error.
// Refused credentials and rate-limited calls log at debug too: a flood of
// them, the case they exist for, must not cost a log line per call.
func codeToLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK, codes.NotFound, codes.Aborted, codes.FailedPrecondition, codes.AlreadyExists,
		codes.Unauthenticated, codes.ResourceExhausted:
		return logging.LevelDebug
	case codes.Canceled, codes.DeadlineExceeded, codes.InvalidArgument, codes.PermissionDenied:
		return logging.LevelInfo
	case codes.Unavailable:
		return logging.LevelWarn
	}
	return logging.LevelError
}
