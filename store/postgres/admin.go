package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

// The listing is keyset-paginated on the primary key: a page costs an index
// range scan however deep, and a record is seen once.
var listSQL = `SELECT ` + recordCols + `, ` + stepsColsOf("idem_records") + ` FROM idem_records
	WHERE tenant = $1
		AND ($2 = '' OR namespace = $2)
		AND ($3 = '' OR state = $3)
		AND ($4::bigint <= 0 OR updated_at <= now() - $4::bigint * interval '1 microsecond')
		AND (namespace, key) > ($5, $6)
		AND ($8 = '' OR starts_with(key, $8))
	ORDER BY namespace, key
	LIMIT $7`

// listRecords runs listSQL for p.
func (d driver) listRecords(ctx context.Context, p *store.ListParams) ([]*store.Record, error) {
	rows, err := d.q.Query(ctx, listSQL, planned, p.Tenant, p.Namespace, string(p.State), micros(p.OlderThan),
		p.After.Namespace, p.After.Key, p.Limit, p.KeyPrefix)
	if err != nil {
		return nil, interpretError(err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Record, error) { return scanRecordAs(row, stepsColumns) })
	return recs, interpretError(err)
}

// RecordList implements store.Store.
func (s *Store) RecordList(ctx context.Context, p *store.ListParams) ([]*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) ([]*store.Record, error) { return d.listRecords(ctx, p) })
}

// deleteSQL deletes a record, wakes the Claims waiting on it (and the held
// watches of its tenant, when it was UNRESOLVED), and keeps
// the deletion, by actor $4–$6 for reason $7, on the key's timeline: its
// entries, which the purge of the record no longer reaches, expire with the
// record's retention from now, unless a new record of the key holds them
// longer.
var deleteSQL = `
WITH gone AS (
	DELETE FROM idem_records WHERE tenant = $1 AND namespace = $2 AND key = $3
	RETURNING ` + recordCols + `, ` + stepsCol + wakeCol("idem_records", true) + heldCol("idem_records", "idem_records.state = 'unresolved'") + `
),
kept AS (
	UPDATE idem_timeline t SET expires_at = greatest(t.expires_at, now() + g.retention_us * interval '1 microsecond')
	FROM gone g
	WHERE t.tenant = g.tenant AND t.namespace = g.namespace AND t.key = g.key
),
noted AS (
	INSERT INTO idem_timeline (` + timelineCols + `)
	SELECT tenant, namespace, key, now(), 'deleted', token, '', 0, state, '', '', '', $4::text, $5::text, $6::text, $7::text, '',
		now() + retention_us * interval '1 microsecond'
	FROM gone
)
SELECT ` + recordNames + `, steps FROM gone`

// deleteRecord runs deleteSQL.
func (d driver) deleteRecord(ctx context.Context, p *store.DeleteParams) (*store.Record, error) {
	rec, err := scanRecordSteps(d.q.QueryRow(ctx, deleteSQL, p.Tenant, p.Namespace, p.Key,
		p.Actor.Tenant, p.Actor.Operator, p.Actor.Resolver, p.Reason))
	return rec, interpretError(err)
}

// RecordDelete implements store.Store.
func (s *Store) RecordDelete(ctx context.Context, p *store.DeleteParams) (*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) { return d.deleteRecord(ctx, p) })
}

var statsSQL = `SELECT namespace, state, count(*), min(updated_at) FROM idem_records
	WHERE tenant = $1 AND ($2 = '' OR namespace = $2)
	GROUP BY namespace, state
	ORDER BY namespace, state`

// recordStats runs statsSQL for p.
func (d driver) recordStats(ctx context.Context, p *store.StatsParams) ([]store.StatsRow, error) {
	rows, err := d.q.Query(ctx, statsSQL, planned, p.Tenant, p.Namespace)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.StatsRow, error) {
		var r store.StatsRow
		var state string
		err := row.Scan(&r.Namespace, &state, &r.Count, &r.OldestUpdatedAt)
		r.State = store.State(state)
		r.OldestUpdatedAt = r.OldestUpdatedAt.UTC()
		return r, err
	})
	return out, interpretError(err)
}

// RecordStats implements store.Store.
func (s *Store) RecordStats(ctx context.Context, p *store.StatsParams) ([]store.StatsRow, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) ([]store.StatsRow, error) { return d.recordStats(ctx, p) })
}

// CountByState implements store.Store: a full count, for the sweeper's
// gauge, which may take longer than StatementTimeout on a large table.
func (s *Store) CountByState(ctx context.Context) (map[store.State]int64, error) {
	counts := map[store.State]int64{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT state, count(*) FROM idem_records GROUP BY state`)
		if err != nil {
			return err
		}
		var state string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
			counts[store.State(state)] = n
			return nil
		})
		return err
	})
	if err != nil {
		return nil, interpretError(err)
	}
	return counts, nil
}

// resolveSQL moves an UNRESOLVED record on to state $4 (waking the held
// watches of its tenant), keeping its token
// ($7 when not 0) and noting it as the one an operator resolved, with
// result $5 or error $6, and keeps the resolution, by actor $8–$10 for
// reason $11, on its timeline; when nothing changed, the second branch
// reports the row.
var resolveSQL = `
WITH changed AS (
	UPDATE idem_records SET state = $4::text, result = $5::bytea, error = CASE WHEN $4::text = 'failed' THEN $6::text END, resolved_token = token,
		lease_expires_at = NULL, completed_at = CASE WHEN $4::text = 'released' THEN NULL ELSE now() END,
		expires_at = now() + retention, updated_at = now()
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND state = 'unresolved' AND ($7::bigint = 0 OR token = $7::bigint)
	RETURNING ` + recordCols + `, ` + stepsCol + wakeCol("idem_records", true) + heldCol("idem_records", "true") + `
)` + entry{kind: "'resolved'", token: "token", state: "state", previousState: "'unresolved'", err: "coalesce(error, '')",
	actorTenant: "$8::text", actorOperator: "$9::text", actorResolver: "$10::text", reason: "$11::text"}.noteSQL("noted", "changed") + `
SELECT true, ` + recordNames + `, steps FROM changed
UNION ALL
SELECT false, ` + recordCols + `, ` + stepsCol + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM changed)`

// resolvedRow is what resolveSQL did: changed rec, or found it so.
type resolvedRow struct {
	changed bool
	rec     *store.Record
}

// resolve runs resolveSQL for p, writing target.
func (d driver) resolve(ctx context.Context, p *store.ResolveParams, target store.ResolveTarget) (resolvedRow, error) {
	var row resolvedRow
	var err error
	row.rec, err = scanRecordSteps(d.q.QueryRow(ctx, resolveSQL, p.Tenant, p.Namespace, p.Key,
		string(target.State), target.Result, target.Error, p.Token, p.Actor.Tenant, p.Actor.Operator, p.Actor.Resolver, p.Reason), &row.changed)
	return row, interpretError(err)
}

// RecordResolve implements store.Store.
func (s *Store) RecordResolve(ctx context.Context, p *store.ResolveParams) (*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	target, err := p.Target()
	if err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) {
		for try := 0; try < maxStatementTries; try++ {
			row, err := d.resolve(ctx, p, target)
			if err != nil {
				return nil, err
			}
			if row.changed {
				return row.rec, nil
			}
			switch dec := p.Decide(row.rec); dec.Action {
			case store.ChangeRepeat:
				return row.rec, nil
			case store.ChangeRefuse:
				return nil, dec.Err
			}
			// ChangeApplies: the second branch read a snapshot from before
			// the change the UPDATE waited for; a new statement sees it.
		}
		return nil, store.ErrContention
	})
}

// The sweeper's statements lock their batch with FOR UPDATE SKIP LOCKED, so
// replicas sweep at once without doing a row twice or blocking a Claim.

// heldSQL says whether a lapsed record r is held for a person rather than
// open to a takeover: its policy holds it (hold), or holds unfinished steps
// and one is STARTED (store.DecideClaim decides the same for a Claim).
const heldSQL = `(r.hold OR coalesce(r.hold_unfinished AND array_position(r.step_finished, NULL) IS NOT NULL, false))`

var sweepExpireSQL = `
WITH due AS (
	SELECT tenant, namespace, key FROM idem_records
	WHERE state = 'processing' AND lease_expires_at <= now()
	ORDER BY lease_expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
),
expired AS (
	UPDATE idem_records r SET state = CASE WHEN ` + heldSQL + ` THEN 'unresolved' ELSE 'expired' END, updated_at = now(),
		expires_at = CASE WHEN ` + heldSQL + ` THEN NULL ELSE now() + r.retention END
	FROM due
	WHERE r.tenant = due.tenant AND r.namespace = due.namespace AND r.key = due.key
	RETURNING r.tenant, r.namespace, r.key, r.state, r.token, r.claimant` + wakeCol("r", true) + heldCol("r", "r.hold") + `
),
held AS (SELECT * FROM expired WHERE state = 'unresolved')` + heldEntry.noteSQL("noted", "held") + `
SELECT count(*) FROM expired`

// sweepPurgeSQL deletes the records due, and their keys' timelines; and,
// as many as $1 again, the entries of keys without a record (a deleted
// record's) whose expires_at has passed. It counts the records.
const sweepPurgeSQL = `
WITH due AS (
	SELECT tenant, namespace, key FROM idem_records
	WHERE state <> 'processing' AND expires_at <= now()
	ORDER BY expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
),
purged AS (
	DELETE FROM idem_records r
	USING due
	WHERE r.tenant = due.tenant AND r.namespace = due.namespace AND r.key = due.key
	RETURNING r.tenant, r.namespace, r.key
),
entries AS (
	DELETE FROM idem_timeline t
	USING purged p
	WHERE t.tenant = p.tenant AND t.namespace = p.namespace AND t.key = p.key
),
orphans AS (
	DELETE FROM idem_timeline t
	WHERE (t.tenant, t.namespace, t.key, t.seq) IN (
		SELECT o.tenant, o.namespace, o.key, o.seq FROM idem_timeline o
		WHERE o.expires_at <= now()
			AND NOT EXISTS (SELECT 1 FROM idem_records r WHERE r.tenant = o.tenant AND r.namespace = o.namespace AND r.key = o.key)
		ORDER BY o.expires_at
		LIMIT $1
		FOR UPDATE SKIP LOCKED)
)
SELECT count(*) FROM purged`

// sweepExpire runs sweepExpireSQL and returns how many records it changed.
func (d driver) sweepExpire(ctx context.Context, limit int) (int, error) {
	var n int64
	if err := d.q.QueryRow(ctx, sweepExpireSQL, planned, limit).Scan(&n); err != nil {
		return 0, interpretError(err)
	}
	return int(n), nil
}

// sweepPurge runs sweepPurgeSQL and returns how many records it deleted.
func (d driver) sweepPurge(ctx context.Context, limit int) (int, error) {
	var n int64
	if err := d.q.QueryRow(ctx, sweepPurgeSQL, planned, limit).Scan(&n); err != nil {
		return 0, interpretError(err)
	}
	return int(n), nil
}

// SweepExpire implements store.Store.
func (s *Store) SweepExpire(ctx context.Context, limit int) (int, error) {
	return driver{q: s.pool}.sweepExpire(ctx, limit)
}

// SweepPurge implements store.Store.
func (s *Store) SweepPurge(ctx context.Context, limit int) (int, error) {
	return driver{q: s.pool}.sweepPurge(ctx, limit)
}

// RecordGet implements store.Store.
func (s *Store) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if err := id.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) { return d.getRecord(ctx, id) })
}

// RecordGetMany implements store.Store in one statement.
func (s *Store) RecordGetMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, []error) {
	recs, errs := make([]*store.Record, len(ids)), make([]error, len(ids))
	sent := make([]store.RecordID, 0, len(ids))
	at := make([]int, 0, len(ids)) // the index in ids of each id sent
	for i, id := range ids {
		if errs[i] = id.CheckText(); errs[i] == nil {
			sent, at = append(sent, id), append(at, i)
		}
	}
	if len(sent) == 0 {
		return recs, errs
	}
	found, err := detached(ctx, s, func(ctx context.Context, d driver) ([]*store.Record, error) { return d.getMany(ctx, sent) })
	for j, i := range at {
		switch {
		case err != nil:
			errs[i] = err
		case found[j] == nil:
			errs[i] = store.ErrNotFound
		default:
			recs[i] = found[j]
		}
	}
	return recs, errs
}
