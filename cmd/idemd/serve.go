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
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

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
	tp, err := tracing.FromEnv(ctx, os.Getenv, buildinfo.Read(version, commit).Version)
	if err != nil {
		return err
	}
	var tracer trace.TracerProvider // stays a nil interface when tracing is off
	flushTraces := func() {}
	if tp != nil {
		tracer = tp
		var once sync.Once
		flushTraces = func() {
			once.Do(func() {
				flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				if err := tp.Shutdown(flushCtx); err != nil {
					logger.Warn("could not send the last spans to the trace collector", "error", err)
				}
			})
		}
		defer flushTraces() // when Run returns before serving
	}

	c.databaseFlags.listenURL = c.DatabaseListenURL
	db, err := c.open(ctx, tracer)
	if err != nil {
		return err
	}
	defer db.Close()
	db.poolerNotes(ctx, logger)
	c.coalesce(db, tracer)
	if db.implicit {
		logger.Info("no --database-url: running on the embedded SQLite store, for one idemd on one machine; "+
			"PostgreSQL is the production store (--database-url postgres://…)", "file", db.name)
	}
	if c.Migrate {
		applied, err := db.Migrate(ctx, logger)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if len(applied) > 0 {
			logger.Info("applied migrations", "versions", applied)
		}
	} else if err := db.checkSchema(ctx, "run `idemd migrate` or drop --no-migrate"); err != nil {
		return err
	}

	lis, err := listen(c.Listen, "--listen", "IDEM_LISTEN")
	if err != nil {
		return err
	}

	var httpLis net.Listener
	if c.HTTPListen != "" {
		if httpLis, err = listen(c.HTTPListen, "--http-listen", "IDEM_HTTP_LISTEN"); err != nil {
			lis.Close()
			return err
		}
	}

	jsonAPI, err := c.listenJSON()
	if err != nil {
		lis.Close()
		if httpLis != nil {
			httpLis.Close()
		}
		return err
	}

	st := db.Backend
	metrics := server.NewMetrics()
	metrics.LimitNamespaceLabels(c.MetricsNamespaces)
	metrics.Registry.MustRegister(db.Collectors()...)
	svc := server.NewService(st, server.Config{
		Metrics:             metrics,
		DefaultLeaseTTL:     c.DefaultLeaseTTL,
		DefaultRetention:    c.DefaultRetention,
		MaxResultBytes:      c.MaxResultBytes,
		Tenants:             sec.tenants,
		Policies:            sec.policies,
		ConnLimits:          c.connFlags.limits(),
		Tracing:             tracer,
		MaxWaiters:          c.MaxWaiters,
		MaxWaitersPerTenant: c.MaxWaitersPerTenant,
		BatchMaxItems:       c.BatchMaxItems,
		BatchMaxBytes:       c.BatchMaxBytes,
	}, logger)
	grpcServer, healthServer := server.NewGRPCServer(svc, logger, sec.opts...)
	var consoleOpts *console.Options
	if c.Console {
		consoleOpts = &console.Options{Authenticated: sec.tenants != nil || c.ClientCA != "", ClientCertificates: c.ClientCA != ""}
	}
	if err := jsonAPI.serve(svc, &c.securityFlags, consoleOpts, logger); err != nil {
		lis.Close()
		if httpLis != nil {
			httpLis.Close()
		}
		return err
	}

	var httpServer *http.Server
	httpAddr := ""
	if httpLis != nil {
		httpServer = &http.Server{Handler: newHTTPHandler(metrics.Registry, db.ready, c.Pprof), ReadHeaderTimeout: 5 * time.Second}
		httpAddr = listenAddr(c.HTTPListen, httpLis)
	}
	build := buildinfo.Read(version, commit)
	if c.Config != "" {
		logger.Info("config loaded", "file", c.Config, "tenants", sec.configTenants)
	}
	logger.Info("idemd serving", "listen", listenAddr(c.Listen, lis), "http_listen", httpAddr, "json_listen", jsonAPI.addr(), "console_url", jsonAPI.consoleURL(), "version", build.Version,
		"commit", build.Commit, "database", db.name, "sweep_interval", c.SweepInterval, "tracing", tp != nil, "gomaxprocs", runtime.GOMAXPROCS(0))
	if u := jsonAPI.consoleURL(); u != "" {
		if consoleOpts.Authenticated {
			logger.Info("operator console: open it in a browser and sign in with the token of a tenant with admin: true or operator: true", "url", u)
		} else {
			logger.Info("operator console: open it in a browser; without authentication anyone who reaches the port can read, resolve and delete every record there", "url", u)
		}
	}
	for _, w := range sec.warnings {
		logger.Warn(w)
	}

	// Everything runs until a signal ends ctx or the gRPC server fails. The
	// sweeper and the health watcher have a context of their own that ends
	// only once the gRPC server has drained, so they keep working meanwhile.
	g, gctx := errgroup.WithContext(ctx)
	background, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	g.Go(func() error {
		if err := grpcServer.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	if httpServer != nil {
		g.Go(func() error {
			if err := httpServer.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
				logger.Error("HTTP listener stopped", "error", err) // the gRPC API goes on
			}
			return nil
		})
	}
	if c.SweepInterval > 0 {
		sw := maintenance.NewSweeper(st, maintenance.SweeperConfig{Interval: c.SweepInterval, Duty: c.SweepDuty,
			Metrics: metrics, CountEvery: c.CountInterval, Logger: logger})
		g.Go(func() error { sw.Run(background); return nil })
	}
	g.Go(func() error {
		svc.WatchHealth(background, c.HealthInterval)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		c.drain(svc, grpcServer, healthServer, jsonAPI, logger)
		stopBackground()
		if httpServer != nil {
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = httpServer.Shutdown(shutdownCtx)
		}
		// Every RPC has ended, and with it its spans: send what the
		// exporter still holds.
		flushTraces()
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	logger.Info("idemd stopped")
	return nil
}

// drain stops the gRPC server and the JSON API: health answers NOT_SERVING
// at once, in-flight RPCs get --shutdown-timeout to finish, and whatever is
// left is cut off. Waiting Claims answer at once with what they know
// (IN_PROGRESS) rather than hold the drain up. The two listeners drain side
// by side, each on a gRPC server of its own.
func (c *serveCmd) drain(svc *server.Service, grpcServer *grpc.Server, healthServer *health.Server, api *jsonAPI, logger *slog.Logger) {
	logger.Info("shutting down: draining in-flight RPCs", "timeout", c.ShutdownTimeout)
	healthServer.Shutdown() // NOT_SERVING from now on, whatever the watcher last saw
	svc.EndWaits()
	ctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	jsonDone := make(chan struct{})
	go func() {
		api.shutdown(ctx)
		close(jsonDone)
	}()
	stopped := make(chan struct{})
	go func() {
		grpcServer.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		logger.Warn("shutdown timeout passed: cutting off the remaining RPCs")
		grpcServer.Stop()
		<-stopped
	}
	<-jsonDone
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
