package postgres

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/migrate"
)

var _ store.Backend = (*Backend)(nil)

// Backend is a Store that owns its pool: what idemd runs on.
type Backend struct {
	*Store
	pool *pgxpool.Pool
}

// OpenBackend connects to url (see Connect) and returns the Backend on that
// pool. The schema is left as it is: Migrate applies what is pending.
//
// With a tracer provider, the store makes spans for the statements of
// traced callers (trace.go); with nil it installs no tracing hook at all.
func OpenBackend(ctx context.Context, url string, tp trace.TracerProvider) (*Backend, error) {
	return OpenBackendWith(ctx, url, tp, Options{})
}

// OpenBackendWith is OpenBackend for a database reached as opts says:
// through a connection pooler, and with a listener of its own (see Options
// and NewWith).
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

// Migrate implements store.Backend: see MigrateLogged.
func (b *Backend) Migrate(ctx context.Context, logger *slog.Logger) ([]int, error) {
	return MigrateLogged(ctx, b.pool, logger)
}

// MigrationScript is the SQL Migrate would run now; see MigrationScript.
func (b *Backend) MigrationScript(ctx context.Context) (migrate.Script, error) {
	return MigrationScript(ctx, b.pool)
}

// SchemaVersion implements store.Backend.
func (b *Backend) SchemaVersion(ctx context.Context) (int, error) {
	return SchemaVersion(ctx, b.pool)
}

// LatestVersion implements store.Backend.
func (b *Backend) LatestVersion() int { return LatestVersion() }

// Close implements store.Backend: it stops the Store's listener and closes
// the pool.
func (b *Backend) Close() error {
	b.Store.Close()
	b.pool.Close()
	return nil
}

// Collectors implements store.Backend: the pgx pool's statistics, read at
// scrape time.
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
