package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// maxStatementTries bounds how often a call runs its statements again when
// a concurrent transaction changed the row under them.
const maxStatementTries = 5

// RecordClaim implements store.Store: claimSQL creates the record or
// returns it, store.DecideClaim decides on it, and a takeover or a lapsed
// hold is written only if the record is still at the version decided on.
// A concurrent insert the statement missed, or a newer version, makes the
// Claim run again.
func (s *Store) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.ClaimResult, error) {
		return claimTries(ctx, d, p, maxStatementTries)
	})
}

// claimTries runs the Claim p until it is settled, at most tries times.
func claimTries(ctx context.Context, d driver, p *store.ClaimParams, tries int) (*store.ClaimResult, error) {
	for range tries {
		row, err := d.claim(ctx, p)
		if err != nil {
			return nil, err
		}
		decided := decideClaim(p, row)
		if decided.write == nil {
			if decided.settled {
				return settled(ctx, d, p, decided)
			}
			continue
		}
		w, err := d.writeMany(ctx, []claimWrite{*decided.write})
		if err != nil {
			return nil, err
		}
		if res := wroteClaim(*decided.write, w[0]); res != nil {
			return res, nil
		}
	}
	return nil, store.ErrContention
}

// claimDecided is what a Claim's row settles: an answer (settled, with res
// or err), a write to try (write), or neither: the Claim runs again.
type claimDecided struct {
	settled bool
	res     *store.ClaimResult
	err     error
	write   *claimWrite
}

// settled is the answer of the Claim p that decided settles; a refused
// fingerprint is kept on the record's timeline first, and a Claim whose
// entry could not be written fails as the statement did.
func settled(ctx context.Context, d driver, p *store.ClaimParams, decided claimDecided) (*store.ClaimResult, error) {
	if errors.Is(decided.err, store.ErrFingerprintMismatch) {
		if err := d.noteMismatch(ctx, p); err != nil {
			return nil, err
		}
	}
	return decided.res, decided.err
}

// decideClaim decides the Claim p on the row its statement returned.
func decideClaim(p *store.ClaimParams, row claimRow) claimDecided {
	switch {
	case row.rec == nil:
		return claimDecided{}
	case row.created:
		return claimDecided{settled: true, res: store.Acquired(row.rec, row.now)}
	}
	switch d := store.DecideClaim(row.rec, p, row.now); d.Action {
	case store.ClaimAnswer:
		return claimDecided{settled: true, res: d.Answer, err: d.Err}
	case store.ClaimMakeUnresolved:
		return claimDecided{write: &claimWrite{p: p, hold: true, version: row.version, prev: row.rec}}
	}
	return claimDecided{write: &claimWrite{p: p, version: row.version, prev: row.rec}}
}

// wroteClaim is the answer of a Claim whose write w did what it did, or
// nil when the record had changed since it was read.
func wroteClaim(w claimWrite, did written) *store.ClaimResult {
	switch {
	case did.rec == nil:
		return nil
	case w.hold:
		return store.Unresolved(did.rec, did.now)
	}
	return store.Acquired(did.rec, did.now)
}

// RecordClaimMany implements store.Store: one claimManySQL for the calls of
// distinct keys, then their takeovers and lapsed holds in one round trip
// (writeMany); a call this did not settle, or of a key already among them,
// then runs alone.
func (s *Store) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p.CheckText()
	}
	batch, rest := distinctByID(ps, errs, func(p *store.ClaimParams) store.RecordID { return p.RecordID })
	res := detachedMany(ctx, s, append(batch, rest...), errs, func(ctx context.Context, d driver, res []*store.ClaimResult, errs []error) {
		for _, i := range claimBatch(ctx, d, ps, batch, res, errs) {
			res[i], errs[i] = claimTries(ctx, d, ps[i], maxStatementTries-1)
		}
		for _, i := range rest {
			res[i], errs[i] = claimTries(ctx, d, ps[i], maxStatementTries)
		}
	})
	return res, errs
}

// claimBatch runs the calls of ps at the indexes batch (distinct keys in
// primary-key order), sets the answers it settles in res and errs, and
// returns the indexes of the others.
func claimBatch(ctx context.Context, d driver, ps []*store.ClaimParams, batch []int, res []*store.ClaimResult, errs []error) (again []int) {
	rows, err := d.claimMany(ctx, column(batch, func(i int) *store.ClaimParams { return ps[i] }))
	if err != nil {
		for _, i := range batch {
			errs[i] = err
		}
		return nil
	}
	var writes []claimWrite
	var writers []int // the index in ps of each write
	for j, i := range batch {
		decided := decideClaim(ps[i], rows[j])
		switch {
		case decided.write != nil:
			writes, writers = append(writes, *decided.write), append(writers, i)
		case decided.settled:
			res[i], errs[i] = settled(ctx, d, ps[i], decided)
		default:
			again = append(again, i)
		}
	}
	if len(writes) == 0 {
		return again
	}
	did, err := d.writeMany(ctx, writes)
	for k, i := range writers {
		if err != nil {
			errs[i] = err
		} else if res[i] = wroteClaim(writes[k], did[k]); res[i] == nil {
			again = append(again, i)
		}
	}
	return again
}

// runTokenCall is the store.TokenCalls the Store embeds.
func (s *Store) runTokenCall(ctx context.Context, call *store.TokenCall) (*store.Record, error) {
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) {
		return tokenTries(ctx, d, call, maxStatementTries)
	})
}

// tokenTries runs the call's statement until it settles the call, at most
// tries times.
func tokenTries(ctx context.Context, d driver, call *store.TokenCall, tries int) (*store.Record, error) {
	for range tries {
		row, err := d.tokenCallOne(ctx, call)
		if err != nil {
			return nil, err
		}
		if rec, settled, err := settleTokenCall(call, row); settled {
			return rec, err
		}
	}
	return nil, store.ErrContention
}

// runTokenCallsMany is the store.TokenCallsMany the Store embeds: one
// many-row statement for the calls of distinct keys; a call it did not
// settle, or of a key already among them, then runs alone.
func (s *Store) runTokenCallsMany(ctx context.Context, calls []*store.TokenCall) ([]*store.Record, []error) {
	errs := make([]error, len(calls))
	batch, rest := distinctByID(calls, errs, func(c *store.TokenCall) store.RecordID { return c.RecordID })
	recs := detachedMany(ctx, s, append(batch, rest...), errs, func(ctx context.Context, d driver, recs []*store.Record, errs []error) {
		rows, err := d.tokenCallMany(ctx, calls[batch[0]].Kind, column(batch, func(i int) *store.TokenCall { return calls[i] }))
		for j, i := range batch {
			if err != nil {
				errs[i] = err
				continue
			}
			var settled bool
			if recs[i], settled, errs[i] = settleTokenCall(calls[i], rows[j]); !settled {
				recs[i], errs[i] = tokenTries(ctx, d, calls[i], maxStatementTries-1)
			}
		}
		for _, i := range rest {
			recs[i], errs[i] = tokenTries(ctx, d, calls[i], maxStatementTries)
		}
	})
	return recs, errs
}

// settleTokenCall is the call's answer from its statement's row, or
// settled false when the row's second branch read a snapshot from before a
// change the update waited for (ChangeApplies).
func settleTokenCall(call *store.TokenCall, row tokenRow) (rec *store.Record, settled bool, err error) {
	switch {
	case row.rec == nil:
		return nil, true, store.ErrNotFound
	case row.changed:
		return row.rec, true, nil
	}
	switch d := call.Decide(row.rec); d.Action {
	case store.ChangeRepeat:
		return row.rec, true, nil
	case store.ChangeRefuse:
		return nil, true, d.Err
	}
	return nil, false, nil
}

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
