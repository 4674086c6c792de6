package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// uniqueID is a record id no other test, in this schema or another one
// listening on the same database, uses: notifications go to every schema.
func uniqueID(t *testing.T) store.RecordID {
	return recordID(t.Name() + "-" + randomHex())
}

func randomHex() string {
	var buf [6]byte
	_, _ = rand.Read(buf[:])
	return hex.EncodeToString(buf[:])
}

// listen opens a connection of the test's own that LISTENs on idem's channel.
func (b *testBundle) listen(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.db.URL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(b.ctx)) })
	if _, err := conn.Exec(b.ctx, "LISTEN idem_records"); err != nil {
		t.Fatalf("LISTEN: %v", err)
	}
	return conn
}

// nextNotified is the id of the next notification on conn about one of ids,
// skipping other tests' notifications; it fails t after 10 seconds.
func nextNotified(t *testing.T, conn *pgx.Conn, ids ...store.RecordID) store.RecordID {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		var got []string
		if err := json.Unmarshal([]byte(n.Payload), &got); err != nil || len(got) != 3 {
			t.Fatalf("payload %q: want a JSON array of tenant, namespace, key", n.Payload)
		}
		id := store.RecordID{Tenant: got[0], Namespace: got[1], Key: got[2]}
		for _, want := range ids {
			if id == want {
				return id
			}
		}
	}
}

// TestNotifyOnlyWaitedRows: the statements that end a lease, single-row and
// batch, notify for the rows a waiting Claim marked and for no others, and a
// Heartbeat notifies nobody.
func TestNotifyOnlyWaitedRows(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		name := map[bool]string{false: "single", true: "batch"}[batch]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// The token calls, one row or many.
			heartbeat := func(p *store.HeartbeatParams) error {
				if batch {
					_, errs := b.store.RecordHeartbeatMany(b.ctx, []*store.HeartbeatParams{p})
					return errs[0]
				}
				_, err := b.store.RecordHeartbeat(b.ctx, p)
				return err
			}
			complete := func(p *store.CompleteParams) error {
				if batch {
					_, errs := b.store.RecordCompleteMany(b.ctx, []*store.CompleteParams{p})
					return errs[0]
				}
				_, err := b.store.RecordComplete(b.ctx, p)
				return err
			}
			fail := func(p *store.FailParams) error {
				if batch {
					_, errs := b.store.RecordFailMany(b.ctx, []*store.FailParams{p})
					return errs[0]
				}
				_, err := b.store.RecordFail(b.ctx, p)
				return err
			}
			conn := b.listen(t)
			quiet, waited, failed := uniqueID(t), uniqueID(t), uniqueID(t)
			quietRec := b.acquire(t, quiet, "w1")
			waitedRec := b.acquire(t, waited, "w2")
			failedRec := b.acquire(t, failed, "w3")
			for _, m := range []struct {
				id    store.RecordID
				token int64
			}{{waited, waitedRec.Token}, {failed, failedRec.Token}} {
				if err := b.store.RecordMarkWaited(b.ctx, m.id, m.token); err != nil {
					t.Fatalf("RecordMarkWaited: %v", err)
				}
			}
			if err := heartbeat(&store.HeartbeatParams{RecordID: waited, Token: waitedRec.Token, LeaseTTL: testLease}); err != nil {
				t.Fatalf("RecordHeartbeat: %v", err)
			}
			for _, p := range []*store.CompleteParams{{RecordID: quiet, Token: quietRec.Token}, {RecordID: waited, Token: waitedRec.Token}} {
				if err := complete(p); err != nil {
					t.Fatalf("RecordComplete: %v", err)
				}
			}
			if got := nextNotified(t, conn, quiet, waited, failed); got != waited {
				t.Fatalf("first notification for %q, want %q (the Heartbeat and the unwaited Complete notify nobody)", got.Key, waited.Key)
			}
			if err := fail(&store.FailParams{RecordID: failed, Token: failedRec.Token, Error: "no"}); err != nil {
				t.Fatalf("RecordFail: %v", err)
			}
			if got := nextNotified(t, conn, quiet, waited, failed); got != failed {
				t.Fatalf("notification for %q, want %q", got.Key, failed.Key)
			}
		})
	}
}

// TestMarkWaited: the mark holds for the token it names only, and a takeover
// clears it.
func TestMarkWaited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := uniqueID(t)
	rec := b.acquire(t, id, "w1")
	waiters := func() bool {
		var w bool
		if err := b.pool.QueryRow(b.ctx, `SELECT waiters FROM idem_records WHERE tenant = $1 AND namespace = $2 AND key = $3`,
			id.Tenant, id.Namespace, id.Key).Scan(&w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	if err := b.store.RecordMarkWaited(b.ctx, id, rec.Token+1); err != nil || waiters() {
		t.Fatalf("mark with another token: %v, waiters %v; want nil, false", err, waiters())
	}
	if err := b.store.RecordMarkWaited(b.ctx, id, rec.Token); err != nil || !waiters() {
		t.Fatalf("mark: %v, waiters %v; want nil, true", err, waiters())
	}
	b.lapse(t, id)
	b.acquire(t, id, "w2")
	if waiters() {
		t.Fatal("waiters still set after a takeover")
	}
}

// TestMarkWaitedFollowsAConcurrentUpdate: a waiting Claim's mark that waits
// for the row lock of another transaction changing the row (a Heartbeat)
// still sets the flag once that commits. Otherwise the holder's Complete
// would find no waiter to notify and the Claim would sleep to the end of
// its wait.
func TestMarkWaitedFollowsAConcurrentUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := uniqueID(t)
	rec := b.acquire(t, id, "w1")
	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, `UPDATE idem_records SET lease_expires_at = now() + interval '1 hour', updated_at = now()
		WHERE tenant = $1 AND namespace = $2 AND key = $3`, id.Tenant, id.Namespace, id.Key); err != nil {
		t.Fatal(err)
	}
	marked := make(chan error, 1)
	done := make(chan struct{})
	go func() { defer close(done); marked <- b.store.RecordMarkWaited(b.ctx, id, rec.Token) }()
	b.waitBlockedBy(t, pid, done)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-marked; err != nil {
		t.Fatal(err)
	}
	var w bool
	if err := b.pool.QueryRow(b.ctx, `SELECT waiters FROM idem_records WHERE tenant = $1 AND namespace = $2 AND key = $3`,
		id.Tenant, id.Namespace, id.Key).Scan(&w); err != nil {
		t.Fatal(err)
	}
	if !w {
		t.Fatal("waiters not set: the mark missed the row version the Heartbeat left")
	}
}

// TestSweepExpireNotifies: the sweeper's expiry wakes the Claims waiting on
// the leases it ends.
func TestSweepExpireNotifies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := b.listen(t)
	id := uniqueID(t)
	rec := b.acquire(t, id, "w1")
	if err := b.store.RecordMarkWaited(b.ctx, id, rec.Token); err != nil {
		t.Fatal(err)
	}
	b.lapse(t, id)
	if n, err := b.store.SweepExpire(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("SweepExpire: %d, %v; want 1", n, err)
	}
	nextNotified(t, conn, id)
}

// TestListenerWakesWatches: a Complete on another Store over the same
// database wakes a watch, and when the listener's connection is killed,
// every watch is woken once it listens again, since what was sent meanwhile
// is lost.
func TestListenerWakesWatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := postgres.New(b.pool)
	app := "idem-listener-test-" + randomHex()
	pool, err := postgres.Connect(b.ctx, b.db.URL+"&application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	waiting := postgres.New(pool)
	t.Cleanup(waiting.Close)

	id, idle := uniqueID(t), uniqueID(t)
	rec := b.acquire(t, id, "w1")
	watch := waiting.RecordWatch(id)
	defer watch.Close()
	idleWatch := waiting.RecordWatch(idle)
	defer idleWatch.Close()
	awaitWake := func(w *store.Watch, what string) {
		t.Helper()
		select {
		case <-w.C:
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake: %s", what)
		}
	}
	// The first listen wakes every watch.
	awaitWake(watch, "the listener's first LISTEN")
	awaitWake(idleWatch, "the listener's first LISTEN")
	if err := waiting.RecordMarkWaited(b.ctx, id, rec.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := other.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: rec.Token, Result: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	awaitWake(watch, "a Complete through another Store")
	select {
	case <-idleWatch.C:
		t.Fatal("a watch of another record woke")
	case <-time.After(100 * time.Millisecond):
	}

	var killed int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the listener: %d backends, %v; want 1", killed, err)
	}
	awaitWake(idleWatch, "the listener listening again")
	if n := waiting.Listens(); n < 2 {
		t.Fatalf("%d listens, want 2 or more", n)
	}
}
