package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// A job's steps live in its record's row, one array per field
// (migrations/006_steps.sql), so that a step call is one update of one row:
// no second table to write, index or purge, and a takeover's
// compare-and-set on the row version sees every step written before it.

// stepFields is how many values stepsColOf carries.
const stepFields = 6

// stepsScan reads a record's steps, in either form (stepsColOf,
// stepsColsOf). It is a pgtype.CompositeIndexScanner for the first.
type stepsScan struct {
	names             []string
	results           [][]byte
	tokens            []int64
	started, finished []pgtype.Timestamptz
	hold              pgtype.Bool
}

// ScanNull implements pgtype.CompositeIndexScanner: a record without steps.
func (s *stepsScan) ScanNull() error {
	*s = stepsScan{}
	return nil
}

// ScanIndex implements pgtype.CompositeIndexScanner.
func (s *stepsScan) ScanIndex(i int) any { return s.fields()[i] }

// fields are the destinations of the steps' values, in stepsColOf's order.
func (s *stepsScan) fields() []any {
	return []any{&s.names, &s.results, &s.tokens, &s.started, &s.finished, &s.hold}
}

// into sets rec's Steps and HoldUnfinished from what s read.
func (s *stepsScan) into(rec *store.Record) error {
	if len(s.names) == 0 {
		return nil
	}
	n := len(s.names)
	if len(s.results) != n || len(s.tokens) != n || len(s.started) != n || len(s.finished) != n {
		// Not the key: internal errors are logged, keys never.
		return fmt.Errorf("postgres: tenant %s, namespace %s: the step arrays differ in length (%d names, %d results, %d tokens, %d, %d times)",
			rec.Tenant, rec.Namespace, n, len(s.results), len(s.tokens), len(s.started), len(s.finished))
	}
	rec.Steps = make([]store.Step, n)
	for i := range n {
		step := store.Step{Name: s.names[i], State: store.StepStarted, Token: s.tokens[i],
			StartedAt: utc(s.started[i]), FinishedAt: utc(s.finished[i])}
		if s.finished[i].Valid {
			step.State, step.Result = store.StepFinished, s.results[i]
			if step.Result == nil {
				step.Result = []byte{}
			}
		}
		rec.Steps[i] = step
	}
	rec.HoldUnfinished = s.hold.Bool
	return nil
}

// The parts of stepOneSQL about the step named $5.
const (
	// stepIsNew: the record has no step of that name.
	stepIsNew = `array_position(step_names, $5::text) IS NULL`
	// stepPos is its index in the arrays, or one past the last for a new
	// step: where it is written. An assignment one past the end of an
	// array, or to an element of a NULL one, extends it.
	stepPos = `coalesce(array_position(step_names, $5::text), coalesce(cardinality(step_names), 0) + 1)`
)

// stepOneSQL is a step call in one statement: the update where
// tokenAppliesSQL holds, the step is new or STARTED (and, for a start, by
// another token: a successor starting it again), and the job's bounds
// hold; else the record's token, state and steps, so that the caller learns
// why (store.StepParams.Decide) in the same round trip. $1–$3 are the
// record's id, $4 the token, $5 the step's name, $6 its result (NULL for a
// start), $7 hold_unfinished, $8 and $9 the bounds on the job's steps and
// their bytes. Only the step's two times come back from the update: the
// caller knows the rest.
var stepOneSQL = `
WITH changed AS (
	UPDATE idem_records SET
		step_names[` + stepPos + `] = $5::text,
		step_results[` + stepPos + `] = $6::bytea,
		step_tokens[` + stepPos + `] = $4::bigint,
		step_started[` + stepPos + `] = CASE WHEN $6::bytea IS NOT NULL AND NOT ` + stepIsNew + `
			THEN step_started[` + stepPos + `] ELSE now() END,
		step_finished[` + stepPos + `] = CASE WHEN $6::bytea IS NULL THEN NULL ELSE now() END,
		step_bytes = coalesce(step_bytes, 0) + coalesce(octet_length($6::bytea), 0)
			+ CASE WHEN ` + stepIsNew + ` THEN octet_length($5::text) ELSE 0 END,
		hold_unfinished = $7::boolean,
		updated_at = now()
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND ` + tokenAppliesSQL("", "$4") + `
		AND (` + stepIsNew + ` OR (step_finished[` + stepPos + `] IS NULL
			AND ($6::bytea IS NOT NULL OR step_tokens[` + stepPos + `] <> $4)))
		AND (NOT ` + stepIsNew + ` OR coalesce(cardinality(step_names), 0) < $8::integer)
		AND coalesce(step_bytes, 0) + coalesce(octet_length($6::bytea), 0)
			+ CASE WHEN ` + stepIsNew + ` THEN octet_length($5::text) ELSE 0 END <= $9::integer
	RETURNING step_started[array_position(step_names, $5::text)] AS started_at,
		step_finished[array_position(step_names, $5::text)] AS finished_at
)
SELECT true, c.started_at, c.finished_at, NULL::bigint, NULL::text, NULL::boolean, NULL::record FROM changed c
UNION ALL
SELECT false, NULL::timestamptz, NULL::timestamptz, token, state, coalesce(resolved_token = token, false), ` + stepsCol + `
	FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM changed)`

// stepRow is what a step call's statement did: wrote the step at started
// and finished (changed), or found rec so that the change does not apply;
// rec is nil when there is no such record.
type stepRow struct {
	changed           bool
	started, finished time.Time
	rec               *store.Record
}

// stepArgs are stepOneSQL's arguments for p.
func stepArgs(p *store.StepParams) []any {
	var result []byte // NULL: a start
	if p.Finish {
		result = p.StepResult()
	}
	return []any{p.Tenant, p.Namespace, p.Key, p.Token, p.Name, result, p.HoldUnfinished, p.MaxSteps, p.MaxStepBytes}
}

// scanStepRow reads a row of stepOneSQL for the record id.
func scanStepRow(row pgx.Row, id store.RecordID) (stepRow, error) {
	var r stepRow
	var started, finished pgtype.Timestamptz
	var token pgtype.Int8
	var state pgtype.Text
	var resolved pgtype.Bool
	var steps stepsScan
	if err := row.Scan(&r.changed, &started, &finished, &token, &state, &resolved, &steps); err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return stepRow{}, nil // no such record
		}
		return stepRow{}, err
	}
	if r.changed {
		r.started, r.finished = utc(started), utc(finished)
		return r, nil
	}
	r.rec = &store.Record{RecordID: id, Token: token.Int64, State: store.State(state.String), ResolvedByOperator: resolved.Bool}
	if err := steps.into(r.rec); err != nil {
		return stepRow{}, err
	}
	return r, nil
}

// stepOne runs p as stepOneSQL.
func (d driver) stepOne(ctx context.Context, p *store.StepParams) (stepRow, error) {
	return scanStepRow(d.q.QueryRow(ctx, stepOneSQL, stepArgs(p)...), p.RecordID)
}

// stepMany runs ps, sorted by primary key with distinct keys, as one
// stepOneSQL each in one round trip: one implicit transaction, whose row
// locks are taken in that order, as every batch takes them.
func (d driver) stepMany(ctx context.Context, ps []*store.StepParams) ([]stepRow, error) {
	b := &pgx.Batch{}
	for _, p := range ps {
		b.Queue(stepOneSQL, stepArgs(p)...)
	}
	results := d.q.SendBatch(ctx, b)
	rows := make([]stepRow, len(ps))
	var err error
	for i, p := range ps {
		if rows[i], err = scanStepRow(results.QueryRow(), p.RecordID); err != nil {
			break
		}
	}
	// What was written is only known to be committed once the
	// transaction has ended without an error.
	if closeErr := results.Close(); err == nil {
		err = interpretError(closeErr)
	}
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// settleStep is the step call's answer from its statement's row, or
// settled false when the row's second branch read a snapshot from before a
// change the update waited for (store.ChangeApplies).
func settleStep(p *store.StepParams, row stepRow) (step *store.Step, settled bool, err error) {
	switch {
	case row.changed:
		s := &store.Step{Name: p.Name, State: store.StepStarted, Token: p.Token, StartedAt: row.started}
		if p.Finish {
			s.State, s.Result, s.FinishedAt = store.StepFinished, p.StepResult(), row.finished
		}
		return s, true, nil
	case row.rec == nil:
		return nil, true, store.ErrNotFound
	}
	switch d, stored := p.Decide(row.rec); d.Action {
	case store.ChangeRepeat:
		return stored, true, nil
	case store.ChangeRefuse:
		return nil, true, d.Err
	}
	return nil, false, nil
}

// stepTries runs the step call p until it settles, at most tries times.
func stepTries(ctx context.Context, d driver, p *store.StepParams, tries int) (*store.Step, error) {
	for range tries {
		row, err := d.stepOne(ctx, p)
		if err != nil {
			return nil, err
		}
		if step, settled, err := settleStep(p, row); settled {
			return step, err
		}
	}
	return nil, store.ErrContention
}

// RecordStep implements store.Store.
func (s *Store) RecordStep(ctx context.Context, p *store.StepParams) (*store.Step, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Step, error) {
		return stepTries(ctx, d, p, maxStatementTries)
	})
}

// RecordStepMany implements store.Store: the calls of distinct keys in one
// round trip (stepMany); a call it did not settle, or of a key already
// among them, then runs alone.
func (s *Store) RecordStepMany(ctx context.Context, ps []*store.StepParams) ([]*store.Step, []error) {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p.CheckText()
	}
	batch, rest := distinctByID(ps, errs, func(p *store.StepParams) store.RecordID { return p.RecordID })
	steps := detachedMany(ctx, s, append(batch, rest...), errs, func(ctx context.Context, d driver, steps []*store.Step, errs []error) {
		if len(batch) > 0 {
			rows, err := d.stepMany(ctx, column(batch, func(i int) *store.StepParams { return ps[i] }))
			for j, i := range batch {
				if err != nil {
					errs[i] = err
					continue
				}
				var settled bool
				if steps[i], settled, errs[i] = settleStep(ps[i], rows[j]); !settled {
					steps[i], errs[i] = stepTries(ctx, d, ps[i], maxStatementTries-1)
				}
			}
		}
		for _, i := range rest {
			steps[i], errs[i] = stepTries(ctx, d, ps[i], maxStatementTries)
		}
	})
	return steps, errs
}
