package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/migrate"
	"github.com/idemhq/idem/store/postgres/migrations"
)

// Pooler names what stands between idem and PostgreSQL: how the store's
// settings reach the server, how its statements are sent, where it LISTENs.
type Pooler string

const (
	// NoPooler: idem's connections are sessions of their own: the settings
	// go as startup parameters, statements are prepared once.
	NoPooler Pooler = "none"
	// SessionPooler: PgBouncer's pool_mode = session and the like, which
	// refuse most startup parameters: the settings are SET instead.
	SessionPooler Pooler = "session"
	// TransactionPooler: PgBouncer's pool_mode = transaction and the like,
	// where nothing may live in a session: no startup parameters or SET
	// (statement_timeout belongs on the role), no named statements, and the
	// listener past the pooler (Options.ListenURL) or polling.
	TransactionPooler Pooler = "transaction"
)

// ParsePooler returns the Pooler s names; "" is NoPooler.
func ParsePooler(s string) (Pooler, error) {
	if s == "" {
		return NoPooler, nil
	}
	for _, p := range []Pooler{NoPooler, SessionPooler, TransactionPooler} {
		if strings.EqualFold(s, string(p)) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pooler %q: want one of none, session, transaction", s)
}

// Options are how the store reaches its database beyond the URL.
type Options struct {
	// Pooler is what stands in front of PostgreSQL; NoPooler by default.
	Pooler Pooler
	// ListenURL, when set, is the listener's own connection string: with
	// TransactionPooler, a direct connection to the primary past the pooler.
	// Empty: the pool's configuration, or with TransactionPooler, polling.
	ListenURL string
}

// configure adjusts cfg, parsed from a URL, for pooler.
func configure(cfg *pgxpool.Config, pooler Pooler) error {
	params := cfg.ConnConfig.RuntimeParams
	settings := map[string]string{}
	for name, value := range sessionSettings() {
		if _, ok := params[name]; !ok {
			settings[name] = value
		}
	}
	switch pooler {
	case NoPooler, "":
		for name, value := range settings {
			params[name] = value
		}
	case SessionPooler:
		if len(settings) == 0 {
			return nil
		}
		var sql strings.Builder
		for _, name := range []string{"statement_timeout", "plan_cache_mode"} {
			if value, ok := settings[name]; ok {
				fmt.Fprintf(&sql, "SET %s = %s;", name, migrate.QuoteLiteral(value))
			}
		}
		set := sql.String()
		next := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, set, pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("set the session's settings: %w", err)
			}
			if next != nil {
				return next(ctx, conn)
			}
			return nil
		}
	case TransactionPooler:
		// A named prepared statement would outlive the transaction that
		// prepared it on a server connection the next one may not get.
		if cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	default:
		return fmt.Errorf("pooler %q: want one of none, session, transaction", pooler)
	}
	return nil
}

// sessionSettings are the settings every connection of the store gets
// unless its URL sets them (see connectConfig).
func sessionSettings() map[string]string {
	return map[string]string{
		"statement_timeout": fmt.Sprint(StatementTimeout.Milliseconds()),
		"plan_cache_mode":   "force_generic_plan",
	}
}

// ConnectWith is Connect for a database behind pooler.
func ConnectWith(ctx context.Context, url string, pooler Pooler) (*pgxpool.Pool, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	return connectConfig(ctx, cfg, pooler)
}

// NewWith returns a Store on pool, made by ConnectWith with opts.Pooler,
// whose listener follows opts.
func NewWith(pool *pgxpool.Pool, opts Options) (*Store, error) {
	s := New(pool)
	if err := s.feedFrom(opts); err != nil {
		return nil, err
	}
	return s, nil
}

// feedFrom sets how the store hears of changes, before any waits.
func (s *Store) feedFrom(opts Options) error {
	switch {
	case opts.ListenURL != "":
		cfg, err := pgx.ParseConfig(opts.ListenURL)
		if err != nil {
			return fmt.Errorf("listen URL: %w", err)
		}
		s.listen.Config = cfg
	case opts.Pooler == TransactionPooler:
		s.listen.Poll = s.poll
	}
	return nil
}

// StatementTimeoutSetting returns the statement_timeout the store's
// connections have, as SHOW prints it ("0" for none).
func (b *Backend) StatementTimeoutSetting(ctx context.Context) (string, error) {
	var v string
	err := b.pool.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&v)
	return v, interpretError(err)
}

var _ store.Backend = (*Backend)(nil)

// Backend is a Store that owns its pool: what idemd runs on.
type Backend struct {
	*Store
	pool *pgxpool.Pool
}

// OpenBackend connects to url (see Connect) and returns the Backend on that
// pool, its schema as it is. With a tracer provider the store makes spans
// of statements (queryTracer); with nil it installs no hook at all.
func OpenBackend(ctx context.Context, url string, tp trace.TracerProvider) (*Backend, error) {
	return OpenBackendWith(ctx, url, tp, Options{})
}

// OpenBackendWith is OpenBackend for a database reached as opts says.
func OpenBackendWith(ctx context.Context, url string, tp trace.TracerProvider, opts Options) (*Backend, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	if tp != nil {
		cfg.ConnConfig.Tracer = newQueryTracer(tp)
	}
	pool, err := connectConfig(ctx, cfg, opts.Pooler)
	if err != nil {
		return nil, err
	}
	s := New(pool)
	if err := s.feedFrom(opts); err != nil {
		pool.Close()
		return nil, err
	}
	return &Backend{Store: s, pool: pool}, nil
}

// Migrate applies the pending migrations of the schema
// (store/postgres/migrations) on pool, logging to slog's default logger.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	applied, err := migrations.Migrate(ctx, pool, slog.Default())
	return applied, interpretError(err)
}

// LatestVersion is the schema version this binary expects.
func LatestVersion() int { return migrations.Latest() }

// Migrate implements store.Backend (migrations.Migrate).
func (b *Backend) Migrate(ctx context.Context, logger *slog.Logger) ([]int, error) {
	applied, err := migrations.Migrate(ctx, b.pool, logger)
	return applied, interpretError(err)
}

// MigrationScript is the SQL Migrate would run now (migrations.Script).
func (b *Backend) MigrationScript(ctx context.Context) (migrate.Script, error) {
	script, err := migrations.Script(ctx, b.pool)
	return script, interpretError(err)
}

// SchemaVersion implements store.Backend.
func (b *Backend) SchemaVersion(ctx context.Context) (int, error) {
	v, err := migrations.SchemaVersion(ctx, b.pool)
	return v, interpretError(err)
}

// LatestVersion implements store.Backend.
func (b *Backend) LatestVersion() int { return LatestVersion() }

// Close implements store.Backend: the listener and the pool.
func (b *Backend) Close() error {
	b.Store.Close()
	b.pool.Close()
	return nil
}

// Collectors implements store.Backend: the pool's statistics.
func (b *Backend) Collectors() []prometheus.Collector {
	pool := b.pool
	gauge := func(name, help string, f func(*pgxpool.Stat) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(pool.Stat()) })
	}
	counter := func(name, help string, f func(*pgxpool.Stat) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(pool.Stat()) })
	}
	return []prometheus.Collector{
		gauge("idem_db_pool_max_conns", "Largest number of connections the pool opens.",
			func(s *pgxpool.Stat) float64 { return float64(s.MaxConns()) }),
		gauge("idem_db_pool_total_conns", "Connections open now.",
			func(s *pgxpool.Stat) float64 { return float64(s.TotalConns()) }),
		gauge("idem_db_pool_acquired_conns", "Connections in use now.",
			func(s *pgxpool.Stat) float64 { return float64(s.AcquiredConns()) }),
		gauge("idem_db_pool_idle_conns", "Connections idle now.",
			func(s *pgxpool.Stat) float64 { return float64(s.IdleConns()) }),
		counter("idem_db_pool_acquires_total", "Connections acquired from the pool.",
			func(s *pgxpool.Stat) float64 { return float64(s.AcquireCount()) }),
		counter("idem_db_pool_empty_acquires_total", "Acquires that had to wait because no connection was idle: a sign the pool is too small.",
			func(s *pgxpool.Stat) float64 { return float64(s.EmptyAcquireCount()) }),
		counter("idem_db_pool_acquire_wait_seconds_total", "Time spent waiting for a connection.",
			func(s *pgxpool.Stat) float64 { return s.AcquireDuration().Seconds() }),
	}
}

// Connect parses url, opens a pool and checks that the database answers
// (store.ErrUnavailable when not). The URL may set search_path, to keep
// idem in its own schema, and pool_max_conns (DefaultMaxConns).
func Connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return ConnectWith(ctx, url, NoPooler)
}

// parseConfig is Connect's pool configuration for url.
func parseConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	if !setsMaxConns(url) {
		cfg.MaxConns = DefaultMaxConns()
	}
	return cfg, nil
}

// DefaultMaxConns is the size of Connect's pool when the URL does not set
// pool_max_conns: 16, or the CPUs when more, since a call mostly waits for
// its commit's WAL flush, which more connections in flight share.
func DefaultMaxConns() int32 {
	return int32(max(16, runtime.NumCPU()))
}

// setsMaxConns reports whether the connection string sets pool_max_conns.
func setsMaxConns(connString string) bool {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return false
	}
	_, ok := cfg.RuntimeParams["pool_max_conns"]
	return ok
}

// connectConfig opens a pool on cfg, for a database behind pooler, whose
// connections get StatementTimeout and generic plans unless cfg sets them:
// the statements on records find their rows by primary key, the plan they
// would get anyway, without planning each execution.
func connectConfig(ctx context.Context, cfg *pgxpool.Config, pooler Pooler) (*pgxpool.Pool, error) {
	if err := configure(cfg, pooler); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, interpretError(err)
	}
	return pool, nil
}

// planned, as a statement's first argument, sends it with its arguments in
// the SQL text, so that Postgres plans it for those values: for statements
// whose best plan depends on a LIMIT or on which filters are set.
const planned = pgx.QueryExecModeSimpleProtocol

// tracerName is the instrumentation scope of the store's spans.
const tracerName = "github.com/idemhq/idem/store/postgres"

// queryTracer is the pool's pgx.QueryTracer: a span for every statement of
// a traced caller ("postgres claim", …), a child of the caller's span; a
// statement with no traced caller (a sweep, a health check) makes none.
type queryTracer struct {
	tracer trace.Tracer
}

func newQueryTracer(tp trace.TracerProvider) *queryTracer {
	return &queryTracer{tracer: tp.Tracer(tracerName)}
}

// querySpanKey marks a context whose statement span queryTracer made.
type querySpanKey struct{}

// TraceQueryStart implements pgx.QueryTracer.
func (t *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return t.start(ctx, data.SQL)
}

// TraceBatchStart implements pgx.BatchTracer: statements sent together (the
// takeovers of a many-row Claim) make one span, as one statement does.
func (t *queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(data.Batch.QueuedQueries))
	for i, q := range data.Batch.QueuedQueries {
		sqls[i] = strings.TrimSpace(q.SQL)
	}
	return t.start(ctx, strings.Join(sqls, ";\n"))
}

// TraceBatchQuery implements pgx.BatchTracer.
func (t *queryTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *queryTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	end(ctx, data.Err)
}

// start makes the span of the statements sql, when ctx is a traced caller's.
func (t *queryTracer) start(ctx context.Context, sql string) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx // no traced caller: a sweep, a health check, a migration
	}
	attrs := []attribute.KeyValue{attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", sql)}
	ctx, span := t.tracer.Start(ctx, "postgres "+operation(sql),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, querySpanKey{}, span)
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	end(ctx, data.Err, attribute.Int64("db.response.returned_rows", data.CommandTag.RowsAffected()))
}

// end ends the statement span that ctx carries, if any, with err or attrs.
func end(ctx context.Context, err error, attrs ...attribute.KeyValue) {
	span, ok := ctx.Value(querySpanKey{}).(trace.Span)
	switch {
	case !ok:
		return
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	default:
		span.SetAttributes(attrs...)
	}
	span.End()
}

// operation names a statement span: the driver's name for one of its
// statements (statementNames), or the statement's first keyword (SELECT,
// UPDATE, …).
func operation(sql string) string {
	sql = strings.TrimSpace(sql)
	for _, one := range strings.Split(sql, ";\n") { // a pgx batch's statements
		if name, ok := statementNames[strings.TrimSpace(one)]; ok {
			return name
		}
	}
	if i := strings.IndexAny(sql, " \t\n("); i > 0 {
		sql = sql[:i]
	}
	return strings.ToUpper(sql)
}

// statementNames are the names of the driver's statements on records, by
// their text without the spaces around it.
var statementNames = trimKeys(map[string]string{
	claimSQL: "claim", claimManySQL: "claim many", takeOverSQL: "takeover", holdSQL: "hold",
	completeOneSQL: "complete", completeManySQL: "complete many",
	failOneSQL: "fail", failManySQL: "fail many",
	heartbeatOneSQL: "heartbeat", heartbeatManySQL: "heartbeat many",
	getSQL: "lookup", getManySQL: "lookup many", resolveSQL: "resolve", deleteSQL: "delete", markWaitedSQL: "mark waited",
})

func trimKeys(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.TrimSpace(k)] = v
	}
	return out
}
