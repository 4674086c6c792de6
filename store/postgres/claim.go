package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
)

// maxStatementTries bounds how often a call runs its statements again when
// a concurrent transaction changed the row under them.
const maxStatementTries = 5

// RecordClaim implements store.Store. The Claim's statement (claimSQL)
// creates the record, or returns the one there; store.DecideClaim decides
// on it, and a takeover or a lapsed hold is written only if the record is
// still at the version decided on. When the statement neither created nor
// saw a row (a concurrent insert its snapshot missed), or the write found a
// newer version, the Claim runs again, at most maxStatementTries times.
func (s *Store) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.ClaimResult, error) {
		return claimTries(ctx, d, p, maxStatementTries)
	})
}

// claimTries runs the Claim p until it is settled, at most tries times.
func claimTries(ctx context.Context, d driver, p *store.ClaimParams, tries int) (*store.ClaimResult, error) {
	for range tries {
		row, err := d.claim(ctx, p)
		if err != nil {
			return nil, err
		}
		decided := decideClaim(p, row)
		if decided.write == nil {
			if decided.settled {
				return decided.res, decided.err
			}
			continue
		}
		w, err := d.writeMany(ctx, []claimWrite{*decided.write})
		if err != nil {
			return nil, err
		}
		if res := wroteClaim(*decided.write, w[0]); res != nil {
			return res, nil
		}
	}
	return nil, store.ErrContention
}

// claimDecided is what a Claim's row settles: an answer (settled, with res
// or err), a write to try (write), or neither: the Claim runs again.
type claimDecided struct {
	settled bool
	res     *store.ClaimResult
	err     error
	write   *claimWrite
}

// decideClaim decides the Claim p on the row its statement returned.
func decideClaim(p *store.ClaimParams, row claimRow) claimDecided {
	switch {
	case row.rec == nil:
		return claimDecided{}
	case row.created:
		return claimDecided{settled: true, res: store.Acquired(row.rec, row.now)}
	}
	switch d := store.DecideClaim(row.rec, p, row.now); d.Action {
	case store.ClaimAnswer:
		return claimDecided{settled: true, res: d.Answer, err: d.Err}
	case store.ClaimMakeUnresolved:
		return claimDecided{write: &claimWrite{p: p, hold: true, version: row.version}}
	}
	return claimDecided{write: &claimWrite{p: p, version: row.version}}
}

// wroteClaim is the answer of a Claim whose write w did what it did, or
// nil when the record had changed since it was read.
func wroteClaim(w claimWrite, did written) *store.ClaimResult {
	switch {
	case did.rec == nil:
		return nil
	case w.hold:
		return store.Unresolved(did.rec, did.now)
	}
	return store.Acquired(did.rec, did.now)
}

// RecordClaimMany implements store.Store. The calls of distinct keys go
// in one claimManySQL, in primary-key order; the takeovers and lapsed holds
// decided on its rows go together in one round trip (writeMany). A call
// that this did not settle, and a call of a key already among the calls,
// then runs alone, as RecordClaim.
func (s *Store) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p.CheckText()
	}
	batch, rest := distinctByID(ps, errs, func(p *store.ClaimParams) store.RecordID { return p.RecordID })
	res := detachedMany(ctx, s, append(batch, rest...), errs, func(ctx context.Context, d driver, res []*store.ClaimResult, errs []error) {
		for _, i := range claimBatch(ctx, d, ps, batch, res, errs) {
			res[i], errs[i] = claimTries(ctx, d, ps[i], maxStatementTries-1)
		}
		for _, i := range rest {
			res[i], errs[i] = claimTries(ctx, d, ps[i], maxStatementTries)
		}
	})
	return res, errs
}

// claimBatch runs the calls of ps at the indexes batch, sorted by primary
// key with distinct keys, as one claimManySQL and its writes, and sets the
// answers it settles in res and errs. It returns the indexes of the calls
// it did not settle.
func claimBatch(ctx context.Context, d driver, ps []*store.ClaimParams, batch []int, res []*store.ClaimResult, errs []error) (again []int) {
	if len(batch) == 0 {
		return nil
	}
	calls := make([]*store.ClaimParams, len(batch))
	for j, i := range batch {
		calls[j] = ps[i]
	}
	rows, err := d.claimMany(ctx, calls)
	if err != nil {
		for _, i := range batch {
			errs[i] = err
		}
		return nil
	}
	var writes []claimWrite
	var writers []int // the index in ps of each write
	for j, i := range batch {
		decided := decideClaim(ps[i], rows[j])
		switch {
		case decided.write != nil:
			writes, writers = append(writes, *decided.write), append(writers, i)
		case decided.settled:
			res[i], errs[i] = decided.res, decided.err
		default:
			again = append(again, i)
		}
	}
	if len(writes) == 0 {
		return again
	}
	did, err := d.writeMany(ctx, writes)
	for k, i := range writers {
		switch {
		case err != nil:
			errs[i] = err
		default:
			if res[i] = wroteClaim(writes[k], did[k]); res[i] == nil {
				again = append(again, i)
			}
		}
	}
	return again
}
