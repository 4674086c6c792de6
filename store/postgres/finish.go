package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
)

// tokenCallSQL is a token-bearing call in one statement: its update applies
// only with the record's current token while the record is PROCESSING or
// EXPIRED; when it applies nothing, the second branch reports the row so that
// the caller can tell why, in the same round trip. $1–$3 are the record's id,
// $4 the token, $5 on the call's own arguments (store.TokenCall.Args).
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

// tokenCalls is each token-bearing call's statement.
var tokenCalls = [...]string{
	store.CallComplete: tokenCallSQL(`state = 'completed', result = $5, error = NULL, lease_expires_at = NULL,
			completed_at = now(), expires_at = now() + retention`),
	store.CallFail: tokenCallSQL(`state = CASE WHEN $6::boolean THEN 'released' ELSE 'failed' END, error = $5::text, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN $6::boolean THEN NULL ELSE now() END,
			expires_at = now() + retention`),
	store.CallHeartbeat: tokenCallSQL(`state = 'processing', lease_expires_at = now() + $5::bigint * interval '1 microsecond',
			expires_at = NULL`),
}

// runTokenCall is the store.TokenCalls the Store embeds.
func (s *Store) runTokenCall(ctx context.Context, call *store.TokenCall) (*store.Record, error) {
	return detached(ctx, s, func(ctx context.Context, db dbtx) (*store.Record, error) {
		return tokenCallTries(ctx, db, call)
	})
}

func tokenCallTries(ctx context.Context, db dbtx, call *store.TokenCall) (*store.Record, error) {
	args := append([]any{call.ID.Tenant, call.ID.Namespace, call.ID.Key, call.Token}, call.Args...)
	for try := 0; try < maxStatementTries; try++ {
		var changed bool
		rec, err := scanRecord(db.QueryRow(ctx, tokenCalls[call.Kind], args...), &changed)
		if err != nil {
			return nil, interpretError(err) // pgx.ErrNoRows becomes store.ErrNotFound
		}
		if changed {
			return rec, nil
		}
		if rec, err := call.Settle(rec); rec != nil || err != nil {
			return rec, err
		}
		// The snapshot shows a row this call should have changed: another
		// transaction changed it while the statement waited for its lock.
		// A new statement sees what it did.
	}
	return nil, store.ErrContention
}
