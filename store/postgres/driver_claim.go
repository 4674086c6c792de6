package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// The driver's Claim: claim and claimMany create the record of a key that
// has none, or return it with its version (xmin, which Postgres stamps on
// every write); a takeover or a lapsed hold is then a compare-and-set on
// that version (writeMany), which changes nothing when a write came between.

// claimRow is what a Claim's statement did for one call: created rec, or
// saw it at version, at now (the database's clock); rec is nil when it did
// neither, having missed a row a concurrent transaction inserted.
type claimRow struct {
	created bool
	rec     *store.Record
	version uint32
	now     time.Time
}

// claimSQL creates the record of a key that has none, or answers with the
// record and its version. cur is read once, for the insert's NOT EXISTS and
// the answer, so a key with a record draws no token and takes no lock; ON
// CONFLICT DO NOTHING waits for a concurrent insert the snapshot missed and
// returns no row. A created record is answered with what the database chose
// and the Claim's own values: reading it all back would cost more.
var claimSQL = `
WITH cur AS (
	SELECT xmin AS version, ` + recordCols + `, ` + stepsCol + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3
),
created AS (
	INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, claimant, fingerprint,
		lease_expires_at, retention, created_at, updated_at, policy, hold)
	SELECT $1::text, $2::text, $3::text, 'processing', nextval('idem_token_seq'), 1, $4::text, $5::bytea,
		now() + $6::bigint * interval '1 microsecond', $7::bigint * interval '1 microsecond', now(), now(), $8::text, $9::boolean
	WHERE NOT EXISTS (SELECT 1 FROM cur)
	ON CONFLICT (tenant, namespace, key) DO NOTHING
	RETURNING token, lease_expires_at, created_at
)
SELECT true, now(), NULL::xid, $1::text, $2::text, $3::text, 'processing', c.token, 1, $4::text, $5::bytea,
	c.lease_expires_at, $7::bigint, NULL::bytea, NULL::text, c.created_at, c.created_at, NULL::timestamptz, NULL::timestamptz,
	$8::text, $9::boolean, false, NULL::record
FROM created c
UNION ALL
SELECT false, now(), cur.* FROM cur`

// claim runs claimSQL for p.
func (d driver) claim(ctx context.Context, p *store.ClaimParams) (claimRow, error) {
	row, err := scanClaimRow(d.q.QueryRow(ctx, claimSQL, p.Tenant, p.Namespace, p.Key,
		p.Claimant, fingerprint(p), micros(p.LeaseTTL), micros(p.Retention), p.Policy, p.Hold))
	if err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return claimRow{}, nil // neither created nor seen: a concurrent insert
		}
		return claimRow{}, err
	}
	return row, nil
}

// scanClaimRow reads a row of claimSQL or claimManySQL.
func scanClaimRow(row pgx.Row) (claimRow, error) {
	var r claimRow
	var now pgtype.Timestamptz
	var version pgtype.Uint32
	rec, err := scanRecordSteps(row, &r.created, &now, &version)
	if err != nil {
		return claimRow{}, err
	}
	r.rec, r.now, r.version = rec, now.Time, version.Uint32
	return r, nil
}

// claimManySQL is claimSQL for many keys: looked pairs each call with its
// record and version (NULLs when none), and the calls without one go to the
// INSERT in primary-key order, so that batches wait for each other's
// inserts in that order.
var claimManySQL = `
WITH looked AS (
	SELECT i.*, r.*
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bigint[], $7::bigint[], $8::text[], $9::boolean[])
		WITH ORDINALITY AS i(in_tenant, in_namespace, in_key, in_claimant, in_fingerprint, in_lease_us, in_retention_us, in_policy, in_hold, ord)
	LEFT JOIN LATERAL (
		SELECT r.xmin AS version, ` + recordColsOf("r") + `, ` + stepsColOf("r") + `
		FROM idem_records r WHERE r.tenant = i.in_tenant AND r.namespace = i.in_namespace AND r.key = i.in_key
		OFFSET 0
	) r ON true
),
created AS (
	INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, claimant, fingerprint,
		lease_expires_at, retention, created_at, updated_at, policy, hold)
	SELECT l.in_tenant, l.in_namespace, l.in_key, 'processing', nextval('idem_token_seq'), 1, l.in_claimant, l.in_fingerprint,
		now() + l.in_lease_us * interval '1 microsecond', l.in_retention_us * interval '1 microsecond', now(), now(), l.in_policy, l.in_hold
	FROM looked l
	WHERE l.state IS NULL
	ORDER BY l.ord
	ON CONFLICT (tenant, namespace, key) DO NOTHING
	RETURNING ` + recordCols + `, NULL::record
)
SELECT true, now(), NULL::xid, created.* FROM created
UNION ALL
SELECT false, now(), version, ` + recordNames + `, steps FROM looked WHERE state IS NOT NULL`

// claimMany runs calls (distinct keys in primary-key order) as claimManySQL
// and returns each call's row.
func (d driver) claimMany(ctx context.Context, calls []*store.ClaimParams) ([]claimRow, error) {
	args := append(idArrays(column(calls, func(p *store.ClaimParams) store.RecordID { return p.RecordID })),
		column(calls, func(p *store.ClaimParams) string { return p.Claimant }),
		column(calls, fingerprint),
		column(calls, func(p *store.ClaimParams) int64 { return micros(p.LeaseTTL) }),
		column(calls, func(p *store.ClaimParams) int64 { return micros(p.Retention) }),
		column(calls, func(p *store.ClaimParams) string { return p.Policy }),
		column(calls, func(p *store.ClaimParams) bool { return p.Hold }))
	result, err := d.q.Query(ctx, claimManySQL, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer result.Close()
	rows := make([]claimRow, len(calls))
	for result.Next() {
		row, err := scanClaimRow(result)
		if err != nil {
			return nil, interpretError(err)
		}
		if i := findID(calls, row.rec.RecordID, func(p *store.ClaimParams) store.RecordID { return p.RecordID }); i >= 0 {
			rows[i] = row
		}
	}
	// The rows are committed only if the statement ended without an error.
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

// takeOverSQL takes the record over (store.ClaimAcquire) if it is still at
// version $4, and keeps the takeover on its timeline with the lease taken
// over ($10–$12, as the Claim read it at that version). The token is drawn
// after that version was read, so it is greater than its token; the
// waiters flag was the ended lease's.
var takeOverSQL = `
WITH took AS (
	UPDATE idem_records SET state = 'processing', token = nextval('idem_token_seq'), attempt = attempt + 1,
		claimant = $5::text, lease_expires_at = now() + $6::bigint * interval '1 microsecond',
		retention = $7::bigint * interval '1 microsecond', policy = $8::text, hold = $9::boolean,
		result = NULL, error = NULL, completed_at = NULL, expires_at = NULL, waiters = false, updated_at = now()
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND xmin = $4::xid
	RETURNING ` + recordCols + `, ` + stepsCol + `
)` + entry{kind: "'taken_over'", token: "token", state: "'processing'", previousToken: "$10::bigint",
	previousState: "$11::text", claimant: "claimant", previousClaimant: "$12::text"}.noteSQL("noted", "took") + `
SELECT true, now(), ` + recordNames + `, steps FROM took`

// holdSQL makes a held record whose lease ran out UNRESOLVED
// (store.ClaimMakeUnresolved) if it is still at version $4, keeps that on
// its timeline, and wakes its waiting Claims and the held watches of its
// tenant.
var holdSQL = `
WITH held AS (
	UPDATE idem_records SET state = 'unresolved', expires_at = NULL, updated_at = now()
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND xmin = $4::xid
	RETURNING ` + recordCols + `, ` + stepsCol + wakeCol("idem_records", true) + heldCol("idem_records", "true") + `
)` + heldEntry.noteSQL("noted", "held") + `
SELECT true, now(), ` + recordNames + `, steps FROM held`

// heldEntry is the entry of a lease held: the record is UNRESOLVED.
var heldEntry = entry{kind: "'held'", token: "token", state: "'unresolved'", previousState: "'processing'", claimant: "claimant"}

// claimWrite is a takeover or a lapsed hold that one Claim decided on the
// record it saw at version, prev.
type claimWrite struct {
	p       *store.ClaimParams
	hold    bool
	version uint32
	prev    *store.Record
}

// written is what a claimWrite did: wrote rec at now, or nothing (rec nil)
// because the record was no longer at the version.
type written struct {
	rec *store.Record
	now time.Time
}

// statement is w's SQL and its arguments.
func (w claimWrite) statement() (string, []any) {
	p := w.p
	if w.hold {
		return holdSQL, []any{p.Tenant, p.Namespace, p.Key, w.version}
	}
	return takeOverSQL, []any{p.Tenant, p.Namespace, p.Key, w.version,
		p.Claimant, micros(p.LeaseTTL), micros(p.Retention), p.Policy, p.Hold,
		w.prev.Token, string(w.prev.State), w.prev.Claimant}
}

// scanWritten reads the row of a claimWrite's statement, which has none
// when the record was no longer at the version.
func scanWritten(row pgx.Row) (written, error) {
	var ok bool
	var now pgtype.Timestamptz
	rec, err := scanRecordSteps(row, &ok, &now)
	if err = interpretError(err); err != nil {
		if err == store.ErrNotFound {
			return written{}, nil
		}
		return written{}, err
	}
	return written{rec: rec, now: now.Time}, nil
}

// writeMany runs ws, sorted by primary key: one alone as its statement,
// more in one round trip, one implicit transaction whose row locks are
// taken in that order, as every batch takes them.
func (d driver) writeMany(ctx context.Context, ws []claimWrite) ([]written, error) {
	if len(ws) == 1 {
		sql, args := ws[0].statement()
		w, err := scanWritten(d.q.QueryRow(ctx, sql, args...))
		if err != nil {
			return nil, err
		}
		return []written{w}, nil
	}
	b := &pgx.Batch{}
	for _, w := range ws {
		sql, args := w.statement()
		b.Queue(sql, args...)
	}
	results := d.q.SendBatch(ctx, b)
	out := make([]written, len(ws))
	var err error
	for i := range ws {
		if out[i], err = scanWritten(results.QueryRow()); err != nil {
			break
		}
	}
	// What was written is only known to be committed once the
	// transaction has ended without an error.
	if closeErr := results.Close(); err == nil {
		err = interpretError(closeErr)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
