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
	for try := 0; try < maxStatementTries; try++ {
		row, err := s.tokens[call.Kind].Do(ctx, call.RecordID, call)
		switch {
		case err != nil:
			return nil, err
		case row.rec == nil:
			return nil, store.ErrNotFound
		case row.changed:
			return row.rec, nil
		}
		switch d := call.Decide(row.rec); d.Action {
		case store.ChangeRepeat:
			return row.rec, nil
		case store.ChangeRefuse:
			return nil, d.Err
		}
		// ChangeApplies: another transaction changed the row while the
		// statement waited for its lock. A new statement sees what it did.
	}
	return nil, store.ErrContention
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
