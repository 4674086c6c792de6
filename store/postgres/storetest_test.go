package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testsupport/storetest"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/readfirst"
)

// TestStore runs the conformance suite of store.Store, each of its tests on
// a freshly migrated schema of its own.
func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness{})
}

// TestStoreCoalesced runs the suite on the store behind the coalescer
// (store/coalesce), with one batch of a kind at a time, so that concurrent
// calls go in batches as often as they can.
func TestStoreCoalesced(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness{wrap: coalesced})
}

// TestStoreReadFirst runs the suite on the store behind the read-first layer
// (store/readfirst).
func TestStoreReadFirst(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness{wrap: readFirst})
}

// harness gives the suite a schema per test; its backdoors are SQL on the
// schema's pool and the database clock.
type harness struct {
	// wrap, when set, puts a decorator (store/coalesce, store/readfirst)
	// around each store the suite gets.
	wrap func(store.Store) store.Store
}

// coalesced is the store behind the coalescer, one batch of a kind at a time.
func coalesced(st store.Store) store.Store { return coalesce.New(st, coalesce.Options{MaxInFlight: 1}) }

// readFirst is the store behind the read-first layer, which reads a record
// lately seen finished before claiming it.
func readFirst(st store.Store) store.Store { return readfirst.New(st, 0) }

// harnessStore is a Store with the test schema it runs on.
type harnessStore struct {
	*postgres.Store
	db *testdb.DB
	// pool is the store's own pool when it is not db's (through a pooler).
	pool *pgxpool.Pool
}

// wrappedStore is a harnessStore behind a decorator.
type wrappedStore struct {
	store.Store
	inner *harnessStore
}

func (h harness) New(t *testing.T, conns int) store.Store {
	db := testdb.New(t, testdb.MaxConns(int32(min(max(conns, 1), 16))))
	hs := &harnessStore{Store: postgres.New(db.Pool), db: db}
	if h.wrap != nil {
		return &wrappedStore{Store: h.wrap(hs), inner: hs}
	}
	return hs
}

// harnessOf is the harnessStore st is or wraps.
func harnessOf(t *testing.T, st store.Store) *harnessStore {
	t.Helper()
	switch st := st.(type) {
	case *harnessStore:
		return st
	case *wrappedStore:
		return st.inner
	}
	t.Fatalf("store %T is not one this harness made", st)
	return nil
}

func poolOf(t *testing.T, st store.Store) *pgxpool.Pool {
	t.Helper()
	return harnessOf(t, st).db.Pool
}

// execOn runs a statement on st's schema and returns how many rows it changed.
func execOn(t *testing.T, st store.Store, sql string, args ...any) int {
	t.Helper()
	tag, err := poolOf(t, st).Exec(t.Context(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return int(tag.RowsAffected())
}

// Now reads the database clock, the only clock the store uses.
func (harness) Now(t *testing.T, st store.Store) time.Time {
	t.Helper()
	var now time.Time
	if err := poolOf(t, st).QueryRow(t.Context(), "SELECT now()").Scan(&now); err != nil {
		t.Fatalf("SELECT now(): %v", err)
	}
	return now.UTC()
}

func (harness) Lapse(t *testing.T, st store.Store, id store.RecordID) {
	t.Helper()
	if n := execOn(t, st, `UPDATE idem_records SET lease_expires_at = now() - interval '1 second'
		WHERE tenant = $1 AND namespace = $2 AND key = $3`, id.Tenant, id.Namespace, id.Key); n != 1 {
		t.Fatalf("lapse %q: updated %d rows, want 1", id.Key, n)
	}
}

func (harness) LapseAll(t *testing.T, st store.Store) int {
	t.Helper()
	return execOn(t, st, `UPDATE idem_records SET lease_expires_at = now() - interval '1 second' WHERE state = 'processing'`)
}

func (harness) AgeOut(t *testing.T, st store.Store, id store.RecordID) {
	t.Helper()
	if n := execOn(t, st, `UPDATE idem_records SET expires_at = now() - interval '1 second'
		WHERE tenant = $1 AND namespace = $2 AND key = $3`, id.Tenant, id.Namespace, id.Key); n != 1 {
		t.Fatalf("age out %q: updated %d rows, want 1", id.Key, n)
	}
}

func (harness) AgeOutAll(t *testing.T, st store.Store) int {
	t.Helper()
	return execOn(t, st, `UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE state <> 'processing'`)
}

func (harness) SetUpdatedAt(t *testing.T, st store.Store, id store.RecordID, at time.Time) {
	t.Helper()
	if n := execOn(t, st, `UPDATE idem_records SET updated_at = $4 WHERE tenant = $1 AND namespace = $2 AND key = $3`,
		id.Tenant, id.Namespace, id.Key, at); n != 1 {
		t.Fatalf("set updated_at of %q: updated %d rows, want 1", id.Key, n)
	}
}

func (harness) AgeOutTimeline(t *testing.T, st store.Store, id store.RecordID) int {
	t.Helper()
	return execOn(t, st, `UPDATE idem_timeline SET expires_at = now() - interval '1 second'
		WHERE tenant = $1 AND namespace = $2 AND key = $3 AND expires_at IS NOT NULL`, id.Tenant, id.Namespace, id.Key)
}

// Close closes the store's pool, as idemd does at shutdown; testdb's cleanup
// closing it again is harmless.
func (harness) Close(t *testing.T, st store.Store) {
	t.Helper()
	if hs := harnessOf(t, st); hs.pool != nil {
		hs.pool.Close()
		return
	}
	poolOf(t, st).Close()
}
