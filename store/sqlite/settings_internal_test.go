package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// TestConnectionSettings pins the durability and locking settings the
// package comment promises: WAL, synchronous=FULL and the busy timeout on the
// write connection, one write connection, and read connections that cannot
// write.
func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	pragma := func(db *sql.DB, name string) string {
		t.Helper()
		var v string
		if err := db.QueryRowContext(t.Context(), "PRAGMA "+name).Scan(&v); err != nil {
			t.Fatalf("PRAGMA %s: %v", name, err)
		}
		return v
	}
	for name, want := range map[string]string{
		"journal_mode": "wal",
		"synchronous":  "2", // FULL
		"busy_timeout": "5000",
	} {
		// The writer holds the write connection: ask it there.
		var got string
		err := s.inWriteTx(t.Context(), func(tx *writeTx, _ time.Time) error {
			return tx.QueryRow("PRAGMA " + name).Scan(&got)
		})
		if err != nil {
			t.Fatalf("PRAGMA %s on the write connection: %v", name, err)
		}
		if got != want {
			t.Errorf("write connection: %s = %s, want %s", name, got, want)
		}
	}
	for name, want := range map[string]string{
		"journal_mode": "wal",
		"busy_timeout": "5000",
		"query_only":   "1",
	} {
		if got := pragma(s.read, name); got != want {
			t.Errorf("read connection: %s = %s, want %s", name, got, want)
		}
	}
	if n := s.write.Stats().MaxOpenConnections; n != 1 {
		t.Errorf("the write pool allows %d connections, want 1", n)
	}
	if _, err := s.read.ExecContext(t.Context(), "UPDATE idem_token SET value = value + 1"); err == nil {
		t.Error("a read connection wrote")
	}
}

// TestWriteTransactionsAreImmediate: a write transaction holds the write lock
// from BEGIN, before its first statement, so what it reads cannot change
// before it writes.
func TestWriteTransactionsAreImmediate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := sql.Open("sqlite", path) // no busy timeout: a held lock fails at once
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	// A call that runs no statement of its own, inside the writer's
	// transaction.
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.inWriteTx(t.Context(), func(*writeTx, time.Time) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	_, err = other.ExecContext(t.Context(), "BEGIN IMMEDIATE")
	close(release)
	if err == nil {
		t.Fatal("another connection took the write lock while a write transaction of the store was open")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(t.Context(), "BEGIN IMMEDIATE; ROLLBACK"); err != nil {
		t.Fatalf("the write lock once the store's transaction ended: %v", err)
	}
}
