package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
)

func claimParams(id store.RecordID, claimant string) *store.ClaimParams {
	return &store.ClaimParams{RecordID: id, Claimant: claimant, LeaseTTL: time.Minute, Retention: time.Hour}
}

func id(key string) store.RecordID {
	return store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: key}
}

// work is one worker's round: a record of its own taken through its whole
// life, and a claim of a key every worker shares.
func work(ctx context.Context, st store.Store, worker, round int) error {
	own := id(fmt.Sprintf("w%d-%d", worker, round))
	res, err := st.RecordClaim(ctx, claimParams(own, ""))
	if err != nil {
		return fmt.Errorf("claim %s: %w", own.Key, err)
	}
	if res.Outcome != store.OutcomeAcquired {
		return fmt.Errorf("claim %s: outcome %v", own.Key, res.Outcome)
	}
	token := res.Record.Token
	if _, err := st.RecordHeartbeat(ctx, &store.HeartbeatParams{RecordID: own, Token: token, LeaseTTL: time.Minute}); err != nil {
		return fmt.Errorf("heartbeat %s: %w", own.Key, err)
	}
	if round%2 == 0 {
		_, err = st.RecordComplete(ctx, &store.CompleteParams{RecordID: own, Token: token, Result: []byte("r")})
	} else {
		_, err = st.RecordFail(ctx, &store.FailParams{RecordID: own, Token: token, Error: "e", Retryable: round%3 == 0})
	}
	if err != nil {
		return fmt.Errorf("finish %s: %w", own.Key, err)
	}
	shared := id(fmt.Sprintf("shared-%d", round%5))
	res, err = st.RecordClaim(ctx, claimParams(shared, fmt.Sprint(worker)))
	if err != nil {
		return fmt.Errorf("claim %s: %w", shared.Key, err)
	}
	if res.Outcome == store.OutcomeAcquired {
		if _, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: shared, Token: res.Record.Token}); err != nil {
			return fmt.Errorf("complete %s: %w", shared.Key, err)
		}
	}
	if round%5 == 4 {
		if _, err := st.SweepExpire(ctx, 100); err != nil {
			return fmt.Errorf("SweepExpire: %w", err)
		}
		if _, err := st.SweepPurge(ctx, 100); err != nil {
			return fmt.Errorf("SweepPurge: %w", err)
		}
		if _, err := st.RecordDelete(ctx, &store.DeleteParams{RecordID: id(fmt.Sprintf("w%d-%d", worker, round-1))}); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	}
	return nil
}

// runWorkers runs workers goroutines of rounds rounds each, the i-th on
// stores[i%len(stores)], and returns every error.
func runWorkers(ctx context.Context, stores []store.Store, workers, rounds int) []error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				if err := work(ctx, stores[w%len(stores)], w, r); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("worker %d: %w", w, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// TestConcurrentWritersNeverBusy: many goroutines writing through one Store
// queue for its write connection; none sees SQLITE_BUSY (ErrUnavailable).
func TestConcurrentWritersNeverBusy(t *testing.T) {
	t.Parallel()
	st, _ := open(t, filepath.Join(t.TempDir(), "idem.db"))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	const workers, rounds = 64, 10
	if errs := runWorkers(ctx, []store.Store{st}, workers, rounds); len(errs) > 0 {
		t.Fatalf("%d workers failed, first: %v", len(errs), errs[0])
	}
	t.Logf("%d workers × %d rounds in %v", workers, rounds, time.Since(start))
}

// TestTwoStoresOnOneFile: two Store values on one file, as a Store and a
// tool that writes to its file would be, take turns at SQLite's write lock.
// One counter hands out the tokens of both, so a key claimed through both at
// once is acquired once and no token repeats. (The lock is not fair, so the
// test claims in bursts, not under sustained load: idemd keeps one Store
// per file.)
func TestTwoStoresOnOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	a, _ := open(t, path)
	b, _ := open(t, path)
	stores := []store.Store{a, b}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	for k := range 5 {
		key := id(fmt.Sprintf("both-%d", k))
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			acquired []*store.Record
			via      int // the store that acquired it
			errs     []error
		)
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := stores[i%2].RecordClaim(ctx, claimParams(key, fmt.Sprint(i)))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case res.Outcome == store.OutcomeAcquired:
					acquired = append(acquired, res.Record)
					via = i % 2
				case res.Outcome != store.OutcomeInProgress:
					errs = append(errs, fmt.Errorf("outcome %v", res.Outcome))
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 || len(acquired) != 1 {
			t.Fatalf("%s claimed through two stores: %d acquired, errors %v; want 1 acquired, no error", key.Key, len(acquired), errs)
		}
		// What one store wrote, the other reads and finishes.
		done, err := stores[1-via].RecordComplete(ctx,
			&store.CompleteParams{RecordID: key, Token: acquired[0].Token, Result: []byte("ok")})
		if err != nil || done.State != store.StateCompleted {
			t.Fatalf("Complete through the other store: %+v, %v", done, err)
		}
	}

	recs, err := a.RecordList(ctx, &store.ListParams{Tenant: "acme", Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]string{}
	for _, r := range recs {
		if other, ok := seen[r.Token]; ok {
			t.Fatalf("%s and %s hold one token, %d", other, r.Key, r.Token)
		}
		seen[r.Token] = r.Key
	}
}

// TestClaimUnderAnotherWriteLock: while another connection holds the write
// lock, a Claim (every Claim goes to the writer) waits for it and gives up
// when its context ends, with the context's error, not ErrUnavailable; reads
// still answer.
func TestClaimUnderAnotherWriteLock(t *testing.T) {
	t.Parallel()
	st, raw := open(t, filepath.Join(t.TempDir(), "idem.db"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	held, err := st.RecordClaim(ctx, claimParams(id("held"), "holder"))
	if err != nil {
		t.Fatal(err)
	}

	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") }()

	for _, key := range []string{"held", "new"} {
		short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = st.RecordClaim(short, claimParams(id(key), "w"))
		cancelShort()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("claim of %s under another's write lock, past its deadline: %v; want context.DeadlineExceeded", key, err)
		}
	}
	if rec, err := st.RecordGet(ctx, id("held")); err != nil || rec.Token != held.Record.Token {
		t.Fatalf("RecordGet under another's write lock: %+v, %v", rec, err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("Ping under another's write lock: %v", err)
	}
}

// TestLockedPastBusyTimeoutIsUnavailable: a write that waits longer than the
// busy timeout for a lock another connection holds is ErrUnavailable, and the
// store writes again once the lock is free.
func TestLockedPastBusyTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	st, raw := open(t, filepath.Join(t.TempDir(), "idem.db"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	held, err := st.RecordClaim(ctx, claimParams(id("k"), "w"))
	if err != nil {
		t.Fatal(err)
	}

	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	start := time.Now()
	_, err = st.RecordComplete(ctx, &store.CompleteParams{RecordID: id("k"), Token: held.Record.Token, Result: []byte("r")})
	waited := time.Since(start)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Complete under another's write lock: %v; want ErrUnavailable", err)
	}
	if waited < sqlite.BusyTimeout-500*time.Millisecond {
		t.Fatalf("Complete gave up after %v, before the busy timeout %v", waited, sqlite.BusyTimeout)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	rec, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: id("k"), Token: held.Record.Token, Result: []byte("r")})
	if err != nil || rec.State != store.StateCompleted {
		t.Fatalf("Complete once the lock is free: %+v, %v", rec, err)
	}
}
