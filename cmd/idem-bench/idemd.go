package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store/postgres"
)

// localIdemd is idemd's service run in this process for --start-idemd: the
// store, service, interceptor chain (metrics and logging included), health
// watch and sweeper wired as `idemd serve` wires them with its defaults (no
// tenants, no TLS, no HTTP endpoint), on a loopback port, over a schema of
// its own that close drops. Running it in-process is what lets --cpuprofile
// and --memprofile see the service.
type localIdemd struct {
	addr    string
	pool    *pgxpool.Pool
	grpc    *grpc.Server
	baseURL string
	schema  string
	stopSwp context.CancelFunc
	swpDone chan struct{}
	// healthDone closes when the health watch, stopped with the sweeper,
	// has returned.
	healthDone chan struct{}
	serveErr   chan error
}

// idemdHealthInterval is idemd's --health-interval default.
const idemdHealthInterval = 5 * time.Second

// startIdemd starts the service over a new schema in baseURL. poolMaxConns,
// when positive, is added to the URL as pool_max_conns, as an operator would;
// otherwise the pool is sized as idemd sizes it.
func startIdemd(ctx context.Context, baseURL, schema string, poolMaxConns int32, sweepInterval time.Duration, logger *slog.Logger) (_ *localIdemd, err error) {
	if err := createSchema(ctx, baseURL, schema); err != nil {
		return nil, err
	}
	d := &localIdemd{baseURL: baseURL, schema: schema}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close(context.WithoutCancel(ctx)))
		}
	}()
	schemaURL, err := withQuery(baseURL, "search_path", schema)
	if err != nil {
		return d, fmt.Errorf("--database-url: %w", err)
	}
	if poolMaxConns > 0 {
		if schemaURL, err = withQuery(schemaURL, "pool_max_conns", strconv.Itoa(int(poolMaxConns))); err != nil {
			return d, fmt.Errorf("--database-url: %w", err)
		}
	}
	// The same calls as idemd serve: Connect, Migrate, New, NewService,
	// NewGRPCServer, NewSweeper.
	if d.pool, err = postgres.Connect(ctx, schemaURL); err != nil {
		return d, fmt.Errorf("idemd: cannot reach the database at %s: %w", redactURL(baseURL), err)
	}
	if _, err := postgres.Migrate(ctx, d.pool); err != nil {
		return d, fmt.Errorf("idemd: migrate: %w", err)
	}
	st := postgres.New(d.pool)
	metrics := server.NewMetrics()
	svc := server.NewService(st, server.Config{Metrics: metrics}, logger)
	var health *health.Server
	d.grpc, health = server.NewGRPCServer(svc, logger)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return d, fmt.Errorf("idemd: listen: %w", err)
	}
	d.addr = lis.Addr().String()
	d.serveErr = make(chan error, 1)
	go func() { d.serveErr <- d.grpc.Serve(lis) }()

	swpCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.stopSwp, d.swpDone = stop, make(chan struct{})
	go func() {
		defer close(d.swpDone)
		if sweepInterval > 0 {
			sw := server.NewSweeper(st, logger)
			sw.Interval = sweepInterval
			sw.Metrics = metrics
			sw.Run(swpCtx)
		}
	}()
	d.healthDone = make(chan struct{})
	go func() {
		defer close(d.healthDone)
		server.WatchHealth(swpCtx, st, health, idemdHealthInterval, logger)
	}()
	return d, nil
}

// maxConns is the size of the started idemd's pool, for the report.
func (d *localIdemd) maxConns() int32 { return d.pool.Config().MaxConns }

// close stops the server and the sweeper, closes the pool and drops the
// schema.
func (d *localIdemd) close(ctx context.Context) error {
	if d.grpc != nil {
		d.grpc.Stop()
		<-d.serveErr
	}
	if d.stopSwp != nil {
		d.stopSwp()
		<-d.swpDone
		<-d.healthDone
	}
	if d.pool != nil {
		d.pool.Close()
	}
	return dropSchema(ctx, d.baseURL, d.schema)
}

func createSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("cannot reach the database at %s: %w", redactURL(url), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	return nil
}

// newIdemdLogger is idemd's default logger (text on stderr) at level.
func newIdemdLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// withQuery returns raw with the query parameter key set to value.
func withQuery(raw, key, value string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redactURL hides a password in a database URL before it is printed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(a database URL that does not parse)"
	}
	return u.Redacted()
}
