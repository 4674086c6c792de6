// Package postgres is idem's production store: the state machine of DESIGN §1
// as SQL statements over pgx v5. The table's unique primary key is the
// atomic gate; every time comes from the database clock.
//
// The driver (driver.go) is the SQL: one statement per operation plus a
// many-row twin for Claims and token calls. The Store decides what each row
// means by the rules of package store (claim.go). Batching concurrent
// calls is a decorator around any store.Store (store/coalesce).
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
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres/notifier"
)

var (
	_ store.Store = (*Store)(nil)
)

// Store implements store.Store on PostgreSQL.
type Store struct {
	store.TokenCalls
	store.TokenCallsMany
	pool *pgxpool.Pool

	// The waiting Claims of this process, and the connection that hears
	// the notifications that wake them (wait.go); it also hears of records
	// that become UNRESOLVED, for the held watches (timeline.go).
	watches store.Watches
	held    store.Watches
	listen  *notifier.Listener
}

// New returns a Store that runs its statements on pool. The schema must have
// been migrated with Migrate.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool}
	s.TokenCalls = s.runTokenCall
	s.TokenCallsMany = s.runTokenCallsMany
	s.listen = &notifier.Listener{Watches: &s.watches, Held: &s.held, Config: pool.Config().ConnConfig}
	s.watches.OnFirst, s.watches.OnLast = s.listen.Start, s.listen.Idle
	s.held.OnFirst, s.held.OnLast = s.listen.Start, s.listen.Idle
	return s
}

// Close stops the connection that listens for the notifications of waiting
// Claims, if one runs. The pool is the caller's to close.
func (s *Store) Close() {
	s.listen.Close()
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "SELECT 1")
	return interpretError(err)
}

// interpretError is the store's one boundary for database errors: nothing
// above the store sees a pgx type. Errors that mean the database could not
// be reached, refused the connection, or went away mid-call are
// store.ErrUnavailable, wrapping the cause for the log.
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
	// A refused connection is a database that cannot be reached, whatever
	// the reason its PgError gives, so it is looked at first.
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

// StatementTimeout is the statement_timeout Connect gives every connection
// unless the URL sets one: a statement of idem's that runs for seconds
// waits on something broken, which Postgres cancels cleanly.
const StatementTimeout = 10 * time.Second

// statementDeadline is the store's own bound on a detached statement, for a
// database that stops answering; longer than StatementTimeout, so that
// Postgres, which cancels cleanly, normally acts first.
const statementDeadline = StatementTimeout + 5*time.Second

// detached runs fn on a pool connection with a context the caller's
// cancellation does not reach, within statementDeadline: a call whose
// deadline passes mid-statement would otherwise make pgx close the
// connection, and leave the outcome more unknown than it must be. The
// caller gets its context's error as soon as the context is done; if no
// connection was free by then, fn never runs. Every store method on the
// request path goes through here.
func detached[T any](ctx context.Context, s *Store, fn func(ctx context.Context, d driver) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Only the caller's span goes along: pgx keeps a connection's last
		// context, which would keep the caller's whole gRPC call alive.
		own, cancel := context.WithTimeout(trace.ContextWithSpan(context.Background(), trace.SpanFromContext(ctx)), statementDeadline)
		defer cancel()
		// Acquiring on the caller's context would let pgxpool cancel a ping
		// of an idle connection mid-flight, which closes it too.
		conn, err := s.pool.Acquire(own)
		if err != nil {
			done <- result{err: ownDeadline(own, interpretError(err))}
			return
		}
		defer conn.Release()
		if err := ctx.Err(); err != nil {
			done <- result{err: err} // the caller left before the statement started: nothing ran
			return
		}
		v, err := fn(own, driver{q: conn})
		done <- result{v: v, err: ownDeadline(own, err)}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// ownDeadline turns the passing of statementDeadline, which is the store's
// and not the caller's, into store.ErrUnavailable.
func ownDeadline(own context.Context, err error) error {
	if err != nil && errors.Is(own.Err(), context.DeadlineExceeded) && errors.Is(interpretError(err), context.DeadlineExceeded) {
		return fmt.Errorf("%w: the database did not answer within %s", store.ErrUnavailable, statementDeadline)
	}
	return err
}

// detachedMany is detached for a many-row operation: fill answers the calls
// at the indexes at into slices of its own, which the caller gets once it
// returned, or its context's error for each of them.
func detachedMany[R any](ctx context.Context, s *Store, at []int, errs []error, fill func(ctx context.Context, d driver, res []R, errs []error)) []R {
	type answers struct {
		res  []R
		errs []error
	}
	n := len(errs)
	res := make([]R, n)
	if len(at) == 0 {
		return res
	}
	out, err := detached(ctx, s, func(ctx context.Context, d driver) (answers, error) {
		a := answers{make([]R, n), make([]error, n)}
		fill(ctx, d, a.res, a.errs)
		return a, nil
	})
	for _, i := range at {
		if err != nil {
			errs[i] = err
		} else {
			res[i], errs[i] = out.res[i], out.errs[i]
		}
	}
	return res
}
