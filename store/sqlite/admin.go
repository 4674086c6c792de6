package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemhq/idem/store"
)

// The listing is keyset-paginated on the primary key: a page costs an index
// range scan however deep, and a record is seen once.
const listSQL = `SELECT ` + recordStepCols + ` FROM idem_records
	WHERE tenant = ?1
		AND (?2 = '' OR namespace = ?2)
		AND (?3 = '' OR state = ?3)
		AND (?4 <= 0 OR updated_at <= ?5 - ?4)
		AND (namespace, key) > (?6, ?7)
		AND (?9 = '' OR substr(CAST(key AS BLOB), 1, length(CAST(?9 AS BLOB))) = CAST(?9 AS BLOB))
	ORDER BY namespace, key
	LIMIT ?8`

// RecordList implements store.Store: the page and the steps of its records
// in one read transaction.
func (s *Store) RecordList(ctx context.Context, p *store.ListParams) ([]*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return listWithSteps(ctx, s, listSQL, p.Tenant, p.Namespace, string(p.State), p.OlderThan.Microseconds(), now().UnixMicro(),
		p.After.Namespace, p.After.Key, max(p.Limit, 0), p.KeyPrefix)
}

// listWithSteps runs query, which selects recordStepCols, and reads the
// steps of the records it lists, in one read transaction.
func listWithSteps(ctx context.Context, s *Store, query string, args ...any) ([]*store.Record, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	var recs []*store.Record
	err := s.inReadTx(ctx, func(q querier) error {
		recs = nil
		var counts []int
		err := q.Query(query, func(rows *sql.Rows) error {
			rec, count, err := scanRecordSteps(rows)
			recs, counts = append(recs, rec), append(counts, count)
			return err
		}, args...)
		if err != nil {
			return err
		}
		for i, rec := range recs {
			if err := readSteps(q, rec, counts[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	return recs, nil
}

// readRows runs query, one of readQueries, and scans each row with scan.
func readRows[T any](ctx context.Context, s *Store, query string, scan func(*sql.Rows) (T, error), args ...any) ([]T, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	rows, err := s.readStmts[query].QueryContext(ctx, args...)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, interpretError(ctx, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(ctx, err)
	}
	return out, nil
}

const deleteSQL = `DELETE FROM idem_records WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`

// keepEntriesSQL makes the entries of a deleted record's key, which its
// purge no longer reaches, expire at ?4 at the earliest.
const keepEntriesSQL = `UPDATE idem_timeline SET expires_at = max(ifnull(expires_at, 0), ?4)
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`

// RecordDelete implements store.Store: the record and its steps are read,
// then deleted (the delete's trigger takes the steps with it), under the
// same write lock; the deletion stays on the key's timeline, whose entries
// expire with the record's retention from now, unless a new record of the
// key holds them longer.
func (s *Store) RecordDelete(ctx context.Context, p *store.DeleteParams) (*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	id := p.RecordID
	var rec *store.Record
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		found, steps, err := scanRecordSteps(tx.QueryRow(getSQL, id.Tenant, id.Namespace, id.Key))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil // not there: rec stays nil
		case err != nil:
			return err
		}
		if err := readSteps(tx, found, steps); err != nil {
			return err
		}
		if _, err := tx.Exec(deleteSQL, id.Tenant, id.Namespace, id.Key); err != nil {
			return err
		}
		rec = found
		tx.WakeAfterCommit(id)
		if rec.State == store.StateUnresolved {
			tx.HeldAfterCommit(id.Tenant)
		}
		expires := now.Add(rec.Retention).UnixMicro()
		if _, err := tx.Exec(keepEntriesSQL, id.Tenant, id.Namespace, id.Key, expires); err != nil {
			return err
		}
		return note(tx, id, now, store.TimelineEntry{Kind: store.EntryDeleted, Token: rec.Token, PreviousState: rec.State,
			Actor: p.Actor, Reason: p.Reason}, sql.NullInt64{Int64: expires, Valid: true})
	})
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, store.ErrNotFound
	}
	return rec, nil
}

const statsSQL = `SELECT namespace, state, count(*), min(updated_at) FROM idem_records
	WHERE tenant = ?1 AND (?2 = '' OR namespace = ?2)
	GROUP BY namespace, state
	ORDER BY namespace, state`

// RecordStats implements store.Store.
func (s *Store) RecordStats(ctx context.Context, p *store.StatsParams) ([]store.StatsRow, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return readRows(ctx, s, statsSQL, func(rows *sql.Rows) (store.StatsRow, error) {
		var r store.StatsRow
		var oldestUS int64
		err := rows.Scan(&r.Namespace, &r.State, &r.Count, &oldestUS)
		r.OldestUpdatedAt = fromMicros(oldestUS)
		return r, err
	}, p.Tenant, p.Namespace)
}

const countByStateSQL = `SELECT state, count(*) FROM idem_records GROUP BY state`

// CountByState implements store.Store: a full count, for the sweeper.
func (s *Store) CountByState(ctx context.Context) (map[store.State]int64, error) {
	counts := map[store.State]int64{}
	_, err := readRows(ctx, s, countByStateSQL, func(rows *sql.Rows) (struct{}, error) {
		var state store.State
		var n int64
		err := rows.Scan(&state, &n)
		counts[state] = n
		return struct{}{}, err
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// Each sweeper statement is one write transaction over at most limit rows,
// which Claims queue behind: keep limit at a few thousand.

// heldSQL says whether a lapsed record is held for a person rather than
// open to a takeover: its policy holds it (hold), or holds unfinished steps
// and one is STARTED (store.DecideClaim decides the same for a Claim).
const heldSQL = `(hold OR coalesce(hold_unfinished AND EXISTS (SELECT 1 FROM idem_steps s
	WHERE s.tenant = idem_records.tenant AND s.namespace = idem_records.namespace AND s.key = idem_records.key
		AND s.finished_at IS NULL), 0))`

const sweepExpireSQL = `UPDATE idem_records SET state = CASE WHEN ` + heldSQL + ` THEN 'unresolved' ELSE 'expired' END, updated_at = ?1,
		expires_at = CASE WHEN ` + heldSQL + ` THEN NULL ELSE ?1 + retention_us END
	WHERE rowid IN (
		SELECT rowid FROM idem_records
		WHERE state = 'processing' AND lease_expires_at <= ?1
		ORDER BY lease_expires_at
		LIMIT ?2)
	RETURNING ` + recordCols

// The purge's statements. The records due are chosen in one order, unique
// by rowid, so that the timeline's and the records' statements take the
// same ones in the one transaction.
const (
	sweepPurgeEntriesSQL = `DELETE FROM idem_timeline WHERE (tenant, namespace, key) IN (
		SELECT tenant, namespace, key FROM idem_records
		WHERE state <> 'processing' AND expires_at <= ?1
		ORDER BY expires_at, rowid
		LIMIT ?2)`
	sweepPurgeSQL = `DELETE FROM idem_records
	WHERE rowid IN (
		SELECT rowid FROM idem_records
		WHERE state <> 'processing' AND expires_at <= ?1
		ORDER BY expires_at, rowid
		LIMIT ?2)`
	// sweepOrphansSQL deletes the entries of keys without a record (a
	// deleted record's) whose expires_at has passed.
	sweepOrphansSQL = `DELETE FROM idem_timeline
	WHERE seq IN (
		SELECT seq FROM idem_timeline t
		WHERE expires_at <= ?1
			AND NOT EXISTS (SELECT 1 FROM idem_records r WHERE r.tenant = t.tenant AND r.namespace = t.namespace AND r.key = t.key)
		ORDER BY expires_at
		LIMIT ?2)`
)

// SweepExpire implements store.Store, waking the Claims waiting on the
// records it expired or made UNRESOLVED, and keeping each lease held on its
// record's timeline.
func (s *Store) SweepExpire(ctx context.Context, limit int) (int, error) {
	var n int
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		var held []*store.Record
		n = 0
		// The rows are read whole before the entries are written.
		err := tx.Query(sweepExpireSQL, func(rows *sql.Rows) error {
			rec, err := scanRecord(rows)
			if err != nil {
				return err
			}
			if s.watches.Active() {
				// A Claim that waits from now on reads the record after it
				// opens its watch: no wake is needed when none waits.
				tx.WakeAfterCommit(rec.RecordID)
			}
			if rec.State == store.StateUnresolved {
				held = append(held, rec)
			}
			n++
			return nil
		}, now.UnixMicro(), max(limit, 0)) // SQLite reads a negative LIMIT as none
		if err != nil {
			return err
		}
		for _, rec := range held {
			if err := noted(tx, rec.RecordID, now, heldEntry(rec)); err != nil {
				return err
			}
			tx.HeldAfterCommit(rec.Tenant)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// SweepPurge implements store.Store: the records due and their keys'
// timelines, and, as many as limit again, the entries of keys without a
// record whose expires_at has passed. It counts the records.
func (s *Store) SweepPurge(ctx context.Context, limit int) (int, error) {
	// SQLite reads a negative LIMIT as no limit at all.
	limit = max(limit, 0)
	var n int64
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		if _, err := tx.Exec(sweepPurgeEntriesSQL, now.UnixMicro(), limit); err != nil {
			return err
		}
		res, err := tx.Exec(sweepPurgeSQL, now.UnixMicro(), limit)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.Exec(sweepOrphansSQL, now.UnixMicro(), limit)
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}
