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

// The tests in this file hold the many-row statements (driver_claim.go,
// driver_tokencall.go) and the coalescers that fill them (store/coalesce)
// to every guarantee of a call made alone, on a real database. The
// conformance suite runs on the many-row statements too
// (TestStoreBatchStatements).

// TestClaimBatchMixesEveryOutcome: one statement whose rows each get their
// own answer, and a row's error does not fail its neighbours.
func TestClaimBatchMixesEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st := postgres.NewBatching(b.pool, 1)

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
		{RecordID: guarded.RecordID, Claimant: "me", Fingerprint: []byte("fp-2"), LeaseTTL: testLease, Retention: testRetention},
	}
	res, errs := st.ClaimBatch(calls)
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
		{0, store.ErrFingerprintMismatch, 0, false},
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
		if res[i].Outcome != w.outcome || res[i].Takeover != w.takeover {
			t.Errorf("%s: outcome %v takeover %v, want %v %v", key, res[i].Outcome, res[i].Takeover, w.outcome, w.takeover)
		}
		if w.token != 0 && res[i].Record.Token != w.token {
			t.Errorf("%s: token %d, want %d", key, res[i].Record.Token, w.token)
		}
		if w.token == 0 && res[i].Record.Token <= seqBefore {
			t.Errorf("%s: token %d, want a new one above %d", key, res[i].Record.Token, seqBefore)
		}
		if res[i].Record.Key != key {
			t.Errorf("%s: answered with the record of %q", key, res[i].Record.Key)
		}
		requireSameRecord(t, key+" as stored", b.get(t, calls[i].RecordID), res[i].Record)
	}
	if res[1].RetryAfter <= 0 {
		t.Errorf("held: RetryAfter %v, want the holder's remaining lease", res[1].RetryAfter)
	}
	// Three rows acquired a new token; the rows that only reported drew none.
	var seqAfter int64
	if err := b.pool.QueryRow(b.ctx, `SELECT last_value FROM idem_token_seq`).Scan(&seqAfter); err != nil {
		t.Fatal(err)
	}
	if seqAfter-seqBefore > 3+2 { // a takeover's INSERT draws a token it does not use
		t.Errorf("the batch drew %d tokens; the reporting rows must draw none", seqAfter-seqBefore)
	}
}

// TestCompleteBatchMixesEveryOutcome: the token calls' batch statement gives
// each row the answer the single-row call gives.
func TestCompleteBatchMixesEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st := postgres.NewBatching(b.pool, 1)

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
	recs, errs := st.CompleteBatch(b.ctx, calls)
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

// TestCoalescedSameKeyTwice: two Claims of one key that queue together are
// answered by one statement (one statement cannot touch a row twice): the
// first goes in it, and the second follows it, answered from the row the
// statement wrote as if it ran right after: IN_PROGRESS on the first's
// token. The coalescer's one statement slot is kept busy by a Claim that
// waits for a row lock until both are queued.
func TestCoalescedSameKeyTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st := postgres.NewBatching(b.pool, 1)

	blocker := recordID("blocker")
	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, insertProcessingSQL, blocker.Tenant, blocker.Namespace, blocker.Key, "other"); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		who string
		res *store.ClaimResult
		err error
	}
	answers := make(chan answer, 4)
	claim := func(id store.RecordID, who string) {
		res, err := st.RecordClaim(b.ctx, claimParams(id, who))
		answers <- answer{who, res, err}
	}
	blocked := make(chan struct{})
	go func() { defer close(blocked); claim(blocker, "blocked") }()
	b.waitBlockedBy(t, pid, blocked)

	twice := recordID("twice")
	go claim(twice, "first")
	waitQueued(t, st, 1)
	go claim(twice, "second")
	waitQueued(t, st, 2)
	go claim(recordID("other"), "third")
	waitQueued(t, st, 3)
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}

	got := map[string]answer{}
	for range 4 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("%s: %v", a.who, a.err)
		}
		got[a.who] = a
	}
	won, lost := got["first"].res, got["second"].res
	if won.Outcome != store.OutcomeAcquired || lost.Outcome != store.OutcomeInProgress || lost.Record.Token != won.Record.Token ||
		lost.RetryAfter <= 0 {
		t.Fatalf("two Claims of the key: first %v (token %d), second %v (token %d, retry after %v); want the first acquired and the second in_progress on its token",
			won.Outcome, won.Record.Token, lost.Outcome, lost.Record.Token, lost.RetryAfter)
	}
	if o := got["third"].res.Outcome; o != store.OutcomeAcquired {
		t.Fatalf("Claim of another key in the batch: %v, want acquired", o)
	}
	// The blocker alone, then first and third with second following: two
	// statements answering four calls, as idem_db_batch_calls tells an
	// operator.
	if n, calls := st.BatchCalls("claim"); n != 2 || calls != 4 {
		t.Fatalf("idem_db_batch_calls{kind=\"claim\"}: %d statements answering %v calls; want 2 answering 4", n, calls)
	}
}

// TestClaimFollowers: many Claims of one key queued together, as when a
// queue redelivers a message to every worker at once, take one statement:
// exactly one acquires, the same claimant asking again gets its ACQUIRED
// back, the others are IN_PROGRESS on its token, and a Claim with another
// fingerprint is refused, all without a second statement. A record the
// statement only read (COMPLETED) answers its followers with the replay.
func TestClaimFollowers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st := postgres.NewBatching(b.pool, 1)
	type answer struct {
		who string
		res *store.ClaimResult
		err error
	}

	// queueBehindBlocker queues the claims behind a statement that waits
	// for a row lock, then lets it go, and returns every answer by name.
	blockerN := 0
	queueBehindBlocker := func(claims ...*store.ClaimParams) map[string]answer {
		t.Helper()
		blockerN++
		blocker := recordID(fmt.Sprintf("blocker-%d", blockerN))
		tx, pid := b.begin(t)
		if _, err := tx.Exec(b.ctx, insertProcessingSQL, blocker.Tenant, blocker.Namespace, blocker.Key, "other"); err != nil {
			t.Fatal(err)
		}
		answers := make(chan answer, len(claims)+1)
		blocked := make(chan struct{})
		go func() {
			defer close(blocked)
			res, err := st.RecordClaim(b.ctx, claimParams(blocker, "blocked"))
			answers <- answer{"blocked", res, err}
		}()
		b.waitBlockedBy(t, pid, blocked)
		for i, p := range claims {
			go func() {
				res, err := st.RecordClaim(b.ctx, p)
				answers <- answer{p.Claimant, res, err}
			}()
			waitQueued(t, st, i+1)
		}
		if err := tx.Rollback(b.ctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]answer{}
		for range len(claims) + 1 {
			a := <-answers
			got[a.who] = a
		}
		return got
	}

	id := recordID("redelivered")
	withFingerprint := func(claimant string, fp string) *store.ClaimParams {
		p := claimParams(id, claimant)
		p.Fingerprint = []byte(fp)
		return p
	}
	claims := []*store.ClaimParams{withFingerprint("w0", "f")}
	for i := 1; i <= 6; i++ {
		claims = append(claims, withFingerprint(fmt.Sprintf("w%d", i), "f"))
	}
	claims = append(claims, withFingerprint("mismatch", "g"))
	statements, calls := st.BatchCalls("claim")
	got := queueBehindBlocker(claims...)
	first := got["w0"]
	if first.err != nil || first.res.Outcome != store.OutcomeAcquired {
		t.Fatalf("first Claim: %+v, %v; want acquired", first.res, first.err)
	}
	token := first.res.Record.Token
	for i := 1; i <= 6; i++ {
		a := got[fmt.Sprintf("w%d", i)]
		if a.err != nil || a.res.Outcome != store.OutcomeInProgress || a.res.Record.Token != token || a.res.RetryAfter <= 0 {
			t.Fatalf("%s: %+v, %v; want in_progress on token %d", a.who, a.res, a.err, token)
		}
	}
	if a := got["mismatch"]; !errors.Is(a.err, store.ErrFingerprintMismatch) {
		t.Fatalf("Claim with another fingerprint: %+v, %v; want a fingerprint mismatch", a.res, a.err)
	}
	n, c := st.BatchCalls("claim")
	if n-statements != 2 || c-calls != float64(len(claims)+1) {
		t.Fatalf("idem_db_batch_calls{kind=\"claim\"} grew by %d statements answering %v calls; want 2 (the blocker, then the key) answering %d",
			n-statements, c-calls, len(claims)+1)
	}

	// The same claimant twice in one batch: the second gets the first's
	// ACQUIRED back, with its token.
	twiceID := recordID("asked-twice")
	a1, a2 := claimParams(twiceID, "same"), claimParams(twiceID, "same")
	answers := make(chan answer, 2)
	blockerN++
	blocker := recordID(fmt.Sprintf("blocker-%d", blockerN))
	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, insertProcessingSQL, blocker.Tenant, blocker.Namespace, blocker.Key, "other"); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan struct{})
	go func() { defer close(blocked); _, _ = st.RecordClaim(b.ctx, claimParams(blocker, "blocked")) }()
	b.waitBlockedBy(t, pid, blocked)
	for i, p := range []*store.ClaimParams{a1, a2} {
		go func() {
			res, err := st.RecordClaim(b.ctx, p)
			answers <- answer{fmt.Sprint(i), res, err}
		}()
		waitQueued(t, st, i+1)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	<-blocked
	r1, r2 := <-answers, <-answers
	if r1.err != nil || r2.err != nil || r1.res.Outcome != store.OutcomeAcquired || r2.res.Outcome != store.OutcomeAcquired ||
		r1.res.Record.Token != r2.res.Record.Token {
		t.Fatalf("the same claimant twice: %+v, %v and %+v, %v; want acquired twice with one token", r1.res, r1.err, r2.res, r2.err)
	}

	// Followers of a record the statement only read: the replay.
	done := b.complete(t, id, token, "charged")
	got = queueBehindBlocker(claimParams(id, "late-1"), claimParams(id, "late-2"), claimParams(id, "late-3"))
	for _, who := range []string{"late-1", "late-2", "late-3"} {
		a := got[who]
		if a.err != nil || a.res.Outcome != store.OutcomeCompleted || string(a.res.Record.Result) != string(done.Result) {
			t.Fatalf("%s after the Complete: %+v, %v; want the completed replay", who, a.res, a.err)
		}
	}

	// Followers of a held record whose lease ran out: every Claim gets
	// UNRESOLVED, whether it made the record so or found it made.
	heldID := recordID("held-lapsed")
	hp := claimParams(heldID, "holder")
	hp.Hold = true
	if res, err := st.RecordClaim(b.ctx, hp); err != nil || res.Outcome != store.OutcomeAcquired {
		t.Fatalf("held claim: %+v, %v", res, err)
	}
	b.lapse(t, heldID)
	var redelivered []*store.ClaimParams
	for i := range 6 {
		redelivered = append(redelivered, claimParams(heldID, fmt.Sprintf("redelivery-%d", i)))
	}
	got = queueBehindBlocker(redelivered...)
	for _, p := range redelivered {
		a := got[p.Claimant]
		if a.err != nil || a.res.Outcome != store.OutcomeUnresolved || a.res.Record.State != store.StateUnresolved {
			t.Fatalf("%s of a held record whose lease ran out: %+v, %v; want UNRESOLVED", p.Claimant, a.res, a.err)
		}
	}
}

// TestClaimFollowerThatWouldWrite: a follower that its leader's answer does
// not settle goes in a statement of its own. The record is RELEASED with
// fingerprint f: the leader, with fingerprint g, is refused, and its
// follower, with f, takes the record over in the next statement.
func TestClaimFollowerThatWouldWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st := postgres.NewBatching(b.pool, 1)
	id := recordID("released")
	p := claimParams(id, "setup")
	p.Fingerprint = []byte("f")
	res, err := st.RecordClaim(b.ctx, p)
	if err != nil || res.Outcome != store.OutcomeAcquired {
		t.Fatalf("setup claim: %+v, %v", res, err)
	}
	if _, err := st.RecordFail(b.ctx, &store.FailParams{RecordID: id, Token: res.Record.Token, Error: "try again", Retryable: true}); err != nil {
		t.Fatal(err)
	}

	// A statement is counted once it has answered, so the blocker's is
	// counted with the others.
	statements, _ := st.BatchCalls("claim")
	tx, pid := b.begin(t)
	blocker := recordID("blocker")
	if _, err := tx.Exec(b.ctx, insertProcessingSQL, blocker.Tenant, blocker.Namespace, blocker.Key, "other"); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan struct{})
	go func() { defer close(blocked); _, _ = st.RecordClaim(b.ctx, claimParams(blocker, "blocked")) }()
	b.waitBlockedBy(t, pid, blocked)
	type answer struct {
		res *store.ClaimResult
		err error
	}
	leader, follower := make(chan answer, 1), make(chan answer, 1)
	lp, fp := claimParams(id, "leader"), claimParams(id, "follower")
	lp.Fingerprint, fp.Fingerprint = []byte("g"), []byte("f")
	go func() { r, err := st.RecordClaim(b.ctx, lp); leader <- answer{r, err} }()
	waitQueued(t, st, 1)
	go func() { r, err := st.RecordClaim(b.ctx, fp); follower <- answer{r, err} }()
	waitQueued(t, st, 2)
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	<-blocked
	l, f := <-leader, <-follower
	if !errors.Is(l.err, store.ErrFingerprintMismatch) {
		t.Fatalf("leader with another fingerprint: %+v, %v; want a fingerprint mismatch", l.res, l.err)
	}
	if f.err != nil || f.res.Outcome != store.OutcomeAcquired || !f.res.Takeover {
		t.Fatalf("follower with the record's fingerprint: %+v, %v; want it to take the record over", f.res, f.err)
	}
	if n, _ := st.BatchCalls("claim"); n-statements != 3 {
		t.Fatalf("%d claim statements; want 3: the blocker's, the leader's, and then one of the follower's own", n-statements)
	}
}

// waitQueued waits until n Claims wait in st's coalescer.
func waitQueued(t *testing.T, st *postgres.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d Claims queued after 10s, want %d", st.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
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
			st := postgres.NewBatching(pool, 2)

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
						_, cerrs := st.ClaimBatch(calls)
						for _, err := range cerrs {
							errs <- err
						}
						return
					}
					calls := make([]*store.CompleteParams, nKeys)
					for i, k := range order {
						calls[i] = &store.CompleteParams{RecordID: ids[k], Token: tokens[k], Result: []byte("r")}
					}
					_, cerrs := st.CompleteBatch(b.ctx, calls)
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
	st := postgres.NewBatching(pool, 1)

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
		recs, errs := st.CompleteBatch(b.ctx, calls)
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
