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
	if s.closed.Load() {
		return nil, errClosed
	}
	var recs []*store.Record
	err := s.inReadTx(ctx, func(q querier) error {
		recs = nil
		var counts []int
		err := q.Query(listSQL, func(rows *sql.Rows) error {
			rec, count, err := scanRecordSteps(rows)
			recs, counts = append(recs, rec), append(counts, count)
			return err
		}, p.Tenant, p.Namespace, string(p.State), p.OlderThan.Microseconds(), now().UnixMicro(), p.After.Namespace, p.After.Key,
			max(p.Limit, 0), p.KeyPrefix)
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

// RecordDelete implements store.Store: the record and its steps are read,
// then deleted (the delete's trigger takes the steps with it), under the
// same write lock.
func (s *Store) RecordDelete(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if err := id.CheckText(); err != nil {
		return nil, err
	}
	var rec *store.Record
	err := s.inWriteTx(ctx, func(tx *writeTx, _ time.Time) error {
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
		return nil
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
		LIMIT ?2)`

const sweepPurgeSQL = `DELETE FROM idem_records
	WHERE rowid IN (
		SELECT rowid FROM idem_records
		WHERE state <> 'processing' AND expires_at <= ?1
		ORDER BY expires_at
		LIMIT ?2)`

// SweepExpire implements store.Store, waking the Claims waiting on the
// records it expired or made UNRESOLVED.
func (s *Store) SweepExpire(ctx context.Context, limit int) (int, error) {
	if !s.watches.Active() {
		// No Claim waits: a Claim that waits from now on reads the
		// record after it opens its watch, so no ids need reading back.
		return s.sweep(ctx, sweepExpireSQL, limit)
	}
	var n int
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		n = 0
		return tx.Query(sweepExpireSQL+` RETURNING tenant, namespace, key`, func(rows *sql.Rows) error {
			var id store.RecordID
			if err := rows.Scan(&id.Tenant, &id.Namespace, &id.Key); err != nil {
				return err
			}
			tx.WakeAfterCommit(id)
			n++
			return nil
		}, now.UnixMicro(), max(limit, 0)) // SQLite reads a negative LIMIT as none
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// SweepPurge implements store.Store.
func (s *Store) SweepPurge(ctx context.Context, limit int) (int, error) {
	return s.sweep(ctx, sweepPurgeSQL, limit)
}

func (s *Store) sweep(ctx context.Context, query string, limit int) (int, error) {
	// SQLite reads a negative LIMIT as no limit at all.
	limit = max(limit, 0)
	var n int64
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		res, err := tx.Exec(query, now.UnixMicro(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}
