package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// recordCols is a record's columns in the order scanRecord reads them. The
// retention leaves the database as microseconds; resolved says whether an
// operator resolved the record under its current token.
const recordCols = `tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, (extract(epoch FROM retention) * 1000000)::bigint AS retention_us,
	result, error, created_at, updated_at, completed_at, expires_at, policy, hold,
	coalesce(resolved_token = token, false) AS resolved`

// recordNames is the names of recordCols' columns, for reading them from a
// subquery that returned them.
const recordNames = `tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, retention_us, result, error, created_at, updated_at, completed_at, expires_at, policy, hold, resolved`

// recordColsOf is recordCols qualified by a table alias.
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

// Plans. The statements on one record or a batch of records run as
// prepared statements with generic plans (store.go), planned once per
// connection with the statistics of that moment: on a new deployment, an
// empty table that Postgres takes for ten pages. A join from a batch's
// arrays to idem_records would then be planned as a hash join over a
// sequential scan of the whole table, and that plan would stay with the
// connection while the table grows. So no statement joins idem_records to
// anything: each record is read through a LATERAL subquery that the planner
// cannot flatten into a join (OFFSET 0, or its FOR UPDATE) and so runs as a
// lookup of the primary key per row, and each row is changed by a statement
// on its primary key or by INSERT … ON CONFLICT, whose conflict check goes
// through the primary key by construction.
// TestHotStatementPlansUseThePrimaryKey checks the plans on an empty table.

// micros turns a duration into the bigint the SQL multiplies by
// interval '1 microsecond'.
func micros(d time.Duration) int64 { return d.Microseconds() }

// scanRecord reads recordCols, after any leading columns given in prefix
// (at most maxPrefix).
//
// It runs for every row the store reads, so it is written for the hot path:
// the destinations are pgtype types whose codecs scan them directly (a
// time.Time or a **string makes pgx build a chain of wrapper plans for every
// column of every row), and they live in one allocation with the record.
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

// maxPrefix is how many leading columns a statement may put before
// recordCols for scanRecord.
const maxPrefix = 3

// recordScan is scanRecord's working space: the record and the columns that
// need converting, with room for the destinations.
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

const getSQL = `SELECT ` + recordCols + ` FROM idem_records
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
