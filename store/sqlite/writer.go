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

// Group commit. Every write of a Store is a call queued for one writer
// goroutine, which runs everything queued (at most maxBatch calls), one
// after another, in one BEGIN IMMEDIATE transaction, and answers them once
// it has committed: one fsync, no timer. A refusal is an answer a call
// keeps in its own variables; an error is a statement that failed, which
// rolls the batch back whole (the others get store.ErrUnavailable), so no
// call needs a savepoint.

// maxBatch bounds the calls of one batch: a batch holds the write lock, and
// its calls wait for the slowest of them, for as long as it runs.
const maxBatch = 128

// writeFunc is one call's work in the batch's transaction, at now, the
// store's clock when the call started; an error gives the batch up.
type writeFunc func(tx *writeTx, now time.Time) error

// writeCall is one queued call.
type writeCall struct {
	ctx context.Context
	fn  writeFunc
	err error
	// panicked is what fn panicked with: do panics with it in the caller's
	// goroutine, where the server's recovery sees it.
	panicked any
	done     chan struct{} // closed once err is set
	// wakes are the records to wake once the batch has committed, held the
	// tenants whose held watches to wake.
	wakes []store.RecordID
	held  []string
}

// writer runs the queued calls of a Store in batches on the write connection.
type writer struct {
	// conn, stmts, ran and tokens are run's goroutine's alone.
	conn  *sql.Conn
	stmts map[string]*sql.Stmt

	mu      sync.Mutex
	queued  sync.Cond // signalled when a call is queued or the writer stops
	queue   []*writeCall
	stopped bool
	exited  chan struct{}

	// batches and batched count the batches committed and their calls,
	// statements the prepared statements they ran, for tests.
	batches, batched, statements int64
	batchCalls                   prometheus.Histogram // idem_sqlite_batch_calls
	watches                      *store.Watches       // woken after commit
	held                         *store.Watches       // the held watches, woken after commit

	ran    int64        // the prepared statements of the running batch
	tokens tokenCounter // the token counter as the running batch sees it
}

// newBatchCalls is the histogram of the calls that share one commit.
func newBatchCalls() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "idem_sqlite_batch_calls",
		Help:    "Calls committed by one write transaction of the SQLite store (one fsync): 1 when writes do not overlap, more under load.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
}

// startWriter starts the writer on conn, the write connection.
func startWriter(conn *sql.Conn, watches, held *store.Watches) *writer {
	w := &writer{conn: conn, stmts: map[string]*sql.Stmt{}, exited: make(chan struct{}),
		batchCalls: newBatchCalls(), watches: watches, held: held}
	w.queued.L = &w.mu
	go w.run()
	return w
}

// do queues fn and waits until its batch has committed or failed, or ctx
// ends; then the call may still commit, or be dropped if its batch had not
// started.
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

// stop stops the writer after its running batch, answers every call still
// queued errClosed, and returns once the write connection is released.
func (w *writer) stop() {
	w.mu.Lock()
	w.stopped = true
	w.queued.Signal()
	w.mu.Unlock()
	<-w.exited
}

// counts returns how many batches the writer committed, their calls and
// the prepared statements they ran.
func (w *writer) counts() (batches, calls, statements int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.batches, w.batched, w.statements
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

// batchCtx is the context of a batch's statements, no caller's: a caller
// that leaves must not interrupt the others' statements or the COMMIT.
var batchCtx = context.Background()

// runBatch runs batch as one transaction and answers every call in it.
func (w *writer) runBatch(batch []*writeCall) {
	// A call whose caller left before its batch began is dropped.
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
	// Counted before the answers, so that a caller sees its own batch.
	w.mu.Lock()
	w.batches++
	w.batched += int64(len(ran))
	w.statements += w.ran
	w.mu.Unlock()
	w.batchCalls.Observe(float64(len(ran)))
	for _, c := range ran {
		for _, id := range c.wakes {
			w.watches.Wake(id)
		}
		for _, tenant := range c.held {
			w.held.Wake(store.RecordID{Tenant: tenant})
		}
		c.wakes, c.held = nil, nil
		c.answer(nil)
	}
}

// fail rolls the batch back and answers culprit, the call whose statement
// failed (nil: the transaction's), its error, and the others
// store.ErrUnavailable.
func (w *writer) fail(batch []*writeCall, culprit *writeCall, step string, cause error) {
	// A ROLLBACK of a transaction SQLite already rolled back fails harmlessly.
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

// stmt returns query prepared on the write connection, once per Store.
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

// writeTx is the batch's transaction as a call sees it.
type writeTx struct {
	w    *writer
	call *writeCall
}

// WakeAfterCommit wakes the Claims waiting on id once the call's batch has
// committed, before the call is answered, so that they look after the
// change is visible.
func (tx *writeTx) WakeAfterCommit(id store.RecordID) {
	tx.call.wakes = append(tx.call.wakes, id)
}

// HeldAfterCommit wakes the held watches of tenant once the call's batch
// has committed: a record of it became UNRESOLVED.
func (tx *writeTx) HeldAfterCommit(tenant string) {
	tx.call.held = append(tx.call.held, tenant)
}

// QueryRow runs query, which returns at most one row.
func (tx *writeTx) QueryRow(query string, args ...any) *sql.Row {
	stmt, err := tx.w.stmt(query)
	if err != nil {
		// Unprepared, it fails again, and the row carries the error.
		return tx.w.conn.QueryRowContext(batchCtx, query, args...)
	}
	return stmt.QueryRowContext(batchCtx, args...)
}

// Query runs query and calls each for every row.
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

// ExecScript runs query, which may hold several statements, unprepared:
// for what runs once, such as a migration.
func (tx *writeTx) ExecScript(query string, args ...any) (sql.Result, error) {
	return tx.w.conn.ExecContext(batchCtx, query, args...)
}

// Tokens. The counter idem_token holds the last token handed out, so a
// token is greater than every one before it, whatever was purged. A batch
// reads it once, under the write lock (another process on the file may have
// drawn tokens), counts in memory, and writes it back before COMMIT; a
// token given back (peekToken without takeToken) is not drawn.
type tokenCounter struct {
	loaded bool
	read   int64 // the value the batch read
	last   int64 // the last token the batch drew
}

const (
	loadTokensSQL  = `SELECT value FROM idem_token WHERE id = 1`
	storeTokensSQL = `UPDATE idem_token SET value = max(value, ?1) WHERE id = 1`
)

// peekToken returns the token the batch's next takeToken draws.
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
