package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
)

// TestOpenCreatesAndReopens: Open creates the file and its directories,
// migrates once, and a second Open of the same file finds its records and
// applies nothing again.
func TestOpenCreatesAndReopens(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "a", "b", "idem.db")

	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database file: %v", err)
	}
	if v, err := st.SchemaVersion(ctx); err != nil || v != sqlite.LatestVersion() || v == 0 {
		t.Fatalf("SchemaVersion: %d, %v; want %d", v, err, sqlite.LatestVersion())
	}
	res, err := st.RecordClaim(ctx, claimParams(id("k"), "w"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: id("k"), Token: res.Record.Token, Result: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	st2, raw := open(t, path)
	rec, err := st2.RecordGet(ctx, id("k"))
	if err != nil || rec.State != store.StateCompleted || string(rec.Result) != "r" {
		t.Fatalf("record after reopening: %+v, %v", rec, err)
	}
	ms, err := sqlite.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var applied int
	if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM idem_schema_migrations").Scan(&applied); err != nil || applied != len(ms) {
		t.Fatalf("%d migrations recorded (%v), want each of the %d once", applied, err, len(ms))
	}
	res, err = st2.RecordClaim(ctx, claimParams(id("k2"), "w"))
	if err != nil || res.Record.Token <= rec.Token {
		t.Fatalf("claim after reopening: %+v, %v; want a token above %d", res, err, rec.Token)
	}
}

// TestOpenConcurrently: Stores opening one new file together migrate it once.
func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			st, err := sqlite.Open(t.Context(), path)
			if err == nil {
				err = st.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
	_, raw := open(t, path)
	ms, err := sqlite.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var applied int
	if err := raw.QueryRowContext(t.Context(), "SELECT count(*) FROM idem_schema_migrations").Scan(&applied); err != nil || applied != len(ms) {
		t.Fatalf("%d migrations recorded (%v), want %d", applied, err, len(ms))
	}
}

// TestOpenWaitsForTheLockOnANewFile: switching a new file to WAL needs the
// file's write lock, which SQLite hands out without waiting. Open waits for a
// lock another connection holds on a new file, as it waits for any other lock
// within the busy timeout, instead of failing with SQLITE_BUSY.
func TestOpenWaitsForTheLockOnANewFile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "idem.db")
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)") // a rollback journal, as a new file has
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	opened := make(chan error, 1)
	go func() {
		st, err := sqlite.Open(ctx, path)
		if err == nil {
			err = st.Close()
		}
		opened <- err
	}()
	// Open cannot finish while the lock is held; it may only wait. Holding
	// the lock a while gives it time to run into the lock (on a busy
	// machine it may not, and then the test proves less but still passes).
	select {
	case err := <-opened:
		t.Fatalf("Open returned while another connection held the write lock of the new file: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Fatalf("Open once the lock was released: %v", err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	st, raw := open(t, path)
	if _, err := raw.ExecContext(t.Context(), "INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES (999, '999_future.sql', 0)"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := sqlite.Open(t.Context(), path)
	if err == nil {
		st2.Close()
		t.Fatal("Open of a file with a newer schema succeeded")
	}
	if !strings.Contains(err.Error(), "999") {
		t.Fatalf("Open of a file with a newer schema: %v; want the version named", err)
	}
}

func TestOpenRejectsBadPaths(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", ":memory:", "file:idem.db", filepath.Join(t.TempDir(), "idem.db?mode=ro")} {
		st, err := sqlite.Open(t.Context(), path)
		if err == nil {
			st.Close()
			t.Fatalf("Open(%q) succeeded", path)
		}
	}
	// A directory where the file should be.
	dir := t.TempDir()
	if st, err := sqlite.Open(t.Context(), dir); err == nil {
		st.Close()
		t.Fatalf("Open of a directory succeeded")
	}
	// A canceled context.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db")); err == nil {
		st.Close()
		t.Fatal("Open with a canceled context succeeded")
	}
}
