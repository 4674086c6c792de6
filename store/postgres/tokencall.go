package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
)

// A Complete, Fail or Heartbeat, from store.TokenCalls to its SQL:
// runTokenCall queues the call in its kind's coalescer (s.tokens), which
// sends it with the calls of that kind queued beside it through runTokens
// to the driver (tokenCallOne or tokenCallMany, driver_tokencall.go). A row
// the call did not change is decided by store.TokenCall.Decide here.

// runTokenCall is the store.TokenCalls the Store embeds. It runs the call's
// statement until the statement settles it, at most maxStatementTries
// times: a one-row statement's second branch reads its snapshot, which may
// show the row as it was before a concurrent change the update waited for.
func (s *Store) runTokenCall(ctx context.Context, call *store.TokenCall) (*store.Record, error) {
	rec, err := s.tokenTries(ctx, call, 0)
	if err == nil && call.Kind != store.CallHeartbeat {
		s.hints.note(rec)
	}
	return rec, err
}

// runTokenCallsMany is the store.TokenCallsMany the Store embeds: the calls,
// all of one kind, go in their kind's coalescer together
// (coalesce.DoMany), so they fill as few statements as its MaxRows allows;
// a call its statement did not settle runs again alone, with the tries
// runTokenCall has left.
func (s *Store) runTokenCallsMany(ctx context.Context, calls []*store.TokenCall) ([]*store.Record, []error) {
	recs, errs := make([]*store.Record, len(calls)), make([]error, len(calls))
	if len(calls) == 0 {
		return recs, errs
	}
	ids := make([]store.RecordID, len(calls))
	for i, c := range calls {
		if c.Kind != calls[0].Kind {
			panic("postgres: runTokenCallsMany with calls of several kinds")
		}
		ids[i] = c.RecordID
	}
	rows, rowErrs := s.tokens[calls[0].Kind].DoMany(ctx, ids, calls)
	for i, c := range calls {
		if rowErrs[i] != nil {
			errs[i] = rowErrs[i]
			continue
		}
		var settled bool
		if recs[i], settled, errs[i] = settleTokenCall(c, rows[i]); !settled {
			recs[i], errs[i] = s.tokenTries(ctx, c, 1)
		}
		if errs[i] == nil && c.Kind != store.CallHeartbeat {
			s.hints.note(recs[i])
		}
	}
	return recs, errs
}

// tokenTries runs the call's statement from try on until the statement
// settles it, at most maxStatementTries times in all.
func (s *Store) tokenTries(ctx context.Context, call *store.TokenCall, try int) (*store.Record, error) {
	for ; try < maxStatementTries; try++ {
		row, err := s.tokens[call.Kind].Do(ctx, call.RecordID, call)
		if err != nil {
			return nil, err
		}
		if rec, settled, err := settleTokenCall(call, row); settled {
			return rec, err
		}
	}
	return nil, store.ErrContention
}

// settleTokenCall is the call's answer from the row its statement
// returned, or settled false when another transaction changed the row
// while the statement waited for its lock (ChangeApplies): a new statement
// sees what it did.
func settleTokenCall(call *store.TokenCall, row tokenRow) (rec *store.Record, settled bool, err error) {
	switch {
	case row.rec == nil:
		return nil, true, store.ErrNotFound
	case row.changed:
		return row.rec, true, nil
	}
	switch d := call.Decide(row.rec); d.Action {
	case store.ChangeRepeat:
		return row.rec, true, nil
	case store.ChangeRefuse:
		return nil, true, d.Err
	}
	return nil, false, nil
}

type tokenCall = coalesce.Call[*store.TokenCall, tokenRow]

// runTokens sends one batch of token calls of kind to the driver.
func (s *Store) runTokens(kind store.TokenCallKind) coalesce.Run[*store.TokenCall, tokenRow] {
	return func(ctx context.Context, batch []*tokenCall) error {
		d := driver{q: s.pool}
		if len(batch) == 1 && !s.manyOnly {
			row, err := d.tokenCallOne(ctx, batch[0].Params)
			batch[0].Res = row
			return err
		}
		calls := make([]*store.TokenCall, len(batch))
		for i, c := range batch {
			calls[i] = c.Params
		}
		rows, err := d.tokenCallMany(ctx, kind, calls)
		if err != nil {
			return err
		}
		for i, c := range batch {
			c.Res = rows[i]
		}
		return nil
	}
}
