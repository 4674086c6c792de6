package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemhq/idem/store"
)

// Group commit. Every write of a Store (Claims that acquire, Completes,
// Fails, Heartbeats, the sweeper's statements, deletes, migrations) is a call
// queued for one writer goroutine, which owns the write connection. The
// writer takes everything queued, at most maxBatch calls, and runs it as one
// batch:
//
//	BEGIN IMMEDIATE
//	SAVEPOINT call; <call 1's statements>; RELEASE call   (or ROLLBACK TO call on its error)
//	<call 2's one statement>                               (a lazy call: see below)
//	…
//	UPDATE idem_token …                                    (if the batch drew tokens)
//	COMMIT                                                 (one fsync of the WAL)
//
// and answers every call of the batch only once COMMIT has returned. There is
// no timer: a call that finds the writer idle runs at once in a batch of its
// own, and calls that arrive while a batch runs or commits go together in the
// next one, so batches grow with the load and the fsync is shared by all of
// them.
//
// Durability is that of one call per transaction: synchronous=FULL makes
// COMMIT fsync the WAL before it returns, and no call is answered before the
// COMMIT of its batch, so an answered call is on disk, and after a crash a
// batch is there whole or not at all.
//
// One call's own error (a fingerprint mismatch, a lost lease, an already
// terminal record, a failed constraint) undoes that call's writes only; the
// others go on. A call of inWriteTx has a savepoint from its start, and its
// error rolls back to it. Most calls would pay for that in vain: a Claim of
// a new key or a Complete runs one statement when it succeeds, and the
// savepoint's two would triple it. So those calls (inWriteTxLazy) take
// their savepoint lazily, before their second writing statement, which is
// as good as one taken at the start as long as the first changed nothing (an
// insert that ran into an existing row, an update that matched none). A
// call whose only write fails is undone by SQLite itself: a statement that
// fails on its own (a constraint, a type, a value too big) takes back what
// it changed and leaves the transaction, and what the calls before it
// wrote, alone; an error that may have ended the transaction (a full or
// failing disk, the lock, memory) fails the batch as below. A lazy call
// that changed rows unprotected must end there and succeed: one that writes
// again, or returns an error, could not be undone alone, so its batch fails
// instead (a bug, never a normal answer; writeTx).
//
// A failure of the transaction itself (BEGIN, a savepoint or COMMIT that
// fails, a disk that is full or fails, a lock held past the busy timeout,
// the transaction rolled back under the batch) answers every call of the
// batch store.ErrUnavailable: its outcome is unknown, and no answer that an
// earlier call of the batch computed is given, since it may rest on writes
// that are not committed.
//
// The calls of a batch run one after another, in the order they were queued,
// each with the store's clock read when it starts, under the write lock. A
// call sees what the calls before it in the batch wrote, so two calls of one
// key in one batch are answered as if they had run in two transactions.

// maxBatch bounds the calls of one batch: a batch holds the write lock, and
// its calls wait for the slowest of them, for as long as it runs.
const maxBatch = 128

// writeFunc is one call's work: it runs in the batch's transaction with now,
// the store's clock when the call started. An error it returns undoes what
// it wrote, and only that (within the rule of inWriteTxLazy for lazy calls).
type writeFunc func(tx *writeTx, now time.Time) error

// writeCall is one queued call.
type writeCall struct {
	ctx context.Context
	fn  writeFunc
	// lazy makes the savepoint lazy (inWriteTxLazy).
	lazy bool
	err  error
	// panicked is what fn panicked with, if it did: do panics with it in
	// the caller's goroutine, where the server's recovery sees it.
	panicked any
	done     chan struct{} // closed once err is set
	// wakes are the records whose waiting Claims fn asked to wake once its
	// batch has committed (writeTx.WakeAfterCommit), in wakeBuf while they
	// fit; only run's goroutine uses them.
	wakes   []store.RecordID
	wakeBuf [1]store.RecordID
}

// writer runs the queued calls of a Store in batches on the write connection.
type writer struct {
	// conn is the write connection, held for the writer's life; only run's
	// goroutine uses it, and stmts, once the writer has started.
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
	// turn is shared by the writers of every Store on the same file in this
	// process; a batch holds it from BEGIN to COMMIT (fileTurn).
	turn *fileTurn

	mu      sync.Mutex
	queued  sync.Cond // signalled when a call is queued or the writer stops
	queue   []*writeCall
	stopped bool
	exited  chan struct{}

	// batches and batched count the batches committed and the calls they
	// held, statements the prepared statements those ran, for tests and
	// benchmarks.
	batches, batched, statements int64
	// batchCalls observes the calls of each committed batch
	// (idem_sqlite_batch_calls).
	batchCalls prometheus.Histogram
	// watches are the Store's waiting Claims (WakeAfterCommit).
	watches *store.Watches

	// ran counts the prepared statements of the running batch; only run's
	// goroutine uses it.
	ran int64

	// tokens is the token counter as the running batch sees it; only run's
	// goroutine uses it.
	tokens tokenCounter
}

// newBatchCalls is the histogram of the calls per committed write
// transaction: how many calls share one commit, and so one fsync.
func newBatchCalls() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "idem_sqlite_batch_calls",
		Help:    "Calls committed by one write transaction of the SQLite store (one fsync): 1 when writes do not overlap, more under load.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
}

// startWriter starts the writer on conn, the write connection to path; it
// wakes the Claims in watches that its calls ask it to.
func startWriter(conn *sql.Conn, path string, watches *store.Watches) *writer {
	w := &writer{conn: conn, stmts: map[string]*sql.Stmt{}, turn: takeTurns(path), exited: make(chan struct{}),
		batchCalls: newBatchCalls(), watches: watches}
	w.queued.L = &w.mu
	go w.run()
	return w
}

// do queues fn and waits until its batch is committed or has failed, or ctx
// ends. When ctx ends first, do returns ctx's error at once; the call may
// still run and commit (or, when its batch had not started, it is dropped).
func (w *writer) do(ctx context.Context, fn writeFunc, lazy bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &writeCall{ctx: ctx, fn: fn, lazy: lazy, done: make(chan struct{})}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return errClosed
	}
	w.queue = append(w.queue, c)
	if len(w.queue) == 1 {
		w.queued.Signal()
	}
	w.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		select {
		case <-c.done: // answered as ctx ended: give the answer
		default:
			return ctx.Err()
		}
	}
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.err
}

// stop stops the writer once the batch it is running has been answered, and
// answers every call still queued errClosed. It returns once the writer has
// released the write connection.
func (w *writer) stop() {
	w.mu.Lock()
	w.stopped = true
	w.queued.Signal()
	w.mu.Unlock()
	<-w.exited
}

// stats returns how many batches the writer committed and how many calls
// they held.
func (w *writer) stats() (batches, calls int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.batches, w.batched
}

// statementsRun returns how many prepared statements the committed batches
// ran (BEGIN and COMMIT, which run unprepared, are not counted).
func (w *writer) statementsRun() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.statements
}

func (w *writer) run() {
	defer close(w.exited)
	defer w.turn.release()
	defer func() {
		for _, stmt := range w.stmts {
			_ = stmt.Close()
		}
		_ = w.conn.Close()
	}()
	var batch []*writeCall
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.stopped {
			w.queued.Wait()
		}
		if w.stopped {
			queued := w.queue
			w.queue = nil
			w.mu.Unlock()
			for _, c := range queued {
				c.answer(errClosed)
			}
			return
		}
		n := min(len(w.queue), maxBatch)
		batch = append(batch[:0], w.queue[:n]...)
		clear(w.queue[:n])
		w.queue = w.queue[n:]
		if len(w.queue) == 0 {
			w.queue = w.queue[:0:0] // let the old array go once drained
		}
		w.mu.Unlock()

		w.runBatch(batch)
		clear(batch)
	}
}

// batchCtx is the context of a batch's statements. It is not any caller's:
// a caller that stops waiting must not interrupt the statements of the
// others, and a COMMIT is never interrupted.
var batchCtx = context.Background()

// runBatch runs batch as one transaction and answers every call in it.
func (w *writer) runBatch(batch []*writeCall) {
	// A call whose caller has stopped waiting before its batch began is
	// dropped: nothing of it is written.
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.answer(err)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	if err := w.turn.wait(); err != nil {
		w.fail(live, "begin", err)
		return
	}
	defer w.turn.done()
	if _, err := w.conn.ExecContext(batchCtx, "BEGIN IMMEDIATE"); err != nil {
		w.fail(live, "begin", err)
		return
	}
	w.tokens = tokenCounter{}
	w.ran = 0
	tx := &writeTx{w: w}
	ran := live[:0:0]
	for _, c := range live {
		if err := c.ctx.Err(); err != nil { // gave up while BEGIN waited for the lock
			c.answer(err)
			continue
		}
		*tx = writeTx{w: w, lazy: c.lazy, call: c}
		if !c.lazy {
			if err := tx.save(); err != nil {
				w.fail(live, "savepoint", err)
				return
			}
		}
		err := c.run(tx)
		switch {
		case c.panicked != nil:
			w.fail(live, "call", fmt.Errorf("a call panicked: %v", c.panicked))
			return
		case tx.broken != nil:
			w.fail(live, "savepoint", tx.broken)
			return
		case err == nil:
			if tx.saved {
				if _, err := w.exec(releaseSQL); err != nil {
					w.fail(live, "release savepoint", err)
					return
				}
			}
			ran = append(ran, c)
			continue
		case errors.Is(interpretError(batchCtx, err), store.ErrUnavailable):
			// The disk, the lock or the connection failed: SQLite may have
			// rolled back the whole transaction already.
			w.fail(live, "call", err)
			return
		case !tx.saved && tx.changed:
			// What the call changed cannot be taken back alone.
			w.fail(live, "call", fmt.Errorf("a call failed after a change it took no savepoint for: %w", err))
			return
		case !tx.saved && mayEndTx(err):
			// Nothing to roll back to, and no telling whether SQLite
			// rolled back the transaction.
			w.fail(live, "call", err)
			return
		}
		c.err = err
		if tx.saved {
			if _, err := w.exec(rollbackToSQL); err != nil {
				w.fail(live, "roll back to savepoint", err)
				return
			}
			if _, err := w.exec(releaseSQL); err != nil {
				w.fail(live, "release savepoint", err)
				return
			}
		}
		ran = append(ran, c)
	}
	if err := w.storeTokens(); err != nil {
		w.fail(live, "store the token counter", err)
		return
	}
	if _, err := w.conn.ExecContext(batchCtx, "COMMIT"); err != nil {
		w.fail(live, "commit", err)
		return
	}
	// Counted before the answers, so that a caller sees its own batch in
	// the counts.
	w.mu.Lock()
	w.batches++
	w.batched += int64(len(ran))
	w.statements += w.ran
	w.mu.Unlock()
	w.batchCalls.Observe(float64(len(ran)))
	for _, c := range ran {
		if c.err == nil {
			// What the call wrote is committed, whether or not its
			// caller is still waiting.
			for _, id := range c.wakes {
				w.watches.Wake(id)
			}
		}
		c.wakes = nil
		c.answer(interpretError(batchCtx, c.err))
	}
}

const (
	savepointSQL  = `SAVEPOINT call`
	releaseSQL    = `RELEASE call`
	rollbackToSQL = `ROLLBACK TO call`
)

// fail ends a batch whose transaction failed: it rolls back what is left of
// the transaction and answers every call of the batch store.ErrUnavailable
// (those already answered keep their answer).
func (w *writer) fail(batch []*writeCall, step string, cause error) {
	// The transaction may be open (a failed COMMIT can leave it so) or
	// already rolled back by SQLite, in which case ROLLBACK fails harmlessly.
	_, _ = w.conn.ExecContext(batchCtx, "ROLLBACK")
	err := interpretError(batchCtx, cause)
	if !errors.Is(err, store.ErrUnavailable) {
		err = fmt.Errorf("%w: the write transaction failed at %s: %w", store.ErrUnavailable, step, err)
	}
	for _, c := range batch {
		c.answer(err)
	}
}

// run runs c's function in tx, recovering a panic into c.panicked.
func (c *writeCall) run(tx *writeTx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.panicked = p
		}
	}()
	return c.fn(tx, now())
}

// answer gives c its answer, once.
func (c *writeCall) answer(err error) {
	select {
	case <-c.done:
		return
	default:
	}
	c.err = err
	close(c.done)
}

// stmt returns query prepared on the write connection, preparing it the
// first time.
func (w *writer) stmt(query string) (*sql.Stmt, error) {
	w.ran++ // the statement is about to run
	if stmt, ok := w.stmts[query]; ok {
		return stmt, nil
	}
	stmt, err := w.conn.PrepareContext(batchCtx, query)
	if err != nil {
		return nil, err
	}
	w.stmts[query] = stmt
	return stmt, nil
}

// exec runs query, prepared, on the write connection.
func (w *writer) exec(query string, args ...any) (sql.Result, error) {
	stmt, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return stmt.ExecContext(batchCtx, args...)
}

// writeTx is the batch's transaction as a call sees it: statements on the
// write connection, inside the call's savepoint once it has one. Each
// statement is prepared once per Store and reused.
//
// A call of inWriteTx has its savepoint from its start. A call of
// inWriteTxLazy runs its first writing statement (QueryRow, Exec) without
// one; the savepoint is taken before the next writing statement (or
// ExecScript), which is the same as taking it at the start as long as the
// first changed nothing, as when an insert ran into an existing row or an
// update matched none. Read runs no savepoint at all: it changes nothing.
// tx tracks whether the unprotected statement changed anything, from what
// it returned; runBatch relies on that to decide whether a failed call can
// be answered alone.
type writeTx struct {
	w    *writer
	call *writeCall
	// lazy: the call's savepoint waits for its second writing statement.
	lazy bool
	// saved: the call's savepoint is taken.
	saved bool
	// wrote: the call ran a writing statement before it had a savepoint.
	wrote bool
	// changed: that statement changed rows, or may have.
	changed bool
	// broken is the error of a savepoint that failed inside the call: the
	// batch fails.
	broken error
}

// WakeAfterCommit wakes the Claims waiting on id once the call's batch has
// committed, if the call succeeded: not when the call failed (what it wrote
// was taken back) or the batch did. It wakes them before the call is
// answered, and even when the caller has stopped waiting, so that a waiting
// Claim looks after the change is visible and never misses it.
func (tx *writeTx) WakeAfterCommit(id store.RecordID) {
	c := tx.call
	if c.wakes == nil {
		c.wakes = c.wakeBuf[:0]
	}
	c.wakes = append(c.wakes, id)
}

// errUnprotected refuses a lazy call's second write after a first that
// changed rows without a savepoint: what the first changed could not be
// undone alone if the call then failed.
var errUnprotected = errors.New("sqlite: a call wrote again after an unprotected change; use inWriteTx")

// save takes the call's savepoint.
func (tx *writeTx) save() error {
	if _, err := tx.w.exec(savepointSQL); err != nil {
		return err
	}
	tx.saved = true
	return nil
}

// beforeWrite is called before every writing statement: it reports whether
// the statement runs unprotected, taking the savepoint first when it is due.
func (tx *writeTx) beforeWrite(force bool) (unprotected bool, err error) {
	switch {
	case tx.saved:
		return false, nil
	case !tx.wrote && !force:
		tx.wrote = true
		tx.changed = true // until the statement shows otherwise
		return true, nil
	case tx.changed:
		return false, errUnprotected
	}
	if err := tx.save(); err != nil {
		tx.broken = err
		return false, err
	}
	return false, nil
}

// QueryRow runs query, a writing statement that returns at most one row
// (UPDATE, INSERT or DELETE ... RETURNING). Unprotected, a row returned is
// a row changed, and none returned is none changed.
func (tx *writeTx) QueryRow(query string, args ...any) rowScanner {
	unprotected, err := tx.beforeWrite(false)
	if err != nil {
		return errRow{err}
	}
	stmt, err := tx.w.stmt(query)
	if err != nil {
		if unprotected {
			tx.changed = false // prepared nothing, ran nothing
		}
		return errRow{err}
	}
	rows, err := stmt.QueryContext(batchCtx, args...)
	if err != nil {
		// A statement that fails changes nothing: SQLite takes back
		// what it did, or the batch fails (runBatch).
		if unprotected {
			tx.changed = false
		}
		return errRow{err}
	}
	return &writeRow{rows: rows, unprotected: unprotected, tx: tx}
}

// Query runs query, a writing statement that returns any number of rows
// (UPDATE or DELETE ... RETURNING), and calls each for every row. SQLite
// makes all of such a statement's changes in its first step, so an error
// from the statement comes before any row. Unprotected, rows returned are
// rows changed, and none returned is none changed.
func (tx *writeTx) Query(query string, each func(*sql.Rows) error, args ...any) error {
	unprotected, err := tx.beforeWrite(false)
	if err != nil {
		return err
	}
	stmt, err := tx.w.stmt(query)
	if err != nil {
		if unprotected {
			tx.changed = false // prepared nothing, ran nothing
		}
		return err
	}
	rows, err := stmt.QueryContext(batchCtx, args...)
	if err != nil {
		if unprotected {
			tx.changed = false
		}
		return err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
		if err := each(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		if unprotected && n == 0 {
			tx.changed = false // failed in its first step: SQLite took it back
		}
		return err
	}
	if unprotected && n == 0 {
		tx.changed = false
	}
	return rows.Close()
}

// writeRow is QueryRow's row: like *sql.Row, and it tells tx whether the
// statement changed a row.
type writeRow struct {
	rows        *sql.Rows
	unprotected bool
	tx          *writeTx
}

func (r *writeRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if r.unprotected {
			r.tx.changed = false // no row back: no row changed, or the statement failed
		}
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// errRow is a row that carries an error to Scan.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// Read runs query, a statement that changes nothing (a SELECT), which
// returns at most one row. It takes no savepoint.
func (tx *writeTx) Read(query string, args ...any) *sql.Row {
	stmt, err := tx.w.stmt(query)
	if err != nil {
		// Unprepared, the statement fails again, and the row carries
		// the error to Scan.
		return tx.w.conn.QueryRowContext(batchCtx, query, args...)
	}
	return stmt.QueryRowContext(batchCtx, args...)
}

// Exec runs query, a writing statement. Unprotected, the rows it affected
// are the rows it changed.
func (tx *writeTx) Exec(query string, args ...any) (sql.Result, error) {
	unprotected, err := tx.beforeWrite(false)
	if err != nil {
		return nil, err
	}
	res, err := tx.w.exec(query, args...)
	if unprotected {
		if err != nil {
			tx.changed = false // failed: SQLite took it back, or the batch fails
		} else if n, nerr := res.RowsAffected(); nerr == nil && n == 0 {
			tx.changed = false
		}
	}
	return res, err
}

// ExecScript runs query, which may hold several statements, without
// preparing it: for statements that run once, such as a migration. It
// always runs under the call's savepoint, taking it if the call has none.
func (tx *writeTx) ExecScript(query string, args ...any) (sql.Result, error) {
	if _, err := tx.beforeWrite(true); err != nil {
		return nil, err
	}
	return tx.w.conn.ExecContext(batchCtx, query, args...)
}

// mayEndTx reports whether err, a statement's error, may have rolled back
// the whole transaction rather than the statement alone. SQLite takes back
// just the failed statement for a constraint, a type mismatch, a value too
// big, a bind out of range and a plain SQL error; other errors (a full or
// failing disk, the lock, memory, an interrupt, corruption) may end the
// transaction. Errors that are not SQLite's come from Go and touch nothing.
func mayEndTx(err error) bool {
	var sqliteErr *sqlite.Error
	if !errors.As(err, &sqliteErr) {
		return false
	}
	switch sqliteErr.Code() & 0xff {
	case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_TOOBIG,
		sqlite3.SQLITE_RANGE, sqlite3.SQLITE_ERROR:
		return false
	}
	return true
}

// Tokens. The counter idem_token holds the last token handed out; every
// token is drawn from it, so a token is greater than every token drawn
// before it, whatever records were purged or deleted since. Rather than one
// UPDATE per token, the writer keeps the counter in memory for the length of
// one batch:
//
//   - the first token a batch draws reads idem_token, inside the batch's
//     transaction, so under the write lock: another Store on the file (this
//     process's, taking turns, or another process's) may have drawn tokens
//     since this writer's last batch, and a batch that failed left nothing;
//   - each token drawn adds one in memory;
//   - before COMMIT, the batch writes the counter back once, in the same
//     transaction, so every token a batch commits is at most the counter it
//     commits, and a later batch, of this Store or another, draws above it.
//
// A token drawn by a call that then fails, or that a conflicting insert did
// not use, leaves a gap at most: gaps are harmless, repeats are not, and a
// token that is given back (peekToken without takeToken) is not even a gap.
// The counter is written by this code only; a statement that changed it
// behind the writer's back within a batch would be overruled at most upwards
// (storeTokensSQL keeps the greater value).
type tokenCounter struct {
	loaded bool
	read   int64 // the value the batch read
	last   int64 // the last token the batch drew
}

const (
	loadTokensSQL  = `SELECT value FROM idem_token WHERE id = 1`
	storeTokensSQL = `UPDATE idem_token SET value = max(value, ?1) WHERE id = 1`
)

// peekToken returns the token that the next takeToken of the batch draws,
// reading the counter first if the batch has not. Until takeToken, the
// token is not drawn, and a later peekToken returns it again.
func (tx *writeTx) peekToken() (int64, error) {
	t := &tx.w.tokens
	if !t.loaded {
		stmt, err := tx.w.stmt(loadTokensSQL)
		if err != nil {
			return 0, err
		}
		if err := stmt.QueryRowContext(batchCtx).Scan(&t.read); err != nil {
			return 0, err
		}
		t.last, t.loaded = t.read, true
	}
	return t.last + 1, nil
}

// takeToken draws token, which peekToken has just returned.
func (tx *writeTx) takeToken(token int64) {
	if t := &tx.w.tokens; t.loaded && token == t.last+1 {
		t.last = token
		return
	}
	panic(fmt.Sprintf("sqlite: takeToken(%d) without peekToken", token))
}

// drawToken draws the next token.
func (tx *writeTx) drawToken() (int64, error) {
	token, err := tx.peekToken()
	if err != nil {
		return 0, err
	}
	tx.takeToken(token)
	return token, nil
}

// storeTokens writes the counter back if the batch drew a token.
func (w *writer) storeTokens() error {
	t := &w.tokens
	if !t.loaded || t.last == t.read {
		return nil
	}
	res, err := w.exec(storeTokensSQL, t.last)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("the token counter's row is missing (%d rows updated, %v)", n, err)
	}
	return nil
}

// fileTurn makes the writers of the Stores that one process opens on one file
// take turns, first come first served. SQLite's own lock is not fair: a
// writer that waits for it sleeps and polls, and a writer that commits batch
// after batch takes it again at once, so without turns one Store could keep
// another from writing past the busy timeout. A Go channel hands its slot to
// the writers waiting for it in order.
type fileTurn struct {
	slot chan struct{}
	path string
	refs int // guarded by fileTurnsMu
}

var (
	fileTurnsMu sync.Mutex
	fileTurns   = map[string]*fileTurn{}
)

// takeTurns returns the turn of the file at path, shared with the other
// writers of the process on that file; release gives it back.
func takeTurns(path string) *fileTurn {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	fileTurnsMu.Lock()
	defer fileTurnsMu.Unlock()
	t, ok := fileTurns[path]
	if !ok {
		t = &fileTurn{slot: make(chan struct{}, 1), path: path}
		fileTurns[path] = t
	}
	t.refs++
	return t
}

func (t *fileTurn) release() {
	fileTurnsMu.Lock()
	defer fileTurnsMu.Unlock()
	if t.refs--; t.refs == 0 {
		delete(fileTurns, t.path)
	}
}

// wait waits for the file's turn, as long as SQLite would wait for its lock.
func (t *fileTurn) wait() error {
	select {
	case t.slot <- struct{}{}:
		return nil
	default:
	}
	timer := time.NewTimer(BusyTimeout)
	defer timer.Stop()
	select {
	case t.slot <- struct{}{}:
		return nil
	case <-timer.C:
		return fmt.Errorf("%w: another Store of this process held the file's write turn for %v", store.ErrUnavailable, BusyTimeout)
	}
}

// done ends the turn.
func (t *fileTurn) done() { <-t.slot }
