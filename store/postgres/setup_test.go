package postgres_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// The lease and retention the tests claim with: long enough that nothing
// lapses on its own while a test runs. A test that needs a lapsed lease moves
// lease_expires_at into the past with SQL (lapse) instead of sleeping.
//
// The tests of this package are PostgreSQL's own: READ COMMITTED races, SKIP
// LOCKED, migrations, error mapping, Connect. What every store does is in
// the conformance suite, internal/testsupport/storetest, which TestStore runs.
const (
	testLease     = time.Minute
	testRetention = time.Hour
)

// testBundle is what setup gives every test: a freshly migrated schema of its
// own, the small pool on it and a Store on that pool.
type testBundle struct {
	ctx   context.Context
	db    *testdb.DB
	pool  *pgxpool.Pool
	store *postgres.Store
}

func setup(t *testing.T, opts ...testdb.Option) *testBundle {
	t.Helper()
	db := testdb.New(t, opts...)
	// A deadline turns a deadlock or a lost wake-up into a failure instead of
	// a hung test binary.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return &testBundle{ctx: ctx, db: db, pool: db.Pool, store: postgres.New(db.Pool)}
}

func recordID(key string) store.RecordID {
	return store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: key}
}

func claimParams(id store.RecordID, claimant string) *store.ClaimParams {
	return &store.ClaimParams{RecordID: id, Claimant: claimant, LeaseTTL: testLease, Retention: testRetention}
}

// claim runs RecordClaim and fails the test on an error.
func (b *testBundle) claim(t *testing.T, p *store.ClaimParams) *store.ClaimResult {
	t.Helper()
	res, err := b.store.RecordClaim(b.ctx, p)
	if err != nil {
		t.Fatalf("RecordClaim(%q, claimant %q): %v", p.Key, p.Claimant, err)
	}
	if res == nil || res.Record == nil {
		t.Fatalf("RecordClaim(%q): nil result without an error: %+v", p.Key, res)
	}
	return res
}

// acquire claims id and requires ACQUIRED.
func (b *testBundle) acquire(t *testing.T, id store.RecordID, claimant string) *store.Record {
	t.Helper()
	res := b.claim(t, claimParams(id, claimant))
	if res.Outcome != store.OutcomeAcquired {
		t.Fatalf("RecordClaim(%q): outcome %v, want acquired (record %+v)", id.Key, res.Outcome, res.Record)
	}
	return res.Record
}

func (b *testBundle) complete(t *testing.T, id store.RecordID, token int64, result string) *store.Record {
	t.Helper()
	rec, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: token, Result: []byte(result)})
	if err != nil {
		t.Fatalf("RecordComplete(%q, token %d): %v", id.Key, token, err)
	}
	return rec
}

func (b *testBundle) fail(t *testing.T, id store.RecordID, token int64, msg string, retryable bool) *store.Record {
	t.Helper()
	rec, err := b.store.RecordFail(b.ctx, &store.FailParams{RecordID: id, Token: token, Error: msg, Retryable: retryable})
	if err != nil {
		t.Fatalf("RecordFail(%q, token %d, retryable %v): %v", id.Key, token, retryable, err)
	}
	return rec
}

func (b *testBundle) get(t *testing.T, id store.RecordID) *store.Record {
	t.Helper()
	rec, err := b.store.RecordGet(b.ctx, id)
	if err != nil {
		t.Fatalf("RecordGet(%q): %v", id.Key, err)
	}
	return rec
}

func (b *testBundle) exec(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	tag, err := b.pool.Exec(b.ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

// lapse makes the lease of id run out now, as if its holder had stalled.
func (b *testBundle) lapse(t *testing.T, id store.RecordID) {
	t.Helper()
	n := b.exec(t, `UPDATE idem_records SET lease_expires_at = now() - interval '1 second'
		WHERE tenant = $1 AND namespace = $2 AND key = $3 AND state = 'processing'`, id.Tenant, id.Namespace, id.Key)
	if n != 1 {
		t.Fatalf("lapse %q: updated %d rows, want 1", id.Key, n)
	}
}

// begin opens a transaction on its own pool connection and returns it with
// the backend's process id, rolled back at the end of the test if still open.
func (b *testBundle) begin(t *testing.T) (pgx.Tx, int32) {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) })
	var pid int32
	if err := tx.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("pg_backend_pid: %v", err)
	}
	return tx, pid
}

// waitBlockedBy waits until some backend waits for a lock that backend pid
// holds, and returns the waiting backends. It fails the test when done is
// closed first (the call it waits for returned without waiting) or after 10 s.
func (b *testBundle) waitBlockedBy(t *testing.T, pid int32, done <-chan struct{}) []int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting []int32
		err := b.pool.QueryRow(b.ctx,
			"SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))",
			pid).Scan(&waiting)
		if err != nil {
			t.Fatalf("pg_blocking_pids: %v", err)
		}
		if len(waiting) > 0 {
			return waiting
		}
		select {
		case <-done:
			t.Fatalf("the call returned before it waited for the lock of backend %d", pid)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backend waited for the lock of backend %d within 10s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requireErr fails unless errors.Is(err, want).
func requireErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// requireSameRecord fails unless got and want are equal field by field.
func requireSameRecord(t *testing.T, what string, got, want *store.Record) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: record changed\n got: %+v\nwant: %+v", what, got, want)
	}
}
