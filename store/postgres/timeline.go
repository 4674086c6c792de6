package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres/notifier"
)

// Timelines (store.Timeline). Each exception's entry is written by the very
// statement that makes it, as a data-modifying CTE reading the rows that
// statement changed (noteSQL), so it commits with it and costs no round
// trip. The statements of a Claim that creates a record and of a Complete
// are not among them, and are unchanged. The purge deletes a record's
// entries with it (sweepPurgeSQL).

// timelineCols are the columns an entry is written with, before its
// source's values.
const timelineCols = `tenant, namespace, key, at, kind, token, state, previous_token, previous_state,
	claimant, previous_claimant, error, actor_tenant, actor_operator, actor_resolver, reason, fingerprint, expires_at`

// entry is a timeline entry as SQL: each field an expression over the rows
// of the statement that writes it (the record's columns, recordCols); an
// empty one is the column's default.
type entry struct {
	kind, token, state, previousToken, previousState, claimant, previousClaimant,
	err, actorTenant, actorOperator, actorResolver, reason string
}

// noteSQL is a CTE, named name, that writes e for each row of from. While
// its key has a record, the entry has no expires_at: the purge of the
// record deletes it.
func (e entry) noteSQL(name, from string) string {
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	return `,
` + name + ` AS (
	INSERT INTO idem_timeline (` + timelineCols + `)
	SELECT tenant, namespace, key, now(), ` + strings.Join([]string{e.kind, e.token, or(e.state, "''"),
		or(e.previousToken, "0"), or(e.previousState, "''"), or(e.claimant, "''"), or(e.previousClaimant, "''"),
		or(e.err, "''"), or(e.actorTenant, "''"), or(e.actorOperator, "''"), or(e.actorResolver, "''"), or(e.reason, "''")}, ", ") + `,
		'', NULL
	FROM ` + from + `
)`
}

// heldCol is the RETURNING column that tells the listeners of
// notifier.HeldChannel that a record of the row's tenant became
// UNRESOLVED, when cond holds ("true" when it always does).
func heldCol(table, cond string) string {
	return `,
		CASE WHEN ` + cond + ` THEN pg_notify('` + notifier.HeldChannel + `', ` + table + `.tenant) END AS held_woke`
}

// mismatchSQL keeps a Claim refused for its fingerprint $5 by claimant $4
// on the record's timeline, once per token and fingerprint; the record's
// retention, and not the purge, bounds it, since it is written by no
// statement that holds the record's row (a purge may miss it).
const mismatchSQL = `
INSERT INTO idem_timeline (` + timelineCols + `)
SELECT r.tenant, r.namespace, r.key, now(), 'fingerprint_mismatch', r.token, r.state, 0, '',
	$4::text, '', '', '', '', '', '', $5::bytea, now() + r.retention
FROM idem_records r
WHERE r.tenant = $1 AND r.namespace = $2 AND r.key = $3
	AND NOT EXISTS (SELECT 1 FROM idem_timeline t
		WHERE t.tenant = $1 AND t.namespace = $2 AND t.key = $3
			AND t.kind = 'fingerprint_mismatch' AND t.token = r.token AND t.fingerprint = $5::bytea)`

// noteMismatch runs mismatchSQL for the Claim p.
func (d driver) noteMismatch(ctx context.Context, p *store.ClaimParams) error {
	_, err := d.q.Exec(ctx, mismatchSQL, p.Tenant, p.Namespace, p.Key, p.Claimant, fingerprint(p))
	return interpretError(err)
}

// timelineSQL reads the latest $4 entries of a key, oldest first.
const timelineSQL = `SELECT at, kind, token, state, previous_token, previous_state, claimant, previous_claimant,
	error, actor_tenant, actor_operator, actor_resolver, reason, fingerprint
FROM (SELECT * FROM idem_timeline WHERE tenant = $1 AND namespace = $2 AND key = $3
	ORDER BY seq DESC LIMIT $4) t
ORDER BY seq`

// RecordTimeline implements store.Timeline.
func (s *Store) RecordTimeline(ctx context.Context, p *store.TimelineParams) ([]store.TimelineEntry, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) ([]store.TimelineEntry, error) {
		rows, err := d.q.Query(ctx, timelineSQL, p.Tenant, p.Namespace, p.Key, max(p.Limit, 0))
		if err != nil {
			return nil, interpretError(err)
		}
		entries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.TimelineEntry, error) {
			var e store.TimelineEntry
			var kind, state, previous string
			err := row.Scan(&e.At, &kind, &e.Token, &state, &e.PreviousToken, &previous, &e.Claimant, &e.PreviousClaimant,
				&e.Error, &e.Actor.Tenant, &e.Actor.Operator, &e.Actor.Resolver, &e.Reason, &e.Fingerprint)
			e.Kind, e.State, e.PreviousState, e.At = store.EntryKind(kind), store.State(state), store.State(previous), e.At.UTC()
			if len(e.Fingerprint) == 0 {
				e.Fingerprint = nil
			}
			return e, err
		})
		return entries, interpretError(err)
	})
}

// listHeldSQL pages through one tenant's UNRESOLVED records. An UNRESOLVED
// record is the only one that is not PROCESSING and has no expires_at, so
// the purge's partial index finds them all without a scan of the tenant's
// records; there are few, and they are sorted.
var listHeldSQL = `SELECT ` + recordCols + `, ` + stepsColsOf("idem_records") + ` FROM idem_records
	WHERE state <> 'processing' AND expires_at IS NULL AND state = 'unresolved'
		AND tenant = $1 AND (namespace, key) > ($2, $3)
	ORDER BY namespace, key
	LIMIT $4`

// RecordListHeld implements store.Timeline.
func (s *Store) RecordListHeld(ctx context.Context, p *store.ListHeldParams) ([]*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) ([]*store.Record, error) {
		rows, err := d.q.Query(ctx, listHeldSQL, planned, p.Tenant, p.After.Namespace, p.After.Key, max(p.Limit, 0))
		if err != nil {
			return nil, interpretError(err)
		}
		recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Record, error) { return scanRecordAs(row, stepsColumns) })
		return recs, interpretError(err)
	})
}

// RecordWatchHeld implements store.Timeline: the store's listener hears
// notifier.HeldChannel while a watch is open, or, where it polls, wakes
// every held watch now and then.
func (s *Store) RecordWatchHeld(tenant string) *store.Watch {
	return s.held.Watch(store.RecordID{Tenant: tenant})
}
