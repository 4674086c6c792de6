package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

// The listing is keyset-paginated on the primary key, so a page costs an
// index range scan however deep it is, and a record present for the whole
// listing is seen exactly once.
const listSQL = `SELECT ` + recordCols + ` FROM idem_records
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
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Record, error) { return scanRecord(row) })
	return recs, interpretError(err)
}

// RecordList implements store.Store.
func (s *Store) RecordList(ctx context.Context, p *store.ListParams) ([]*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) ([]*store.Record, error) { return d.listRecords(ctx, p) })
}

// deleteSQL deletes a record and, like the statements that end a lease,
// wakes the Claims waiting on it (wait.go): the next Claim of the key
// acquires it.
var deleteSQL = `
WITH gone AS (
	DELETE FROM idem_records WHERE tenant = $1 AND namespace = $2 AND key = $3
	RETURNING ` + recordCols + wakeCol("idem_records", true) + `
)
SELECT ` + recordNames + ` FROM gone`

// deleteRecord runs deleteSQL; a record that is not there is
// store.ErrNotFound.
func (d driver) deleteRecord(ctx context.Context, id store.RecordID) (*store.Record, error) {
	rec, err := scanRecord(d.q.QueryRow(ctx, deleteSQL, id.Tenant, id.Namespace, id.Key))
	return rec, interpretError(err)
}

// RecordDelete implements store.Store.
func (s *Store) RecordDelete(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if err := id.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) { return d.deleteRecord(ctx, id) })
}

const statsSQL = `SELECT namespace, state, count(*), min(updated_at) FROM idem_records
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

// CountByState implements store.Store. It is a full count: the sweeper calls
// it at most once a --count-interval, never per scrape. On a large table it
// may take longer than StatementTimeout, so its transaction lifts that.
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
