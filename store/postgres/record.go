package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

// recordCols is a record's columns in the order scanRecord reads them. The
// retention leaves the database as microseconds.
const recordCols = `tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, (extract(epoch FROM retention) * 1000000)::bigint AS retention_us,
	result, error, created_at, updated_at, completed_at, expires_at`

// micros turns a duration into the bigint the SQL multiplies by
// interval '1 microsecond'.
func micros(d time.Duration) int64 { return d.Microseconds() }

// scanRecord reads recordCols, after any leading columns given in prefix.
func scanRecord(row pgx.Row, prefix ...any) (*store.Record, error) {
	var (
		r                         store.Record
		state                     string
		retentionUS               int64
		errText                   *string
		lease, completed, expires *time.Time
	)
	dest := append(prefix,
		&r.Tenant, &r.Namespace, &r.Key, &state, &r.Token, &r.Attempt, &r.Claimant, &r.Fingerprint,
		&lease, &retentionUS, &r.Result, &errText, &r.CreatedAt, &r.UpdatedAt, &completed, &expires)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	r.State = store.State(state)
	r.Retention = time.Duration(retentionUS) * time.Microsecond
	if errText != nil {
		r.Error = *errText
	}
	r.CreatedAt = r.CreatedAt.UTC()
	r.UpdatedAt = r.UpdatedAt.UTC()
	r.LeaseExpiresAt = utc(lease)
	r.CompletedAt = utc(completed)
	r.ExpiresAt = utc(expires)
	if len(r.Fingerprint) == 0 {
		r.Fingerprint = nil
	}
	return &r, nil
}

func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

const getSQL = `SELECT ` + recordCols + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3`

// RecordGet reads one record.
func (s *Store) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	r, err := scanRecord(s.db.QueryRow(ctx, getSQL, id.Tenant, id.Namespace, id.Key))
	if err != nil {
		return nil, interpretError(err)
	}
	return r, nil
}
