package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// claimSQL is Claim in one statement. cur reads the row as the statement's
// snapshot sees it. When that row is live (held, finished, or guarded by
// another fingerprint) nothing is written and cur answers: replays and
// IN_PROGRESS take no lock and draw no token. Otherwise the INSERT creates the
// record, or on conflict the UPDATE takes over a RELEASED or EXPIRED record, or
// a PROCESSING one whose lease ran out, unless the fingerprints differ; the
// UPDATE re-checks that against the newest row version under its lock. The
// token of a takeover is drawn inside the UPDATE, after the row lock is held,
// so it is greater than every token handed out before. A takeover clears the
// row's waiters flag (wait.go): it was set for the lease that just ended.
var claimSQL = `
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

// claimTakeoverSQL ends the INSERT of claimSQL and claimBatchSQL: on
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
// fingerprint differs from the other's. claimSQL and claimBatchSQL judge it
// on their snapshot, the takeover again on the newest row under its lock;
// store.DecideClaim is the same rule in Go.
func takeableSQL(alias, fp string) string {
	a := alias + "."
	return "(" + a + "state IN ('released', 'expired') OR (" + a + "state = 'processing' AND " + a + "lease_expires_at <= now() AND NOT " + a + "hold))" +
		" AND (" + a + "fingerprint = '' OR " + fp + " = '' OR " + a + "fingerprint = " + fp + ")"
}

// maxStatementTries bounds how often a call re-runs its statement when a
// concurrent transaction changed the row while the statement ran.
const maxStatementTries = 5

// RecordClaim implements store.Store. On a pool it goes through the Claim
// coalescer (coalesce.go), which runs its statements detached from the
// caller; in a transaction it runs claimSQL itself.
func (s *Store) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	if s.claims == nil {
		return detached(ctx, s, func(ctx context.Context, db dbtx) (*store.ClaimResult, error) {
			return claimTries(p,
				func() (claimRow, error) { return claimOnce(ctx, db, p) },
				func() (*store.Record, bool, error) { return holdLapsed(ctx, db, p.RecordID) })
		})
	}
	return claimTries(p,
		func() (claimRow, error) { return s.claims.do(ctx, p.RecordID, p) },
		func() (*store.Record, bool, error) {
			type held struct {
				rec *store.Record
				ok  bool
			}
			h, err := detached(ctx, s, func(ctx context.Context, db dbtx) (held, error) {
				rec, ok, err := holdLapsed(ctx, db, p.RecordID)
				return held{rec, ok}, err
			})
			return h.rec, h.ok, err
		})
}

// claimTries runs a Claim's statement (once) until it settles, at most
// maxStatementTries times. Under READ COMMITTED a statement's snapshot may
// miss a row that a concurrent transaction inserted or changed while the
// statement waited for its lock, and a new statement takes a new snapshot.
// A held record whose lease ran out is made UNRESOLVED (hold); when the row
// changed under that too, the Claim looks again.
func claimTries(p *store.ClaimParams, once func() (claimRow, error), hold func() (*store.Record, bool, error)) (*store.ClaimResult, error) {
	for try := 0; try < maxStatementTries; try++ {
		row, err := once()
		switch {
		case err != nil:
			return nil, err
		case row.rec == nil:
			continue // neither written nor seen: a concurrent insert
		case row.acquired:
			return store.Acquired(row.rec), nil
		}
		d := store.DecideClaim(row.rec, p, row.now)
		switch d.Action {
		case store.ClaimAnswer:
			return d.Answer, d.Err
		case store.ClaimMakeUnresolved:
			rec, held, err := hold()
			if err != nil {
				return nil, err
			}
			if held {
				return store.Unresolved(rec), nil
			}
		}
		// ClaimAcquire, or a hold that found the row changed: the row
		// changed under the statement. A new one sees what changed it.
	}
	return nil, store.ErrContention
}

// claimRow is what a Claim's statement did for one call: acquired rec, or
// saw it as it was (rec nil: neither, a concurrent insert the snapshot
// missed). now is the database's clock in the statement.
type claimRow struct {
	acquired bool
	rec      *store.Record
	now      time.Time
}

// claimOnce runs claimSQL once.
func claimOnce(ctx context.Context, db dbtx, p *store.ClaimParams) (claimRow, error) {
	fingerprint := p.Fingerprint
	if fingerprint == nil {
		fingerprint = []byte{}
	}
	var row claimRow
	var dbNow pgtype.Timestamptz
	rec, err := scanRecord(db.QueryRow(ctx, claimSQL, p.Tenant, p.Namespace, p.Key,
		p.Claimant, fingerprint, micros(p.LeaseTTL), micros(p.Retention), p.Policy, p.Hold), &row.acquired, &dbNow)
	if err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return row, nil // neither written nor seen: a concurrent insert
		}
		return row, err
	}
	row.rec, row.now = rec, dbNow.Time
	return row, nil
}
