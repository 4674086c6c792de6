package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// tokenCallSQL is a token-bearing call's update, where the token is current
// and the state PROCESSING, EXPIRED or UNRESOLVED: ?1–?3 the record's id,
// ?4 the token, ?5 now in microseconds, ?6 on the call's own values.
func tokenCallSQL(set string) string {
	return `UPDATE idem_records SET ` + set + `, updated_at = ?5
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 AND token = ?4
		AND state IN ('processing', 'expired', 'unresolved')
	RETURNING ` + recordCols
}

// tokenCalls is each token-bearing call's statement.
var tokenCalls = [...]string{
	store.CallComplete: tokenCallSQL(`state = 'completed', result = ?6, error = NULL, lease_expires_at = NULL,
			completed_at = ?5, expires_at = ?5 + retention_us`),
	store.CallFail: tokenCallSQL(`state = CASE WHEN ?7 THEN 'released' ELSE 'failed' END, error = ?6, result = NULL,
			lease_expires_at = NULL, completed_at = CASE WHEN ?7 THEN NULL ELSE ?5 END,
			expires_at = ?5 + retention_us`),
	store.CallHeartbeat: tokenCallSQL(`state = 'processing', lease_expires_at = ?5 + ?6, expires_at = NULL`),
}

// runTokenCall is the store.TokenCalls the Store embeds.
func (s *Store) runTokenCall(ctx context.Context, call *store.TokenCall) (*store.Record, error) {
	args := []any{call.Tenant, call.Namespace, call.Key, call.Token, nil}
	switch call.Kind {
	case store.CallComplete:
		args = append(args, call.Result)
	case store.CallFail:
		args = append(args, call.Error, call.Retryable)
	case store.CallHeartbeat:
		args = append(args, call.LeaseTTL.Microseconds())
	}
	var after func(tx *writeTx, rec *store.Record, now time.Time) error
	if call.Kind == store.CallFail {
		// A Fail is an exception in the record's life: its entry's kind is
		// the state it leaves, failed or released.
		after = func(tx *writeTx, rec *store.Record, now time.Time) error {
			return noted(tx, call.RecordID, now, store.TimelineEntry{Kind: store.EntryKind(rec.State), Token: rec.Token,
				State: rec.State, Claimant: rec.Claimant, Error: rec.Error})
		}
	}
	return s.change(ctx, call.RecordID, call.Kind != store.CallHeartbeat, false, call.Decide, func(tx *writeTx, now time.Time) *sql.Row {
		args[4] = now.UnixMicro()
		return tx.QueryRow(tokenCalls[call.Kind], args...)
	}, after)
}

// change runs update, which changes the record under a condition (no row
// when it does not apply), then after, when set, on the changed record;
// otherwise it answers what decide says of the record, read under the same
// write lock. wakes wakes waiting Claims. With steps, update returns
// recordStepCols and the answer carries the record's steps.
func (s *Store) change(ctx context.Context, id store.RecordID, wakes, steps bool, decide func(*store.Record) store.ChangeDecision,
	update func(tx *writeTx, now time.Time) *sql.Row, after func(tx *writeTx, rec *store.Record, now time.Time) error) (*store.Record, error) {
	var (
		out     *store.Record
		refusal error
	)
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		var rec *store.Record
		var count int
		var err error
		if steps {
			rec, count, err = scanRecordSteps(update(tx, now))
		} else {
			rec, err = scanRecord(update(tx, now))
		}
		if err == nil {
			if after != nil {
				if err := after(tx, rec, now); err != nil {
					return err
				}
			}
			if wakes {
				tx.WakeAfterCommit(id)
			}
			out = rec
			return readSteps(tx, rec, count)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		rec, count, err = scanRecordSteps(tx.QueryRow(getSQL, id.Tenant, id.Namespace, id.Key))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			refusal = store.ErrNotFound
			return nil
		case err != nil:
			return err
		}
		switch d := decide(rec); d.Action {
		case store.ChangeRepeat:
			if !steps {
				// As the update would have answered it.
				rec.HoldUnfinished = false
				count = 0
			}
			out = rec
			return readSteps(tx, rec, count)
		case store.ChangeRefuse:
			refusal = d.Err
			return nil
		}
		// Not the key: internal errors are logged, keys never.
		return fmt.Errorf("sqlite: tenant %s, namespace %s: the change applies to the record in state %s, yet changed nothing",
			id.Tenant, id.Namespace, rec.State)
	})
	if err != nil {
		return nil, err
	}
	return out, refusal
}

// resolveSQL moves an UNRESOLVED record on to state ?4 at ?5, keeping its
// token (?8 when not 0) as the one an operator resolved, with result ?6 or
// error ?7.
const resolveSQL = `UPDATE idem_records SET state = ?4, result = ?6, error = CASE WHEN ?4 = 'failed' THEN ?7 END, resolved_token = token, lease_expires_at = NULL,
		completed_at = CASE WHEN ?4 = 'released' THEN NULL ELSE ?5 END,
		expires_at = ?5 + retention_us, updated_at = ?5
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 AND state = 'unresolved' AND (?8 = 0 OR token = ?8)
	RETURNING ` + recordStepCols

// RecordResolve implements store.Store.
func (s *Store) RecordResolve(ctx context.Context, p *store.ResolveParams) (*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	target, err := p.Target()
	if err != nil {
		return nil, err
	}
	return s.change(ctx, p.RecordID, true, true, p.Decide, func(tx *writeTx, now time.Time) *sql.Row {
		return tx.QueryRow(resolveSQL, p.Tenant, p.Namespace, p.Key, string(target.State), now.UnixMicro(), target.Result, target.Error, p.Token)
	}, func(tx *writeTx, rec *store.Record, now time.Time) error {
		tx.HeldAfterCommit(p.Tenant)
		return noted(tx, p.RecordID, now, store.TimelineEntry{Kind: store.EntryResolved, Token: rec.Token, State: rec.State,
			PreviousState: store.StateUnresolved, Error: rec.Error, Actor: p.Actor, Reason: p.Reason})
	})
}
