package postgres

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
)

// tokenRow is what a token call's statement did: changed rec, or found it
// so that the change does not apply (store.TokenCall.Decide says why). rec
// is nil when there is no such record.
type tokenRow struct {
	changed bool
	rec     *store.Record
}

// tokenAppliesSQL is the condition under which a token call changes a
// record: token is its current token, and no Complete, Fail or operator
// ended its lease (an EXPIRED or UNRESOLVED record still takes its holder's
// late call). alias qualifies the record's columns ("" for none).
func tokenAppliesSQL(alias, token string) string {
	a := ""
	if alias != "" {
		a = alias + "."
	}
	return a + "token = " + token + " AND " + a + "state IN ('processing', 'expired', 'unresolved')"
}

// tokenOneSQL is a token-bearing call in one statement: the update where
// tokenAppliesSQL holds, else the row, so that the caller learns why in the
// same round trip. $1–$3 are the record's id, $4 the token, $5 on the
// call's own values; when wakes, the update notifies waiting Claims; note,
// when not empty, is a CTE that keeps the change on the timeline.
func tokenOneSQL(set string, wakes bool, note string) string {
	return `
WITH changed AS (
	UPDATE idem_records SET ` + set + `, updated_at = now()
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND ` + tokenAppliesSQL("", "$4") + `
	RETURNING ` + recordCols + wakeCol("idem_records", wakes) + `
)` + note + `
SELECT true, ` + recordNames + ` FROM changed
UNION ALL
SELECT false, ` + recordCols + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM changed)`
}

// tokenChange is how one kind of token call changes a record, for
// tokenManySQL: arrays are its own arrays after the ids and tokens, names
// their elements' names; cols and vals the columns and values it proposes
// for each row (set reads them as excluded.<col>); set the update; note,
// when not empty, a CTE that keeps the change on the timeline.
type tokenChange struct {
	arrays, names, cols, vals, set, note string
}

// tokenManySQL is tokenOneSQL for many keys. locked takes the row locks
// first, one primary-key lookup per call in primary-key order, so that
// batches sharing keys never deadlock; a row changed concurrently is locked
// in its newest version, so each call gets one row, changed or as it now
// stands. The change is an INSERT of the locked rows, which always
// conflicts (each row exists and is locked) and so updates where
// tokenAppliesSQL holds; the proposed row carries the locked row's own
// values for the required columns, so it passes the constraints checked
// before the conflict.
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
)` + change.note + `
SELECT true, ` + recordNames + ` FROM changed
UNION ALL
SELECT false, ` + recordNames + ` FROM locked
WHERE NOT (` + tokenAppliesSQL("", "in_token") + `)`
}

// The statements of each kind of token call, one row and many. A Complete
// and a Fail end the lease, and so wake the record's waiting Claims.
var (
	completeSet = `state = 'completed', result = $5, error = NULL, lease_expires_at = NULL,
			completed_at = now(), expires_at = now() + retention`
	failSet = `state = CASE WHEN $6::boolean THEN 'released' ELSE 'failed' END, error = $5::text, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN $6::boolean THEN NULL ELSE now() END,
			expires_at = now() + retention`
	heartbeatSet = `state = 'processing', lease_expires_at = now() + $5::bigint * interval '1 microsecond',
			expires_at = NULL`

	// A Fail is an exception in the record's life: its entry's kind is the
	// state it leaves, failed or released.
	failNote = entry{kind: "state", token: "token", state: "state", claimant: "claimant", err: "error"}.noteSQL("noted", "changed")

	completeOneSQL  = tokenOneSQL(completeSet, true, "")
	failOneSQL      = tokenOneSQL(failSet, true, failNote)
	heartbeatOneSQL = tokenOneSQL(heartbeatSet, false, "")

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
		note: failNote,
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
	args := append(idArrays(column(calls, func(c *store.TokenCall) store.RecordID { return c.RecordID })),
		column(calls, func(c *store.TokenCall) int64 { return c.Token }))
	var sql string
	switch kind {
	case store.CallComplete:
		sql, args = completeManySQL, append(args, column(calls, func(c *store.TokenCall) []byte { return c.Result }))
	case store.CallFail:
		sql, args = failManySQL, append(args, column(calls, func(c *store.TokenCall) string { return c.Error }),
			column(calls, func(c *store.TokenCall) bool { return c.Retryable }))
	case store.CallHeartbeat:
		sql, args = heartbeatManySQL, append(args, column(calls, func(c *store.TokenCall) int64 { return micros(c.LeaseTTL) }))
	default:
		return nil, fmt.Errorf("postgres: token call kind %d", kind)
	}
	result, err := d.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer result.Close()
	// A call without a row has no record, and keeps an empty tokenRow.
	rows := make([]tokenRow, len(calls))
	var changed bool
	for result.Next() {
		rec, err := scanRecord(result, &changed)
		if err != nil {
			return nil, interpretError(err)
		}
		if i := findID(calls, rec.RecordID, func(c *store.TokenCall) store.RecordID { return c.RecordID }); i >= 0 {
			rows[i] = tokenRow{changed: changed, rec: rec}
		}
	}
	if err := result.Err(); err != nil {
		return nil, interpretError(err)
	}
	return rows, nil
}
