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
	once := func() (tokenRow, error) { return s.tokens[call.Kind].do(ctx, call.RecordID, call) }
	if s.tokens[call.Kind] == nil {
		return detached(ctx, s, func(ctx context.Context, db dbtx) (*store.Record, error) {
			return tokenCallTries(call, func() (tokenRow, error) { return tokenCallOnce(ctx, db, call) })
		})
	}
	return tokenCallTries(call, once)
}

// tokenRow is what a token call's statement did: changed rec, or found it
// so that the change did not apply (rec nil: there is no such record).
type tokenRow struct {
	changed bool
	rec     *store.Record
}

// tokenCallTries runs a token call's statement (once) until it settles, at
// most maxStatementTries times.
func tokenCallTries(call *store.TokenCall, once func() (tokenRow, error)) (*store.Record, error) {
	for try := 0; try < maxStatementTries; try++ {
		row, err := once()
		switch {
		case err != nil:
			return nil, err
		case row.rec == nil:
			return nil, store.ErrNotFound
		case row.changed:
			return row.rec, nil
		}
		switch d := call.Decide(row.rec); d.Action {
		case store.ChangeRepeat:
			return row.rec, nil
		case store.ChangeRefuse:
			return nil, d.Err
		}
		// ChangeApplies: the snapshot shows a row this call should have
		// changed: another transaction changed it while the statement
		// waited for its lock. A new statement sees what it did.
	}
	return nil, store.ErrContention
}

// tokenCallOnce runs the single-row statement of a token call once.
func tokenCallOnce(ctx context.Context, db dbtx, call *store.TokenCall) (tokenRow, error) {
	var row tokenRow
	var err error
	switch call.Kind {
	case store.CallComplete:
		row.rec, err = scanRecord(db.QueryRow(ctx, tokenCalls[call.Kind], call.Tenant, call.Namespace, call.Key, call.Token,
			call.Result), &row.changed)
	case store.CallFail:
		row.rec, err = scanRecord(db.QueryRow(ctx, tokenCalls[call.Kind], call.Tenant, call.Namespace, call.Key, call.Token,
			call.Error, call.Retryable), &row.changed)
	case store.CallHeartbeat:
		row.rec, err = scanRecord(db.QueryRow(ctx, tokenCalls[call.Kind], call.Tenant, call.Namespace, call.Key, call.Token,
			micros(call.LeaseTTL)), &row.changed)
	}
	if err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return tokenRow{}, nil
		}
		return tokenRow{}, err
	}
	return row, nil
}
