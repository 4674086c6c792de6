package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/puddle/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
)

// The driver is the store's SQL and nothing else: one method per operation,
// returning the rows its statement wrote or read, and for Claims and token
// calls a many-row twin, whose calls are sorted by primary key with
// distinct keys:
//
//	claim, claimMany; writeMany    claims; takeovers, holds   claim.go
//	tokenCallOne, tokenCallMany    token calls                tokencall.go
//	stepOne, stepMany              a job's steps              steps.go
//	getRecord, getMany             reads                      driver.go
//	listRecords, deleteRecord, recordStats, resolve, sweepExpire, sweepPurge
//	                               the operator's, the sweeper's   admin.go
//	markWaited                     a waiting Claim's mark     wait.go
//
// What a row means for its call is decided beside it by the rules of
// package store (store.DecideClaim, TokenCall.Decide). Every call runs
// detached from its caller's cancellation (detached), and errors leave
// through interpretError.
type driver struct {
	q querier
}

// querier is what the driver's statements run on: the pool, one of its
// connections, or, in tests, a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// compareIDs orders record ids by their primary key columns, byte-wise:
// the order in which the many-row statements lock rows, so that two of
// them sharing keys wait for each other rather than deadlock.
func compareIDs(a, b store.RecordID) int {
	if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// distinctByID splits the calls whose errs are nil into batch, the
// indexes of each key's first call sorted by primary key (a many-row
// statement's calls), and rest, the indexes of the calls of a key already
// in batch, in the order of calls.
func distinctByID[T any](calls []T, errs []error, idOf func(T) store.RecordID) (batch, rest []int) {
	seen := make(map[store.RecordID]bool, len(calls))
	for i, c := range calls {
		switch id := idOf(c); {
		case errs[i] != nil:
		case seen[id]:
			rest = append(rest, i)
		default:
			seen[id] = true
			batch = append(batch, i)
		}
	}
	slices.SortFunc(batch, func(a, b int) int { return compareIDs(idOf(calls[a]), idOf(calls[b])) })
	return batch, rest
}

// findID is the index of the call of calls, sorted by primary key, that id
// addresses, or -1.
func findID[T any](calls []T, id store.RecordID, idOf func(T) store.RecordID) int {
	i, ok := slices.BinarySearchFunc(calls, id, func(c T, id store.RecordID) int { return compareIDs(idOf(c), id) })
	if !ok {
		return -1
	}
	return i
}

// idArrays are the tenants, namespaces and keys of ids: the first arrays of
// a many-row statement.
func idArrays(ids []store.RecordID) []any {
	return []any{column(ids, func(id store.RecordID) string { return id.Tenant }),
		column(ids, func(id store.RecordID) string { return id.Namespace }),
		column(ids, func(id store.RecordID) string { return id.Key })}
}

// column is f of each call: an array of a many-row statement.
func column[C, T any](calls []C, f func(C) T) []T {
	out := make([]T, len(calls))
	for i, c := range calls {
		out[i] = f(c)
	}
	return out
}

// recordCols is a record's columns in the order scanRecord reads them.
var recordCols = recordColsOf("idem_records")

// recordNames names recordCols' columns, as a subquery returns them.
const recordNames = `tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, retention_us, result, error, created_at, updated_at, completed_at, expires_at, policy, hold, resolved`

// stepsCol is the column that carries a record's steps (stepsColOf).
var stepsCol = stepsColOf("idem_records")

// stepsColOf is a record's steps and hold_unfinished as one value (a
// record), NULL when it has none, qualified by a table alias: one column
// more in the answers that read a record, NULL for the many that have no
// steps. The statements sent as simple queries, whose answers are text,
// read stepsColsOf instead, since pgx reads a record only in binary.
func stepsColOf(alias string) string {
	a := alias + "."
	return `CASE WHEN ` + a + `step_names IS NOT NULL THEN ROW(` + a + `step_names, ` + a + `step_results, ` +
		a + `step_tokens, ` + a + `step_started, ` + a + `step_finished, ` + a + `hold_unfinished) END AS steps`
}

// stepsColsOf is stepsColOf as six columns, for answers in text.
func stepsColsOf(alias string) string {
	a := alias + "."
	return a + `step_names, ` + a + `step_results, ` + a + `step_tokens, ` + a + `step_started, ` + a + `step_finished, ` + a + `hold_unfinished`
}

// recordColsOf is a record's columns qualified by a table alias; resolved
// says whether an operator resolved it under its current token.
func recordColsOf(alias string) string {
	cols := []string{"tenant", "namespace", "key", "state", "token", "attempt", "claimant", "fingerprint",
		"lease_expires_at", "(extract(epoch FROM " + alias + ".retention) * 1000000)::bigint AS retention_us",
		"result", "error", "created_at", "updated_at", "completed_at", "expires_at", "policy", "hold",
		"(coalesce(" + alias + ".resolved_token = " + alias + ".token, false)) AS resolved"}
	for i, c := range cols {
		if !strings.HasPrefix(c, "(") {
			cols[i] = alias + "." + c
		}
	}
	return strings.Join(cols, ", ")
}

// Plans. The statements on records run on generic plans made once per
// connection, on a new deployment for an empty table, where a join from a
// batch's arrays to idem_records would become a scan of the whole table,
// kept as it grows. So each record is read through a LATERAL subquery the
// planner cannot flatten (OFFSET 0, or FOR UPDATE), a primary-key lookup,
// and changed on its primary key or by INSERT … ON CONFLICT
// (TestHotStatementPlansUseThePrimaryKey checks it on an empty table).

// micros is d in the microseconds the SQL takes.
func micros(d time.Duration) int64 { return d.Microseconds() }

// scanRecord reads recordCols after the leading columns prefix (at most
// maxPrefix). It runs for every row the store reads: its destinations are
// pgtype types that scan directly, in one allocation with the record.
func scanRecord(row pgx.Row, prefix ...any) (*store.Record, error) {
	return scanRecordAs(row, noSteps, prefix...)
}

// scanRecordSteps is scanRecord of recordCols followed by stepsCol.
func scanRecordSteps(row pgx.Row, prefix ...any) (*store.Record, error) {
	return scanRecordAs(row, stepsRecord, prefix...)
}

// How a row carries a record's steps after its recordCols.
type stepsForm int

const (
	noSteps      stepsForm = iota // not at all
	stepsRecord                   // stepsColOf
	stepsColumns                  // stepsColsOf
)

// scanRecordAs reads recordCols, and the steps in form, after prefix.
func scanRecordAs(row pgx.Row, form stepsForm, prefix ...any) (*store.Record, error) {
	s := new(recordScan)
	dest := append(s.dest[:0], prefix...)
	r := &s.rec
	dest = append(dest,
		&r.Tenant, &r.Namespace, &r.Key, &s.state, &r.Token, &r.Attempt, &r.Claimant, &r.Fingerprint,
		&s.lease, &s.retentionUS, &r.Result, &s.errText, &s.created, &s.updated, &s.completed, &s.expires, &r.Policy, &r.Hold, &r.ResolvedByOperator)
	switch form {
	case stepsRecord:
		dest = append(dest, &s.steps)
	case stepsColumns:
		dest = append(dest, s.steps.fields()...)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if err := s.steps.into(r); err != nil {
		return nil, err
	}
	r.State = store.State(s.state)
	r.Retention = time.Duration(s.retentionUS) * time.Microsecond
	r.Error = s.errText.String // "" when NULL
	r.CreatedAt = utc(s.created)
	r.UpdatedAt = utc(s.updated)
	r.LeaseExpiresAt = utc(s.lease)
	r.CompletedAt = utc(s.completed)
	r.ExpiresAt = utc(s.expires)
	if len(r.Fingerprint) == 0 {
		r.Fingerprint = nil
	}
	return r, nil
}

// maxPrefix bounds the columns before recordCols that scanRecord reads.
const maxPrefix = 3

// recordScan is scanRecord's working space.
type recordScan struct {
	rec                                         store.Record
	state                                       string
	retentionUS                                 int64
	errText                                     pgtype.Text
	created, updated, lease, completed, expires pgtype.Timestamptz
	steps                                       stepsScan
	dest                                        [maxPrefix + 19 + stepFields]any
}

// utc is t in UTC, the zero time when t is NULL.
func utc(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

var getSQL = `SELECT ` + recordCols + `, ` + stepsCol + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3`

// getRecord runs getSQL; a record that is not there is store.ErrNotFound.
func (d driver) getRecord(ctx context.Context, id store.RecordID) (*store.Record, error) {
	rec, err := scanRecordSteps(d.q.QueryRow(ctx, getSQL, id.Tenant, id.Namespace, id.Key))
	return rec, interpretError(err)
}

// getManySQL reads the records of many ids; each row's ordinal is the
// index of its id, from 1, and an id with no record returns no row.
var getManySQL = `SELECT k.i, r.* FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k(t, n, ky, i)
	CROSS JOIN LATERAL (SELECT ` + recordCols + `, ` + stepsCol + ` FROM idem_records
		WHERE tenant = k.t AND namespace = k.n AND key = k.ky OFFSET 0) r`

// getMany runs getManySQL: the record of each id, nil when it has none.
func (d driver) getMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, error) {
	rows, err := d.q.Query(ctx, getManySQL, idArrays(ids)...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	recs := make([]*store.Record, len(ids))
	for rows.Next() {
		var i int64
		rec, err := scanRecordSteps(rows, &i)
		if err != nil {
			return nil, interpretError(err)
		}
		recs[i-1] = rec
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	return recs, nil
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
