package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

// The driver's token calls (Complete, Fail, Heartbeat): tokenCallOne and
// tokenCallMany run one call, or the calls of a batch of one kind, as one
// statement and return, per call, the row it changed or the row it found
// the change does not apply to. What that row means for the call is
// store.TokenCall.Decide's to say, above the driver (tokencall.go).

// tokenRow is what a token call's statement did: changed rec, or found it
// so that the change does not apply. rec is nil when there is no such
// record.
type tokenRow struct {
	changed bool
	rec     *store.Record
}

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

// tokenOneSQL is a token-bearing call in one statement: its update applies
// only with the record's current token while the record is PROCESSING,
// EXPIRED or UNRESOLVED (tokenAppliesSQL); when it applies nothing, the
// second branch reports the row so that the caller can tell why, in the
// same round trip. $1–$3 are the record's id, $4 the token, $5 on the
// call's own values (set names them). When wakes, the update notifies the
// record's waiting Claims if its waiters flag is set (wait.go).
func tokenOneSQL(set string, wakes bool) string {
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

// tokenChange is how one kind of token call changes a record, for
// tokenManySQL.
type tokenChange struct {
	// arrays are the call's own arrays, bound after the ids and the
	// tokens, and names the names unnest gives their elements.
	arrays, names string
	// cols and vals name columns of the row the batch proposes for each
	// record, and the values it proposes (from the locked row l, whose
	// columns include the call's own, by names); set may read them as
	// excluded.<col>.
	cols, vals string
	// set is the ON CONFLICT update: the columns the call changes.
	set string
}

// tokenManySQL is tokenOneSQL for many keys. locked takes the batch's row
// locks first, one primary-key lookup per call in the order of the arrays,
// which are sorted by primary key, so that batches sharing keys never
// deadlock; a row changed concurrently is locked in its newest version, so
// a row the change does not apply to is reported as it now stands and needs
// no second read. The statement answers with every row it changed, and
// every row it locked that the change does not apply to: the change's
// condition is judged on the version locked, which no one else can change
// before this statement commits, so each call gets one row.
//
// The change itself is an INSERT of the locked rows that always conflicts
// (each row exists and this statement holds its lock, so none can have
// gone) and so updates: the update applies only with the call's token while
// the record is PROCESSING, EXPIRED or UNRESOLVED, judged on the newest row
// version. The proposed row carries the locked row's own values for the
// columns the table requires, so it passes every constraint that is checked
// before the conflict is found. When wakes, the update notifies the waiting
// Claims of the rows it changed that have their waiters flag set
// (wait.go).
func tokenManySQL(change tokenChange, wakes bool) string {
	return `
WITH locked AS (
	SELECT i.token AS in_token, ` + change.names + `, r.*
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], ` + change.arrays + `)
		WITH ORDINALITY AS i(tenant, namespace, key, token, ` + change.names + `, ord)
	CROSS JOIN LATERAL (
		SELECT ` + recordColsOf("r") + `, r.retention
		FROM idem_records r WHERE r.tenant = i.tenant AND r.namespace = i.namespace AND r.key = i.key
		FOR UPDATE
	) r
),
changed AS (
	INSERT INTO idem_records AS r (tenant, namespace, key, token, attempt, retention, created_at, updated_at, ` + change.cols + `)
	SELECT l.tenant, l.namespace, l.key, l.in_token, l.attempt, l.retention, l.created_at, l.updated_at, ` + change.vals + `
	FROM locked l
	ON CONFLICT (tenant, namespace, key) DO UPDATE SET ` + change.set + `, updated_at = now()
	WHERE ` + tokenAppliesSQL("r", "excluded.token") + `
	RETURNING ` + recordColsOf("r") + wakeCol("r", wakes) + `
)
SELECT true, ` + recordNames + ` FROM changed
UNION ALL
SELECT false, ` + recordNames + ` FROM locked
WHERE NOT (` + tokenAppliesSQL("", "in_token") + `)`
}

// The statements of each kind of token call, one row and many. A Complete
// and a Fail end the lease, and so wake the record's waiting Claims; a
// Heartbeat does not.
var (
	completeSet = `state = 'completed', result = $5, error = NULL, lease_expires_at = NULL,
			completed_at = now(), expires_at = now() + retention`
	failSet = `state = CASE WHEN $6::boolean THEN 'released' ELSE 'failed' END, error = $5::text, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN $6::boolean THEN NULL ELSE now() END,
			expires_at = now() + retention`
	heartbeatSet = `state = 'processing', lease_expires_at = now() + $5::bigint * interval '1 microsecond',
			expires_at = NULL`

	completeOneSQL  = tokenOneSQL(completeSet, true)
	failOneSQL      = tokenOneSQL(failSet, true)
	heartbeatOneSQL = tokenOneSQL(heartbeatSet, false)

	completeManySQL = tokenManySQL(tokenChange{
		arrays: "$5::bytea[]", names: "in_result",
		cols: "state, result", vals: "l.state, l.in_result",
		set: `state = 'completed', result = excluded.result, error = NULL, lease_expires_at = NULL,
			completed_at = now(), expires_at = now() + r.retention`,
	}, true)
	failManySQL = tokenManySQL(tokenChange{
		arrays: "$5::text[], $6::boolean[]", names: "in_error, in_retryable",
		cols: "state, error", vals: "CASE WHEN l.in_retryable THEN 'released' ELSE 'failed' END, l.in_error",
		set: `state = excluded.state, error = excluded.error, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN excluded.state = 'released' THEN NULL ELSE now() END,
			expires_at = now() + r.retention`,
	}, true)
	heartbeatManySQL = tokenManySQL(tokenChange{
		arrays: "$5::bigint[]", names: "in_lease_us",
		cols: "state, lease_expires_at", vals: "l.state, now() + l.in_lease_us * interval '1 microsecond'",
		set: `state = 'processing', lease_expires_at = excluded.lease_expires_at, expires_at = NULL`,
	}, false)
)

// tokenCallOne runs call as its kind's one-row statement.
func (d driver) tokenCallOne(ctx context.Context, call *store.TokenCall) (tokenRow, error) {
	args := []any{call.Tenant, call.Namespace, call.Key, call.Token}
	var sql string
	switch call.Kind {
	case store.CallComplete:
		sql, args = completeOneSQL, append(args, call.Result)
	case store.CallFail:
		sql, args = failOneSQL, append(args, call.Error, call.Retryable)
	case store.CallHeartbeat:
		sql, args = heartbeatOneSQL, append(args, micros(call.LeaseTTL))
	default:
		return tokenRow{}, fmt.Errorf("postgres: token call kind %d", call.Kind)
	}
	var row tokenRow
	rec, err := scanRecord(d.q.QueryRow(ctx, sql, args...), &row.changed)
	if err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return tokenRow{}, nil // no such record
		}
		return tokenRow{}, err
	}
	row.rec = rec
	return row, nil
}

// tokenCallMany runs calls, all of kind and sorted by primary key with
// distinct keys, as the kind's many-row statement and returns each call's
// row, in the order of calls.
func (d driver) tokenCallMany(ctx context.Context, kind store.TokenCallKind, calls []*store.TokenCall) ([]tokenRow, error) {
	n := len(calls)
	tenants, namespaces, keys, tokens := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, c := range calls {
		tenants[i], namespaces[i], keys[i], tokens[i] = c.Tenant, c.Namespace, c.Key, c.Token
	}
	var (
		result pgx.Rows
		err    error
	)
	switch kind {
	case store.CallComplete:
		results := make([][]byte, n)
		for i, c := range calls {
			results[i] = c.Result
		}
		result, err = d.q.Query(ctx, completeManySQL, tenants, namespaces, keys, tokens, results)
	case store.CallFail:
		errs, retryable := make([]string, n), make([]bool, n)
		for i, c := range calls {
			errs[i], retryable[i] = c.Error, c.Retryable
		}
		result, err = d.q.Query(ctx, failManySQL, tenants, namespaces, keys, tokens, errs, retryable)
	case store.CallHeartbeat:
		leases := make([]int64, n)
		for i, c := range calls {
			leases[i] = micros(c.LeaseTTL)
		}
		result, err = d.q.Query(ctx, heartbeatManySQL, tenants, namespaces, keys, tokens, leases)
	default:
		return nil, fmt.Errorf("postgres: token call kind %d", kind)
	}
	if err != nil {
		return nil, interpretError(err)
	}
	defer result.Close()
	// A call without a row has no record (the lock skips a row deleted
	// under the statement, as a single read misses it), and keeps an empty
	// tokenRow.
	rows := make([]tokenRow, n)
	var changed bool
	for result.Next() {
		rec, err := scanRecord(result, &changed)
		if err != nil {
			return nil, interpretError(err)
		}
		i := findID(calls, rec.RecordID, func(c *store.TokenCall) store.RecordID { return c.RecordID })
		if i < 0 || rows[i].changed {
			continue // a changed row wins over a locked one
		}
		rows[i] = tokenRow{changed: changed, rec: rec}
	}
	if err := result.Err(); err != nil {
		return nil, interpretError(err)
	}
	return rows, nil
}
