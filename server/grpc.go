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
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// messageHeadroom is what a request carries besides its result: namespace,
// key, token and framing, with room to spare.
const messageHeadroom = 16 << 10

// NewGRPCServer returns a gRPC server with idem's interceptor chain, the
// service, the standard health service and server reflection registered.
// The chain is logging outermost, recovery innermost, so a panic becomes
// Internal and is still logged. Extra options are appended.
func NewGRPCServer(svc *Service, logger *slog.Logger, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	recoveryHandler := func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	}
	base := []grpc.ServerOption{
		// A Complete carries at most MaxResultBytes of result; grpc-go's own
		// default (4 MiB) would let a caller make the server buffer far more.
		grpc.MaxRecvMsgSize(svc.cfg.MaxResultBytes + messageHeadroom),
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(interceptorLogger(logger),
				logging.WithLogOnEvents(logging.FinishCall),
				logging.WithLevels(codeToLevel)),
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
func codeToLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK, codes.NotFound, codes.Aborted, codes.FailedPrecondition, codes.AlreadyExists:
		return logging.LevelDebug
	case codes.Canceled, codes.DeadlineExceeded, codes.InvalidArgument, codes.Unauthenticated,
		codes.PermissionDenied, codes.ResourceExhausted:
		return logging.LevelInfo
	case codes.Unavailable:
		return logging.LevelWarn
	}
	return logging.LevelError
}
