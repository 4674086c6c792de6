// Package postgres is idem's production store: the state machine of DESIGN §1
// as single SQL statements over pgx v5. The table's unique primary key is the
// atomic gate; every time comes from the database clock.
//
// The package has three layers. The driver (driver.go) is the SQL: typed
// operations that return the rows their statement wrote or read. The
// coalescers (store/coalesce) gather concurrent calls of one kind into one
// statement of the driver. The Store's methods decide what each row means
// by the rules of package store (claim.go, tokencall.go) and run the call
// again when a row changed under its statement.
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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/internal/rawconn"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
)

var (
	_ store.Store = (*Store)(nil)
)

// Store implements store.Store on PostgreSQL: its driver's statements
// (driver.go), the coalescers that gather concurrent Claims, Completes,
// Fails and Heartbeats into them (store/coalesce), and the rules that
// decide what each row means (claim.go, tokencall.go).
type Store struct {
	store.TokenCalls
	store.TokenCallsMany
	pool *pgxpool.Pool

	// The coalescers of Claim and of each kind of token call, indexed by
	// store.TokenCallKind.
	claims *coalesce.Coalescer[*store.ClaimParams, claimRow]
	tokens [store.CallHeartbeat + 1]*coalesce.Coalescer[*store.TokenCall, tokenRow]
	// replays is the read slot: a Claim of a record this process lately saw
	// finished (hints) is read there first, since it only replays
	// (replay.go).
	replays *coalesce.Coalescer[*store.ClaimParams, claimRow]
	// hints is what this process lately saw of records (hint.go).
	hints *recordHint
	// batchRows counts the calls each statement carried, by kind.
	batchRows *prometheus.HistogramVec
	// manyOnly sends a lone call as the many-row statement too: the
	// conformance suite runs once so, to hold those statements to every
	// case (export_test.go).
	manyOnly bool

	// The waiting Claims of this process, and the connection that hears
	// the notifications that wake them (wait.go).
	watches store.Watches
	listen  *listener
}

// New returns a Store that runs its statements on pool. The schema must have
// been migrated with Migrate.
func New(pool *pgxpool.Pool) *Store {
	return newStore(pool, coalesce.Config{})
}

// newStore is New with the coalescers' bounds; Kind, Calls and Deadline are
// filled in.
func newStore(pool *pgxpool.Pool, bounds coalesce.Config) *Store {
	s := &Store{pool: pool, batchRows: newBatchRows(), hints: newRecordHint()}
	s.TokenCalls = s.runTokenCall
	s.TokenCallsMany = s.runTokenCallsMany
	s.listen = &listener{pool: pool, watches: &s.watches}
	s.watches.OnFirst, s.watches.OnLast = s.listen.start, s.listen.idle
	cfg := func(kind string) coalesce.Config {
		c := bounds
		c.Kind, c.Calls, c.Deadline = kind, s.batchRows.WithLabelValues(kind), statementDeadline
		if c.MaxInFlight == 0 {
			c.MaxInFlight = 1
		}
		return c
	}
	s.claims = coalesce.NewCoalescer(cfg("claim"), s.runClaims, followClaim)
	s.replays = coalesce.NewCoalescer(cfg("claim_read"), s.runReplays, followReplay)
	for _, kind := range []store.TokenCallKind{store.CallComplete, store.CallFail, store.CallHeartbeat} {
		s.tokens[kind] = coalesce.NewCoalescer(cfg(kind.String()), s.runTokens(kind), nil)
	}
	return s
}

// newBatchRows is the histogram of the calls per statement, by kind: how
// well the coalescers batch under the load they see.
func newBatchRows() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "idem_db_batch_calls",
		Help:    "Calls answered by one statement of the coalescer, by kind (claim, claim_read: the reads of Claims that replay a finished record, complete, fail, heartbeat): 1 when calls do not overlap, more under load; Claims of a key already in the statement count with it.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
	}, []string{"kind"})
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
	// Raw reads and writes on the connections to Postgres: each read and
	// write through the runtime's entersyscall woke its monitor thread
	// after every idle spell, a third of idemd's CPU at one call in flight
	// (internal/rawconn). TLS, when the URL asks for it, goes over the
	// wrapped connection.
	if dial := cfg.ConnConfig.DialFunc; dial != nil {
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return rawconn.Wrap(c), nil
		}
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
