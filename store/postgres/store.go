// Package postgres is idem's production store: the state machine of DESIGN §1
// as single SQL statements over pgx v5. The table's unique primary key is the
// atomic gate; every time comes from the database clock.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/idemhq/idem/store"
)

var _ store.Store = (*Store)(nil)

// dbtx is what the store's SQL runs on: the pool, or a pgx.Tx in tests and
// tools that need a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store implements store.Store on PostgreSQL.
type Store struct {
	db dbtx
}

// New returns a Store that runs its statements on db, a *pgxpool.Pool or a
// pgx.Tx. The schema must have been migrated with Migrate.
func New(db dbtx) *Store {
	return &Store{db: db}
}

// Connect parses url, opens a pool and checks that the database answers.
// A database that cannot be reached is reported as store.ErrUnavailable.
// The pool's search_path follows the URL (?search_path=idem), so idem can live
// in its own schema.
func Connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	return ConnectConfig(ctx, cfg)
}

// ConnectConfig is Connect with a parsed configuration.
func ConnectConfig(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
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

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.db.Exec(ctx, "SELECT 1")
	return interpretError(err)
}

// interpretError is the store's one boundary for database errors: nothing
// above the store sees a pgx type. Context errors pass through unchanged;
// errors that mean the database could not be reached, or went away mid-call,
// become store.ErrUnavailable (wrapping the cause for the log).
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
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool) ||
		pgconn.SafeToRetry(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}
