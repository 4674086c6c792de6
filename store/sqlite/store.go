// Package sqlite is idem's single-node store: the state machine of DESIGN §1
// on one SQLite file, through the pure-Go driver modernc.org/sqlite (no cgo).
//
// One connection writes and a few read. Every write is a call queued for the
// one write connection, so the writes of a Store queue in Go for that
// connection instead of polling SQLite's busy handler. The writer runs the
// calls queued together as one BEGIN IMMEDIATE transaction and answers them
// once it has committed: group commit, one fsync for all of them
// (writer.go). No transaction ever has to upgrade a read lock to a write
// lock (which WAL mode may refuse at once with SQLITE_BUSY). The journal is
// WAL, so readers (lookups, the admin listing) never wait for the writer.
//
// Durability: synchronous=FULL. In WAL mode every commit fsyncs the WAL before
// it returns, so an acknowledged Complete survives kill -9 of the process and
// a power cut alike. NORMAL would survive kill -9 too (the WAL is in the
// operating system's page cache by then) but could lose the last commits in a
// power cut, and a lost Complete is the one failure idem exists to prevent.
// The price is one fsync per write transaction, which group commit shares
// among the calls of a batch; no call is answered before its batch commits.
//
// Time: SQLite has no server clock and one file has one host, so the process
// clock (UTC, to the microsecond) stands in for the database clock of DESIGN
// §1. A write reads the clock once it holds the write lock, so the times of
// records follow the order of commits as long as the system clock does not
// step back. Times are stored as integer microseconds since the Unix epoch.
//
// A file has one Store: idemd keeps a second server off it with a lock file
// of its own. Anything else that writes to the file (a tool, another Store)
// takes turns with the Store through SQLite's file lock, which is not fair:
// each waits up to the busy timeout (5 s) for the other, and past it a call
// fails with store.ErrUnavailable. Open waits the same way, also while
// several Stores create one new file together.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemhq/idem/store"
)

var _ store.Backend = (*Store)(nil)

// BusyTimeout is how long a statement waits for a lock that another
// connection to the file holds (another Store, another process, a tool)
// before it fails with store.ErrUnavailable.
const BusyTimeout = 5 * time.Second

// readConns is the size of the read pool. Reads are short point lookups and
// admin listings; a few connections keep them off the writer's path.
const readConns = 4

// Store implements store.Store on one SQLite file. It is safe for concurrent
// use.
type Store struct {
	store.TokenCalls
	store.TokenCallsMany
	// write has exactly one connection, which the writer holds: every
	// write runs on it, in the writer's batches (writer.go).
	write *sql.DB
	w     *writer
	// read serves statements that change nothing; in WAL mode they run
	// beside the writer and see the last committed transaction.
	read *sql.DB
	// readStmts are the statements the read connections run, by their
	// text, prepared once rather than on every call. They are not changed
	// after Open.
	readStmts map[string]*sql.Stmt
	closed    atomic.Bool
	// watches are the Claims waiting on a record (wait.go).
	watches store.Watches
}

// readQueries are the statements Open prepares on the read connections.
var readQueries = []string{pingSQL, getSQL, listSQL, statsSQL, countByStateSQL}

// errClosed is what every call returns once Close has run.
var errClosed = fmt.Errorf("%w: the SQLite store is closed", store.ErrUnavailable)

// Open opens the SQLite database at path, creating the file and its directory
// when they do not exist, and applies the schema's pending migrations. The
// database runs in WAL mode with synchronous=FULL. Close releases it.
func Open(ctx context.Context, path string) (*Store, error) {
	switch {
	case path == "":
		return nil, errors.New("sqlite: the database path is empty; name a file such as /var/lib/idem/idem.db")
	case strings.ContainsRune(path, '?'), strings.HasPrefix(path, "file:"), strings.HasPrefix(path, ":memory:"):
		return nil, fmt.Errorf("sqlite: database path %q: give a plain file path, without '?', a file: URI or :memory:", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: create the database's directory: %w", err)
	}

	busy := fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds())
	// The journal mode is not in the DSN: useWAL sets it, once, because the
	// switch needs a lock SQLite does not wait for. The mode is kept in the
	// file, so a connection opened later finds it.
	write, err := sql.Open("sqlite", dsn(path, url.Values{
		"_pragma": {busy, "synchronous(FULL)"},
	}))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	if err := useWAL(ctx, write); err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	conn, err := write.Conn(ctx)
	if err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, interpretError(ctx, err))
	}
	s := &Store{write: write}
	s.w = startWriter(conn, &s.watches)
	s.TokenCalls = s.runTokenCall
	// The writer's group commit takes concurrent calls in as few
	// transactions as it can.
	s.TokenCallsMany = store.Concurrently(s.runTokenCall)
	if _, err := s.migrate(ctx, slog.Default()); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}

	read, err := sql.Open("sqlite", dsn(path, url.Values{
		"_pragma": {busy, "query_only(1)"},
	}))
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	read.SetMaxOpenConns(readConns)
	read.SetMaxIdleConns(readConns)
	read.SetConnMaxLifetime(0)
	read.SetConnMaxIdleTime(0)
	s.read = read
	if s.readStmts, err = prepare(ctx, read, readQueries); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := s.Ping(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return s, nil
}

// useWAL puts the database file in WAL mode, waiting up to BusyTimeout for
// the lock that takes.
//
// SQLite's busy handler does not cover this. Switching a file that is not in
// WAL mode yet (a new file) reads its header under a shared lock and then asks
// for the write lock; a connection that already holds a shared lock is told
// SQLITE_BUSY at once instead of waiting, since waiting with a lock held could
// deadlock. So when Stores open one new file together, all but the first to
// switch it would fail. The statement holds nothing once it has failed, so
// trying it again is safe: the others wait here until the first is done and
// then find the file in WAL mode.
func useWAL(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(BusyTimeout)
	wait := time.Millisecond
	for {
		var mode string
		err := db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
		switch {
		case err == nil && strings.EqualFold(mode, "wal"):
			return nil
		case err == nil:
			return fmt.Errorf("the journal mode stayed %q when WAL was asked for: the file system may not support WAL's shared memory", mode)
		case !isBusy(err) || time.Now().Add(wait).After(deadline):
			return interpretError(ctx, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY: a lock another
// connection holds.
func isBusy(err error) bool {
	var sqliteErr *sqlite.Error
	return errors.As(err, &sqliteErr) && sqliteErr.Code()&0xff == sqlite3.SQLITE_BUSY
}

// prepare prepares queries on db.
func prepare(ctx context.Context, db *sql.DB, queries []string) (map[string]*sql.Stmt, error) {
	stmts := make(map[string]*sql.Stmt, len(queries))
	for _, q := range queries {
		stmt, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil, interpretError(ctx, fmt.Errorf("prepare %q: %w", q, err))
		}
		stmts[q] = stmt
	}
	return stmts, nil
}

// dsn is path with the driver's parameters. The driver cuts the path at the
// first '?', which is why Open refuses paths that contain one.
func dsn(path string, params url.Values) string {
	return path + "?" + params.Encode()
}

// Close closes the database. Calls made after it return store.ErrUnavailable.
// Closing twice is not an error.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.w.stop()
	var errs []error
	if s.read != nil {
		errs = append(errs, s.read.Close())
	}
	errs = append(errs, s.write.Close())
	return errors.Join(errs...)
}

// Ping reports whether the database file can be read.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return errClosed
	}
	var v int64
	return interpretError(ctx, s.readStmts[pingSQL].QueryRowContext(ctx).Scan(&v))
}

const pingSQL = `SELECT value FROM idem_token`

// now is the store's clock: the process clock in UTC, to the microsecond the
// database keeps.
func now() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

// inWriteTx runs fn in a write transaction, in the writer's next batch
// (writer.go), and returns once that batch has committed (nil) or failed
// (fn's own error when a statement of fn failed, store.ErrUnavailable when
// another call's did or the transaction failed), or ctx has ended (ctx's
// error; fn may still commit). The transaction is BEGIN IMMEDIATE: it holds
// the database's write lock from its start, so what fn reads cannot change
// before it writes. now is read when fn starts, under the lock. fn keeps its
// answer, refusals included, in its own variables.
func (s *Store) inWriteTx(ctx context.Context, fn writeFunc) error {
	if s.closed.Load() {
		return errClosed
	}
	return s.w.do(ctx, fn)
}

// interpretError is the store's one boundary for database errors: nothing
// above the store sees a driver type. The store's own errors and the caller's
// context errors pass through unchanged; sql.ErrNoRows becomes
// store.ErrNotFound; a database that is locked past the busy timeout, closed,
// or cannot be opened, read or written (its file gone, damaged or not a
// database any more) becomes store.ErrUnavailable (wrapping the
// cause for the log).
func interpretError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrLeaseLost),
		errors.Is(err, store.ErrAlreadyTerminal), errors.Is(err, store.ErrFingerprintMismatch),
		errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrContention), errors.Is(err, store.ErrNotUnresolved):
		return err
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	// A statement interrupted because the caller's context ended, or a
	// transaction that database/sql rolled back for it.
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		switch sqliteErr.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_BUSY, // another connection held the lock past the busy timeout
			sqlite3.SQLITE_LOCKED,
			sqlite3.SQLITE_IOERR,    // the disk failed a read, write or fsync
			sqlite3.SQLITE_FULL,     // the disk is full
			sqlite3.SQLITE_CANTOPEN, // the file or its directory went away
			sqlite3.SQLITE_READONLY, // the file became read-only or was moved
			sqlite3.SQLITE_PERM,     // the file may not be opened as asked
			sqlite3.SQLITE_NOTADB,   // the file's contents are no longer a database
			sqlite3.SQLITE_CORRUPT,  // the file cannot be read as one
			sqlite3.SQLITE_PROTOCOL:
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	if errors.Is(err, sql.ErrConnDone) || err.Error() == "sql: database is closed" {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}
