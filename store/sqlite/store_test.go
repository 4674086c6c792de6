package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
	"github.com/idemhq/idem/store/storetest"
)

// TestStore runs the conformance suite on new stores.
func TestStore(t *testing.T) {
	storetest.Run(t, harness{})
}

// harness runs the conformance suite on a file of its own per test, in the
// test's temporary directory. Its backdoors write to the file through a
// connection of their own, beside the store's.
type harness struct{}

// harnessStore is a Store with the test's own connection to its file.
type harnessStore struct {
	*sqlite.Store
	raw *sql.DB
}

func (harness) New(t *testing.T, _ int) store.Store {
	st, raw := open(t, filepath.Join(t.TempDir(), "idem.db"))
	return &harnessStore{Store: st, raw: raw}
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
	hs, ok := st.(*harnessStore)
	if !ok {
		t.Fatalf("store %T is not one this harness made", st)
	}
	return hs.raw
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

func (harness) SetUpdatedAt(t *testing.T, st store.Store, id store.RecordID, at time.Time) {
	t.Helper()
	if n := rawExec(t, st, `UPDATE idem_records SET updated_at = ?4 WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`,
		id.Tenant, id.Namespace, id.Key, micros(at)); n != 1 {
		t.Fatalf("set updated_at of %q: updated %d rows, want 1", id.Key, n)
	}
}

func (harness) Close(t *testing.T, st store.Store) {
	t.Helper()
	if err := st.(*harnessStore).Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
