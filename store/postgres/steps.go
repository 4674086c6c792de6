package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
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

// stepSQL is the parts of a step call's update about the step of name,
// on the record r: each an expression of the record's row before the
// update, as SET and WHERE see it.
type stepSQL struct {
	// isNew: the record has no step of that name.
	isNew string
	// pos is its index in the arrays, or one past the last for a new step:
	// where it is written. An assignment one past the end of an array, or
	// to an element of a NULL one, extends it.
	pos string
	// set is the update's SET list and applies its condition: the token is
	// current (tokenAppliesSQL), the step new or STARTED (and, for a
	// start, by another token: a successor starting it again), and the
	// job's bounds hold.
	set, applies string
}

// newStepSQL is stepSQL for a call whose token, name, result (NULL for a
// start), policy and bounds are the expressions given.
func newStepSQL(r, token, name, result, hold, maxSteps, maxBytes string) stepSQL {
	a := r + "."
	q := stepSQL{
		isNew: `array_position(` + a + `step_names, ` + name + `) IS NULL`,
		pos:   `coalesce(array_position(` + a + `step_names, ` + name + `), coalesce(cardinality(` + a + `step_names), 0) + 1)`,
	}
	added := `coalesce(octet_length(` + result + `), 0) + CASE WHEN ` + q.isNew + ` THEN octet_length(` + name + `) ELSE 0 END`
	q.set = `step_names[` + q.pos + `] = ` + name + `,
		step_results[` + q.pos + `] = ` + result + `,
		step_tokens[` + q.pos + `] = ` + token + `,
		step_started[` + q.pos + `] = CASE WHEN ` + result + ` IS NOT NULL AND NOT ` + q.isNew + `
			THEN ` + a + `step_started[` + q.pos + `] ELSE now() END,
		step_finished[` + q.pos + `] = CASE WHEN ` + result + ` IS NULL THEN NULL ELSE now() END,
		step_bytes = coalesce(` + a + `step_bytes, 0) + ` + added + `,
		hold_unfinished = ` + hold + `,
		updated_at = now()`
	q.applies = tokenAppliesSQL(r, token) + `
		AND (` + q.isNew + ` OR (` + a + `step_finished[` + q.pos + `] IS NULL
			AND (` + result + ` IS NOT NULL OR ` + a + `step_tokens[` + q.pos + `] <> ` + token + `)))
		AND (NOT ` + q.isNew + ` OR coalesce(cardinality(` + a + `step_names), 0) < ` + maxSteps + `)
		AND coalesce(` + a + `step_bytes, 0) + ` + added + ` <= ` + maxBytes
	return q
}

// stepOneSQL is a step call in one statement: the update where it applies
// (stepSQL), else the record's token, state and steps, so that the caller
// learns why (store.StepParams.Decide) in the same round trip. $1–$3 are
// the record's id, $4 the token, $5 the step's name, $6 its result (NULL
// for a start), $7 hold_unfinished, $8 and $9 the bounds on the job's
// steps and their bytes. Only the step's two times come back from the
// update: the caller knows the rest.
var stepOneSQL = func() string {
	q := newStepSQL("idem_records", "$4::bigint", "$5::text", "$6::bytea", "$7::boolean", "$8::integer", "$9::integer")
	return `
WITH changed AS (
	UPDATE idem_records SET ` + q.set + `
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND ` + q.applies + `
	RETURNING step_started[array_position(step_names, $5::text)] AS started_at,
		step_finished[array_position(step_names, $5::text)] AS finished_at
)
SELECT true, c.started_at, c.finished_at, NULL::bigint, NULL::text, NULL::boolean, NULL::record FROM changed c
UNION ALL
SELECT false, NULL::timestamptz, NULL::timestamptz, token, state, coalesce(resolved_token = token, false), ` + stepsCol + `
	FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM changed)`
}()

// stepManySQL is stepOneSQL for many keys, each row led by its record's
// id, in tokenManySQL's way: locked takes the row locks first, one
// primary-key lookup per call in primary-key order, so that batches
// sharing keys never deadlock and each call gets its row in its newest
// version, changed or as it now stands; the change is an INSERT of the
// locked rows, which always conflicts and so updates where stepSQL
// applies. The proposed row carries the locked row's own values for the
// required columns, and the call's step in its step arrays' first element
// and its token and policy in theirs. The update returns only its time:
// the step's times come from it and from the locked row. A call that
// changed nothing gets the record read again, with its steps: the locked
// rows carry only what the others need. $8 and $9 are the bounds, the same
// for every call of the statement.
var stepManySQL = func() string {
	q := newStepSQL("r", "excluded.token", "excluded.step_names[1]", "excluded.step_results[1]", "excluded.hold_unfinished",
		"$8::integer", "$9::integer")
	return `
WITH locked AS (
	SELECT i.token AS in_token, i.name AS in_name, i.result AS in_result, i.hold AS in_hold, r.*
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bytea[], $7::boolean[])
		WITH ORDINALITY AS i(tenant, namespace, key, token, name, result, hold, ord)
	CROSS JOIN LATERAL (
		SELECT r.tenant, r.namespace, r.key, r.state, r.token, r.attempt, r.retention, r.created_at, r.updated_at,
			r.step_started[array_position(r.step_names, i.name)] AS was_started
		FROM idem_records r WHERE r.tenant = i.tenant AND r.namespace = i.namespace AND r.key = i.key
		FOR UPDATE
	) r
),
changed AS (
	INSERT INTO idem_records AS r (tenant, namespace, key, token, attempt, retention, created_at, updated_at, state,
		step_names, step_results, hold_unfinished)
	SELECT l.tenant, l.namespace, l.key, l.in_token, l.attempt, l.retention, l.created_at, l.updated_at, l.state,
		ARRAY[l.in_name], ARRAY[l.in_result], l.in_hold
	FROM locked l
	ON CONFLICT (tenant, namespace, key) DO UPDATE SET ` + q.set + `
	WHERE ` + q.applies + `
	RETURNING r.tenant, r.namespace, r.key, r.updated_at
)
SELECT l.tenant, l.namespace, l.key, true,
		CASE WHEN l.in_result IS NOT NULL AND l.was_started IS NOT NULL THEN l.was_started ELSE c.updated_at END,
		CASE WHEN l.in_result IS NOT NULL THEN c.updated_at END,
		NULL::bigint, NULL::text, NULL::boolean, NULL::record
	FROM changed c JOIN locked l ON l.tenant = c.tenant AND l.namespace = c.namespace AND l.key = c.key
UNION ALL
SELECT l.tenant, l.namespace, l.key, false, NULL::timestamptz, NULL::timestamptz, r.token, r.state,
		coalesce(r.resolved_token = r.token, false), ` + stepsColOf("r") + `
	FROM locked l
	CROSS JOIN LATERAL (
		SELECT * FROM idem_records r WHERE r.tenant = l.tenant AND r.namespace = l.namespace AND r.key = l.key
		OFFSET 0
	) r
	WHERE NOT EXISTS (SELECT 1 FROM changed c WHERE c.tenant = l.tenant AND c.namespace = l.namespace AND c.key = l.key)`
}()

// stepRow is what a step call's statement did: wrote the step at started
// and finished (changed), or found rec so that the change does not apply;
// rec is nil when there is no such record.
type stepRow struct {
	changed           bool
	started, finished time.Time
	rec               *store.Record
}

// stepResultArg is p's result as the statements take it: NULL for a
// start.
func stepResultArg(p *store.StepParams) []byte {
	if !p.Finish {
		return nil
	}
	return p.StepResult()
}

// stepArgs are stepOneSQL's arguments for p.
func stepArgs(p *store.StepParams) []any {
	return []any{p.Tenant, p.Namespace, p.Key, p.Token, p.Name, stepResultArg(p), p.HoldUnfinished, bound(p.MaxSteps), bound(p.MaxStepBytes)}
}

// scanStepRow reads a row of stepOneSQL, or of stepManySQL after the
// columns prefix; id is the record's id, once the row is read.
func scanStepRow(row pgx.Row, id func() store.RecordID, prefix ...any) (stepRow, error) {
	var r stepRow
	var started, finished pgtype.Timestamptz
	var token pgtype.Int8
	var state pgtype.Text
	var resolved pgtype.Bool
	var steps stepsScan
	dest := append(prefix, &r.changed, &started, &finished, &token, &state, &resolved, &steps)
	if err := row.Scan(dest...); err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return stepRow{}, nil // no such record
		}
		return stepRow{}, err
	}
	if r.changed {
		r.started, r.finished = utc(started), utc(finished)
		return r, nil
	}
	r.rec = &store.Record{RecordID: id(), Token: token.Int64, State: store.State(state.String), ResolvedByOperator: resolved.Bool}
	if err := steps.into(r.rec); err != nil {
		return stepRow{}, err
	}
	return r, nil
}

// stepOne runs p as stepOneSQL.
func (d driver) stepOne(ctx context.Context, p *store.StepParams) (stepRow, error) {
	return scanStepRow(d.q.QueryRow(ctx, stepOneSQL, stepArgs(p)...), func() store.RecordID { return p.RecordID })
}

// stepMany runs ps, sorted by primary key with distinct keys and all
// with the bounds of the first, as stepManySQL and returns each call's
// row, in the order of ps; a call without a row has no record.
func (d driver) stepMany(ctx context.Context, ps []*store.StepParams) ([]stepRow, error) {
	args := append(idArrays(column(ps, func(p *store.StepParams) store.RecordID { return p.RecordID })),
		column(ps, func(p *store.StepParams) int64 { return p.Token }),
		column(ps, func(p *store.StepParams) string { return p.Name }),
		column(ps, stepResultArg),
		column(ps, func(p *store.StepParams) bool { return p.HoldUnfinished }),
		bound(ps[0].MaxSteps), bound(ps[0].MaxStepBytes))
	result, err := d.q.Query(ctx, stepManySQL, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer result.Close()
	rows := make([]stepRow, len(ps))
	for result.Next() {
		var id store.RecordID
		row, err := scanStepRow(result, func() store.RecordID { return id }, &id.Tenant, &id.Namespace, &id.Key)
		if err != nil {
			return nil, interpretError(err)
		}
		if i := findID(ps, id, func(p *store.StepParams) store.RecordID { return p.RecordID }); i >= 0 {
			rows[i] = row
		}
	}
	// The rows are committed only if the statement ended without an error.
	if err := result.Err(); err != nil {
		return nil, interpretError(err)
	}
	return rows, nil
}

// bound is a bound on a job's steps as the statements take it.
func bound(n int) int32 { return int32(min(n, math.MaxInt32)) }

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
// statement per bounds (stepMany; the server gives every call the same);
// a call it did not settle, or of a key already among them, then runs
// alone.
func (s *Store) RecordStepMany(ctx context.Context, ps []*store.StepParams) ([]*store.Step, []error) {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p.CheckText()
	}
	batch, rest := distinctByID(ps, errs, func(p *store.StepParams) store.RecordID { return p.RecordID })
	steps := detachedMany(ctx, s, append(batch, rest...), errs, func(ctx context.Context, d driver, steps []*store.Step, errs []error) {
		for _, group := range byBounds(ps, batch) {
			rows, err := d.stepMany(ctx, column(group, func(i int) *store.StepParams { return ps[i] }))
			for j, i := range group {
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

// byBounds splits the indexes batch of ps into groups of the same bounds,
// each in the order of batch.
func byBounds(ps []*store.StepParams, batch []int) [][]int {
	var groups [][]int
	for _, i := range batch {
		k := slices.IndexFunc(groups, func(g []int) bool {
			return ps[g[0]].MaxSteps == ps[i].MaxSteps && ps[g[0]].MaxStepBytes == ps[i].MaxStepBytes
		})
		if k < 0 {
			groups = append(groups, nil)
			k = len(groups) - 1
		}
		groups[k] = append(groups[k], i)
	}
	return groups
}
