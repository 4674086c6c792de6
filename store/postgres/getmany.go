package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
)

// getManySQL reads the records of many ids in one statement; the ordinal
// of each row is the index of the id it answers, from 1, and an id with no
// record returns no row. Each record is read by a lookup of its primary
// key: the lateral subquery is getSQL's, kept from being flattened into a
// join by its OFFSET 0, for the reason in record.go's "Plans".
const getManySQL = `SELECT k.i, r.* FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k(t, n, ky, i)
	CROSS JOIN LATERAL (SELECT ` + recordCols + ` FROM idem_records
		WHERE tenant = k.t AND namespace = k.n AND key = k.ky OFFSET 0) r`

// getMany runs getManySQL: the record of each id, nil when it has none.
func (d driver) getMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, error) {
	tenants, namespaces, keys := make([]string, len(ids)), make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		tenants[i], namespaces[i], keys[i] = id.Tenant, id.Namespace, id.Key
	}
	rows, err := d.q.Query(ctx, getManySQL, tenants, namespaces, keys)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	recs := make([]*store.Record, len(ids))
	for rows.Next() {
		var i int64
		rec, err := scanRecord(rows, &i)
		if err != nil {
			return nil, interpretError(err)
		}
		recs[i-1] = rec
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	return recs, nil
}

// RecordGetMany implements store.Store: one statement for all the ids,
// instead of one connection and round trip each.
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
