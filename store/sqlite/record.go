package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemhq/idem/store"
)

// recordCols is a record's columns in the order scanRecord reads them;
// resolved says whether an operator resolved the record under its current
// token.
const recordCols = `tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, retention_us, result, error, created_at, updated_at, completed_at, expires_at, policy, hold,
	coalesce(resolved_token = token, 0) AS resolved`

// rowScanner is a *sql.Row or *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanRecord reads recordCols.
func scanRecord(row rowScanner) (*store.Record, error) {
	var (
		r                         store.Record
		state                     string
		retentionUS               int64
		createdUS, updatedUS      int64
		errText                   sql.NullString
		lease, completed, expires sql.NullInt64
	)
	if err := row.Scan(&r.Tenant, &r.Namespace, &r.Key, &state, &r.Token, &r.Attempt, &r.Claimant, &r.Fingerprint,
		&lease, &retentionUS, &r.Result, &errText, &createdUS, &updatedUS, &completed, &expires, &r.Policy, &r.Hold, &r.ResolvedByOperator); err != nil {
		return nil, err
	}
	r.State = store.State(state)
	r.Retention = time.Duration(retentionUS) * time.Microsecond
	r.Error = errText.String
	r.CreatedAt = fromMicros(createdUS)
	r.UpdatedAt = fromMicros(updatedUS)
	r.LeaseExpiresAt = fromNullMicros(lease)
	r.CompletedAt = fromNullMicros(completed)
	r.ExpiresAt = fromNullMicros(expires)
	if len(r.Fingerprint) == 0 {
		r.Fingerprint = nil
	}
	return &r, nil
}

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func fromNullMicros(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return fromMicros(us.Int64)
}

const getSQL = `SELECT ` + recordCols + ` FROM idem_records WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`

// getRecord reads one record with stmt, a prepared getSQL. A missing record
// is sql.ErrNoRows.
func getRecord(ctx context.Context, stmt *sql.Stmt, id store.RecordID) (*store.Record, error) {
	return scanRecord(stmt.QueryRowContext(ctx, id.Tenant, id.Namespace, id.Key))
}

// RecordGet implements store.Store.
func (s *Store) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if err := id.CheckText(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	rec, err := getRecord(ctx, s.readStmts[getSQL], id)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	return rec, nil
}
