package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// What every store's sweeper does is checked by the conformance suite in
// internal/testsupport/storetest. What follows is PostgreSQL's own: FOR UPDATE SKIP LOCKED.

// insertRows inserts n records named prefix-0 … prefix-(n-1) in state, with
// a lease and an expires_at offset from now() by the given intervals (NULL
// when the interval is empty), and a retention of 90 minutes.
func (b *testBundle) insertRows(t *testing.T, prefix string, n int, state store.State, lease, expires string) {
	t.Helper()
	nullable := func(interval string) any {
		if interval == "" {
			return nil
		}
		return interval
	}
	b.exec(t, `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, lease_expires_at,
			retention, created_at, updated_at, expires_at)
		SELECT 'acme', 'process_payment', $1 || '-' || i, $2, nextval('idem_token_seq'), 1, now() + $3::interval,
			interval '90 minutes', now(), now(), now() + $4::interval
		FROM generate_series(0, $5 - 1) AS i`,
		prefix, string(state), nullable(lease), nullable(expires), n)
}

func (b *testBundle) countRows(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM idem_records WHERE "+where).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", where, err)
	}
	return n
}

// TestSweepSkipsLockedRows: a row that another transaction holds is skipped,
// not waited for, and is swept once that transaction is done.
func TestSweepSkipsLockedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertRows(t, "lapsed", 1, store.StateProcessing, "-1 second", "")
	b.insertRows(t, "due", 1, store.StateCompleted, "", "-1 second")

	tx, _ := b.begin(t)
	if _, err := tx.Exec(b.ctx, "SELECT 1 FROM idem_records FOR UPDATE"); err != nil {
		t.Fatalf("lock the rows: %v", err)
	}

	for name, sweep := range map[string]func(context.Context, int) (int, error){
		"SweepExpire": b.store.SweepExpire, "SweepPurge": b.store.SweepPurge,
	} {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		n, err := sweep(ctx, 100)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s waited for the locked row instead of skipping it", name)
		}
		if err != nil || n != 0 {
			t.Fatalf("%s with every row locked: %d, %v; want 0, nil", name, n, err)
		}
	}

	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if n, err := b.store.SweepExpire(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepExpire once unlocked: %d, %v; want 1", n, err)
	}
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepPurge once unlocked: %d, %v; want 1", n, err)
	}
}

// TestSweepDoesNotBlockClaims: while a sweeper's batch transaction holds its
// rows, Claims of other keys (new ones and takeovers) go through at once.
func TestSweepDoesNotBlockClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertRows(t, "lapsed", 20, store.StateProcessing, "-1 second", "")
	b.insertRows(t, "due", 20, store.StateReleased, "", "-1 second")
	b.insertRows(t, "available", 1, store.StateReleased, "", "1 hour")

	tx, _ := b.begin(t)
	sweeper := postgres.SweeperOn(tx)
	if n, err := sweeper.SweepExpire(b.ctx, 100); err != nil || n != 20 {
		t.Fatalf("SweepExpire in the open transaction: %d, %v; want 20", n, err)
	}
	if n, err := sweeper.SweepPurge(b.ctx, 100); err != nil || n != 20 {
		t.Fatalf("SweepPurge in the open transaction: %d, %v; want 20", n, err)
	}

	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	for _, key := range []string{"brand-new", "available-0"} {
		res, err := b.store.RecordClaim(ctx, claimParams(recordID(key), "w"))
		if err != nil {
			t.Fatalf("claim %q while the sweeper holds its batch: %v", key, err)
		}
		if res.Outcome != store.OutcomeAcquired {
			t.Fatalf("claim %q: outcome %v, want acquired", key, res.Outcome)
		}
	}
	// A second sweeper skips the batch the first one holds.
	if n, err := b.store.SweepExpire(ctx, 100); err != nil || n != 0 {
		t.Fatalf("second sweeper's SweepExpire: %d, %v; want 0", n, err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if n := b.countRows(t, "state = 'expired'"); n != 20 {
		t.Fatalf("%d expired rows after the commit, want 20", n)
	}
}
