package postgres

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// The driver is the store's SQL and nothing else: one method per operation,
// returning the rows its statement wrote or read, and for Claims and token
// calls a many-row twin, whose calls are sorted by primary key with
// distinct keys:
//
//	claim, claimMany; writeMany    claims; takeovers, holds   driver_claim.go
//	tokenCallOne, tokenCallMany    token calls                driver_tokencall.go
//	getRecord, getMany             reads                      driver.go
//	listRecords, deleteRecord, recordStats, resolve, sweepExpire, sweepPurge
//	                               the operator's, the sweeper's   admin.go
//	markWaited                     a waiting Claim's mark     wait.go
//
// What a row means for its call is decided above it by the rules of
// package store (claim.go). Errors leave through
// interpretError.
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
