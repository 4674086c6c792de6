package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemhq/idem/store"
)

// resolveSQL moves an UNRESOLVED record on, keeping its token, and notes
// that token as the one an operator resolved: ?4 is the new state, ?5 now
// in microseconds, ?6 the result, ?7 the error.
const resolveSQL = `UPDATE idem_records SET state = ?4, result = ?6, error = ?7, resolved_token = token, lease_expires_at = NULL,
		completed_at = CASE WHEN ?4 = 'released' THEN NULL ELSE ?5 END,
		expires_at = ?5 + retention_us, updated_at = ?5
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 AND state = 'unresolved'
	RETURNING ` + recordCols

// RecordResolve implements store.Store.
func (s *Store) RecordResolve(ctx context.Context, p *store.ResolveParams) (*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	state, result, errText, err := p.Values()
	if err != nil {
		return nil, err
	}
	var out *store.Record
	err = s.inWriteTxLazy(ctx, func(tx *writeTx, now time.Time) error {
		rec, err := scanRecord(tx.QueryRow(resolveSQL, p.Tenant, p.Namespace, p.Key, string(state), now.UnixMicro(), result, errText))
		if err == nil {
			tx.WakeAfterCommit(p.RecordID)
			out = rec
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		rec, err = scanRecord(tx.Read(getSQL, p.Tenant, p.Namespace, p.Key))
		if err != nil {
			return err // sql.ErrNoRows becomes store.ErrNotFound
		}
		if !p.Holds(rec) {
			return store.ErrNotUnresolved
		}
		out = rec // a retry of a resolution that was made
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
