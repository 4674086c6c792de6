package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
)

// runTokenCall is the store.TokenCalls the Store embeds: a Complete, Fail
// or Heartbeat as its kind's one-row statement, whose row, when the change
// did not apply, store.TokenCall.Decide answers.
func (s *Store) runTokenCall(ctx context.Context, call *store.TokenCall) (*store.Record, error) {
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) {
		return tokenTries(ctx, d, call, maxStatementTries)
	})
}

// tokenTries runs the call's statement until the statement settles it, at
// most tries times: the statement's second branch reads its snapshot, which
// may show the row as it was before a concurrent change the update waited
// for.
func tokenTries(ctx context.Context, d driver, call *store.TokenCall, tries int) (*store.Record, error) {
	for range tries {
		row, err := d.tokenCallOne(ctx, call)
		if err != nil {
			return nil, err
		}
		if rec, settled, err := settleTokenCall(call, row); settled {
			return rec, err
		}
	}
	return nil, store.ErrContention
}

// runTokenCallsMany is the store.TokenCallsMany the Store embeds: the
// calls of distinct keys, all of one kind, go in the kind's many-row
// statement; a call it did not settle, and a call of a key already among
// the calls, then runs alone.
func (s *Store) runTokenCallsMany(ctx context.Context, calls []*store.TokenCall) ([]*store.Record, []error) {
	errs := make([]error, len(calls))
	batch, rest := distinctByID(calls, errs, func(c *store.TokenCall) store.RecordID { return c.RecordID })
	recs := detachedMany(ctx, s, append(batch, rest...), errs, func(ctx context.Context, d driver, recs []*store.Record, errs []error) {
		sorted := make([]*store.TokenCall, len(batch))
		for j, i := range batch {
			sorted[j] = calls[i]
		}
		rows, err := d.tokenCallMany(ctx, calls[batch[0]].Kind, sorted)
		for j, i := range batch {
			if err != nil {
				errs[i] = err
				continue
			}
			var settled bool
			if recs[i], settled, errs[i] = settleTokenCall(calls[i], rows[j]); !settled {
				recs[i], errs[i] = tokenTries(ctx, d, calls[i], maxStatementTries-1)
			}
		}
		for _, i := range rest {
			recs[i], errs[i] = tokenTries(ctx, d, calls[i], maxStatementTries)
		}
	})
	return recs, errs
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
