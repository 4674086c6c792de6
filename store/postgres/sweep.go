package postgres

import (
	"context"
)

// Both sweeper statements lock their batch with FOR UPDATE SKIP LOCKED: rows
// that a Claim or another sweeper holds are skipped, not waited for, so any
// number of replicas sweep at once without doing a row twice or blocking a
// Claim. Each batch is its own short transaction.

var sweepExpireSQL = `
WITH due AS (
	SELECT tenant, namespace, key FROM idem_records
	WHERE state = 'processing' AND lease_expires_at <= now()
	ORDER BY lease_expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
),
expired AS (
	UPDATE idem_records r SET state = CASE WHEN r.hold THEN 'unresolved' ELSE 'expired' END, updated_at = now(),
		expires_at = CASE WHEN r.hold THEN NULL ELSE now() + r.retention END
	FROM due
	WHERE r.tenant = due.tenant AND r.namespace = due.namespace AND r.key = due.key
	RETURNING r.tenant` + wakeCol("r", true) + `
)
SELECT count(*) FROM expired`

const sweepPurgeSQL = `
WITH due AS (
	SELECT tenant, namespace, key FROM idem_records
	WHERE state <> 'processing' AND expires_at <= now()
	ORDER BY expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
DELETE FROM idem_records r
USING due
WHERE r.tenant = due.tenant AND r.namespace = due.namespace AND r.key = due.key`

// sweepExpire runs sweepExpireSQL and returns how many records it expired
// (or made UNRESOLVED).
func (d driver) sweepExpire(ctx context.Context, limit int) (int, error) {
	var n int64
	if err := d.q.QueryRow(ctx, sweepExpireSQL, planned, limit).Scan(&n); err != nil {
		return 0, interpretError(err)
	}
	return int(n), nil
}

// sweepPurge runs sweepPurgeSQL and returns how many records it deleted.
func (d driver) sweepPurge(ctx context.Context, limit int) (int, error) {
	tag, err := d.q.Exec(ctx, sweepPurgeSQL, planned, limit)
	if err != nil {
		return 0, interpretError(err)
	}
	return int(tag.RowsAffected()), nil
}

// SweepExpire implements store.Store. It wakes the Claims waiting on the
// records it expires (wait.go).
func (s *Store) SweepExpire(ctx context.Context, limit int) (int, error) {
	return driver{q: s.pool}.sweepExpire(ctx, limit)
}

// SweepPurge implements store.Store.
func (s *Store) SweepPurge(ctx context.Context, limit int) (int, error) {
	return driver{q: s.pool}.sweepPurge(ctx, limit)
}
