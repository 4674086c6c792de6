package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsupport/storetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
	"github.com/idemhq/idem/store/readfirst"
	"github.com/idemhq/idem/store/sqlite"
)

// TestStore runs the conformance suite on new stores.
func TestStore(t *testing.T) {
	storetest.Run(t, harness{})
}

// TestStoreCoalesced runs the suite on stores behind the coalescer
// (store/coalesce), with one batch of a kind at a time.
func TestStoreCoalesced(t *testing.T) {
	storetest.Run(t, harness{wrap: coalesced})
}

// TestStoreReadFirst runs the suite on the store behind the read-first layer
// (store/readfirst).
func TestStoreReadFirst(t *testing.T) {
	storetest.Run(t, harness{wrap: readFirst})
}

// harness runs the conformance suite on a file of its own per test, in the
// test's temporary directory. Its backdoors write to the file through a
// connection of their own, beside the store's.
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

// wrappedStore is a harnessStore behind a decorator.
type wrappedStore struct {
	store.Store
	inner *harnessStore
}

// harnessStore is a Store with the test's own connection to its file.
type harnessStore struct {
	*sqlite.Store
	raw *sql.DB
}

func (h harness) New(t *testing.T, _ int) store.Store {
	st, raw := open(t, filepath.Join(t.TempDir(), "idem.db"))
	hs := &harnessStore{Store: st, raw: raw}
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

// open opens the store at path for t, and a connection of the test's own to
// the same file, both closed in t.Cleanup.
func open(t *testing.T, path string) (*sqlite.Store, *sql.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("sqlite.Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	raw.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = raw.Close() })
	return st, raw
}

func rawOf(t *testing.T, st store.Store) *sql.DB {
	t.Helper()
	return harnessOf(t, st).raw
}

// rawExec runs a statement on st's file through the test's own connection and
// returns how many rows it changed.
func rawExec(t *testing.T, st store.Store, query string, args ...any) int {
	t.Helper()
	res, err := rawOf(t, st).ExecContext(t.Context(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return int(n)
}

// micros is the store's representation of a time.
func micros(ts time.Time) int64 { return ts.UnixMicro() }

// Now is the process clock, which the store uses.
func (harness) Now(t *testing.T, _ store.Store) time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

func (h harness) Lapse(t *testing.T, st store.Store, id store.RecordID) {
	t.Helper()
	if n := rawExec(t, st, `UPDATE idem_records SET lease_expires_at = ?4 WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`,
		id.Tenant, id.Namespace, id.Key, micros(h.Now(t, st).Add(-time.Second))); n != 1 {
		t.Fatalf("lapse %q: updated %d rows, want 1", id.Key, n)
	}
}

func (h harness) LapseAll(t *testing.T, st store.Store) int {
	t.Helper()
	return rawExec(t, st, `UPDATE idem_records SET lease_expires_at = ?1 WHERE state = 'processing'`,
		micros(h.Now(t, st).Add(-time.Second)))
}

func (h harness) AgeOut(t *testing.T, st store.Store, id store.RecordID) {
	t.Helper()
	if n := rawExec(t, st, `UPDATE idem_records SET expires_at = ?4 WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`,
		id.Tenant, id.Namespace, id.Key, micros(h.Now(t, st).Add(-time.Second))); n != 1 {
		t.Fatalf("age out %q: updated %d rows, want 1", id.Key, n)
	}
}

func (h harness) AgeOutAll(t *testing.T, st store.Store) int {
	t.Helper()
	return rawExec(t, st, `UPDATE idem_records SET expires_at = ?1 WHERE state <> 'processing'`,
		micros(h.Now(t, st).Add(-time.Second)))
}

func (h harness) AgeOutTimeline(t *testing.T, st store.Store, id store.RecordID) int {
	t.Helper()
	return rawExec(t, st, `UPDATE idem_timeline SET expires_at = ?4
		WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 AND expires_at IS NOT NULL`,
		id.Tenant, id.Namespace, id.Key, micros(h.Now(t, st).Add(-time.Second)))
}

func (harness) SetUpdatedAt(t *testing.T, st store.Store, id store.RecordID, at time.Time) {
	t.Helper()
	if n := rawExec(t, st, `UPDATE idem_records SET updated_at = ?4 WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`,
		id.Tenant, id.Namespace, id.Key, micros(at)); n != 1 {
		t.Fatalf("set updated_at of %q: updated %d rows, want 1", id.Key, n)
	}
}

func (harness) Close(t *testing.T, st store.Store) {
	t.Helper()
	if err := harnessOf(t, st).Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
