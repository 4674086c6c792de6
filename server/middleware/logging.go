package middleware

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/server/services"
)

// The services whose successful calls Logging logs at debug: health
// probes, which arrive every few seconds from every load balancer, and the
// workers' calls, thousands a second on a busy server, which the metrics
// count by method and code already; a call that ends in an error code, and
// every AdminService call, keeps its line.
var (
	healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"
	workerPrefix = "/" + idemv1.IdempotencyService_ServiceDesc.ServiceName + "/"
	// A resolver that cannot stream polls ListHeld every few seconds.
	heldPoll = "/" + idemv1.ResolverService_ServiceDesc.ServiceName + "/ListHeld"
)

// Logging logs one line per finished call, at codeToLevel's level, and one
// per item of a batch call. It builds a line only when its level is
// enabled, so that a call whose line is not written costs nothing for it.
// With traced, a call whose span is recording has its trace and span ids on
// the line.
func Logging(logger *slog.Logger, traced bool) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		line := &callLine{}
		resp, err := handler(context.WithValue(ctx, callLineKey{}, line), req)
		if services.IsBatch(info.FullMethod) {
			logItems(ctx, logger, info.FullMethod, line, BatchErrors(resp))
		}
		code := status.Code(err)
		level := codeToLevel(code)
		if strings.HasPrefix(info.FullMethod, healthPrefix) ||
			(code == codes.OK && (strings.HasPrefix(info.FullMethod, workerPrefix) || info.FullMethod == heldPoll)) {
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
		if line.operator != "" {
			attrs = append(attrs, slog.String("who", line.operator))
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

// callLine is what the interceptors inside Logging add to the call's line.
type callLine struct {
	tenant, operator string
}

type callLineKey struct{}

// logCaller puts the caller's tenant, and the name its token carries, on
// the call's log line.
func logCaller(ctx context.Context, c *services.Credential) {
	if line, ok := ctx.Value(callLineKey{}).(*callLine); ok {
		line.tenant, line.operator = c.Tenant().Name(), c.Operator()
	}
}

// codeToLevel gives every RPC one line at info (Logging lowers the workers'
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

// logItems logs each item of a batch as Logging logs a unary call: a failed
// item at its code's level, an answered one at debug.
func logItems(ctx context.Context, logger *slog.Logger, method string, line *callLine, errs []error) {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	tenant := line.tenant
	if tenant == "" {
		tenant = services.DefaultTenant
	}
	for i, err := range errs {
		code := status.Code(err)
		level := slog.LevelDebug
		if code != codes.OK {
			level = codeToLevel(code)
		}
		if !logger.Enabled(ctx, level) {
			continue
		}
		attrs := []slog.Attr{slog.String("grpc.service", service), slog.String("grpc.method", name), slog.Int("batch.item", i),
			slog.String("grpc.code", code.String()), slog.String("tenant", tenant)}
		if err != nil {
			attrs = append(attrs, slog.String("grpc.error", err.Error()))
		}
		logger.LogAttrs(ctx, level, "finished batch item", attrs...)
	}
}

// BatchErrors are the errors of a batch call's items, in its response, nil
// for an item answered; none for any other response.
func BatchErrors(resp any) []error {
	m, ok := resp.(proto.Message)
	if !ok {
		return nil
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("results")
	if fd == nil || !fd.IsList() {
		return nil
	}
	results := r.Get(fd).List()
	errs := make([]error, results.Len())
	for i := range errs {
		item := results.Get(i).Message()
		if f := item.Descriptor().Fields().ByName("error"); f != nil && item.Has(f) {
			st, _ := item.Get(f).Message().Interface().(*spb.Status)
			errs[i] = status.ErrorProto(st)
		}
	}
	return errs
}

// Recovery turns a panic in a handler into INTERNAL, logged with its stack.
// It goes innermost, so that the call is still logged and counted.
func Recovery(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
		return services.NewError(codes.Internal, idemv1.ErrorReason_ERROR_REASON_INTERNAL, "internal error", nil)
	}))
}
