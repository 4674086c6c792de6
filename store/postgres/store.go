// Package postgres is idem's production store: the state machine of DESIGN §1
// as SQL statements over pgx v5. The table's unique primary key is the
// atomic gate; every time comes from the database clock.
//
// The package has two layers. The driver (driver.go) is the SQL: typed
// operations, one statement each plus a many-row twin for Claims and token
// calls, that return the rows their statement wrote or read. The Store's
// methods decide what each row means by the rules of package store
// (claim.go, tokencall.go) and run the call again when a row changed under
// its statement. Batching concurrent calls is not the store's: it is a
// decorator around any store.Store (store/coalesce).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/idemhq/idem/store"
)

var (
	_ store.Store = (*Store)(nil)
)

// Store implements store.Store on PostgreSQL: its driver's statements
// (driver.go) and the rules that decide what each row means (claim.go,
// tokencall.go).
type Store struct {
	store.TokenCalls
	store.TokenCallsMany
	pool *pgxpool.Pool

	// The waiting Claims of this process, and the connection that hears
	// the notifications that wake them (wait.go).
	watches store.Watches
	listen  *listener
}

// New returns a Store that runs its statements on pool. The schema must have
// been migrated with Migrate.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool}
	s.TokenCalls = s.runTokenCall
	s.TokenCallsMany = s.runTokenCallsMany
	s.listen = &listener{pool: pool, watches: &s.watches}
	s.watches.OnFirst, s.watches.OnLast = s.listen.start, s.listen.idle
	return s
}

// Close stops the connection that listens for the notifications of waiting
// Claims, if one runs. The pool is the caller's to close. Waiting Claims
// still look again when their wait or the holder's lease runs out.
func (s *Store) Close() {
	s.listen.close()
}

// Connect parses url, opens a pool and checks that the database answers.
// A database that cannot be reached is reported as store.ErrUnavailable.
// The pool's search_path follows the URL (?search_path=idem), so idem can live
// in its own schema. The pool has DefaultMaxConns connections at most unless
// the URL sets pool_max_conns.
func Connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	return ConnectConfig(ctx, cfg)
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
// pool_max_conns: 16, or the number of CPUs when there are more. pgx's own
// default (the greater of 4 and the CPUs) is too small for idem: a call
// spends most of its time waiting for its commit's WAL flush, not on a CPU,
// and more connections in flight share each flush. docs/BENCHMARKS.md has
// the measurements behind 16.
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

// ConnectConfig is Connect with a parsed configuration. Its connections get
// StatementTimeout as their statement_timeout, and generic plans
// (plan_cache_mode), unless cfg sets them.
//
// Generic plans: pgx prepares every statement once per connection, and
// Postgres then plans a prepared statement afresh on each execution unless
// it judges a generic plan good enough, which for idem's statements it does
// not. Claims, Completes and the other calls on one record find their rows
// by primary key, so the generic plan is the plan they get anyway, and
// planning was a large part of their cost (docs/BENCHMARKS.md, "Generic
// plans"). The statements
// whose best plan depends on their arguments (a LIMIT, optional filters: the
// sweeper's and the admin listing's) are sent with their arguments inline
// (planned), so that Postgres plans each execution with the values.
//
// Behind a connection pooler see ConnectWith and Pooler: the settings go
// elsewhere there.
func ConnectConfig(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	return connectConfig(ctx, cfg, NoPooler)
}

// connectConfig is ConnectConfig for a database behind pooler.
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

// planned, as a statement's first argument, sends it with its arguments
// written into the SQL text (pgx's simple protocol), so that Postgres plans
// it for those values rather than reusing a generic plan: for statements
// whose best plan depends on a LIMIT or on which optional filters are set.
const planned = pgx.QueryExecModeSimpleProtocol

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "SELECT 1")
	return interpretError(err)
}

// interpretError is the store's one boundary for database errors: nothing
// above the store sees a pgx type. Context errors pass through unchanged;
// errors that mean the database could not be reached, refused the
// connection, or went away mid-call, become store.ErrUnavailable (wrapping the cause for the log).
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	// A connection the server refused is a database that cannot be reached,
	// whatever the server gave as its reason: a database that does not
	// accept connections (55000) or does not exist (3D000), a role that may
	// not log in (28000, 28P01), no connection slot left (53300). The
	// ConnectError wraps that PgError, so it is looked at first: the code
	// alone would not say that nothing was reached.
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08", // connection exception
			pgErr.Code == "57P01", // admin_shutdown
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now
			pgErr.Code == "53300", // too_many_connections
			pgErr.Code == "25006", // read_only_sql_transaction: a standby after failover
			pgErr.Code == "57014", // query_canceled: statement_timeout ran out
			pgErr.Code == "55P03": // lock_not_available: lock_timeout ran out
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		case pgErr.Code == "40001", pgErr.Code == "40P01": // serialization failure, deadlock
			return fmt.Errorf("%w: %w", store.ErrContention, err)
		}
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool) ||
		pgconn.SafeToRetry(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}
