package postgres

import (
	"context"
	"errors"

	"github.com/idemhq/idem/store"
)

// maxStatementTries bounds how often a call runs its statements again when
// a concurrent transaction changed the row under them.
const maxStatementTries = 5

// RecordClaim implements store.Store: claimSQL creates the record or
// returns it, store.DecideClaim decides on it, and a takeover or a lapsed
// hold is written only if the record is still at the version decided on.
// A concurrent insert the statement missed, or a newer version, makes the
// Claim run again.
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
				return settled(ctx, d, p, decided)
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

// settled is the answer of the Claim p that decided settles; a refused
// fingerprint is kept on the record's timeline first, and a Claim whose
// entry could not be written fails as the statement did.
func settled(ctx context.Context, d driver, p *store.ClaimParams, decided claimDecided) (*store.ClaimResult, error) {
	if errors.Is(decided.err, store.ErrFingerprintMismatch) {
		if err := d.noteMismatch(ctx, p); err != nil {
			return nil, err
		}
	}
	return decided.res, decided.err
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
		return claimDecided{write: &claimWrite{p: p, hold: true, version: row.version, prev: row.rec}}
	}
	return claimDecided{write: &claimWrite{p: p, version: row.version, prev: row.rec}}
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

// RecordClaimMany implements store.Store: one claimManySQL for the calls of
// distinct keys, then their takeovers and lapsed holds in one round trip
// (writeMany); a call this did not settle, or of a key already among them,
// then runs alone.
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

// claimBatch runs the calls of ps at the indexes batch (distinct keys in
// primary-key order), sets the answers it settles in res and errs, and
// returns the indexes of the others.
func claimBatch(ctx context.Context, d driver, ps []*store.ClaimParams, batch []int, res []*store.ClaimResult, errs []error) (again []int) {
	rows, err := d.claimMany(ctx, column(batch, func(i int) *store.ClaimParams { return ps[i] }))
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
			res[i], errs[i] = settled(ctx, d, ps[i], decided)
		default:
			again = append(again, i)
		}
	}
	if len(writes) == 0 {
		return again
	}
	did, err := d.writeMany(ctx, writes)
	for k, i := range writers {
		if err != nil {
			errs[i] = err
		} else if res[i] = wroteClaim(writes[k], did[k]); res[i] == nil {
			again = append(again, i)
		}
	}
	return again
}

// runTokenCall is the store.TokenCalls the Store embeds.
func (s *Store) runTokenCall(ctx context.Context, call *store.TokenCall) (*store.Record, error) {
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) {
		return tokenTries(ctx, d, call, maxStatementTries)
	})
}

// tokenTries runs the call's statement until it settles the call, at most
// tries times.
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

// runTokenCallsMany is the store.TokenCallsMany the Store embeds: one
// many-row statement for the calls of distinct keys; a call it did not
// settle, or of a key already among them, then runs alone.
func (s *Store) runTokenCallsMany(ctx context.Context, calls []*store.TokenCall) ([]*store.Record, []error) {
	errs := make([]error, len(calls))
	batch, rest := distinctByID(calls, errs, func(c *store.TokenCall) store.RecordID { return c.RecordID })
	recs := detachedMany(ctx, s, append(batch, rest...), errs, func(ctx context.Context, d driver, recs []*store.Record, errs []error) {
		rows, err := d.tokenCallMany(ctx, calls[batch[0]].Kind, column(batch, func(i int) *store.TokenCall { return calls[i] }))
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

// settleTokenCall is the call's answer from its statement's row, or
// settled false when the row's second branch read a snapshot from before a
// change the update waited for (ChangeApplies).
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
