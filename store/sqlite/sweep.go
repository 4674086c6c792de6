package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemhq/idem/store"
)

// Each sweeper statement is one write transaction over at most limit rows.
// SQLite has one writer, so a batch holds the write lock while it runs and
// Claims queue behind it: keep limit at a few thousand rows. Two sweepers
// take turns on the lock and the second sees what the first did, so no row
// is swept twice.

const sweepExpireSQL = `UPDATE idem_records SET state = CASE WHEN hold THEN 'unresolved' ELSE 'expired' END, updated_at = ?1,
		expires_at = CASE WHEN hold THEN NULL ELSE ?1 + retention_us END
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

// SweepExpire implements store.Store. It wakes the Claims waiting on the
// records it expired (or made UNRESOLVED), once their batch has committed.
func (s *Store) SweepExpire(ctx context.Context, limit int) (int, error) {
	if !s.watches.Active() {
		// No Claim waits: expire without reading every id back. One
		// that starts waiting from now on reads the record after it
		// opens its watch, and a lease that has run out is not one it
		// sleeps on (it acts on it at once, as any Claim does).
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
