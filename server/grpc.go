package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// messageHeadroom is what a request carries besides its result: namespace,
// key, token and framing, with room to spare.
const messageHeadroom = 16 << 10

// maxRequestBytes is the largest request the gRPC server reads: the larger
// of a Complete with the largest result and the largest batch (whose size
// checkBatch refuses with REQUEST_TOO_LARGE, past messageHeadroom gRPC
// does).
func maxRequestBytes(cfg Config) int {
	return max(cfg.MaxResultBytes, cfg.BatchMaxBytes) + messageHeadroom
}

// streamWorkers is the size of the server's pool of call goroutines: enough
// for the concurrency a replica sees under load (idem-bench runs 32
// workers); an idle worker costs its stack, a few KiB.
const streamWorkers = 64

// streamWindow is the flow-control window of each stream: the largest
// request the server reads, and never below HTTP/2's default window, under
// which grpc-go would ignore it and estimate the window again.
func streamWindow(maxRequest int) int32 {
	return int32(max(maxRequest, 64<<10-1))
}

// connWindow is the flow-control window of a connection: room for 16 of
// the largest unary requests at once or one of the largest batches, and
// 1 MiB at least. Sixteen of the largest batches would let one connection
// hold that much of the server's memory unread.
func connWindow(maxUnary, maxRequest int) int32 {
	return max(16*streamWindow(maxUnary), streamWindow(maxRequest), 1<<20)
}

// NewGRPCServer returns a gRPC server with idem's interceptor chain
// (unaryInterceptors) and the IdempotencyService, AdminService, standard
// health service and server reflection registered. Extra options are
// appended.
func NewGRPCServer(svc *Service, logger *slog.Logger, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	unary := unaryInterceptors(svc, logger)
	var stream []grpc.StreamServerInterceptor
	if m := svc.cfg.Metrics; m != nil {
		stream = append(stream, m.GRPC.StreamServerInterceptor())
	}
	stream = append(stream, svc.cfg.Tenants.streamInterceptors()...)

	base := []grpc.ServerOption{
		// A Complete carries at most MaxResultBytes of result and a batch
		// at most BatchMaxBytes; grpc-go's own default (4 MiB) would let a
		// caller make the server buffer more than either.
		grpc.MaxRecvMsgSize(maxRequestBytes(svc.cfg)),
		// Calls run on a pool of goroutines that keep their grown stacks,
		// instead of a new goroutine per call whose stack grows again
		// through the handler chain, which showed in profiles under load
		// (docs/BENCHMARKS.md). Past streamWorkers concurrent calls grpc-go
		// starts goroutines as before.
		grpc.NumStreamWorkers(streamWorkers),
		// Fixed flow-control windows, each stream's large enough for the
		// largest request in one flight. grpc-go's default, a window it
		// grows by estimating the connection's bandwidth-delay product,
		// sends a PING after every request it receives and reads its ack:
		// two more syscalls and a wake-up per call, for calls that fit in
		// the first window anyway. Fixed windows also bound what one
		// connection can make the server buffer, where the estimate lets
		// it grow to 16 MiB.
		grpc.InitialWindowSize(streamWindow(maxRequestBytes(svc.cfg))),
		grpc.InitialConnWindowSize(connWindow(svc.cfg.MaxResultBytes+messageHeadroom, maxRequestBytes(svc.cfg))),
		// An answer waiting for its client to read it holds its own size,
		// not a pooled buffer of 1 MiB (protoCodec).
		grpc.ForceServerCodecV2(newProtoCodec()),
	}
	if tp := svc.cfg.Tracing; tp != nil {
		// A stats handler, not an interceptor: its span starts before the
		// interceptor chain runs, so the log line and the store's spans
		// find it in the context. Health probes, every few seconds from
		// every load balancer, would bury the traces worth reading; the
		// Prometheus metrics already count every call.
		base = append(base, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(propagation.TraceContext{}),
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
		)))
	}
	base = append(base, svc.cfg.ConnLimits.serverOptions()...)
	base = append(base,
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	)
	srv := grpc.NewServer(append(base, opts...)...)
	idemv1.RegisterIdempotencyServiceServer(srv, svc)
	idemv1.RegisterAdminServiceServer(srv, NewAdminService(svc.store, svc.cfg, logger))
	healthSrv := health.NewServer()
	// Known from the start, NOT_SERVING until a ping or a call has seen the
	// store answer: a readiness probe that asks before the first check gets
	// "not yet", not "unknown service".
	healthSrv.SetServingStatus(HealthServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	svc.health.attach(healthSrv)
	healthpb.RegisterHealthServer(srv, healthSrv)
	reflection.Register(srv)
	if m := svc.cfg.Metrics; m != nil {
		m.GRPC.InitializeMetrics(srv)
	}
	return srv, healthSrv
}

// unaryInterceptors are idem's chain: metrics → logging → auth → rate limit →
// recovery. Recovery is innermost, so that a panic becomes Internal and is
// still logged and counted; auth inside logging, so that a refused caller
// is logged too. The HTTP/JSON API runs the same chain on the calls it
// refuses before they reach the server.
func unaryInterceptors(svc *Service, logger *slog.Logger) []grpc.UnaryServerInterceptor {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	recoveryHandler := func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
		return newError(codes.Internal, idemv1.ErrorReason_ERROR_REASON_INTERNAL, "internal error", nil)
	}
	var unary []grpc.UnaryServerInterceptor
	if m := svc.cfg.Metrics; m != nil {
		// Outermost, so that every call is counted, refused ones included.
		unary = append(unary, m.GRPC.UnaryServerInterceptor())
	}
	// One line per RPC; health probes and the workers' answered calls only
	// at debug (healthPrefix, workerPrefix).
	unary = append(unary, logCalls(logger, svc.cfg.Tracing != nil))
	// Then authentication and the tenant's rate limit (none without tenants;
	// health and reflection skip both): a caller without credentials is
	// refused before it costs a store call, and is still logged and counted.
	unary = append(unary, svc.cfg.Tenants.unaryInterceptors()...)
	return append(unary, recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(recoveryHandler)))
}

// chainUnary is the interceptors as one, outermost first, as
// grpc.ChainUnaryInterceptor runs them.
func chainUnary(interceptors []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for i := len(interceptors) - 1; i >= 0; i-- {
			interceptor, inner := interceptors[i], next
			next = func(ctx context.Context, req any) (any, error) { return interceptor(ctx, req, info, inner) }
		}
		return next(ctx, req)
	}
}

// The services whose successful calls logCalls logs at debug: health
// probes, which arrive every few seconds from every load balancer, and the
// workers' calls, thousands a second on a busy server. A line per answered
// Claim and Complete is a large share of idemd's CPU per job under load
// (docs/BENCHMARKS.md), and the metrics already count every call by method
// and code; a call that ends in an error code, and every AdminService call,
// keeps its line.
var (
	healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"
	workerPrefix = "/" + idemv1.IdempotencyService_ServiceDesc.ServiceName + "/"
)

// logCalls logs one line per finished call, at codeToLevel's level. It
// builds the line only when that level is enabled: go-grpc-middleware's
// logging interceptor built its fields for every call before it knew the
// level, so every call paid for a line that was rarely written
// (docs/BENCHMARKS.md). With traced, a call whose span is
// recording has its trace and span ids on the line.
func logCalls(logger *slog.Logger, traced bool) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		line := &callLine{}
		resp, err := handler(context.WithValue(ctx, callLineKey{}, line), req)
		code := status.Code(err)
		level := codeToLevel(code)
		if strings.HasPrefix(info.FullMethod, healthPrefix) || (code == codes.OK && strings.HasPrefix(info.FullMethod, workerPrefix)) {
			level = slog.LevelDebug
		}
		if !logger.Enabled(ctx, level) {
			return resp, err
		}
		service, method, _ := strings.Cut(strings.TrimPrefix(info.FullMethod, "/"), "/")
		attrs := make([]slog.Attr, 0, 11)
		attrs = append(attrs,
			slog.String("grpc.service", service),
			slog.String("grpc.method", method),
			slog.String("grpc.code", code.String()),
			slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000))
		if p, ok := peer.FromContext(ctx); ok {
			attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
		}
		if d, ok := ctx.Deadline(); ok {
			attrs = append(attrs, slog.Time("grpc.request.deadline", d))
		}
		if line.tenant != "" {
			attrs = append(attrs, slog.String("tenant", line.tenant))
		}
		if err != nil {
			attrs = append(attrs, slog.String("grpc.error", err.Error()))
		}
		if traced {
			if span := trace.SpanFromContext(ctx); span.IsRecording() {
				sc := span.SpanContext()
				attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
			}
		}
		logger.LogAttrs(ctx, level, "finished call", attrs...)
		return resp, err
	}
}

// callLine is what the interceptors inside logCalls add to the call's line.
type callLine struct {
	tenant string
}

type callLineKey struct{}

// logTenant puts the tenant on the call's log line.
func logTenant(ctx context.Context, tenant string) {
	if line, ok := ctx.Value(callLineKey{}).(*callLine); ok {
		line.tenant = tenant
	}
}

// codeToLevel gives every RPC one line at info (logCalls lowers the workers'
// answered calls and health probes to debug): answered calls, the answers a
// worker expects (lease lost, not found, …), a cancelled call or a passed
// deadline. A store outage logs at warn, a bug at error. Refused credentials
// and rate-limited calls log at debug: a flood of them, the case they exist
// for, must not cost a log line per call.
func codeToLevel(code codes.Code) slog.Level {
	switch code {
	case codes.Unauthenticated, codes.ResourceExhausted:
		return slog.LevelDebug
	case codes.OK, codes.NotFound, codes.Aborted, codes.FailedPrecondition, codes.AlreadyExists,
		codes.Canceled, codes.DeadlineExceeded, codes.InvalidArgument, codes.PermissionDenied:
		return slog.LevelInfo
	case codes.Unavailable:
		return slog.LevelWarn
	}
	return slog.LevelError
}
