package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/idemhq/idem/console"
	"github.com/idemhq/idem/internal/buildinfo"
	"github.com/idemhq/idem/internal/maintenance"
	"github.com/idemhq/idem/internal/tracing"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server"
)

type serveCmd struct {
	databaseFlags
	coalesceFlags
	logFlags
	securityFlags
	jsonFlags
	connFlags
	DatabaseListenURL   string        `name:"database-listen-url" env:"IDEM_DATABASE_LISTEN_URL" placeholder:"URL" help:"A direct postgres:// connection to the primary, past the pooler, for the one connection per idemd that LISTENs for the changes that wake waiting Claims (ClaimRequest.wait); a multi-host URL with target_session_attrs=read-write follows a failover. Without it that connection is made like the others, and with --database-pooler=transaction there is none: waiting Claims are woken by polling."`
	Listen              string        `default:"127.0.0.1:7070" env:"IDEM_LISTEN" help:"Address the gRPC API listens on."`
	SweepInterval       time.Duration `default:"${sweep_interval}" env:"IDEM_SWEEP_INTERVAL" help:"Time between sweeper passes; 0 turns this replica's sweeper off."`
	CountInterval       time.Duration `default:"${count_interval}" env:"IDEM_COUNT_INTERVAL" help:"How often the sweeper counts the records per state for the idem_records gauge (a full read of the table)."`
	SweepDuty           float64       `default:"${sweep_duty}" env:"IDEM_SWEEP_DUTY" help:"Share of its time a sweeper pass with a backlog spends in statements (0.01 to 1): after each full batch it rests until the share is kept, at most --sweep-interval; 1 runs the batches back to back."`
	DefaultLeaseTTL     time.Duration `default:"5m" env:"IDEM_DEFAULT_LEASE_TTL" help:"Lease of a Claim or Heartbeat that sends none (1s to 24h)."`
	DefaultRetention    time.Duration `default:"24h" env:"IDEM_DEFAULT_RETENTION" help:"How long a record is kept after it leaves PROCESSING when the Claim sends no retention (1m to 90 days)."`
	MaxResultBytes      int           `default:"65536" env:"IDEM_MAX_RESULT_BYTES" help:"Largest result Complete accepts, in bytes (1 to 16 MiB)."`
	MaxWaiters          int           `default:"10000" env:"IDEM_MAX_WAITERS" help:"Most Claims waiting at once (ClaimRequest.wait) on this replica, in all; a Claim that would wait beyond it answers IN_PROGRESS at once. Waiting Claims hold no database connection."`
	MaxWaitersPerTenant int           `default:"1000" env:"IDEM_MAX_WAITERS_PER_TENANT" help:"Most Claims of one tenant waiting at once on this replica (without a config file, of the one default tenant)."`
	BatchMaxItems       int           `default:"500" env:"IDEM_BATCH_MAX_ITEMS" help:"Most items one batch call (BatchClaim, BatchComplete, …) may carry (1 to 10000); more is INVALID_BATCH_SIZE."`
	BatchMaxBytes       int           `default:"4194304" env:"IDEM_BATCH_MAX_BYTES" help:"Largest batch call, in bytes of protobuf (64 KiB to 64 MiB); a larger one is REQUEST_TOO_LARGE. The gRPC server and the HTTP/JSON API read requests this large."`
	Migrate             bool          `default:"true" negatable:"" env:"IDEM_MIGRATE" help:"Apply pending PostgreSQL migrations on start (the SQLite store always migrates itself when it opens)."`
	ShutdownTimeout     time.Duration `default:"30s" env:"IDEM_SHUTDOWN_TIMEOUT" help:"How long shutdown waits for in-flight RPCs before cutting them off."`
	HTTPListen          string        `name:"http-listen" default:"127.0.0.1:7071" env:"IDEM_HTTP_LISTEN" help:"Address serving /metrics, /healthz and /readyz over HTTP; empty turns it off."`
	HealthInterval      time.Duration `default:"5s" env:"IDEM_HEALTH_INTERVAL" help:"How often the gRPC health status is checked against the database; between checks it follows what the calls see."`
	MetricsNamespaces   int           `default:"100" env:"IDEM_METRICS_NAMESPACES" help:"How many namespaces idem_claims_total labels besides those the config names literally: the first ones claimed; the rest count as _other (0 to 10000)."`
	Pprof               bool          `env:"IDEM_PPROF" help:"Also serve Go's profiler (net/http/pprof) under /debug/pprof/ on --http-listen, to profile idemd under load. Off by default: profiles expose the process's internals."`
}

// The bounds of --batch-max-items and --batch-max-bytes: a batch is one
// request the server holds whole in memory, with a goroutine per key.
const (
	maxBatchItems = 10000
	minBatchBytes = 64 << 10
	maxBatchBytes = 64 << 20
)

func (c *serveCmd) validate() error {
	if err := durationFlag("default-lease-ttl", c.DefaultLeaseTTL, limits.MinLeaseTTL, limits.MaxLeaseTTL); err != nil {
		return err
	}
	if err := durationFlag("default-retention", c.DefaultRetention, limits.MinRetention, limits.MaxRetention); err != nil {
		return err
	}
	if c.MaxResultBytes < 1 || c.MaxResultBytes > limits.ResultBytesCeiling {
		return fmt.Errorf("--max-result-bytes is %d; it must be between 1 and %d", c.MaxResultBytes, limits.ResultBytesCeiling)
	}
	if c.MaxWaiters < 1 {
		return fmt.Errorf("--max-waiters is %d; it must be at least 1", c.MaxWaiters)
	}
	if c.MaxWaitersPerTenant < 1 {
		return fmt.Errorf("--max-waiters-per-tenant is %d; it must be at least 1", c.MaxWaitersPerTenant)
	}
	if c.BatchMaxItems < 1 || c.BatchMaxItems > maxBatchItems {
		return fmt.Errorf("--batch-max-items is %d; it must be between 1 and %d", c.BatchMaxItems, maxBatchItems)
	}
	if c.BatchMaxBytes < minBatchBytes || c.BatchMaxBytes > maxBatchBytes {
		return fmt.Errorf("--batch-max-bytes is %d; it must be between %d and %d", c.BatchMaxBytes, minBatchBytes, maxBatchBytes)
	}
	if c.MetricsNamespaces < 0 || c.MetricsNamespaces > 10000 {
		return fmt.Errorf("--metrics-namespaces is %d; it must be between 0 and 10000", c.MetricsNamespaces)
	}
	if c.HealthInterval <= 0 {
		return fmt.Errorf("--health-interval is %s; it must be positive", c.HealthInterval)
	}
	if c.CountInterval <= 0 {
		return fmt.Errorf("--count-interval is %s; it must be positive", c.CountInterval)
	}
	if c.SweepInterval < 0 {
		return fmt.Errorf("--sweep-interval is %s; it must be 0 (off) or positive", c.SweepInterval)
	}
	if err := checkDuty("--sweep-duty", c.SweepDuty); err != nil {
		return err
	}
	if err := c.jsonFlags.validate(&c.securityFlags); err != nil {
		return err
	}
	if err := c.connFlags.validate(); err != nil {
		return err
	}
	if err := c.coalesceFlags.validate(); err != nil {
		return err
	}
	return c.securityFlags.validate(c.Listen)
}

// Run serves until a signal ends ctx: it opens the store, listens, builds
// the server and serves it, then drains it.
func (c *serveCmd) Run(ctx context.Context) error {
	if err := c.validate(); err != nil {
		return err
	}
	logger := c.logger(os.Stderr)
	sec, err := c.securityFlags.load(c.Listen, c.MaxResultBytes)
	if err != nil {
		return err
	}
	// Tracing comes first: the store's pool is made with its hook or
	// without.
	tracer, err := startTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer tracer.flush() // when Run returns before serving
	db, err := c.openDatabase(ctx, tracer.provider, logger)
	if err != nil {
		return err
	}
	defer db.Close()
	lis, err := c.listen()
	if err != nil {
		return err
	}
	defer lis.close()
	metrics := server.NewMetrics()
	metrics.LimitNamespaceLabels(c.MetricsNamespaces)
	metrics.Registry.MustRegister(db.Collectors()...)
	srv, err := c.newServer(db, sec, tracer.provider, metrics, logger)
	if err != nil {
		return err
	}
	c.logServing(lis, db, sec, tracer.provider != nil, logger)
	if err := c.serve(ctx, srv, lis, db, metrics, logger, tracer.flush); err != nil {
		return err
	}
	logger.Info("idemd stopped")
	return nil
}

// tracer is the trace exporter of OTEL_EXPORTER_OTLP_ENDPOINT, if set.
type tracer struct {
	provider trace.TracerProvider // stays a nil interface when tracing is off
	// flush sends the spans the exporter still holds, once.
	flush func()
}

func startTracing(ctx context.Context, logger *slog.Logger) (*tracer, error) {
	tp, err := tracing.FromEnv(ctx, os.Getenv, buildinfo.Read(version, commit).Version)
	if err != nil || tp == nil {
		return &tracer{flush: func() {}}, err
	}
	var once sync.Once
	return &tracer{provider: tp, flush: func() {
		once.Do(func() {
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(flushCtx); err != nil {
				logger.Warn("could not send the last spans to the trace collector", "error", err)
			}
		})
	}}, nil
}

// openDatabase opens the store and brings its schema up to date, or checks
// that it is, with --no-migrate.
func (c *serveCmd) openDatabase(ctx context.Context, tp trace.TracerProvider, logger *slog.Logger) (*database, error) {
	c.databaseFlags.listenURL = c.DatabaseListenURL
	db, err := c.open(ctx, tp)
	if err != nil {
		return nil, err
	}
	db.poolerNotes(ctx, logger)
	c.coalesce(db, tp)
	if db.implicit {
		logger.Info("no --database-url: running on the embedded SQLite store, for one idemd on one machine; "+
			"PostgreSQL is the production store (--database-url postgres://…)", "file", db.name)
	}
	if !c.Migrate {
		err = db.checkSchema(ctx, "run `idemd migrate` or drop --no-migrate")
	} else if applied, merr := db.Migrate(ctx, logger); merr != nil {
		err = fmt.Errorf("migrate: %w", merr)
	} else if len(applied) > 0 {
		logger.Info("applied migrations", "versions", applied)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// listeners are serve's: gRPC, and HTTP (metrics, health) and the
// HTTP/JSON API unless their flags are empty. They open before serving
// starts, so that an address in use fails idemd's start.
type listeners struct {
	grpc, http, json net.Listener
}

func (c *serveCmd) listen() (*listeners, error) {
	lis := &listeners{}
	var err error
	if lis.grpc, err = listen(c.Listen, "--listen", "IDEM_LISTEN"); err == nil && c.HTTPListen != "" {
		lis.http, err = listen(c.HTTPListen, "--http-listen", "IDEM_HTTP_LISTEN")
	}
	if err == nil && c.JSONListen != "" {
		lis.json, err = listen(c.JSONListen, "--json-listen", "IDEM_JSON_LISTEN")
	}
	if err != nil {
		lis.close()
		return nil, err
	}
	return lis, nil
}

// close closes the listeners the servers have not.
func (l *listeners) close() {
	for _, lis := range []net.Listener{l.grpc, l.http, l.json} {
		if lis != nil {
			_ = lis.Close()
		}
	}
}

// consoleOptions are the console's, nil with --no-console.
func (c *serveCmd) consoleOptions(sec *security) *console.Options {
	if !c.Console {
		return nil
	}
	return &console.Options{Authenticated: sec.tenants != nil || c.ClientCA != "", ClientCertificates: c.ClientCA != ""}
}

// newServer builds the server the flags describe.
func (c *serveCmd) newServer(db *database, sec *security, tp trace.TracerProvider, metrics *server.Metrics, logger *slog.Logger) (*server.Server, error) {
	jsonOpts, err := c.jsonFlags.jsonOptions(&c.securityFlags, c.consoleOptions(sec))
	if err != nil {
		return nil, err
	}
	return server.New(server.Options{Store: db.Backend, Logger: logger, GRPCOptions: sec.opts, JSON: jsonOpts, Config: server.Config{
		Metrics:             metrics,
		DefaultLeaseTTL:     c.DefaultLeaseTTL,
		DefaultRetention:    c.DefaultRetention,
		MaxResultBytes:      c.MaxResultBytes,
		Tenants:             sec.tenants,
		Policies:            sec.policies,
		ConnLimits:          c.connFlags.limits(),
		Tracing:             tp,
		MaxWaiters:          c.MaxWaiters,
		MaxWaitersPerTenant: c.MaxWaitersPerTenant,
		BatchMaxItems:       c.BatchMaxItems,
		BatchMaxBytes:       c.BatchMaxBytes,
	}})
}

// logServing says where idemd serves, and what an operator should know.
func (c *serveCmd) logServing(lis *listeners, db *database, sec *security, tracing bool, logger *slog.Logger) {
	build := buildinfo.Read(version, commit)
	if c.Config != "" {
		logger.Info("config loaded", "file", c.Config, "tenants", sec.configTenants)
	}
	addr := func(flag string, l net.Listener) string {
		if l == nil {
			return ""
		}
		return listenAddr(flag, l)
	}
	consoleURL := c.consoleURL(lis.json, c.TLSCert != "")
	logger.Info("idemd serving", "listen", addr(c.Listen, lis.grpc), "http_listen", addr(c.HTTPListen, lis.http), "json_listen", addr(c.JSONListen, lis.json),
		"console_url", consoleURL, "version", build.Version, "commit", build.Commit, "database", db.name, "sweep_interval", c.SweepInterval,
		"tracing", tracing, "gomaxprocs", runtime.GOMAXPROCS(0))
	switch {
	case consoleURL != "" && c.consoleOptions(sec).Authenticated:
		logger.Info("operator console: open it in a browser and sign in with the token of a tenant with admin: true or operator: true", "url", consoleURL)
	case consoleURL != "":
		logger.Info("operator console: open it in a browser; without authentication anyone who reaches the port can read, resolve and delete every record there", "url", consoleURL)
	}
	if c.Config != "" && c.TLSCert == "" && lis.json != nil && !isLoopback(lis.json.Addr().String()) {
		logger.Warn("bearer tokens cross the network in plaintext on --json-listen: pass --tls-cert and --tls-key, or terminate TLS in front of idemd")
	}
	for _, w := range sec.warnings {
		logger.Warn(w)
	}
}

// serve runs everything until a signal ends ctx or the gRPC server fails,
// then drains the server: in-flight calls get --shutdown-timeout to finish
// and whatever is left is cut off. The sweeper and the health watcher run
// on a context of their own that ends only once the server has drained,
// so they keep working meanwhile.
func (c *serveCmd) serve(ctx context.Context, srv *server.Server, lis *listeners, db *database, metrics *server.Metrics, logger *slog.Logger, flushTraces func()) error {
	g, gctx := errgroup.WithContext(ctx)
	background, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	g.Go(func() error {
		if err := srv.Serve(lis.grpc); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	if lis.json != nil {
		g.Go(func() error {
			if err := srv.ServeJSON(lis.json); err != nil {
				logger.Error("HTTP/JSON listener stopped", "error", err) // the gRPC API goes on
			}
			return nil
		})
	}
	var httpServer *http.Server
	if lis.http != nil {
		httpServer = &http.Server{Handler: newHTTPHandler(metrics.Registry, db.ready, c.Pprof), ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := httpServer.Serve(lis.http); !errors.Is(err, http.ErrServerClosed) {
				logger.Error("HTTP listener stopped", "error", err) // the gRPC API goes on
			}
			return nil
		})
	}
	if c.SweepInterval > 0 {
		sw := maintenance.NewSweeper(db.Backend, maintenance.SweeperConfig{Interval: c.SweepInterval, Duty: c.SweepDuty,
			Metrics: metrics, CountEvery: c.CountInterval, Logger: logger})
		g.Go(func() error { sw.Run(background); return nil })
	}
	g.Go(func() error { srv.WatchHealth(background, c.HealthInterval); return nil })
	g.Go(func() error {
		<-gctx.Done()
		logger.Info("shutting down: draining in-flight RPCs", "timeout", c.ShutdownTimeout)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx) // it says what it cut off
		stopBackground()
		if httpServer != nil {
			httpCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = httpServer.Shutdown(httpCtx)
		}
		// Every RPC has ended, and with it its spans: send what the
		// exporter still holds.
		flushTraces()
		return nil
	})
	return g.Wait()
}

// listen opens a TCP listener on addr, the value of flag or of the
// environment variable env: an address in use says which of them moves it.
func listen(addr, flag, env string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	switch {
	case err == nil:
		return lis, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("listen on %s (%s): the address is in use, by another idemd or another program; stop it, "+
			"or give idemd another address with %s or %s (port 0 lets the system choose one)", addr, flag, flag, env)
	}
	return nil, fmt.Errorf("listen on %s (%s or %s): %w", addr, flag, env, err)
}

// listenAddr is the address lis listens on as the flag wrote it, with the
// port the system chose for port 0: Go reports a listener on 0.0.0.0 as
// [::], which is not what the operator asked for.
func listenAddr(flag string, lis net.Listener) string {
	host, _, err := net.SplitHostPort(flag)
	_, port, err2 := net.SplitHostPort(lis.Addr().String())
	if err != nil || err2 != nil {
		return lis.Addr().String()
	}
	return net.JoinHostPort(host, port)
}

// redactURL hides a password in a database URL before it is logged.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(a database URL that does not parse)"
	}
	return u.Redacted()
}
