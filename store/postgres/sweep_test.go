package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testdb"
	"github.com/idemhq/idem/store"
)

// insertRows inserts n records named prefix-0 … prefix-(n-1) in state, with
// a lease and an expires_at offset from now() by the given intervals (NULL
// when the interval is empty), and a retention of insertedRetention.
const insertedRetention = 90 * time.Minute

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

func TestSweepExpireMarksOnlyLapsedProcessing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertRows(t, "lapsed", 3, store.StateProcessing, "-1 second", "")
	b.insertRows(t, "live", 3, store.StateProcessing, "1 minute", "")
	b.insertRows(t, "completed", 2, store.StateCompleted, "", "1 hour")
	b.insertRows(t, "failed", 2, store.StateFailed, "", "1 hour")
	b.insertRows(t, "released", 2, store.StateReleased, "", "1 hour")
	// A terminal row with a lapsed lease_expires_at must not be touched: only
	// PROCESSING rows expire.
	b.insertRows(t, "completed-stale-lease", 2, store.StateCompleted, "-1 hour", "1 hour")
	untouched := map[string]*store.Record{}
	for _, key := range []string{"live-0", "completed-0", "failed-0", "released-0", "completed-stale-lease-0"} {
		untouched[key] = b.get(t, recordID(key))
	}

	before := b.now(t)
	n, err := b.store.SweepExpire(b.ctx, 1000)
	after := b.now(t)
	if err != nil || n != 3 {
		t.Fatalf("SweepExpire: %d, %v; want 3, nil", n, err)
	}
	for i := range 3 {
		rec := b.get(t, recordID(fmt.Sprintf("lapsed-%d", i)))
		if rec.State != store.StateExpired {
			t.Fatalf("%s: state %s, want expired", rec.Key, rec.State)
		}
		requireBetween(t, "updated_at", rec.UpdatedAt, before, after)
		if want := rec.UpdatedAt.Add(insertedRetention); rec.Retention != insertedRetention || !rec.ExpiresAt.Equal(want) {
			t.Fatalf("%s: expires_at %v, want now + retention = %v", rec.Key, rec.ExpiresAt, want)
		}
	}
	for key, want := range untouched {
		requireSameRecord(t, key, b.get(t, recordID(key)), want)
	}
	if n, err := b.store.SweepExpire(b.ctx, 1000); err != nil || n != 0 {
		t.Fatalf("second SweepExpire: %d, %v; want 0, nil", n, err)
	}
}

func TestSweepPurgeDeletesOnlyDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, state := range []store.State{store.StateCompleted, store.StateFailed, store.StateReleased, store.StateExpired} {
		b.insertRows(t, "due-"+string(state), 2, state, "", "-1 second")
		b.insertRows(t, "kept-"+string(state), 2, state, "", "1 minute")
	}
	// PROCESSING rows are never purged, not even with an expires_at in the
	// past (which the store never writes) or a lapsed lease.
	b.insertRows(t, "processing-odd", 2, store.StateProcessing, "-1 hour", "-1 hour")
	b.insertRows(t, "processing-live", 2, store.StateProcessing, "1 minute", "")

	n, err := b.store.SweepPurge(b.ctx, 1000)
	if err != nil || n != 8 {
		t.Fatalf("SweepPurge: %d, %v; want 8, nil", n, err)
	}
	if left := b.countRows(t, "key LIKE 'due-%'"); left != 0 {
		t.Fatalf("%d due rows left", left)
	}
	if kept := b.countRows(t, "key NOT LIKE 'due-%'"); kept != 12 {
		t.Fatalf("%d other rows left, want 12", kept)
	}
	if n, err := b.store.SweepPurge(b.ctx, 1000); err != nil || n != 0 {
		t.Fatalf("second SweepPurge: %d, %v; want 0, nil", n, err)
	}
}

func TestSweepRespectsLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertRows(t, "lapsed", 25, store.StateProcessing, "-1 second", "")
	b.insertRows(t, "due", 25, store.StateCompleted, "", "-1 second")

	for _, want := range []int{10, 10, 5, 0} {
		if n, err := b.store.SweepExpire(b.ctx, 10); err != nil || n != want {
			t.Fatalf("SweepExpire(10): %d, %v; want %d", n, err, want)
		}
	}
	if n := b.countRows(t, "state = 'expired'"); n != 25 {
		t.Fatalf("%d expired rows, want 25", n)
	}
	for _, want := range []int{10, 10, 5, 0} {
		if n, err := b.store.SweepPurge(b.ctx, 10); err != nil || n != want {
			t.Fatalf("SweepPurge(10): %d, %v; want %d", n, err, want)
		}
	}
	// The freshly expired rows are kept for their retention.
	if n := b.countRows(t, "true"); n != 25 {
		t.Fatalf("%d rows left, want the 25 expired ones", n)
	}
}

// TestSweepersConcurrent: two replicas sweeping at once share the work, do
// every row once and never deadlock (the bundle's context has a deadline).
func TestSweepersConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.MaxConns(6))
	const rows = 2000
	b.insertRows(t, "lapsed", rows, store.StateProcessing, "-1 second", "")

	sweepAll := func(sweep func(context.Context, int) (int, error)) (total int) {
		t.Helper()
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			counts []int
			errs   []error
		)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sum := 0
				for {
					n, err := sweep(b.ctx, 50)
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
					if n == 0 {
						break
					}
					sum += n
				}
				mu.Lock()
				counts = append(counts, sum)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("sweeper failed: %v", errs[0])
		}
		t.Logf("the two sweepers did %v", counts)
		return counts[0] + counts[1]
	}

	if total := sweepAll(b.store.SweepExpire); total != rows {
		t.Fatalf("the sweepers expired %d rows in total, want each of the %d once", total, rows)
	}
	if n := b.countRows(t, "state = 'expired'"); n != rows {
		t.Fatalf("%d expired rows, want %d", n, rows)
	}
	b.exec(t, "UPDATE idem_records SET expires_at = now() - interval '1 second'")
	if total := sweepAll(b.store.SweepPurge); total != rows {
		t.Fatalf("the sweepers purged %d rows in total, want each of the %d once", total, rows)
	}
	if n := b.countRows(t, "true"); n != 0 {
		t.Fatalf("%d rows left after purging", n)
	}
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
	sweeper := b.storeOn(tx)
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

// TestTokensIncreaseAfterPurge: a record purged and created again gets a
// token greater than every token of its earlier life (DESIGN §1).
func TestTokensIncreaseAfterPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("reborn")
	first := b.claim(t, &store.ClaimParams{RecordID: id, LeaseTTL: testLease, Retention: time.Minute}).Record
	b.lapse(t, id)
	second := b.acquire(t, id, "")
	b.complete(t, id, second.Token, "done")
	b.exec(t, "UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE key = $1", id.Key)
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepPurge: %d, %v; want 1", n, err)
	}
	_, err := b.store.RecordGet(b.ctx, id)
	requireErr(t, "RecordGet after the purge", err, store.ErrNotFound)
	_, err = b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: second.Token})
	requireErr(t, "RecordComplete after the purge", err, store.ErrNotFound)

	reborn := b.acquire(t, id, "")
	if reborn.Token <= second.Token || reborn.Token <= first.Token || reborn.Attempt != 1 {
		t.Fatalf("token %d attempt %d after the purge; want > %d and attempt 1", reborn.Token, reborn.Attempt, second.Token)
	}
	for _, old := range []int64{first.Token, second.Token} {
		_, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: old})
		requireErr(t, "RecordComplete with a token from the earlier life", err, store.ErrLeaseLost)
	}
}

func TestSweepEmptyTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if n, err := b.store.SweepExpire(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("SweepExpire: %d, %v", n, err)
	}
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("SweepPurge: %d, %v", n, err)
	}
}
