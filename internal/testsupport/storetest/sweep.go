package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// seededRetention is the retention of the records seed creates.
const seededRetention = 90 * time.Minute

// seed creates n records named prefix-0 … prefix-(n-1) through the store and
// leaves them in state, with a live lease while PROCESSING and a retention of
// seededRetention. EXPIRED records are made by lapsing their leases and
// sweeping: seed fails when the sweep expires any other record, so seed them
// before lapsing anything else. It claims from a few goroutines at once.
func (b *bundle) seed(t *testing.T, prefix string, n int, state store.State) []store.RecordID {
	t.Helper()
	ids := make([]store.RecordID, n)
	for i := range ids {
		ids[i] = recordID(fmt.Sprintf("%s-%d", prefix, i))
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan store.RecordID)
	)
	for range min(n, 8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				if err := b.seedOne(id, state); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("seed %s as %s: %w", id.Key, state, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d records not seeded, first: %v", len(errs), n, errs[0])
	}
	if state == store.StateExpired {
		for _, id := range ids {
			b.lapse(t, id)
		}
		if got, err := b.store.SweepExpire(b.ctx, n+1); err != nil || got != n {
			t.Fatalf("seed %s as expired: SweepExpire: %d, %v; want %d", prefix, got, err, n)
		}
	}
	return ids
}

func (b *bundle) seedOne(id store.RecordID, state store.State) error {
	res, err := b.store.RecordClaim(b.ctx, &store.ClaimParams{RecordID: id, LeaseTTL: testLease, Retention: seededRetention})
	if err != nil {
		return err
	}
	if res.Outcome != store.OutcomeAcquired {
		return fmt.Errorf("outcome %v, want acquired", res.Outcome)
	}
	token := res.Record.Token
	switch state {
	case store.StateProcessing, store.StateExpired:
	case store.StateCompleted:
		_, err = b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: token, Result: []byte("r")})
	case store.StateFailed, store.StateReleased:
		_, err = b.store.RecordFail(b.ctx, &store.FailParams{RecordID: id, Token: token, Error: "e", Retryable: state == store.StateReleased})
	default:
		err = fmt.Errorf("cannot seed state %q", state)
	}
	return err
}

func testSweepExpireMarksOnlyLapsedProcessing(t *testing.T, h Harness) {
	b := setup(t, h)
	lapsed := b.seed(t, "lapsed", 3, store.StateProcessing)
	for _, id := range lapsed {
		b.lapse(t, id)
	}
	b.seed(t, "live", 3, store.StateProcessing)
	b.seed(t, "completed", 2, store.StateCompleted)
	b.seed(t, "failed", 2, store.StateFailed)
	b.seed(t, "released", 2, store.StateReleased)
	// A terminal record with a lapsed lease_expires_at must not be touched:
	// only PROCESSING records expire. (The store clears the lease when a
	// record leaves PROCESSING; the harness sets it back.)
	for _, id := range b.seed(t, "completed-stale-lease", 2, store.StateCompleted) {
		b.lapse(t, id)
	}
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
	for _, id := range lapsed {
		rec := b.get(t, id)
		if rec.State != store.StateExpired {
			t.Fatalf("%s: state %s, want expired", rec.Key, rec.State)
		}
		requireBetween(t, "updated_at", rec.UpdatedAt, before, after)
		if want := rec.UpdatedAt.Add(seededRetention); rec.Retention != seededRetention || !rec.ExpiresAt.Equal(want) {
			t.Fatalf("%s: expires_at %v, want now + retention = %v", rec.Key, rec.ExpiresAt, want)
		}
	}
	for key, want := range untouched {
		requireSameRecord(t, key, b.get(t, recordID(key)), want)
	}
	// The EXPIRED records keep their lapsed lease_expires_at, and are not
	// expired again.
	if n, err := b.store.SweepExpire(b.ctx, 1000); err != nil || n != 0 {
		t.Fatalf("second SweepExpire: %d, %v; want 0, nil", n, err)
	}
}

func testSweepPurgeDeletesOnlyDue(t *testing.T, h Harness) {
	b := setup(t, h)
	var due, kept []store.RecordID
	// EXPIRED first: seeding them sweeps, and nothing else has lapsed yet.
	for _, state := range []store.State{store.StateExpired, store.StateCompleted, store.StateFailed, store.StateReleased} {
		due = append(due, b.seed(t, "due-"+string(state), 2, state)...)
		kept = append(kept, b.seed(t, "kept-"+string(state), 2, state)...)
	}
	for _, id := range due {
		b.h.AgeOut(t, b.store, id)
	}
	// PROCESSING records are never purged, not even with an expires_at in
	// the past (which the store never writes) or a lapsed lease.
	for _, id := range b.seed(t, "processing-odd", 2, store.StateProcessing) {
		b.lapse(t, id)
		b.h.AgeOut(t, b.store, id)
		kept = append(kept, id)
	}
	kept = append(kept, b.seed(t, "processing-live", 2, store.StateProcessing)...)

	n, err := b.store.SweepPurge(b.ctx, 1000)
	if err != nil || n != 8 {
		t.Fatalf("SweepPurge: %d, %v; want 8, nil", n, err)
	}
	for _, id := range due {
		b.requireGone(t, id)
	}
	for _, id := range kept {
		b.get(t, id)
	}
	if total := b.total(t); total != 12 {
		t.Fatalf("%d records left, want the 12 kept", total)
	}
	if n, err := b.store.SweepPurge(b.ctx, 1000); err != nil || n != 0 {
		t.Fatalf("second SweepPurge: %d, %v; want 0, nil", n, err)
	}
}

func testSweepRespectsLimit(t *testing.T, h Harness) {
	b := setup(t, h)
	b.seed(t, "lapsed", 25, store.StateProcessing)
	b.seed(t, "due", 25, store.StateCompleted)
	if n := b.h.LapseAll(t, b.store); n != 25 {
		t.Fatalf("LapseAll: %d, want the 25 processing records", n)
	}
	if n := b.h.AgeOutAll(t, b.store); n != 25 {
		t.Fatalf("AgeOutAll: %d, want the 25 completed records", n)
	}

	for _, want := range []int{10, 10, 5, 0} {
		if n, err := b.store.SweepExpire(b.ctx, 10); err != nil || n != want {
			t.Fatalf("SweepExpire(10): %d, %v; want %d", n, err, want)
		}
	}
	if n := b.countStates(t)[store.StateExpired]; n != 25 {
		t.Fatalf("%d expired records, want 25", n)
	}
	for _, want := range []int{10, 10, 5, 0} {
		if n, err := b.store.SweepPurge(b.ctx, 10); err != nil || n != want {
			t.Fatalf("SweepPurge(10): %d, %v; want %d", n, err, want)
		}
	}
	// The freshly expired records are kept for their retention.
	if counts := b.countStates(t); counts[store.StateExpired] != 25 || b.total(t) != 25 {
		t.Fatalf("records left %v, want the 25 expired ones", counts)
	}
}

// testSweepersConcurrent: two replicas sweeping at once share the work, do
// every record once and never deadlock (the bundle's context has a deadline).
func testSweepersConcurrent(t *testing.T, h Harness) {
	b := setup(t, h, 6)
	// 400 rows in batches of 10 give the sweepers as many batches to share
	// as 2000 in batches of 50, while seeding (one commit a row on SQLite)
	// stays well inside the deadline on a busy machine.
	const rows, batch = 400, 10
	b.seed(t, "lapsed", rows, store.StateProcessing)
	if n := b.h.LapseAll(t, b.store); n != rows {
		t.Fatalf("LapseAll: %d, want %d", n, rows)
	}

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
					n, err := sweep(b.ctx, batch)
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
		t.Fatalf("the sweepers expired %d records in total, want each of the %d once", total, rows)
	}
	if n := b.countStates(t)[store.StateExpired]; n != rows {
		t.Fatalf("%d expired records, want %d", n, rows)
	}
	if n := b.h.AgeOutAll(t, b.store); n != rows {
		t.Fatalf("AgeOutAll: %d, want %d", n, rows)
	}
	if total := sweepAll(b.store.SweepPurge); total != rows {
		t.Fatalf("the sweepers purged %d records in total, want each of the %d once", total, rows)
	}
	if n := b.total(t); n != 0 {
		t.Fatalf("%d records left after purging", n)
	}
}

func testSweepEmptyStore(t *testing.T, h Harness) {
	b := setup(t, h)
	if n, err := b.store.SweepExpire(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("SweepExpire: %d, %v", n, err)
	}
	if n, err := b.store.SweepPurge(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("SweepPurge: %d, %v", n, err)
	}
}

// testTokensIncreaseAfterPurge: a record purged and created again gets a
// token greater than every token of its earlier life (DESIGN §1).
func testTokensIncreaseAfterPurge(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("reborn")
	first := b.claim(t, &store.ClaimParams{RecordID: id, LeaseTTL: testLease, Retention: time.Minute}).Record
	b.lapse(t, id)
	second := b.acquire(t, id, "")
	b.complete(t, id, second.Token, "done")
	b.h.AgeOut(t, b.store, id)
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
