// Package server assembles idem's server: the services of package services
// behind the interceptors of package middleware, on a gRPC server, and the
// HTTP/JSON API of package gateway on an http.Server of its own. New builds
// it, Serve and ServeJSON serve it, Shutdown drains it. idemd, the test kit
// (idemtest) and the test harnesses all build it here.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/server/gateway"
	"github.com/idemhq/idem/server/middleware"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
)

// Config is the server's configuration. The fields it shares with
// services.Config mean what they mean there, where each states its
// default; zero fields take the defaults.
type Config struct {
	DefaultLeaseTTL     time.Duration
	DefaultRetention    time.Duration
	MaxResultBytes      int
	Tenants             *services.Tenants
	Policies            []config.Policy
	MaxWaiters          int
	MaxWaitersPerTenant int
	BatchMaxItems       int
	// BatchMaxBytes bounds a batch call's request, as protobuf; the gRPC
	// server and the HTTP/JSON API read requests that large.
	BatchMaxBytes int
	MaxSteps      int
	MaxStepBytes  int
	HeldRelist    time.Duration
	// Metrics, when set, counts calls, Claims, takeovers, lost leases and
	// waits.
	Metrics *Metrics
	// ConnLimits bound what one gRPC client connection can make the server
	// hold; zero fields take middleware.DefaultConnLimits.
	ConnLimits middleware.ConnLimits
	// Tracing, when set, gives every RPC a server span (otelgrpc), its
	// parent taken from the caller's W3C traceparent, and puts the trace id
	// on the call's log line. Nil (the default) installs nothing: no stats
	// handler, no work per call.
	Tracing trace.TracerProvider
}

// DefaultConfig returns the defaults of DESIGN §2.
func DefaultConfig() Config {
	d := services.DefaultConfig()
	return Config{DefaultLeaseTTL: d.DefaultLeaseTTL, DefaultRetention: d.DefaultRetention, MaxResultBytes: d.MaxResultBytes,
		MaxWaiters: d.MaxWaiters, MaxWaitersPerTenant: d.MaxWaitersPerTenant, BatchMaxItems: d.BatchMaxItems, BatchMaxBytes: d.BatchMaxBytes,
		MaxSteps: d.MaxSteps, MaxStepBytes: d.MaxStepBytes}
}

// services is the services' part of c, its defaults filled in.
func (c Config) services() services.Config {
	return services.Config{DefaultLeaseTTL: c.DefaultLeaseTTL, DefaultRetention: c.DefaultRetention, MaxResultBytes: c.MaxResultBytes,
		Tenants: c.Tenants, Policies: c.Policies, MaxWaiters: c.MaxWaiters, MaxWaitersPerTenant: c.MaxWaitersPerTenant,
		BatchMaxItems: c.BatchMaxItems, BatchMaxBytes: c.BatchMaxBytes, MaxSteps: c.MaxSteps, MaxStepBytes: c.MaxStepBytes, HeldRelist: c.HeldRelist}.WithDefaults()
}

// JSONBodyLimit is the largest body of a unary call that the HTTP/JSON API
// of a server with cfg reads (gateway.BodyLimits).
func JSONBodyLimit(cfg Config) int64 {
	unary, _ := gateway.BodyLimits(cfg.services())
	return unary
}

// Options are what New builds a Server from.
type Options struct {
	// Store is what the services run on. It is required.
	Store store.Store
	// Config is the services' defaults and limits, the tenants, metrics and
	// tracing.
	Config Config
	// Logger receives a line per call and the server's own events; nil
	// discards them.
	Logger *slog.Logger
	// GRPCOptions are added to the gRPC server's options: TLS credentials,
	// say, or interceptors of a test, which run inside idem's.
	GRPCOptions []grpc.ServerOption
	// JSON, when set, serves the HTTP/JSON API too (ServeJSON).
	JSON *JSONOptions
}

// JSONOptions configure the HTTP/JSON API's listener. Zero fields take their
// defaults.
type JSONOptions struct {
	// TLS, when set, serves HTTPS (HTTP/1.1 and HTTP/2); without it the API
	// serves HTTP/1.1 and HTTP/2 with prior knowledge (h2c), which Connect
	// clients and gRPC-Web proxies may speak without TLS.
	TLS *tls.Config
	// ReadTimeout bounds a request's headers and body: a client that
	// trickles its body is cut off, not waited for. It defaults to 10
	// seconds.
	ReadTimeout time.Duration
	// IdleTimeout closes a connection with no request in flight for this
	// long. It defaults to 2 minutes.
	IdleTimeout time.Duration
	// WriteTimeout closes a connection whose client reads nothing of an
	// answer for this long (middleware.LimitListener). It defaults to 10
	// seconds.
	WriteTimeout time.Duration
	// MaxConnections bounds the connections held open at once; a new one
	// waits to be accepted until another closes. It defaults to 1024.
	MaxConnections int
	// Wrap, when set, wraps the API's handler, to serve more beside it: the
	// operator console.
	Wrap func(http.Handler) http.Handler
}

// Server is idem's server: one gRPC server on Serve's listener, and the
// HTTP/JSON API on ServeJSON's.
type Server struct {
	grpc     *grpc.Server
	health   *storeHealth
	store    store.Store
	service  *services.Service
	resolver *services.ResolverService
	json     *http.Server // nil without Options.JSON
	jsonGRPC *grpc.Server // the API's calls, in process
	jsonOpts JSONOptions
	logger   *slog.Logger
}

// New builds the server of opts: its services on opts.Store, the
// interceptor chain, the gRPC server with the IdempotencyService,
// AdminService, ResolverService, the standard health service and server
// reflection, and the
// HTTP/JSON API when opts.JSON asks for it.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("server: Options.Store is required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg := opts.Config
	svcCfg := cfg.services()
	s := &Server{health: newStoreHealth(logger), store: opts.Store, logger: logger}
	s.service = services.NewService(opts.Store, svcCfg, logger)
	admin := services.NewAdminService(opts.Store, svcCfg, logger)
	s.resolver = services.NewResolverService(opts.Store, svcCfg, logger)
	cfg.Metrics.watch(s.service, cfg.Tenants)
	unary := interceptors(cfg, s.health, logger)
	newGRPC := func() *grpc.Server {
		srv := grpc.NewServer(append(grpcOptions(cfg, svcCfg, unary), opts.GRPCOptions...)...)
		idemv1.RegisterIdempotencyServiceServer(srv, s.service)
		idemv1.RegisterAdminServiceServer(srv, admin)
		idemv1.RegisterResolverServiceServer(srv, s.resolver)
		healthpb.RegisterHealthServer(srv, s.health.server)
		reflection.Register(srv)
		if cfg.Metrics != nil {
			cfg.Metrics.GRPC.InitializeMetrics(srv)
		}
		return srv
	}
	s.grpc = newGRPC()
	if opts.JSON == nil {
		return s, nil
	}
	s.jsonOpts = opts.JSON.withDefaults()
	// A gRPC server of its own, which only the API feeds: stopping a
	// grpc.Server cuts the calls its ServeHTTP has in flight, so the API
	// drains on its http.Server before its gRPC server stops.
	s.jsonGRPC = newGRPC()
	api, err := gateway.New(s.jsonGRPC, chain(unary), svcCfg)
	if err != nil {
		return nil, err
	}
	if s.jsonOpts.Wrap != nil {
		api = s.jsonOpts.Wrap(api)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(s.jsonOpts.TLS != nil)
	protocols.SetUnencryptedHTTP2(s.jsonOpts.TLS == nil)
	s.json = &http.Server{Handler: api, TLSConfig: s.jsonOpts.TLS, ReadTimeout: s.jsonOpts.ReadTimeout, IdleTimeout: s.jsonOpts.IdleTimeout,
		MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn), Protocols: &protocols}
	return s, nil
}

func (o JSONOptions) withDefaults() JSONOptions {
	o.ReadTimeout = cmp.Or(o.ReadTimeout, 10*time.Second)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, 2*time.Minute)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, 10*time.Second)
	o.MaxConnections = cmp.Or(o.MaxConnections, 1024)
	return o
}

// interceptors are idem's chain, as go-grpc-middleware's example server has
// it: metrics → logging → authentication → the tenant's rate limit →
// recovery. Metrics go first, so that every call is counted, refused ones
// included, and with them what tells the health what calls see;
// authentication inside logging, so that a refused caller is logged too,
// and before the rate limit, so that the bucket is the authenticated
// tenant's; recovery innermost, so that a panic becomes INTERNAL and is
// still logged and counted. The HTTP/JSON API runs the same chain on the
// calls it refuses before they reach its gRPC server.
func interceptors(cfg Config, health *storeHealth, logger *slog.Logger) []grpc.UnaryServerInterceptor {
	var unary []grpc.UnaryServerInterceptor
	if m := cfg.Metrics; m != nil {
		unary = append(unary, m.GRPC.UnaryServerInterceptor(), m.countAnswers)
	}
	unary = append(unary, health.observe)
	unary = append(unary, middleware.Logging(logger, cfg.Tracing != nil))
	if ts := cfg.Tenants; ts != nil {
		unary = append(unary, middleware.Auth(ts), middleware.RateLimit(ts))
	}
	return append(unary, middleware.Recovery(logger))
}

// chain is interceptors as one, outermost first, as
// grpc.ChainUnaryInterceptor runs them.
func chain(interceptors []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for i := len(interceptors) - 1; i >= 0; i-- {
			interceptor, inner := interceptors[i], next
			next = func(ctx context.Context, req any) (any, error) { return interceptor(ctx, req, info, inner) }
		}
		return next(ctx, req)
	}
}

// Serve serves the gRPC API on lis until Shutdown or Stop, after which it
// returns nil.
func (s *Server) Serve(lis net.Listener) error {
	if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// ServeJSON serves the HTTP/JSON API on lis until Shutdown or Stop, after
// which it returns nil, with the limits of Options.JSON.
func (s *Server) ServeJSON(lis net.Listener) error {
	if s.json == nil {
		return errors.New("server: ServeJSON without Options.JSON")
	}
	lis = middleware.LimitListener(lis, s.jsonOpts.MaxConnections, s.jsonOpts.WriteTimeout)
	var err error
	if s.json.TLSConfig != nil {
		err = s.json.ServeTLS(lis, "", "") // the certificate is in TLSConfig
	} else {
		err = s.json.Serve(lis)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// WatchHealth pings the store every interval until ctx is done, so that the
// health status follows the database while no call comes.
func (s *Server) WatchHealth(ctx context.Context, interval time.Duration) {
	s.health.watch(ctx, s.store, interval)
}

// Shutdown drains the server: health answers NOT_SERVING at once, waiting
// Claims answer with what they know (IN_PROGRESS) and WatchHeld streams end
// (UNAVAILABLE: their clients connect again) rather than hold the drain
// up, and the calls in flight run until they answer, the gRPC
// listener's and the HTTP/JSON API's side by side, each on a server of its
// own. When ctx ends first, what is left is cut off and Shutdown returns
// ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.server.Shutdown() // NOT_SERVING from now on
	s.service.EndWaits()
	s.resolver.EndStreams()
	jsonDone := make(chan error, 1)
	go func() { jsonDone <- s.shutdownJSON(ctx) }()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	var err error
	select {
	case <-stopped:
	case <-ctx.Done():
		s.logger.Warn("shutdown timeout passed: cutting off the remaining RPCs")
		s.grpc.Stop()
		<-stopped
		err = ctx.Err()
	}
	return cmp.Or(err, <-jsonDone)
}

// shutdownJSON stops the API's listener and waits for its calls in flight
// until ctx ends, then closes its connections; only then does it stop the
// API's gRPC server, whose stop would cut them.
func (s *Server) shutdownJSON(ctx context.Context) error {
	if s.json == nil {
		return nil
	}
	err := s.json.Shutdown(ctx)
	if err != nil {
		s.logger.Warn("shutdown timeout passed: cutting off the remaining HTTP/JSON calls")
		_ = s.json.Close()
	}
	s.jsonGRPC.Stop()
	return err
}

// Stop stops the server at once, cutting off the calls in flight.
func (s *Server) Stop() {
	s.health.server.Shutdown()
	s.service.EndWaits()
	s.resolver.EndStreams()
	if s.json != nil {
		_ = s.json.Close()
		s.jsonGRPC.Stop()
	}
	s.grpc.Stop()
}

// messageHeadroom is what a request carries besides its result: namespace,
// key, token and framing, with room to spare.
const messageHeadroom = 16 << 10

// streamWorkers is the size of the server's pool of call goroutines: enough
// for the concurrency a replica sees under load; an idle worker costs its
// stack, a few KiB.
const streamWorkers = 64

// grpcOptions are the gRPC server's options for cfg and its services'
// bounds, with the chain unary.
func grpcOptions(cfg Config, svc services.Config, unary []grpc.UnaryServerInterceptor) []grpc.ServerOption {
	maxRequest := max(svc.MaxResultBytes, svc.BatchMaxBytes) + messageHeadroom
	opts := []grpc.ServerOption{
		// A Complete carries at most MaxResultBytes of result and a batch
		// at most BatchMaxBytes; grpc-go's own default (4 MiB) would let a
		// caller make the server buffer more than either.
		grpc.MaxRecvMsgSize(maxRequest),
		// Calls run on a pool of goroutines that keep their grown stacks,
		// instead of a new goroutine per call whose stack grows again
		// through the handler chain. Past streamWorkers concurrent calls
		// grpc-go starts goroutines as before.
		grpc.NumStreamWorkers(streamWorkers),
		// Fixed flow-control windows, each stream's large enough for the
		// largest request in one flight. grpc-go's default, a window it
		// grows by estimating the connection's bandwidth-delay product,
		// sends a PING after every request it receives and reads its ack:
		// two more syscalls and a wake-up per call, for calls that fit in
		// the first window anyway. Fixed windows also bound what one
		// connection can make the server buffer, where the estimate lets
		// it grow to 16 MiB.
		grpc.InitialWindowSize(streamWindow(maxRequest)),
		grpc.InitialConnWindowSize(connWindow(svc.MaxResultBytes+messageHeadroom, maxRequest)),
		// An answer waiting for its client to read it holds its own size,
		// not a pooled buffer of 1 MiB (protoCodec).
		grpc.ForceServerCodecV2(newProtoCodec()),
		grpc.ChainUnaryInterceptor(unary...),
	}
	if tp := cfg.Tracing; tp != nil {
		// A stats handler, not an interceptor: its span starts before the
		// interceptor chain runs, so that the log line and the store's
		// spans find it in the context. Health probes, every few seconds
		// from every load balancer, would bury the traces worth reading;
		// the Prometheus metrics already count every call.
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(propagation.TraceContext{}),
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
		)))
	}
	var stream []grpc.StreamServerInterceptor
	if cfg.Metrics != nil {
		stream = append(stream, cfg.Metrics.GRPC.StreamServerInterceptor())
	}
	if cfg.Tenants != nil {
		stream = append(stream, middleware.StreamAuth(cfg.Tenants))
	}
	opts = append(opts, grpc.ChainStreamInterceptor(stream...))
	return append(opts, cfg.ConnLimits.ServerOptions()...)
}

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
