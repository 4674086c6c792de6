package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// tokenCall is one of the calls that must present the record's current
// token. Its update applies only with that token while the record is
// PROCESSING or EXPIRED; when it applies nothing, the same transaction reads
// the row to tell why.
type tokenCall struct {
	sql string
	// repeat reports whether a record in this state, holding the caller's
	// token, is what this very call produced earlier: a retry after a lost
	// response, answered with the stored record.
	repeat func(store.State) bool
}

// tokenCallSQL binds ?1–?3 to the record's id, ?4 to the token, ?5 to now in
// microseconds and ?6 on to the call's own arguments.
func tokenCallSQL(set string) string {
	return `UPDATE idem_records SET ` + set + `, updated_at = ?5
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 AND token = ?4
		AND state IN ('processing', 'expired')
	RETURNING ` + recordCols
}

var (
	completeCall = tokenCall{
		sql: tokenCallSQL(`state = 'completed', result = ?6, error = NULL, lease_expires_at = NULL,
			completed_at = ?5, expires_at = ?5 + retention_us`),
		repeat: func(s store.State) bool { return s == store.StateCompleted },
	}
	failCall = tokenCall{
		sql: tokenCallSQL(`state = CASE WHEN ?7 THEN 'released' ELSE 'failed' END, error = ?6, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN ?7 THEN NULL ELSE ?5 END,
			expires_at = ?5 + retention_us`),
		repeat: func(s store.State) bool { return s == store.StateFailed || s == store.StateReleased },
	}
	heartbeatCall = tokenCall{
		sql:    tokenCallSQL(`state = 'processing', lease_expires_at = ?5 + ?6, expires_at = NULL`),
		repeat: func(store.State) bool { return false },
	}
)

// RecordComplete implements store.Store.
func (s *Store) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	result := p.Result
	if result == nil {
		result = []byte{}
	}
	return s.runTokenCall(ctx, completeCall, p.RecordID, p.Token, result)
}

// RecordFail implements store.Store.
func (s *Store) RecordFail(ctx context.Context, p *store.FailParams) (*store.Record, error) {
	return s.runTokenCall(ctx, failCall, p.RecordID, p.Token, p.Error, p.Retryable)
}

// RecordHeartbeat implements store.Store.
func (s *Store) RecordHeartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.Record, error) {
	return s.runTokenCall(ctx, heartbeatCall, p.RecordID, p.Token, p.LeaseTTL.Microseconds())
}

func (s *Store) runTokenCall(ctx context.Context, call tokenCall, id store.RecordID, token int64, args ...any) (*store.Record, error) {
	var out *store.Record
	err := s.inWriteTx(ctx, func(tx *sql.Tx, now time.Time) error {
		all := append([]any{id.Tenant, id.Namespace, id.Key, token, now.UnixMicro()}, args...)
		rec, err := scanRecord(s.inTx(ctx, tx, call.sql).QueryRowContext(ctx, all...))
		if err == nil {
			out = rec
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		rec, err = getRecord(ctx, s.inTx(ctx, tx, getSQL), id)
		if err != nil {
			return err // sql.ErrNoRows becomes store.ErrNotFound
		}
		switch {
		case rec.Token != token:
			return store.ErrLeaseLost
		case call.repeat(rec.State):
			out = rec
			return nil
		case rec.State != store.StateProcessing && rec.State != store.StateExpired:
			return store.ErrAlreadyTerminal
		}
		// The update and the read ran under one write lock, so the row the
		// update skipped cannot be one it should have changed.
		return fmt.Errorf("sqlite: %s/%s/%s: state %s with the current token, yet the update applied nothing",
			id.Tenant, id.Namespace, id.Key, rec.State)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
