package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
)

// tokenCall is one of the calls that must present the record's current
// token. Its update applies only with that token while the record is
// PROCESSING or EXPIRED; when it applies nothing, the second branch reports
// the row so that the caller can tell why, in the same round trip.
type tokenCall struct {
	sql string
	// repeat reports whether a record in this state, holding the caller's
	// token, is what this very call produced earlier: a retry after a lost
	// response, answered with the stored record.
	repeat func(store.State) bool
}

func tokenCallSQL(set string) string {
	return `
WITH changed AS (
	UPDATE idem_records SET ` + set + `, updated_at = now()
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND token = $4
		AND state IN ('processing', 'expired')
	RETURNING ` + recordCols + `
)
SELECT true, changed.* FROM changed
UNION ALL
SELECT false, ` + recordCols + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM changed)`
}

var (
	completeCall = tokenCall{
		sql: tokenCallSQL(`state = 'completed', result = $5, error = NULL, lease_expires_at = NULL,
			completed_at = now(), expires_at = now() + retention`),
		repeat: func(s store.State) bool { return s == store.StateCompleted },
	}
	failCall = tokenCall{
		sql: tokenCallSQL(`state = CASE WHEN $6::boolean THEN 'released' ELSE 'failed' END, error = $5::text, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN $6::boolean THEN NULL ELSE now() END,
			expires_at = now() + retention`),
		repeat: func(s store.State) bool { return s == store.StateFailed || s == store.StateReleased },
	}
	heartbeatCall = tokenCall{
		sql: tokenCallSQL(`state = 'processing', lease_expires_at = now() + $5::bigint * interval '1 microsecond',
			expires_at = NULL`),
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
	return s.runTokenCall(ctx, heartbeatCall, p.RecordID, p.Token, micros(p.LeaseTTL))
}

func (s *Store) runTokenCall(ctx context.Context, call tokenCall, id store.RecordID, token int64, args ...any) (*store.Record, error) {
	all := append([]any{id.Tenant, id.Namespace, id.Key, token}, args...)
	for try := 0; try < maxStatementTries; try++ {
		var changed bool
		rec, err := scanRecord(s.db.QueryRow(ctx, call.sql, all...), &changed)
		if err != nil {
			return nil, interpretError(err) // pgx.ErrNoRows becomes store.ErrNotFound
		}
		switch {
		case changed:
			return rec, nil
		case rec.Token != token:
			return nil, store.ErrLeaseLost
		case call.repeat(rec.State):
			return rec, nil
		case rec.State != store.StateProcessing && rec.State != store.StateExpired:
			return nil, store.ErrAlreadyTerminal
		}
		// The snapshot shows a row this call should have changed: another
		// transaction changed it while the statement waited for its lock.
		// A new statement sees what it did.
	}
	return nil, store.ErrContention
}
