package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemhq/idem/store"
)

// The listing is keyset-paginated on the primary key, so a page costs an
// index range scan however deep it is, and a record present for the whole
// listing is seen exactly once. Text compares bytewise (SQLite's BINARY
// collation).
const listSQL = `SELECT ` + recordCols + ` FROM idem_records
	WHERE tenant = ?1
		AND (?2 = '' OR namespace = ?2)
		AND (?3 = '' OR state = ?3)
		AND (?4 <= 0 OR updated_at <= ?5 - ?4)
		AND (namespace, key) > (?6, ?7)
		AND (?9 = '' OR substr(CAST(key AS BLOB), 1, length(CAST(?9 AS BLOB))) = CAST(?9 AS BLOB))
	ORDER BY namespace, key
	LIMIT ?8`

// RecordList implements store.Store.
func (s *Store) RecordList(ctx context.Context, p *store.ListParams) ([]*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	rows, err := s.readStmts[listSQL].QueryContext(ctx, p.Tenant, p.Namespace, string(p.State),
		p.OlderThan.Microseconds(), now().UnixMicro(), p.After.Namespace, p.After.Key, max(p.Limit, 0), p.KeyPrefix)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	defer rows.Close()
	var recs []*store.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, interpretError(ctx, err)
		}
		recs = append(recs, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(ctx, err)
	}
	return recs, nil
}

const deleteSQL = `DELETE FROM idem_records WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 RETURNING ` + recordCols

// RecordDelete implements store.Store.
func (s *Store) RecordDelete(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if err := id.CheckText(); err != nil {
		return nil, err
	}
	var rec *store.Record
	err := s.inWriteTx(ctx, func(tx *writeTx, _ time.Time) error {
		var err error
		switch rec, err = scanRecord(tx.QueryRow(deleteSQL, id.Tenant, id.Namespace, id.Key)); {
		case err == nil:
			tx.WakeAfterCommit(id)
		case errors.Is(err, sql.ErrNoRows):
			return nil // not there: rec stays nil
		}
		return err
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
	if s.closed.Load() {
		return nil, errClosed
	}
	rows, err := s.readStmts[statsSQL].QueryContext(ctx, p.Tenant, p.Namespace)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	defer rows.Close()
	var out []store.StatsRow
	for rows.Next() {
		var r store.StatsRow
		var state string
		var oldestUS int64
		if err := rows.Scan(&r.Namespace, &state, &r.Count, &oldestUS); err != nil {
			return nil, interpretError(ctx, err)
		}
		r.State = store.State(state)
		r.OldestUpdatedAt = fromMicros(oldestUS)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(ctx, err)
	}
	return out, nil
}

const countByStateSQL = `SELECT state, count(*) FROM idem_records GROUP BY state`

// CountByState implements store.Store. It is a full count: the sweeper calls
// it once per pass, never per scrape.
func (s *Store) CountByState(ctx context.Context) (map[store.State]int64, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	rows, err := s.readStmts[countByStateSQL].QueryContext(ctx)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	defer rows.Close()
	counts := map[store.State]int64{}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, interpretError(ctx, err)
		}
		counts[store.State(state)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(ctx, err)
	}
	return counts, nil
}
