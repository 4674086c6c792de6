package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store"
)

// Group commit. Every write of a Store (Claims that acquire, Completes,
// Fails, Heartbeats, the sweeper's statements, deletes, migrations) is a call
// queued for one writer goroutine, which owns the write connection. The
// writer takes everything queued, at most maxBatch calls, and runs it as one
// transaction:
//
//	BEGIN IMMEDIATE
//	<call 1's statements>
//	<call 2's statements>
//	…
//	UPDATE idem_token …   (if the batch drew tokens)
//	COMMIT                (one fsync of the WAL)
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
// A call's answer is its own: a refusal (a fingerprint mismatch, a lost
// lease, an already terminal record, a record that is not there) is an
// answer the call keeps in its own variables, decided before it writes
// anything, and never an error of the call. An error a call returns means
// that one of its statements failed, and then the batch is given up whole:
// it is rolled back, the call gets its error and every other call of the
// batch store.ErrUnavailable, since what it wrote is gone too. So no call
// needs a savepoint to be undone alone. A failure of the transaction itself
// (BEGIN or COMMIT that fails, a disk that is full or fails, a lock held past
// the busy timeout) answers every call of the batch store.ErrUnavailable: its
// outcome is unknown, and no answer that a call of the batch computed is
// given, since it may rest on writes that are not committed.
//
// The calls of a batch run one after another, in the order they were queued,
// each with the store's clock read when it starts, under the write lock. A
// call sees what the calls before it in the batch wrote, so two calls of one
// key in one batch are answered as if they had run in two transactions.
//
// This is not store/coalesce, which the Postgres store batches with: that
// gathers the calls of one kind, each key once, into one many-row statement,
// and runs several statements at once. Here what is shared is the commit,
// not a statement: calls of every kind go in one transaction, in arrival
// order, a key as often as it comes, and one transaction runs at a time.
// Claims, Completes and the sweeper's passes in their own coalescers would
// each commit, and fsync, on their own.

// maxBatch bounds the calls of one batch: a batch holds the write lock, and
// its calls wait for the slowest of them, for as long as it runs.
const maxBatch = 128

// writeFunc is one call's work: it runs in the batch's transaction with now,
// the store's clock when the call started. It keeps its answer in its own
// variables; an error it returns is a statement that failed, and gives up
// the batch.
type writeFunc func(tx *writeTx, now time.Time) error

// writeCall is one queued call.
type writeCall struct {
	ctx context.Context
	fn  writeFunc
	err error
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

// startWriter starts the writer on conn, the write connection; it wakes the
// Claims in watches that its calls ask it to.
func startWriter(conn *sql.Conn, watches *store.Watches) *writer {
	w := &writer{conn: conn, stmts: map[string]*sql.Stmt{}, exited: make(chan struct{}),
		batchCalls: newBatchCalls(), watches: watches}
	w.queued.L = &w.mu
	go w.run()
	return w
}

// do queues fn and waits until its batch is committed or has failed, or ctx
// ends. When ctx ends first, do returns ctx's error at once; the call may
// still run and commit (or, when its batch had not started, it is dropped).
func (w *writer) do(ctx context.Context, fn writeFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &writeCall{ctx: ctx, fn: fn, done: make(chan struct{})}
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
	if _, err := w.conn.ExecContext(batchCtx, "BEGIN IMMEDIATE"); err != nil {
		w.fail(live, nil, "begin", err)
		return
	}
	w.tokens = tokenCounter{}
	w.ran = 0
	ran := live[:0:0]
	for _, c := range live {
		if err := c.ctx.Err(); err != nil { // gave up while BEGIN waited for the lock
			c.answer(err)
			continue
		}
		if err := c.run(&writeTx{w: w, call: c}); err != nil || c.panicked != nil {
			if c.panicked != nil {
				err = fmt.Errorf("a call panicked: %v", c.panicked)
			}
			w.fail(live, c, "call", err)
			return
		}
		ran = append(ran, c)
	}
	if err := w.storeTokens(); err != nil {
		w.fail(live, nil, "store the token counter", err)
		return
	}
	if _, err := w.conn.ExecContext(batchCtx, "COMMIT"); err != nil {
		w.fail(live, nil, "commit", err)
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
		// What the call wrote is committed, whether or not its caller is
		// still waiting.
		for _, id := range c.wakes {
			w.watches.Wake(id)
		}
		c.wakes = nil
		c.answer(nil)
	}
}

// fail gives up a batch: it rolls back what is left of the transaction and
// answers culprit, the call whose statement failed (nil when the
// transaction itself did), with its error, and every other call of the batch
// store.ErrUnavailable (those already answered keep their answer).
func (w *writer) fail(batch []*writeCall, culprit *writeCall, step string, cause error) {
	// The transaction may be open (a failed COMMIT can leave it so) or
	// already rolled back by SQLite, in which case ROLLBACK fails harmlessly.
	_, _ = w.conn.ExecContext(batchCtx, "ROLLBACK")
	err := interpretError(batchCtx, cause)
	if culprit != nil && culprit.panicked == nil {
		culprit.answer(err)
	}
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

// writeTx is the batch's transaction as a call sees it: statements on the
// write connection, each prepared once per Store and reused.
type writeTx struct {
	w    *writer
	call *writeCall
}

// WakeAfterCommit wakes the Claims waiting on id once the call's batch has
// committed: not when the batch failed. It wakes them before the call is
// answered, and even when the caller has stopped waiting, so that a waiting
// Claim looks after the change is visible and never misses it.
func (tx *writeTx) WakeAfterCommit(id store.RecordID) {
	c := tx.call
	if c.wakes == nil {
		c.wakes = c.wakeBuf[:0]
	}
	c.wakes = append(c.wakes, id)
}

// QueryRow runs query, which returns at most one row: a SELECT, or a write
// with RETURNING.
func (tx *writeTx) QueryRow(query string, args ...any) *sql.Row {
	stmt, err := tx.w.stmt(query)
	if err != nil {
		// Unprepared, the statement fails again, and the row carries
		// the error to Scan.
		return tx.w.conn.QueryRowContext(batchCtx, query, args...)
	}
	return stmt.QueryRowContext(batchCtx, args...)
}

// Query runs query, which returns any number of rows, and calls each for
// every row.
func (tx *writeTx) Query(query string, each func(*sql.Rows) error, args ...any) error {
	stmt, err := tx.w.stmt(query)
	if err != nil {
		return err
	}
	rows, err := stmt.QueryContext(batchCtx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// Exec runs query, a writing statement.
func (tx *writeTx) Exec(query string, args ...any) (sql.Result, error) {
	stmt, err := tx.w.stmt(query)
	if err != nil {
		return nil, err
	}
	return stmt.ExecContext(batchCtx, args...)
}

// ExecScript runs query, which may hold several statements, without
// preparing it: for statements that run once, such as a migration.
func (tx *writeTx) ExecScript(query string, args ...any) (sql.Result, error) {
	return tx.w.conn.ExecContext(batchCtx, query, args...)
}

// Tokens. The counter idem_token holds the last token handed out; every
// token is drawn from it, so a token is greater than every token drawn
// before it, whatever records were purged or deleted since. Rather than one
// UPDATE per token, the writer keeps the counter in memory for the length of
// one batch:
//
//   - the first token a batch draws reads idem_token, inside the batch's
//     transaction, so under the write lock: another process on the file
//     (a tool, or a second Store) may have drawn tokens since this writer's
//     last batch, and a batch that failed left nothing;
//   - each token drawn adds one in memory;
//   - before COMMIT, the batch writes the counter back once, in the same
//     transaction, so every token a batch commits is at most the counter it
//     commits, and a later batch, of this Store or another, draws above it.
//
// A token that a conflicting insert did not use leaves a gap at most: gaps are harmless, repeats are not, and a
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
		if err := tx.QueryRow(loadTokensSQL).Scan(&t.read); err != nil {
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
	stmt, err := w.stmt(storeTokensSQL)
	if err != nil {
		return err
	}
	res, err := stmt.ExecContext(batchCtx, t.last)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("the token counter's row is missing (%d rows updated, %v)", n, err)
	}
	return nil
}
