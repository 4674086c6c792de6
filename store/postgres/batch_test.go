package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testsupport/faultproxy"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// The tests in this file hold the many-row operations (RecordClaimMany and
// the token calls' twins: claimManySQL, writeMany, tokenManySQL) to every
// guarantee of a call made alone, on a real database. The conformance suite
// calls them too (internal/testsupport/storetest).

// TestClaimManyMixesEveryOutcome: one many-row Claim whose calls each get
// their own answer: new keys, replays, live leases, takeovers of released,
// expired and lapsed records, a held lease that ran out (made UNRESOLVED),
// an UNRESOLVED record, a fingerprint mismatch, and a second call of a key
// among them, answered as if it ran after the first. Only the new key and
// the takeovers draw tokens, one each.
func TestClaimManyMixesEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)

	held := b.acquire(t, recordID("held"), "holder")
	mine := b.acquire(t, recordID("mine"), "me")
	done := b.acquire(t, recordID("done"), "w")
	b.complete(t, done.RecordID, done.Token, "result")
	failed := b.acquire(t, recordID("failed"), "w")
	b.fail(t, failed.RecordID, failed.Token, "boom", false)
	released := b.acquire(t, recordID("released"), "w")
	b.fail(t, released.RecordID, released.Token, "again", true)
	lapsed := b.acquire(t, recordID("lapsed"), "w")
	b.lapse(t, lapsed.RecordID)
	expired := b.acquire(t, recordID("expired"), "w")
	b.exec(t, `UPDATE idem_records SET state = 'expired', lease_expires_at = now() - interval '1 second' WHERE key = 'expired'`)
	heldLapsed := b.claim(t, &store.ClaimParams{RecordID: recordID("held-lapsed"), Claimant: "w", Hold: true,
		LeaseTTL: testLease, Retention: testRetention}).Record
	b.lapse(t, heldLapsed.RecordID)
	unresolved := b.acquire(t, recordID("unresolved"), "w")
	b.exec(t, `UPDATE idem_records SET state = 'unresolved' WHERE key = 'unresolved'`)
	guarded := b.claim(t, &store.ClaimParams{RecordID: recordID("guarded"), Claimant: "w", Fingerprint: []byte("fp-1"),
		LeaseTTL: testLease, Retention: testRetention}).Record
	b.complete(t, guarded.RecordID, guarded.Token, "r")

	var seqBefore int64
	if err := b.pool.QueryRow(b.ctx, `SELECT last_value FROM idem_token_seq`).Scan(&seqBefore); err != nil {
		t.Fatal(err)
	}
	calls := []*store.ClaimParams{
		claimParams(recordID("new"), "me"),
		claimParams(held.RecordID, "me"),
		claimParams(mine.RecordID, "me"),
		claimParams(done.RecordID, "me"),
		claimParams(failed.RecordID, "me"),
		claimParams(released.RecordID, "me"),
		claimParams(lapsed.RecordID, "me"),
		claimParams(expired.RecordID, "me"),
		claimParams(heldLapsed.RecordID, "me"),
		claimParams(unresolved.RecordID, "me"),
		{RecordID: guarded.RecordID, Claimant: "me", Fingerprint: []byte("fp-2"), LeaseTTL: testLease, Retention: testRetention},
		claimParams(recordID("new"), "someone else"),
	}
	res, errs := b.store.RecordClaimMany(b.ctx, calls)
	want := []struct {
		outcome  store.Outcome
		err      error
		token    int64 // 0: a new token from the sequence
		takeover bool
	}{
		{store.OutcomeAcquired, nil, 0, false},
		{store.OutcomeInProgress, nil, held.Token, false},
		{store.OutcomeAcquired, nil, mine.Token, false},
		{store.OutcomeCompleted, nil, done.Token, false},
		{store.OutcomeFailed, nil, failed.Token, false},
		{store.OutcomeAcquired, nil, 0, true},
		{store.OutcomeAcquired, nil, 0, true},
		{store.OutcomeAcquired, nil, 0, true},
		{store.OutcomeUnresolved, nil, heldLapsed.Token, false},
		{store.OutcomeUnresolved, nil, unresolved.Token, false},
		{0, store.ErrFingerprintMismatch, 0, false},
		{store.OutcomeInProgress, nil, -1, false}, // the first call's token
	}
	for i, w := range want {
		key := calls[i].Key
		if w.err != nil {
			requireErr(t, key, errs[i], w.err)
			continue
		}
		if errs[i] != nil || res[i] == nil {
			t.Fatalf("%s: %+v, %v; want %v", key, res[i], errs[i], w.outcome)
		}
		if res[i].Outcome != w.outcome || res[i].Takeover != w.takeover || res[i].Now.IsZero() {
			t.Errorf("%s: outcome %v takeover %v at %v, want %v %v at the database's clock", key, res[i].Outcome, res[i].Takeover, res[i].Now, w.outcome, w.takeover)
		}
		switch {
		case w.token > 0 && res[i].Record.Token != w.token:
			t.Errorf("%s: token %d, want %d", key, res[i].Record.Token, w.token)
		case w.token == 0 && res[i].Record.Token <= seqBefore:
			t.Errorf("%s: token %d, want a new one above %d", key, res[i].Record.Token, seqBefore)
		case w.token < 0 && res[i].Record.Token != res[0].Record.Token:
			t.Errorf("%s: token %d, want the first call's %d", key, res[i].Record.Token, res[0].Record.Token)
		}
		if res[i].Record.Key != key {
			t.Errorf("%s: answered with the record of %q", key, res[i].Record.Key)
		}
		if i != len(calls)-1 {
			requireSameRecord(t, key+" as stored", b.get(t, calls[i].RecordID), res[i].Record)
		}
	}
	if res[1].RetryAfter <= 0 {
		t.Errorf("held: RetryAfter %v, want the holder's remaining lease", res[1].RetryAfter)
	}
	var seqAfter int64
	if err := b.pool.QueryRow(b.ctx, `SELECT last_value FROM idem_token_seq`).Scan(&seqAfter); err != nil {
		t.Fatal(err)
	}
	if seqAfter-seqBefore != 4 {
		t.Errorf("the calls drew %d tokens; want 4, one for the new key and one per takeover", seqAfter-seqBefore)
	}
}

// TestCompleteManyMixesEveryOutcome: the token calls' many-row statement
// gives each call the answer the one-row statement gives.
func TestCompleteManyMixesEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)

	live := b.acquire(t, recordID("live"), "w")
	expired := b.acquire(t, recordID("expired"), "w")
	b.exec(t, `UPDATE idem_records SET state = 'expired', expires_at = now() + retention WHERE key = 'expired'`)
	again := b.acquire(t, recordID("again"), "w")
	first := b.complete(t, again.RecordID, again.Token, "first")
	other := b.acquire(t, recordID("other-value"), "w")
	b.complete(t, other.RecordID, other.Token, "first")
	taken := b.acquire(t, recordID("taken"), "w")
	b.lapse(t, taken.RecordID)
	successor := b.acquire(t, taken.RecordID, "successor")
	failed := b.acquire(t, recordID("failed"), "w")
	b.fail(t, failed.RecordID, failed.Token, "boom", false)

	calls := []*store.CompleteParams{
		{RecordID: live.RecordID, Token: live.Token, Result: []byte("r-live")},
		{RecordID: expired.RecordID, Token: expired.Token, Result: []byte("r-expired")},
		{RecordID: again.RecordID, Token: again.Token, Result: []byte("first")},
		{RecordID: taken.RecordID, Token: taken.Token, Result: []byte("stale")},
		{RecordID: failed.RecordID, Token: failed.Token, Result: []byte("late")},
		{RecordID: recordID("missing"), Token: 1, Result: []byte("r")},
		{RecordID: other.RecordID, Token: other.Token, Result: []byte("second")},
	}
	recs, errs := b.store.RecordCompleteMany(b.ctx, calls)
	for i := range 2 {
		if errs[i] != nil || recs[i].State != store.StateCompleted || string(recs[i].Result) != string(calls[i].Result) {
			t.Errorf("%s: %+v, %v; want completed with its result", calls[i].Key, recs[i], errs[i])
		}
	}
	if errs[2] != nil {
		t.Errorf("repeated Complete: %v", errs[2])
	} else {
		requireSameRecord(t, "repeated Complete", recs[2], first)
	}
	requireErr(t, "superseded token", errs[3], store.ErrLeaseLost)
	requireErr(t, "Complete after Fail", errs[4], store.ErrAlreadyTerminal)
	requireErr(t, "no such record", errs[5], store.ErrNotFound)
	requireErr(t, "Complete with another result after Complete", errs[6], store.ErrAlreadyTerminal)
	requireSameRecord(t, "the successor's record", b.get(t, taken.RecordID), successor)
}

// TestBatchesOnOverlappingKeysDoNotDeadlock: two batches over the same keys,
// built in opposite orders, meet on a row that a third transaction holds.
// Locked in the order each was built, the first would hold the keys below
// that row and the second the keys above it, and each would then wait for
// the other: a deadlock, which Postgres breaks by failing one statement
// (ErrContention). Locked in primary-key order, the second waits behind the
// first and both succeed. Both batch statements are checked: the Claim's
// ON CONFLICT takeover and the token calls' FOR UPDATE.
func TestBatchesOnOverlappingKeysDoNotDeadlock(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"claim", "complete"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// A pool of its own, named, so that the test can see when both
			// of its batches wait for a lock.
			cfg, err := pgxpool.ParseConfig(b.db.URL)
			if err != nil {
				t.Fatal(err)
			}
			app := fmt.Sprintf("deadlock-test-%s-%d", kind, time.Now().UnixNano())
			cfg.ConnConfig.RuntimeParams["application_name"] = app
			cfg.MaxConns = 2
			pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			st := postgres.New(pool)

			const nKeys = 9
			ids := make([]store.RecordID, nKeys)
			tokens := make([]int64, nKeys)
			for i := range ids {
				ids[i] = recordID(fmt.Sprintf("k%d", i))
				tokens[i] = b.acquire(t, ids[i], "w").Token
			}
			b.exec(t, `UPDATE idem_records SET lease_expires_at = now() - interval '1 second'`)
			tx, _ := b.begin(t)
			if _, err := tx.Exec(b.ctx, `SELECT 1 FROM idem_records WHERE key = $1 FOR UPDATE`, ids[nKeys/2].Key); err != nil {
				t.Fatal(err)
			}

			errs := make(chan error, 2*nKeys)
			var wg sync.WaitGroup
			for g, reversed := range []bool{false, true} {
				order := make([]int, nKeys)
				for i := range order {
					order[i] = i
					if reversed {
						order[i] = nKeys - 1 - i
					}
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if kind == "claim" {
						calls := make([]*store.ClaimParams, nKeys)
						for i, k := range order {
							calls[i] = claimParams(ids[k], fmt.Sprintf("g%d", g))
						}
						_, cerrs := st.RecordClaimMany(b.ctx, calls)
						for _, err := range cerrs {
							errs <- err
						}
						return
					}
					calls := make([]*store.CompleteParams, nKeys)
					for i, k := range order {
						calls[i] = &store.CompleteParams{RecordID: ids[k], Token: tokens[k], Result: []byte("r")}
					}
					_, cerrs := st.RecordCompleteMany(b.ctx, calls)
					for _, err := range cerrs {
						if !errors.Is(err, store.ErrAlreadyTerminal) { // the other batch completed it first
							errs <- err
						}
					}
				}()
			}
			// Both batches wait for a lock: the first (or both) for the
			// held row, the second for the first's.
			deadline := time.Now().Add(10 * time.Second)
			for {
				var waiting int
				if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of the two batches wait for a lock after 10s", waiting)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := tx.Rollback(b.ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("batch on overlapping keys: %v", err)
				}
			}
		})
	}
}

// TestConnectionCutMidBatchIsUnavailable: the connection under a batch
// statement goes away while the statement waits for a row lock. Every call
// of the batch is answered ErrUnavailable (the outcome is unknown), none
// with a definite answer, and the other rows of the batch changed nothing.
func TestConnectionCutMidBatchIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(t, fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", proxyPort(t, proxy)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := postgres.New(pool)

	var calls []*store.CompleteParams
	for _, k := range []string{"a", "b", "c"} {
		rec := b.acquire(t, recordID(k), "w")
		calls = append(calls, &store.CompleteParams{RecordID: rec.RecordID, Token: rec.Token, Result: []byte("r")})
	}
	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, `SELECT 1 FROM idem_records WHERE key = 'c' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		recs []*store.Record
		errs []error
	}
	out := make(chan answer, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		recs, errs := st.RecordCompleteMany(b.ctx, calls)
		out <- answer{recs, errs}
	}()
	waiting := b.waitBlockedBy(t, pid, done)
	proxy.Cut()
	got := <-out
	for i, err := range got.errs {
		requireErr(t, "Complete of "+calls[i].Key+" in a batch whose connection was cut", err, store.ErrUnavailable)
		if got.recs[i] != nil {
			t.Errorf("%s: a record alongside the error", calls[i].Key)
		}
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	// The backend was still waiting for the lock when its client went away
	// and runs on once it has it: whether it commits is what nobody can
	// know, which is why every caller got ErrUnavailable. It is one
	// statement, so its rows commit all together or not at all.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var active int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE pid = ANY($1) AND state = 'active'`, waiting).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cut batch's backend still runs after 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var completed int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM idem_records WHERE state = 'completed'`).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if completed != 0 && completed != len(calls) {
		t.Fatalf("%d of the batch's %d records completed; a batch commits all or none", completed, len(calls))
	}
}

func proxyPort(t *testing.T, p *faultproxy.Proxy) uint16 {
	t.Helper()
	var port uint16
	if _, err := fmt.Sscanf(p.Addr(), "127.0.0.1:%d", &port); err != nil {
		t.Fatalf("proxy address %q: %v", p.Addr(), err)
	}
	return port
}
