package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// tokenCallSQL is a token-bearing call's update: it applies only with the
// record's current token while the record is PROCESSING, EXPIRED or
// UNRESOLVED; when it
// applies nothing, the same transaction reads the row to tell why. ?1–?3 are
// the record's id, ?4 the token, ?5 now in microseconds and ?6 on the call's
// own values.
func tokenCallSQL(set string) string {
	return `UPDATE idem_records SET ` + set + `, updated_at = ?5
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 AND token = ?4
		AND state IN ('processing', 'expired', 'unresolved')
	RETURNING ` + recordCols
}

// tokenCalls is each token-bearing call's statement.
var tokenCalls = [...]string{
	store.CallComplete: tokenCallSQL(`state = 'completed', result = ?6, error = NULL, lease_expires_at = NULL,
			completed_at = ?5, expires_at = ?5 + retention_us`),
	store.CallFail: tokenCallSQL(`state = CASE WHEN ?7 THEN 'released' ELSE 'failed' END, error = ?6, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN ?7 THEN NULL ELSE ?5 END,
			expires_at = ?5 + retention_us`),
	store.CallHeartbeat: tokenCallSQL(`state = 'processing', lease_expires_at = ?5 + ?6, expires_at = NULL`),
}

// runTokenCall is the store.TokenCalls the Store embeds.
func (s *Store) runTokenCall(ctx context.Context, call *store.TokenCall) (*store.Record, error) {
	var (
		out     *store.Record
		refusal error
	)
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		var row *sql.Row
		switch call.Kind {
		case store.CallComplete:
			row = tx.QueryRow(tokenCalls[call.Kind], call.Tenant, call.Namespace, call.Key, call.Token, now.UnixMicro(), call.Result)
		case store.CallFail:
			row = tx.QueryRow(tokenCalls[call.Kind], call.Tenant, call.Namespace, call.Key, call.Token, now.UnixMicro(), call.Error, call.Retryable)
		case store.CallHeartbeat:
			row = tx.QueryRow(tokenCalls[call.Kind], call.Tenant, call.Namespace, call.Key, call.Token, now.UnixMicro(), call.LeaseTTL.Microseconds())
		}
		rec, err := scanRecord(row)
		if err == nil {
			if call.Kind != store.CallHeartbeat {
				tx.WakeAfterCommit(call.RecordID) // the lease ended
			}
			out = rec
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		rec, err = scanRecord(tx.QueryRow(getSQL, call.Tenant, call.Namespace, call.Key))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			refusal = store.ErrNotFound
			return nil
		case err != nil:
			return err
		}
		switch d := call.Decide(rec); d.Action {
		case store.ChangeRepeat:
			out = rec
			return nil
		case store.ChangeRefuse:
			refusal = d.Err
			return nil
		}
		// The update and the read ran under one write lock, so the row the
		// update skipped cannot be one it should have changed.
		// Not the key: internal errors are logged, keys never.
		return fmt.Errorf("sqlite: tenant %s, namespace %s: state %s with the current token, yet the update applied nothing",
			call.Tenant, call.Namespace, rec.State)
	})
	if err != nil {
		return nil, err
	}
	return out, refusal
}
