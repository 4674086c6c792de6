package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// The multi-row statements the coalescers send (coalesce.go). Each takes the
// batch as parallel arrays, one element per call, sorted by primary key, and
// answers with the rows it wrote and the rows it read (a Claim that took a
// record over gets both; claimBatchSQL says which wins); the Go side
// matches the rows to the calls by primary key (unique within a batch).

// recordColsOf is recordCols qualified by a table alias.
func recordColsOf(alias string) string {
	cols := []string{"tenant", "namespace", "key", "state", "token", "attempt", "claimant", "fingerprint",
		"lease_expires_at", "(extract(epoch FROM " + alias + ".retention) * 1000000)::bigint AS retention_us",
		"result", "error", "created_at", "updated_at", "completed_at", "expires_at", "policy", "hold",
		"(coalesce(" + alias + ".resolved_token = " + alias + ".token, false)) AS resolved"}
	for i, c := range cols {
		if !strings.HasPrefix(c, "(") {
			cols[i] = alias + "." + c
		}
	}
	return strings.Join(cols, ", ")
}

// Plans. These statements run as prepared statements with generic plans
// (store.go), planned once per connection with the statistics of that
// moment: on a new deployment, an empty table that Postgres takes for ten
// pages. A join from the batch's arrays to idem_records would then be planned
// as a hash join over a sequential scan of the whole table, and that plan
// would stay with the connection while the table grows, so every batch would
// read every record. So no statement here joins idem_records to anything:
// each record is read through a LATERAL subquery that the planner cannot
// flatten into a join (OFFSET 0, or its FOR UPDATE) and so can only run as a
// lookup of the primary key per row, and each row is changed by INSERT … ON
// CONFLICT, whose conflict check goes through the primary key by
// construction. TestHotStatementPlansUseThePrimaryKey checks the plans on an
// empty table.

// claimBatchSQL is claimSQL for many keys. looked pairs each call with its
// record as the statement's snapshot sees it (NULLs when there is none);
// only the calls whose record is absent or may be taken over go to the
// INSERT, in primary-key order, so that the ON CONFLICT row locks are taken
// in that order by every batch. The statement answers with every row it
// wrote (acquired) and every record it saw (not acquired): a call with both
// was acquired, and the Go side keeps that answer. Calls answered from what
// looked saw draw no token and lock nothing. A call with neither row (a
// concurrent insert the snapshot missed) is tried again in a later
// statement.
var claimBatchSQL = `
WITH looked AS (
	SELECT i.*, r.*
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bigint[], $7::bigint[], $8::text[], $9::boolean[])
		WITH ORDINALITY AS i(in_tenant, in_namespace, in_key, in_claimant, in_fingerprint, in_lease_us, in_retention_us, in_policy, in_hold, ord)
	LEFT JOIN LATERAL (
		SELECT ` + recordColsOf("r") + `
		FROM idem_records r WHERE r.tenant = i.in_tenant AND r.namespace = i.in_namespace AND r.key = i.in_key
		OFFSET 0
	) r ON true
),
claimed AS (
	INSERT INTO idem_records AS r (tenant, namespace, key, state, token, attempt, claimant, fingerprint,
		lease_expires_at, retention, created_at, updated_at, policy, hold)
	SELECT l.in_tenant, l.in_namespace, l.in_key, 'processing', nextval('idem_token_seq'), 1, l.in_claimant, l.in_fingerprint,
		now() + l.in_lease_us * interval '1 microsecond', l.in_retention_us * interval '1 microsecond', now(), now(), l.in_policy, l.in_hold
	FROM looked l
	WHERE l.state IS NULL
		OR (` + takeableSQL("l", "l.in_fingerprint") + `)
	ORDER BY l.ord
` + claimTakeoverSQL + `
)
SELECT true, now(), claimed.* FROM claimed
UNION ALL
SELECT false, now(), ` + recordNames + ` FROM looked WHERE state IS NOT NULL`

// tokenChange is how one kind of token call changes a record, for
// tokenBatchSQL.
type tokenChange struct {
	// cols and vals name columns of the row the batch proposes for each
	// record, and the values it proposes (from the locked row l, whose
	// columns include the call's own arguments a1, a2, …); set may read
	// them as excluded.<col>.
	cols, vals string
	// set is the ON CONFLICT update: the columns the call changes.
	set string
}

// tokenBatchSQL is tokenCallSQL for many keys. locked takes the batch's row
// locks first, one primary-key lookup per call in the order of the arrays,
// which the coalescer sorts by primary key, so that batches sharing keys
// never deadlock; a row changed concurrently is locked in its newest
// version, so a row the change does not apply to is reported as it now
// stands and needs no second read. The statement answers with every row it
// changed, and every row it locked that the change does not apply to: the
// change's condition is judged on the version locked, which no one else can
// change before this statement commits, so each call gets one row (the Go
// side would keep a changed row over a locked one all the same).
//
// The change itself is an INSERT of the locked rows that always conflicts
// (each row exists and this statement holds its lock, so none can have
// gone) and so updates: the update applies only with the call's token while
// the record is PROCESSING, EXPIRED or UNRESOLVED, judged on the newest row
// version. The proposed row carries the
// locked row's own values for the columns the table requires, so it passes
// every constraint that is checked before the conflict is found. argTypes
// are the SQL types of the call's own arrays, bound from $5 on as a1, a2, ….
// When wakes, the update notifies the waiting Claims of the rows it changed
// that have their waiters flag set (wait.go).
func tokenBatchSQL(change tokenChange, wakes bool, argTypes ...string) string {
	params := "$1::text[], $2::text[], $3::text[], $4::bigint[]"
	names := "tenant, namespace, key, token"
	carried := "i.token AS in_token"
	for n, typ := range argTypes {
		a := "a" + string(rune('1'+n))
		params += ", $" + string(rune('5'+n)) + "::" + typ + "[]"
		names += ", " + a
		carried += ", i." + a
	}
	return `
WITH locked AS (
	SELECT ` + carried + `, r.*
	FROM unnest(` + params + `) WITH ORDINALITY AS i(` + names + `, ord)
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

// followClaim answers f, a Claim of the key that leader's statement wrote or
// read, from what the statement found, as if f ran right after it, when
// f's decision on that record is an answer (store.ClaimAnswer): a replay,
// IN_PROGRESS on leader's lease, the same claimant's ACQUIRED again, a
// fingerprint mismatch. It leaves f to a statement of its own (false) when
// the statement found no record, or when f would write: take the record
// over, or make a held record whose lease ran out UNRESOLVED. A held lease
// that ran out is made UNRESOLVED by the leader's caller once this
// statement has answered; the follower, in a later statement, reads
// UNRESOLVED when that has committed, and otherwise finds the lease run out
// too and makes it UNRESOLVED itself (one of them wins; claimTries makes
// the others look again).
//
// The answer is true at a moment within f's call: f was queued before the
// statement began and is answered after it ended. A record that leader's
// statement wrote is f's from the statement's commit on, which no other
// write can come between while the statement holds the row's lock; a record
// it only read is the statement's snapshot, taken after f was queued, and is
// what leader itself is answered from.
func followClaim(leader, f *claimCall) bool {
	row := leader.res
	if row.rec == nil || store.DecideClaim(row.rec, f.params, row.now).Action != store.ClaimAnswer {
		return false
	}
	// A Record of its own (the byte slices it shares with the leader's are
	// never written).
	rec := *row.rec
	f.res, f.err = claimRow{rec: &rec, now: row.now}, nil
	return true
}

type claimCall = pending[*store.ClaimParams, claimRow]

// runClaims runs one batch of Claims.
func (s *Store) runClaims(ctx context.Context, batch []*claimCall) {
	if len(batch) == 1 && !s.alwaysBatchSQL {
		c := batch[0]
		c.res, c.err = claimOnce(ctx, s.db, c.params)
		if c.err != nil {
			c.err = batchError(c.err)
		}
		return
	}
	n := len(batch)
	tenants, namespaces, keys, claimants := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	fingerprints := make([][]byte, n)
	leases, retentions, policies, holds := make([]int64, n), make([]int64, n), make([]string, n), make([]bool, n)
	for i, c := range batch {
		p := c.params
		tenants[i], namespaces[i], keys[i], claimants[i] = p.Tenant, p.Namespace, p.Key, p.Claimant
		fingerprints[i] = p.Fingerprint
		if fingerprints[i] == nil {
			fingerprints[i] = []byte{}
		}
		leases[i], retentions[i], policies[i], holds[i] = micros(p.LeaseTTL), micros(p.Retention), p.Policy, p.Hold
	}
	rows, err := s.db.Query(ctx, claimBatchSQL, tenants, namespaces, keys, claimants, fingerprints, leases, retentions, policies, holds)
	if err != nil {
		failBatch(batch, batchError(err))
		return
	}
	defer rows.Close()
	var (
		acquired bool
		dbNow    pgtype.Timestamptz
	)
	for rows.Next() {
		rec, err := scanRecord(rows, &acquired, &dbNow)
		if err != nil {
			rows.Close()
			failBatch(batch, batchError(err))
			return
		}
		i := findCall(batch, rec.RecordID)
		if i < 0 {
			continue
		}
		c := batch[i]
		if c.res.acquired {
			continue // the record as it was before this statement acquired it
		}
		c.res = claimRow{acquired: acquired, rec: rec, now: dbNow.Time}
	}
	// The rows are only known to be committed once the statement has ended
	// without an error.
	if err := rows.Err(); err != nil {
		failBatch(batch, batchError(err))
	}
}

type tokenBatchCall = pending[*store.TokenCall, tokenRow]

// tokenKind is the batch statement of one kind of token call.
type tokenKind struct {
	name  string // the kind's label in idem_db_batch_calls
	batch string
	// arrays turns a batch's own arguments (store.TokenCall.Args) into the
	// arrays bound from $5.
	arrays func(batch []*tokenBatchCall) []any
}

// tokenKinds is each token-bearing call's batch statement, indexed by
// store.TokenCallKind.
var tokenKinds = [...]*tokenKind{
	store.CallComplete: {
		name: "complete",
		batch: tokenBatchSQL(tokenChange{
			cols: "state, result", vals: "l.state, l.a1",
			set: `state = 'completed', result = excluded.result, error = NULL, lease_expires_at = NULL,
			completed_at = now(), expires_at = now() + r.retention`,
		}, true, "bytea"),
		arrays: func(batch []*tokenBatchCall) []any {
			results := make([][]byte, len(batch))
			for i, c := range batch {
				results[i] = c.params.Result
			}
			return []any{results}
		},
	},
	store.CallFail: {
		name: "fail",
		batch: tokenBatchSQL(tokenChange{
			cols: "state, error", vals: "CASE WHEN l.a2 THEN 'released' ELSE 'failed' END, l.a1",
			set: `state = excluded.state, error = excluded.error, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN excluded.state = 'released' THEN NULL ELSE now() END,
			expires_at = now() + r.retention`,
		}, true, "text", "boolean"),
		arrays: func(batch []*tokenBatchCall) []any {
			errs, retryable := make([]string, len(batch)), make([]bool, len(batch))
			for i, c := range batch {
				errs[i], retryable[i] = c.params.Error, c.params.Retryable
			}
			return []any{errs, retryable}
		},
	},
	store.CallHeartbeat: {
		name: "heartbeat",
		batch: tokenBatchSQL(tokenChange{
			cols: "state, lease_expires_at", vals: "l.state, now() + l.a1 * interval '1 microsecond'",
			set: `state = 'processing', lease_expires_at = excluded.lease_expires_at, expires_at = NULL`,
		}, false, "bigint"),
		arrays: func(batch []*tokenBatchCall) []any {
			leases := make([]int64, len(batch))
			for i, c := range batch {
				leases[i] = micros(c.params.LeaseTTL)
			}
			return []any{leases}
		},
	},
}

// runTokens returns the batch runner of one kind of token call.
func (s *Store) runTokens(kind *tokenKind) func(ctx context.Context, batch []*tokenBatchCall) {
	return func(ctx context.Context, batch []*tokenBatchCall) {
		if len(batch) == 1 && !s.alwaysBatchSQL {
			c := batch[0]
			c.res, c.err = tokenCallOnce(ctx, s.db, c.params)
			if c.err != nil {
				c.err = batchError(c.err)
			}
			return
		}
		n := len(batch)
		tenants, namespaces, keys, tokens := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
		for i, c := range batch {
			tenants[i], namespaces[i], keys[i], tokens[i] = c.id.Tenant, c.id.Namespace, c.id.Key, c.params.Token
		}
		args := append([]any{tenants, namespaces, keys, tokens}, kind.arrays(batch)...)
		rows, err := s.db.Query(ctx, kind.batch, args...)
		if err != nil {
			failBatch(batch, batchError(err))
			return
		}
		defer rows.Close()
		// Each call gets one row; were a call to get both its changed and
		// its locked row, the changed one is its answer.
		answered, changedRow := make([]bool, n), make([]bool, n)
		var changed bool
		for rows.Next() {
			rec, err := scanRecord(rows, &changed)
			if err != nil {
				rows.Close()
				failBatch(batch, batchError(err))
				return
			}
			i := findCall(batch, rec.RecordID)
			if i < 0 || changedRow[i] || (answered[i] && !changed) {
				continue
			}
			answered[i], changedRow[i] = true, changed
			batch[i].res = tokenRow{changed: changed, rec: rec}
		}
		if err := rows.Err(); err != nil {
			failBatch(batch, batchError(err))
			return
		}
		// A call without a row has no record (the lock skips a row
		// deleted under the statement, as a single read misses it): its
		// tokenRow stays empty.
	}
}

// findCall is the index of the call of a sorted batch that addresses id, or
// -1.
func findCall[P, R any](batch []*pending[P, R], id store.RecordID) int {
	lo, hi := 0, len(batch)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if compareIDs(batch[m].id, id) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(batch) && batch[lo].id == id {
		return lo
	}
	return -1
}

// failBatch gives every call of a batch the same error, replacing any
// answer a row had given: a statement that failed committed nothing.
func failBatch[P, R any](batch []*pending[P, R], err error) {
	var zero R
	for _, c := range batch {
		c.res, c.err = zero, err
	}
}
