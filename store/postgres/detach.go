package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// StatementTimeout is the statement_timeout Connect gives every connection
// unless the URL sets one (?statement_timeout=…, in milliseconds or with a
// unit): Postgres cancels a statement that runs longer, and the connection
// stays usable. idem's statements touch one record, or one bounded batch,
// and take milliseconds; one that runs for seconds is waiting on something
// that is broken. Migrations and the sweeper's count of the whole table lift
// it for their own transaction.
const StatementTimeout = 10 * time.Second

// statementDeadline is the store's own bound on a statement it runs
// detached from its caller, for a database that stops answering altogether.
// It is longer than StatementTimeout so that Postgres, which cancels
// cleanly, normally acts first.
const statementDeadline = StatementTimeout + 5*time.Second

// detached runs fn on a pool connection with a context that the caller's
// cancellation does not reach, so that a call whose deadline passes while
// its statement runs neither makes pgx close the connection (it does, for a
// query cancelled mid-flight, and Postgres then forks a new backend for the
// next one) nor leaves the statement's outcome more unknown than it must be:
// the statement finishes, or Postgres cancels it at StatementTimeout.
//
// The caller gets its context's error as soon as the context is done. If
// that happens before a connection is free, fn never runs. fn must be one
// short, self-contained unit of work (a statement, or a few retries of one);
// it runs within statementDeadline. Every store method on the request path
// that no coalescer carries goes through here.
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
		own, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementDeadline)
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

// detachedMany is detached for the calls of a many-row operation: fill
// answers the calls at the indexes at, into slices of its own, and the
// caller gets those answers once fill has returned, or its context's error
// for each of them. errs, the caller's, already holds the answers of the
// calls not at those indexes.
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
