package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// resolveSQL moves an UNRESOLVED record on, keeping its token, and notes
// that token as the one an operator resolved: ?4 is the new state, ?5 now
// in microseconds, ?6 the result (NULL unless completed), ?7 the error,
// kept only when failed.
const resolveSQL = `UPDATE idem_records SET state = ?4, result = ?6, error = CASE WHEN ?4 = 'failed' THEN ?7 END, resolved_token = token, lease_expires_at = NULL,
		completed_at = CASE WHEN ?4 = 'released' THEN NULL ELSE ?5 END,
		expires_at = ?5 + retention_us, updated_at = ?5
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 AND state = 'unresolved'
	RETURNING ` + recordCols

// RecordResolve implements store.Store.
func (s *Store) RecordResolve(ctx context.Context, p *store.ResolveParams) (*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	target, err := p.Target()
	if err != nil {
		return nil, err
	}
	var (
		out     *store.Record
		refusal error
	)
	err = s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		rec, err := scanRecord(tx.QueryRow(resolveSQL, p.Tenant, p.Namespace, p.Key, string(target.State), now.UnixMicro(), target.Result, target.Error))
		if err == nil {
			tx.WakeAfterCommit(p.RecordID)
			out = rec
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		rec, err = scanRecord(tx.QueryRow(getSQL, p.Tenant, p.Namespace, p.Key))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			refusal = store.ErrNotFound
			return nil
		case err != nil:
			return err
		}
		switch d := p.Decide(rec); d.Action {
		case store.ChangeRepeat:
			out = rec // a retry of a resolution that was made
			return nil
		case store.ChangeRefuse:
			refusal = d.Err
			return nil
		}
		// The update and the read ran under one write lock, so the row the
		// update skipped cannot be UNRESOLVED. Not the key: internal errors
		// are logged, keys never.
		return fmt.Errorf("sqlite: tenant %s, namespace %s: an UNRESOLVED record the resolution did not apply to", p.Tenant, p.Namespace)
	})
	if err != nil {
		return nil, err
	}
	return out, refusal
}
