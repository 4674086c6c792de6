package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// recordCols is a record's columns in the order scanRecord reads them.
var recordCols = recordColsOf("idem_records")

// recordNames names recordCols' columns, as a subquery returns them.
const recordNames = `tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, retention_us, result, error, created_at, updated_at, completed_at, expires_at, policy, hold, resolved`

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

// Plans. The statements on records run on generic plans (store.go), made
// once per connection with the statistics of that moment, on a new
// deployment an empty table: a join from a batch's arrays to idem_records
// would be planned as a scan of the whole table and kept as the table
// grows. So no statement joins idem_records to anything: each record is
// read through a LATERAL subquery the planner cannot flatten (OFFSET 0, or
// FOR UPDATE), a primary-key lookup per row, and changed by a statement on
// its primary key or by INSERT … ON CONFLICT.
// TestHotStatementPlansUseThePrimaryKey checks the plans on an empty table.

// micros is d in the microseconds the SQL takes.
func micros(d time.Duration) int64 { return d.Microseconds() }

// scanRecord reads recordCols after the leading columns prefix (at most
// maxPrefix). It runs for every row the store reads: its destinations are
// pgtype types that scan directly, in one allocation with the record.
func scanRecord(row pgx.Row, prefix ...any) (*store.Record, error) {
	s := new(recordScan)
	dest := append(s.dest[:0], prefix...)
	r := &s.rec
	dest = append(dest,
		&r.Tenant, &r.Namespace, &r.Key, &s.state, &r.Token, &r.Attempt, &r.Claimant, &r.Fingerprint,
		&s.lease, &s.retentionUS, &r.Result, &s.errText, &s.created, &s.updated, &s.completed, &s.expires, &r.Policy, &r.Hold, &r.ResolvedByOperator)
	if err := row.Scan(dest...); err != nil {
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
	dest                                        [maxPrefix + 19]any
}

// utc is t in UTC, the zero time when t is NULL.
func utc(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

var getSQL = `SELECT ` + recordCols + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3`

// getRecord runs getSQL; a record that is not there is store.ErrNotFound.
func (d driver) getRecord(ctx context.Context, id store.RecordID) (*store.Record, error) {
	rec, err := scanRecord(d.q.QueryRow(ctx, getSQL, id.Tenant, id.Namespace, id.Key))
	return rec, interpretError(err)
}

// RecordGet implements store.Store.
func (s *Store) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if err := id.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) { return d.getRecord(ctx, id) })
}

// getManySQL reads the records of many ids; each row's ordinal is the
// index of its id, from 1, and an id with no record returns no row.
var getManySQL = `SELECT k.i, r.* FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k(t, n, ky, i)
	CROSS JOIN LATERAL (SELECT ` + recordCols + ` FROM idem_records
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
		rec, err := scanRecord(rows, &i)
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

// RecordGetMany implements store.Store in one statement.
func (s *Store) RecordGetMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, []error) {
	recs, errs := make([]*store.Record, len(ids)), make([]error, len(ids))
	sent := make([]store.RecordID, 0, len(ids))
	at := make([]int, 0, len(ids)) // the index in ids of each id sent
	for i, id := range ids {
		if errs[i] = id.CheckText(); errs[i] == nil {
			sent, at = append(sent, id), append(at, i)
		}
	}
	if len(sent) == 0 {
		return recs, errs
	}
	found, err := detached(ctx, s, func(ctx context.Context, d driver) ([]*store.Record, error) { return d.getMany(ctx, sent) })
	for j, i := range at {
		switch {
		case err != nil:
			errs[i] = err
		case found[j] == nil:
			errs[i] = store.ErrNotFound
		default:
			recs[i] = found[j]
		}
	}
	return recs, errs
}
