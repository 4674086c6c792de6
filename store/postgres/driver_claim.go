package postgres

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// The driver's Claim: claimOne and claimMany run one Claim, or the Claims of
// a batch, as one statement and return, per call, the row it wrote or the
// row it saw. It decides in
// SQL only what it must decide under the row lock (whether to insert or
// take over); what the row it saw means for the call is store.DecideClaim's
// to say, above the driver (claim.go).

// claimRow is what a Claim's statement did for one call: acquired rec, or
// saw it as it was. rec is nil when it did neither: the statement's
// snapshot missed a row that a concurrent transaction inserted. now is the
// database's clock in the statement.
type claimRow struct {
	acquired bool
	rec      *store.Record
	now      time.Time
}

// claimOne runs the Claim p as claimOneSQL.
func (d driver) claimOne(ctx context.Context, p *store.ClaimParams) (claimRow, error) {
	var row claimRow
	var dbNow pgtype.Timestamptz
	rec, err := scanRecord(d.q.QueryRow(ctx, claimOneSQL, p.Tenant, p.Namespace, p.Key,
		p.Claimant, fingerprint(p), micros(p.LeaseTTL), micros(p.Retention), p.Policy, p.Hold), &row.acquired, &dbNow)
	if err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return claimRow{}, nil // neither written nor seen: a concurrent insert
		}
		return claimRow{}, err
	}
	row.rec, row.now = rec, dbNow.Time
	return row, nil
}

// claimNew runs the Claim p as claimNewSQL alone: it creates the record
// when there is none, and reports created false, having written nothing,
// when there is one. The statement returns only what the database chose
// (the token and the clock); the rest of the new record is p's.
func (d driver) claimNew(ctx context.Context, p *store.ClaimParams) (row claimRow, created bool, err error) {
	var (
		token     int64
		lease, at pgtype.Timestamptz
	)
	err = d.q.QueryRow(ctx, claimNewSQL, p.Tenant, p.Namespace, p.Key,
		p.Claimant, fingerprint(p), micros(p.LeaseTTL), micros(p.Retention), p.Policy, p.Hold).Scan(&token, &lease, &at)
	if err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return claimRow{}, false, nil // the key has a record
		}
		return claimRow{}, false, err
	}
	return claimRow{acquired: true, rec: newRecord(p, token, lease, at), now: at.Time}, true, nil
}

// newRecord is the record claimNewSQL created for p, as scanRecord would
// read it back: the columns the statement did not return are p's, or the
// INSERT's constants.
func newRecord(p *store.ClaimParams, token int64, lease, created pgtype.Timestamptz) *store.Record {
	var fp []byte // a copy, NULL when empty, as scanRecord reads it
	if len(p.Fingerprint) > 0 {
		fp = bytes.Clone(p.Fingerprint)
	}
	return &store.Record{
		RecordID:       p.RecordID,
		State:          store.StateProcessing,
		Token:          token,
		Attempt:        1,
		Claimant:       p.Claimant,
		Fingerprint:    fp,
		LeaseExpiresAt: utc(lease),
		Retention:      time.Duration(micros(p.Retention)) * time.Microsecond,
		CreatedAt:      utc(created),
		UpdatedAt:      utc(created),
		Policy:         p.Policy,
		Hold:           p.Hold,
	}
}

// claimIfAbsent runs the Claim p as claimIfAbsentSQL and then
// claimSeenSQL, in one round trip and one transaction: it creates the
// record when there is none, and otherwise reads it as it stands once any
// transaction that was inserting it has ended. It takes over nothing: what
// the row it read means for p, and whether p must then take the record over
// with claimOne, is for the caller to decide. It is the lone Claim of a key
// this process lately saw with a record; claimNew is that of any other
// (claim.go).
func (d driver) claimIfAbsent(ctx context.Context, p *store.ClaimParams) (claimRow, error) {
	b := &pgx.Batch{}
	b.Queue(claimIfAbsentSQL, p.Tenant, p.Namespace, p.Key,
		p.Claimant, fingerprint(p), micros(p.LeaseTTL), micros(p.Retention), p.Policy, p.Hold)
	b.Queue(claimSeenSQL, p.Tenant, p.Namespace, p.Key)
	result := d.q.SendBatch(ctx, b)
	var row claimRow
	var dbNow pgtype.Timestamptz
	rec, err := scanRecord(result.QueryRow(), &row.acquired, &dbNow)
	if errors.Is(err, pgx.ErrNoRows) {
		rec, err = scanRecord(result.QueryRow(), &row.acquired, &dbNow)
	}
	// The row is only known to be committed once the transaction has ended
	// without an error.
	if closeErr := result.Close(); err == nil || errors.Is(err, pgx.ErrNoRows) && closeErr != nil {
		err = closeErr
	}
	if err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return claimRow{}, nil // neither written nor seen: deleted meanwhile
		}
		return claimRow{}, err
	}
	row.rec, row.now = rec, dbNow.Time
	return row, nil
}

// claimMany runs calls, sorted by primary key with distinct keys, as
// claimManySQL and returns each call's row, in the order of calls.
func (d driver) claimMany(ctx context.Context, calls []*store.ClaimParams) ([]claimRow, error) {
	rows := make([]claimRow, len(calls))
	n := len(calls)
	tenants, namespaces, keys, claimants := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	fingerprints := make([][]byte, n)
	leases, retentions, policies, holds := make([]int64, n), make([]int64, n), make([]string, n), make([]bool, n)
	for i, p := range calls {
		tenants[i], namespaces[i], keys[i], claimants[i] = p.Tenant, p.Namespace, p.Key, p.Claimant
		fingerprints[i] = fingerprint(p)
		leases[i], retentions[i], policies[i], holds[i] = micros(p.LeaseTTL), micros(p.Retention), p.Policy, p.Hold
	}
	result, err := d.q.Query(ctx, claimManySQL, tenants, namespaces, keys, claimants, fingerprints, leases, retentions, policies, holds)
	if err != nil {
		return nil, interpretError(err)
	}
	defer result.Close()
	var (
		acquired bool
		dbNow    pgtype.Timestamptz
	)
	for result.Next() {
		rec, err := scanRecord(result, &acquired, &dbNow)
		if err != nil {
			return nil, interpretError(err)
		}
		i := findID(calls, rec.RecordID, func(p *store.ClaimParams) store.RecordID { return p.RecordID })
		if i < 0 || rows[i].acquired {
			continue // a row the statement wrote wins over the one it saw
		}
		rows[i] = claimRow{acquired: acquired, rec: rec, now: dbNow.Time}
	}
	// The rows are only known to be committed once the statement has ended
	// without an error.
	if err := result.Err(); err != nil {
		return nil, interpretError(err)
	}
	return rows, nil
}

// fingerprint is p's fingerprint as the column holds it: never NULL.
func fingerprint(p *store.ClaimParams) []byte {
	if p.Fingerprint == nil {
		return []byte{}
	}
	return p.Fingerprint
}

// claimOneSQL is a Claim in one statement. cur reads the row as the statement's
// snapshot sees it. When that row is live (held, finished, or guarded by
// another fingerprint) nothing is written and cur answers: replays and
// IN_PROGRESS take no lock and draw no token. Otherwise the INSERT creates the
// record, or on conflict the UPDATE takes over a RELEASED or EXPIRED record, or
// a PROCESSING one whose lease ran out, unless the fingerprints differ; the
// UPDATE re-checks that against the newest row version under its lock. The
// token of a takeover is drawn inside the UPDATE, after the row lock is held,
// so it is greater than every token handed out before. A takeover clears the
// row's waiters flag (wait.go): it was set for the lease that just ended.
var claimOneSQL = `
WITH cur AS (
	SELECT ` + recordCols + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3
),
claimed AS (
	INSERT INTO idem_records AS r (tenant, namespace, key, state, token, attempt, claimant, fingerprint,
		lease_expires_at, retention, created_at, updated_at, policy, hold)
	SELECT $1::text, $2::text, $3::text, 'processing', nextval('idem_token_seq'), 1, $4::text, $5::bytea,
		now() + $6::bigint * interval '1 microsecond', $7::bigint * interval '1 microsecond', now(), now(), $8::text, $9::boolean
	WHERE NOT EXISTS (
		SELECT 1 FROM cur
		WHERE NOT (` + takeableSQL("cur", "$5::bytea") + `))
` + claimTakeoverSQL + `
)
SELECT true, now(), claimed.* FROM claimed
UNION ALL
SELECT false, now(), cur.* FROM cur WHERE NOT EXISTS (SELECT 1 FROM claimed)`

// claimIfAbsentInsert creates the record of a Claim whose key has none, and
// does nothing otherwise: the common first Claim of a key, without the
// takeover's update or the reading of claimOneSQL. NOT EXISTS keeps a key
// that has a record from drawing a token (and the transaction from writing
// the sequence); ON CONFLICT waits for a concurrent insert of the key that
// the statement's snapshot missed, and then does nothing either.
const claimIfAbsentInsert = `
INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, retention, created_at, updated_at, policy, hold)
SELECT $1::text, $2::text, $3::text, 'processing', nextval('idem_token_seq'), 1, $4::text, $5::bytea,
	now() + $6::bigint * interval '1 microsecond', $7::bigint * interval '1 microsecond', now(), now(), $8::text, $9::boolean
WHERE NOT EXISTS (SELECT 1 FROM idem_records WHERE tenant = $1 AND namespace = $2 AND key = $3)
ON CONFLICT (tenant, namespace, key) DO NOTHING`

// claimIfAbsentSQL is claimIfAbsentInsert answering with the record it
// created, for claimIfAbsent's pipeline.
var claimIfAbsentSQL = claimIfAbsentInsert + `
RETURNING true, now(), ` + recordCols

// claimNewSQL is claimIfAbsentInsert answering with only what the
// database chose for the record it created: its token, its lease's end,
// and the clock (created_at is now()). A new record's other columns are
// the Claim's own or constants, which claimNew fills in; reading back all
// of them cost Postgres more than the reading of the row did.
var claimNewSQL = claimIfAbsentInsert + `
RETURNING token, lease_expires_at, created_at`

// claimSeenSQL reads the record that claimIfAbsentSQL found, with a
// snapshot of its own, taken after any insert that statement waited for.
var claimSeenSQL = `SELECT false, now(), ` + recordCols + ` FROM idem_records WHERE tenant = $1 AND namespace = $2 AND key = $3`

// claimTakeoverSQL ends the INSERT of claimOneSQL and claimManySQL: on
// conflict, a takeover of a RELEASED or EXPIRED record, or of a PROCESSING
// one whose lease ran out, unless the fingerprints differ, re-checked under
// the row lock; the token is drawn after the lock is held.
var claimTakeoverSQL = `	ON CONFLICT (tenant, namespace, key) DO UPDATE SET
		state = 'processing',
		token = nextval('idem_token_seq'),
		attempt = r.attempt + 1,
		claimant = excluded.claimant,
		lease_expires_at = excluded.lease_expires_at,
		retention = excluded.retention,
		policy = excluded.policy,
		hold = excluded.hold,
		result = NULL,
		error = NULL,
		completed_at = NULL,
		expires_at = NULL,
		waiters = false,
		updated_at = now()
	WHERE ` + takeableSQL("r", "excluded.fingerprint") + `
	RETURNING ` + recordCols

// takeableSQL is the condition under which a Claim with fingerprint fp may
// take over the record that alias names: it is RELEASED or EXPIRED, or
// PROCESSING under a lease that ran out and no hold, and neither side's
// fingerprint differs from the other's. claimOneSQL and claimManySQL judge it
// on their snapshot, the takeover again on the newest row under its lock;
// store.DecideClaim is the same rule in Go.
func takeableSQL(alias, fp string) string {
	a := alias + "."
	return "(" + a + "state IN ('released', 'expired') OR (" + a + "state = 'processing' AND " + a + "lease_expires_at <= now() AND NOT " + a + "hold))" +
		" AND (" + a + "fingerprint = '' OR " + fp + " = '' OR " + a + "fingerprint = " + fp + ")"
}

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

// claimManySQL is claimOneSQL for many keys. looked pairs each call with its
// record as the statement's snapshot sees it (NULLs when there is none);
// only the calls whose record is absent or may be taken over go to the
// INSERT, in primary-key order, so that the ON CONFLICT row locks are taken
// in that order by every batch. The statement answers with every row it
// wrote (acquired) and every record it saw (not acquired): a call with both
// was acquired, and the Go side keeps that answer. Calls answered from what
// looked saw draw no token and lock nothing. A call with neither row (a
// concurrent insert the snapshot missed) is tried again in a later
// statement.
var claimManySQL = `
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
