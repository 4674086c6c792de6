package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// warm opens every connection of the pool, so that a later new connection
// can only replace one that was closed, and returns how many it opened.
func (b *testBundle) warm(t *testing.T) int64 {
	t.Helper()
	n := int(b.pool.Config().MaxConns)
	var conns []interface{ Release() }
	for range n {
		c, err := b.pool.Acquire(b.ctx)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return b.pool.Stat().NewConnsCount()
}

// TestShortDeadlinesKeepThePoolsConnections: calls whose deadline passes
// while their statement runs leave the pool's connections open. pgx closes
// a connection whose query is cancelled mid-flight, so before the store ran
// its statements detached from the caller's cancellation, a flood of calls
// with deadlines of a few milliseconds made Postgres fork a backend for
// nearly every one.
func TestShortDeadlinesKeepThePoolsConnections(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.MaxConns(4))
	opened := b.warm(t)

	var cutOff, answered atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				// 50 µs to 3 ms: some calls end before their statement is
				// sent, many while it runs, some after it answered.
				d := time.Duration(50+(i*37+w*211)%2950) * time.Microsecond
				ctx, cancel := context.WithTimeout(b.ctx, d)
				id := recordID(fmt.Sprintf("w%d-%d", w, i%20))
				var err error
				if i%2 == 0 {
					_, err = b.store.RecordClaim(ctx, claimParams(id, "flood"))
				} else {
					_, err = b.store.RecordGet(ctx, id)
				}
				cancel()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					cutOff.Add(1)
				case err == nil, errors.Is(err, store.ErrNotFound):
					answered.Add(1)
				default:
					t.Errorf("call with a %s deadline: %v", d, err)
				}
			}
		}()
	}
	wg.Wait()
	if cutOff.Load() == 0 {
		t.Fatalf("no call was cut off by its deadline (%d answered): the test proves nothing", answered.Load())
	}
	// Statements whose callers left finish on their own; let them.
	waitReleased(t, b)
	if st := b.pool.Stat(); st.NewConnsCount() != opened || st.TotalConns() != b.pool.Config().MaxConns {
		t.Fatalf("%d calls cut off by their deadline, %d answered: the pool opened %d new connections and holds %d of %d; want no new one and all kept",
			cutOff.Load(), answered.Load(), st.NewConnsCount()-opened, st.TotalConns(), b.pool.Config().MaxConns)
	}
	t.Logf("%d calls cut off by their deadline, %d answered, no connection lost", cutOff.Load(), answered.Load())
}

// waitReleased waits up to 30 s for the statements whose callers left to
// finish and give their connections back.
func waitReleased(t *testing.T, b *testBundle) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); b.pool.Stat().AcquiredConns() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections are still in use 30s after their callers left", b.pool.Stat().AcquiredConns())
		}
	}
}

// TestCancelledCallReturnsAtOnceAndItsStatementFinishes: a Complete waiting
// for a row lock returns the caller's cancellation at once; the statement
// itself goes on, completes the record once the lock is released, and the
// connection it ran on stays open.
func TestCancelledCallReturnsAtOnceAndItsStatementFinishes(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.MaxConns(4))
	id := recordID("locked")
	rec := b.acquire(t, id, "worker")
	opened := b.warm(t)

	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, "SELECT 1 FROM idem_records WHERE tenant = $1 AND namespace = $2 AND key = $3 FOR UPDATE",
		id.Tenant, id.Namespace, id.Key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	returned := make(chan struct{})
	var err error
	go func() {
		defer close(returned)
		_, err = b.store.RecordComplete(ctx, &store.CompleteParams{RecordID: id, Token: rec.Token, Result: []byte("ok")})
	}()
	b.waitBlockedBy(t, pid, returned)
	cancel()
	select {
	case <-returned:
		requireErr(t, "Complete cancelled while it waited for the lock", err, context.Canceled)
	case <-time.After(20 * time.Second):
		t.Fatal("Complete did not return within 20s of its cancellation, while its statement waited for a lock")
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); b.get(t, id).State != store.StateCompleted; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled Complete's statement did not finish once the lock was released: %s", b.get(t, id).State)
		}
	}
	waitReleased(t, b)
	if st := b.pool.Stat(); st.NewConnsCount() != opened || st.TotalConns() != b.pool.Config().MaxConns {
		t.Fatalf("the pool opened %d new connections and holds %d of %d; want no new one and all kept",
			st.NewConnsCount()-opened, st.TotalConns(), b.pool.Config().MaxConns)
	}
}

// TestConnectSetsAStatementTimeout: Connect's connections have
// StatementTimeout unless the URL sets statement_timeout.
func TestConnectSetsAStatementTimeout(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	custom, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := custom.Query()
	q.Set("statement_timeout", "1234")
	q.Set("pool_max_conns", "1")
	custom.RawQuery = q.Encode()
	plain, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q = plain.Query()
	q.Set("pool_max_conns", "1")
	plain.RawQuery = q.Encode()
	for _, tc := range []struct{ url, want string }{
		{plain.String(), fmt.Sprint(postgres.StatementTimeout.Seconds()) + "s"},
		{custom.String(), "1234ms"},
	} {
		pool, err := postgres.Connect(t.Context(), tc.url)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = pool.QueryRow(t.Context(), "SHOW statement_timeout").Scan(&got)
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("statement_timeout %s; want %s", got, tc.want)
		}
	}
}

// TestConnectUsesGenericPlans: Connect's connections plan idem's prepared
// statements once (plan_cache_mode = force_generic_plan) unless the URL sets
// plan_cache_mode.
func TestConnectUsesGenericPlans(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, tc := range []struct{ params, want string }{
		{"", "force_generic_plan"},
		{"plan_cache_mode=auto", "auto"},
	} {
		u, err := url.Parse(db.URL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("pool_max_conns", "1")
		if k, v, ok := strings.Cut(tc.params, "="); ok {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
		pool, err := postgres.Connect(t.Context(), u.String())
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = pool.QueryRow(t.Context(), "SHOW plan_cache_mode").Scan(&got)
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("URL params %q: plan_cache_mode %s; want %s", tc.params, got, tc.want)
		}
	}
}
