// Package sqlite is idem's single-node store: the state machine of DESIGN §1
// on one SQLite file, through the pure-Go driver modernc.org/sqlite (no cgo).
// Every write is a call queued for one writer, which commits the calls
// queued together in one transaction (writer.go); readers run beside it
// (WAL). synchronous=FULL, so an acknowledged Complete survives a power
// cut, not only kill -9: a lost Complete is the one failure idem exists to
// prevent, and group commit shares the fsync. The process clock (UTC, in
// microseconds) stands in for the database clock, read under the write
// lock, so records' times follow commit order. A file has one Store (idemd
// keeps a second server off it); anything else that writes to it takes
// turns through SQLite's file lock, waiting up to BusyTimeout.
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

// BusyTimeout is how long a statement waits for a lock another connection
// to the file holds before it fails with store.ErrUnavailable.
const BusyTimeout = 5 * time.Second

// readConns is the size of the read pool, for lookups and listings.
const readConns = 4

// Store implements store.Store on one SQLite file. It is safe for concurrent
// use.
type Store struct {
	store.TokenCalls
	store.TokenCallsMany
	// write has one connection, the writer's (writer.go).
	write *sql.DB
	w     *writer
	// read serves what changes nothing, beside the writer; readStmts are
	// its statements, prepared by Open.
	read      *sql.DB
	readStmts map[string]*sql.Stmt
	closed    atomic.Bool
	watches   store.Watches // the Claims waiting on a record (wait.go)
	held      store.Watches // the held watches, by tenant (timeline.go)
}

// readQueries are the statements Open prepares on the read connections.
var readQueries = []string{pingSQL, getSQL, listSQL, statsSQL, countByStateSQL, stepsSQL, timelineSQL, listHeldSQL}

// errClosed is what every call returns once Close has run.
var errClosed = fmt.Errorf("%w: the SQLite store is closed", store.ErrUnavailable)

// Open opens the SQLite database at path, creating the file and its directory
// when they do not exist, and applies the schema's pending migrations.
func Open(ctx context.Context, path string) (*Store, error) {
	switch {
	case path == "":
		return nil, errors.New("sqlite: the database path is empty; name a file such as /var/lib/idem/idem.db")
	case strings.ContainsRune(path, '?'), strings.HasPrefix(path, "file:"), strings.HasPrefix(path, ":memory:"):
		return nil, fmt.Errorf("sqlite: database path %q is a URI, :memory: or holds '?'; give a plain file path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: create the database's directory: %w", err)
	}
	s, err := open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return s, nil
}

// open is Open of a checked path.
func open(ctx context.Context, path string) (*Store, error) {
	busy := fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds())
	// The journal mode is not in the DSN: useWAL sets it once, in the file.
	write, err := connections(path, 1, busy, "synchronous(FULL)")
	if err != nil {
		return nil, err
	}
	if err := useWAL(ctx, write); err != nil {
		_ = write.Close()
		return nil, err
	}
	conn, err := write.Conn(ctx)
	if err != nil {
		_ = write.Close()
		return nil, interpretError(ctx, err)
	}
	s := &Store{write: write}
	s.w = startWriter(conn, &s.watches, &s.held)
	s.TokenCalls = s.runTokenCall
	// The writer's group commit takes concurrent calls together.
	s.TokenCallsMany = store.Concurrently(s.runTokenCall)
	if _, err := s.migrate(ctx, slog.Default()); err != nil {
		_ = s.Close()
		return nil, err
	}
	if s.read, err = connections(path, readConns, busy, "query_only(1)"); err == nil {
		if s.readStmts, err = prepare(ctx, s.read, readQueries); err == nil {
			err = s.Ping(ctx)
		}
	}
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// connections opens path with pragmas as a pool of n connections kept open.
func connections(path string, n int, pragmas ...string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, url.Values{"_pragma": pragmas}))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}

// useWAL puts the database file in WAL mode, waiting up to BusyTimeout for
// the lock that takes. SQLite's busy handler does not cover it: switching a
// new file asks for the write lock while holding a shared one, which is
// told SQLITE_BUSY at once, so when Stores open one new file together all
// but the first would fail; the failed statement holds nothing, so trying
// again is safe.
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

// isBusy reports whether err is SQLITE_BUSY: a lock another connection holds.
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

// dsn is path with the driver's parameters; the driver cuts the path at the
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

// now is the store's clock, to the microsecond the database keeps.
func now() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

// inWriteTx runs fn in the writer's next batch (writer.go), under the
// write lock, so what fn reads cannot change before it writes, and returns
// once the batch has committed or failed, or ctx has ended (fn may then
// still commit).
func (s *Store) inWriteTx(ctx context.Context, fn writeFunc) error {
	if s.closed.Load() {
		return errClosed
	}
	return s.w.do(ctx, fn)
}

// interpretError is the store's one boundary for database errors: nothing
// above the store sees a driver type. sql.ErrNoRows is store.ErrNotFound; a
// database locked past the busy timeout, closed, or that cannot be read or
// written is store.ErrUnavailable, wrapping the cause for the log.
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
	// A statement interrupted because the caller's context ended.
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		// A lock held past the busy timeout, a disk that failed or is full,
		// a file gone, read-only, or no longer a database.
		switch sqliteErr.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_PROTOCOL:
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	if errors.Is(err, sql.ErrConnDone) || err.Error() == "sql: database is closed" {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// Waking waiting Claims (store.Watcher): every write goes through this
// process, which wakes them once it commits (writeTx.WakeAfterCommit).

// RecordWatch implements store.Watcher.
func (s *Store) RecordWatch(id store.RecordID) *store.Watch {
	return s.watches.Watch(id)
}

// RecordMarkWaited implements store.Watcher. Nothing to mark: every change
// is announced in the process that makes it.
func (s *Store) RecordMarkWaited(context.Context, store.RecordID, int64) error {
	return nil
}

// recordCols is a record's columns in the order scanRecord reads them.
const recordCols = `tenant, namespace, key, state, token, attempt, claimant, fingerprint,
	lease_expires_at, retention_us, result, error, created_at, updated_at, completed_at, expires_at, policy, hold,
	coalesce(resolved_token = token, 0) AS resolved`

// recordStepCols is recordCols and what a read of the record's steps
// needs: their count (NULL for none) and hold_unfinished.
const recordStepCols = recordCols + `, step_count, coalesce(hold_unfinished, 0)`

// rowScanner is a *sql.Row or *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanRecord reads recordCols.
func scanRecord(row rowScanner) (*store.Record, error) {
	return scanRecordWith(row)
}

// scanRecordSteps reads recordStepCols; stepCount is how many steps the
// record has, which readSteps reads into its Steps.
func scanRecordSteps(row rowScanner) (rec *store.Record, stepCount int, err error) {
	var count sql.NullInt64
	var hold bool
	if rec, err = scanRecordWith(row, &count, &hold); err != nil {
		return nil, 0, err
	}
	rec.HoldUnfinished = hold
	return rec, int(count.Int64), nil
}

// scanRecordWith reads recordCols followed by the columns extra.
func scanRecordWith(row rowScanner, extra ...any) (*store.Record, error) {
	var (
		r                         store.Record
		state                     string
		retentionUS               int64
		createdUS, updatedUS      int64
		errText                   sql.NullString
		lease, completed, expires sql.NullInt64
	)
	dest := append([]any{&r.Tenant, &r.Namespace, &r.Key, &state, &r.Token, &r.Attempt, &r.Claimant, &r.Fingerprint,
		&lease, &retentionUS, &r.Result, &errText, &createdUS, &updatedUS, &completed, &expires, &r.Policy, &r.Hold, &r.ResolvedByOperator},
		extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	r.State = store.State(state)
	r.Retention = time.Duration(retentionUS) * time.Microsecond
	r.Error = errText.String
	r.CreatedAt = fromMicros(createdUS)
	r.UpdatedAt = fromMicros(updatedUS)
	r.LeaseExpiresAt = fromNullMicros(lease)
	r.CompletedAt = fromNullMicros(completed)
	r.ExpiresAt = fromNullMicros(expires)
	if len(r.Fingerprint) == 0 {
		r.Fingerprint = nil
	}
	return &r, nil
}

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func fromNullMicros(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return fromMicros(us.Int64)
}

const getSQL = `SELECT ` + recordStepCols + ` FROM idem_records WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`

// RecordGet implements store.Store. A record with steps is read again with
// them in one read transaction, so that they are the record's as it stood.
func (s *Store) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if err := id.CheckText(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	rec, steps, err := scanRecordSteps(s.readStmts[getSQL].QueryRowContext(ctx, id.Tenant, id.Namespace, id.Key))
	if err != nil || steps == 0 {
		return rec, interpretError(ctx, err)
	}
	err = s.inReadTx(ctx, func(q querier) error {
		if rec, steps, err = scanRecordSteps(q.QueryRow(getSQL, id.Tenant, id.Namespace, id.Key)); err != nil {
			return err
		}
		return readSteps(q, rec, steps)
	})
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	return rec, nil
}

// RecordGetMany implements store.Store: the reads one after the other, each
// a lookup of the local file that needs no round trip.
func (s *Store) RecordGetMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, []error) {
	recs, errs := make([]*store.Record, len(ids)), make([]error, len(ids))
	for i, id := range ids {
		recs[i], errs[i] = s.RecordGet(ctx, id)
	}
	return recs, errs
}
