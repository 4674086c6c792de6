package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// A job's steps are rows of idem_steps (migrations/005_steps.sql); the
// record counts them, so that a read of a record without steps reads
// nothing more, and a trigger deletes them with it.

// stepsSQL reads a record's steps in the order they were first recorded.
const stepsSQL = `SELECT name, result, token, started_at, finished_at FROM idem_steps
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 ORDER BY ord`

// querier runs the store's statements in a transaction: the writer's
// (writeTx) or a reader's (readTx).
type querier interface {
	QueryRow(query string, args ...any) *sql.Row
	Query(query string, each func(*sql.Rows) error, args ...any) error
}

// readSteps reads the count steps of rec into rec.Steps.
func readSteps(q querier, rec *store.Record, count int) error {
	if count == 0 {
		return nil
	}
	steps := make([]store.Step, 0, count)
	err := q.Query(stepsSQL, func(rows *sql.Rows) error {
		var step store.Step
		var startedUS int64
		var finishedUS sql.NullInt64
		if err := rows.Scan(&step.Name, &step.Result, &step.Token, &startedUS, &finishedUS); err != nil {
			return err
		}
		step.StartedAt, step.FinishedAt = fromMicros(startedUS), fromNullMicros(finishedUS)
		step.State = store.StepStarted
		if finishedUS.Valid {
			step.State = store.StepFinished
			if step.Result == nil {
				step.Result = []byte{}
			}
		} else {
			step.Result = nil
		}
		steps = append(steps, step)
		return nil
	}, rec.Tenant, rec.Namespace, rec.Key)
	if err != nil {
		return err
	}
	rec.Steps = steps
	return nil
}

// readTx is a read transaction on the read pool: its statements see one
// snapshot of the file (WAL).
type readTx struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

// QueryRow runs query, one of readQueries, which returns at most one row.
func (r readTx) QueryRow(query string, args ...any) *sql.Row {
	return r.tx.StmtContext(r.ctx, r.stmts[query]).QueryRowContext(r.ctx, args...)
}

// Query runs query, one of readQueries, and calls each for every row.
func (r readTx) Query(query string, each func(*sql.Rows) error, args ...any) error {
	rows, err := r.tx.StmtContext(r.ctx, r.stmts[query]).QueryContext(r.ctx, args...)
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

// inReadTx runs fn in a read transaction.
func (s *Store) inReadTx(ctx context.Context, fn func(q querier) error) error {
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(readTx{ctx: ctx, tx: tx, stmts: s.readStmts}); err != nil {
		return err
	}
	return tx.Commit()
}

// The writes of a step call, under the write lock, once
// store.StepParams.Decide has said that it applies: the step's row, new or
// changed (a start of a step a predecessor started, or a finish of a
// STARTED one), and the record's count and policy. The job's bounds are
// checked on the steps as read (Record.StepBytes).
const (
	upsertStepSQL = `INSERT INTO idem_steps (tenant, namespace, key, name, ord, result, token, started_at, finished_at)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
	ON CONFLICT (tenant, namespace, key, name) DO UPDATE SET result = excluded.result, token = excluded.token,
		started_at = excluded.started_at, finished_at = excluded.finished_at`
	stepRecordSQL = `UPDATE idem_records SET step_count = ?4, hold_unfinished = ?5, updated_at = ?6
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`
)

// RecordStep implements store.Store. The call runs in the writer's next
// batch: the record and its steps are read and decided on
// (store.StepParams.Decide) under the write lock, so nothing changes in
// between.
func (s *Store) RecordStep(ctx context.Context, p *store.StepParams) (*store.Step, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	var (
		out     *store.Step
		refusal error
	)
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) (err error) {
		out, refusal, err = stepIn(tx, p, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, refusal
}

// stepIn runs the step call p in the writer's transaction tx at now: the
// step as stored, or the refusal that is its answer, or the error of a
// statement.
func stepIn(tx *writeTx, p *store.StepParams, now time.Time) (step *store.Step, refusal, err error) {
	rec, count, err := scanRecordSteps(tx.QueryRow(getSQL, p.Tenant, p.Namespace, p.Key))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, store.ErrNotFound, nil
	case err != nil:
		return nil, nil, err
	}
	if err := readSteps(tx, rec, count); err != nil {
		return nil, nil, err
	}
	switch d, stored := p.Decide(rec); d.Action {
	case store.ChangeRepeat:
		return stored, nil, nil
	case store.ChangeRefuse:
		return nil, d.Err, nil
	}
	stored := rec.Step(p.Name)
	step = &store.Step{Name: p.Name, State: store.StepStarted, Token: p.Token, StartedAt: now}
	var result any // NULL while STARTED
	var finished sql.NullInt64
	if p.Finish {
		step.State, step.Result, step.FinishedAt = store.StepFinished, p.StepResult(), now
		result, finished = step.Result, sql.NullInt64{Int64: now.UnixMicro(), Valid: true}
		if stored != nil {
			step.StartedAt = stored.StartedAt // a finish keeps when its step started
		}
	}
	if stored == nil {
		count++
	}
	if _, err := tx.Exec(upsertStepSQL, p.Tenant, p.Namespace, p.Key, p.Name, len(rec.Steps), result, p.Token,
		step.StartedAt.UnixMicro(), finished); err != nil {
		return nil, nil, err
	}
	if _, err := tx.Exec(stepRecordSQL, p.Tenant, p.Namespace, p.Key, count, p.HoldUnfinished, now.UnixMicro()); err != nil {
		return nil, nil, err
	}
	return step, nil, nil
}

// RecordStepMany implements store.Store: the calls run at once, each as
// RecordStep, and the writer commits them together.
func (s *Store) RecordStepMany(ctx context.Context, ps []*store.StepParams) ([]*store.Step, []error) {
	steps, errs := make([]*store.Step, len(ps)), make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { steps[i], errs[i] = s.RecordStep(ctx, p) })
	}
	wg.Wait()
	return steps, errs
}
