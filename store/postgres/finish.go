package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
)

// tokenAppliesSQL is the condition under which a token call changes a
// record: token is its current token, and its lease has not been ended by a
// Complete, Fail or an operator (an EXPIRED or UNRESOLVED record still takes
// its holder's late call). alias qualifies the record's columns ("" for
// none).
func tokenAppliesSQL(alias, token string) string {
	a := ""
	if alias != "" {
		a = alias + "."
	}
	return a + "token = " + token + " AND " + a + "state IN ('processing', 'expired', 'unresolved')"
}

// tokenCallSQL is a token-bearing call in one statement: its update applies
// only with the record's current token while the record is PROCESSING,
// EXPIRED or UNRESOLVED (tokenAppliesSQL); when it applies nothing, the
// second branch reports the row so that the caller can tell why, in the
// same round trip. $1–$3 are the record's id,
// $4 the token, $5 on the call's own arguments (store.TokenCall.Args). When
// wakes, the update notifies the record's waiting Claims if its waiters flag
// is set (wait.go).
func tokenCallSQL(set string, wakes bool) string {
	return `
WITH changed AS (
	UPDATE idem_records SET ` + set + `, updated_at = now()
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND ` + tokenAppliesSQL("", "$4") + `
	RETURNING ` + recordCols + wakeCol("idem_records", wakes) + `
)
SELECT true, ` + recordNames + ` FROM changed
UNION ALL
SELECT false, ` + recordCols + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM changed)`
}

// tokenCalls is each token-bearing call's statement.
var tokenCalls = [...]string{
	store.CallComplete: tokenCallSQL(`state = 'completed', result = $5, error = NULL, lease_expires_at = NULL,
			completed_at = now(), expires_at = now() + retention`, true),
	store.CallFail: tokenCallSQL(`state = CASE WHEN $6::boolean THEN 'released' ELSE 'failed' END, error = $5::text, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN $6::boolean THEN NULL ELSE now() END,
			expires_at = now() + retention`, true),
	store.CallHeartbeat: tokenCallSQL(`state = 'processing', lease_expires_at = now() + $5::bigint * interval '1 microsecond',
			expires_at = NULL`, false),
}

// runTokenCall is the store.TokenCalls the Store embeds. On a pool it runs
// the call through its kind's coalescer (coalesce.go), which runs its
// statements detached from the caller; in a transaction it runs the
// single-row statement itself.
func (s *Store) runTokenCall(ctx context.Context, call *store.TokenCall) (*store.Record, error) {
	c := s.tokens[call.Kind]
	if c == nil {
		return detached(ctx, s, func(ctx context.Context, db dbtx) (*store.Record, error) {
			return tokenCallTries(ctx, db, call)
		})
	}
	for try := 0; try < maxStatementTries; try++ {
		out, err := c.do(ctx, call.ID, call)
		if err != nil || out.settled {
			return out.rec, err
		}
		// The snapshot shows a row this call should have changed: another
		// transaction changed it while the statement waited for its lock.
		// A new statement sees what it did.
	}
	return nil, store.ErrContention
}

// tokenCallTries runs the single-row statement of a token call until it
// settles.
func tokenCallTries(ctx context.Context, db dbtx, call *store.TokenCall) (*store.Record, error) {
	for try := 0; try < maxStatementTries; try++ {
		rec, settled, err := tokenCallOnce(ctx, db, call)
		if err != nil || settled {
			return rec, err
		}
	}
	return nil, store.ErrContention
}

// tokenCallOnce runs the single-row statement of a token call once.
func tokenCallOnce(ctx context.Context, db dbtx, call *store.TokenCall) (*store.Record, bool, error) {
	args := append([]any{call.ID.Tenant, call.ID.Namespace, call.ID.Key, call.Token}, call.Args...)
	var changed bool
	rec, err := scanRecord(db.QueryRow(ctx, tokenCalls[call.Kind], args...), &changed)
	if err != nil {
		err = interpretError(err) // pgx.ErrNoRows becomes store.ErrNotFound
		return nil, err == store.ErrNotFound, err
	}
	return settleTokenCall(call, rec, changed)
}

// settleTokenCall answers a token call from the row its statement returned.
// settled is false when the row should have changed and did not.
func settleTokenCall(call *store.TokenCall, rec *store.Record, changed bool) (*store.Record, bool, error) {
	if changed {
		return rec, true, nil
	}
	rec, err := call.Settle(rec)
	return rec, rec != nil || err != nil, err
}
