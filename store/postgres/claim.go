package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
)

// A Claim, from RecordClaim to its SQL: a Claim of a record lately seen
// finished is first read in the read slot (replay.go). Otherwise
// RecordClaim queues the call in the Claim coalescer (s.claims), which
// sends it with the Claims queued beside it through runClaims to the driver
// (alone: claimNew or claimIfAbsent, then claimOne if the record it read
// may be taken over; with others: claimMany; driver_claim.go). The row that
// comes back for the call is decided by store.DecideClaim here, and the
// decision done: answered, acquired (the statement did it), or made
// UNRESOLVED (holdLapsed, hold.go). What the call found goes in the hints
// (hint.go), which choose the way of the key's next Claim.

// maxStatementTries bounds how often a call re-runs its statement when a
// concurrent transaction changed the row while the statement ran.
const maxStatementTries = 5

// RecordClaim implements store.Store.
//
// It runs the Claim's statement until the statement settles it, at most
// maxStatementTries times. Under READ COMMITTED a statement's snapshot may
// miss a row that a concurrent transaction inserted or changed while the
// statement waited for its lock, and a new statement takes a new snapshot.
func (s *Store) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	if s.hints.finished(p.RecordID) {
		if res, answered, err := s.claimReplay(ctx, p); answered {
			return res, err
		}
	}
	return s.claimTries(ctx, p, 0)
}

// RecordClaimMany implements store.Store: the calls go in the Claim
// coalescer together (coalesce.DoMany), so they fill as few statements as
// its MaxRows allows; a call its statement did not settle runs again alone,
// with the tries RecordClaim has left. The calls of records lately seen
// finished are read first in the read slot, together, as RecordClaim's
// are, and only those the read does not answer join the others.
func (s *Store) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	res, errs := make([]*store.ClaimResult, len(ps)), make([]error, len(ps))
	var hinted, rest []int // indexes in ps
	for i, p := range ps {
		switch errs[i] = p.CheckText(); {
		case errs[i] != nil:
		case s.hints.finished(p.RecordID):
			hinted = append(hinted, i)
		default:
			rest = append(rest, i)
		}
	}
	if len(hinted) > 0 {
		ids, sent := claimsAt(ps, hinted)
		rows, rowErrs := s.replays.DoMany(ctx, ids, sent)
		for j, i := range hinted {
			if rowErrs[j] != nil {
				errs[i] = rowErrs[j]
				continue
			}
			if d, ok := replayFrom(ps[i], rows[j]); ok {
				res[i], errs[i] = d.Answer, d.Err
				continue
			}
			s.hints.saw(ps[i].RecordID, rows[j].rec)
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return res, errs
	}
	ids, sent := claimsAt(ps, rest)
	rows, rowErrs := s.claims.DoMany(ctx, ids, sent)
	for j, i := range rest {
		if rowErrs[j] != nil {
			errs[i] = rowErrs[j]
			continue
		}
		var settled bool
		if res[i], settled, errs[i] = s.settleClaim(ctx, sent[j], rows[j]); !settled {
			res[i], errs[i] = s.claimTries(ctx, sent[j], 1)
		}
	}
	return res, errs
}

// claimsAt is the ids and the calls of ps at the indexes at.
func claimsAt(ps []*store.ClaimParams, at []int) ([]store.RecordID, []*store.ClaimParams) {
	ids, sent := make([]store.RecordID, len(at)), make([]*store.ClaimParams, len(at))
	for j, i := range at {
		ids[j], sent[j] = ps[i].RecordID, ps[i]
	}
	return ids, sent
}

// claimTries runs the Claim's statement from try on until the statement
// settles it, at most maxStatementTries times in all.
func (s *Store) claimTries(ctx context.Context, p *store.ClaimParams, try int) (*store.ClaimResult, error) {
	for ; try < maxStatementTries; try++ {
		row, err := s.claims.Do(ctx, p.RecordID, p)
		if err != nil {
			return nil, err
		}
		if res, settled, err := s.settleClaim(ctx, p, row); settled {
			return res, err
		}
	}
	return nil, store.ErrContention
}

// settleClaim is the Claim p's answer from the row its statement returned,
// or settled false when the statement did not settle it and a new one must
// run.
func (s *Store) settleClaim(ctx context.Context, p *store.ClaimParams, row claimRow) (res *store.ClaimResult, settled bool, err error) {
	switch {
	case row.rec == nil:
		return nil, false, nil // neither written nor seen: a concurrent insert
	case row.acquired:
		s.hints.note(row.rec)
		return store.Acquired(row.rec, row.now), true, nil
	}
	switch d := store.DecideClaim(row.rec, p, row.now); d.Action {
	case store.ClaimAnswer:
		s.hints.note(row.rec)
		return d.Answer, true, d.Err
	case store.ClaimMakeUnresolved:
		held, err := detached(ctx, s, func(ctx context.Context, d driver) (heldRow, error) { return d.holdLapsed(ctx, p.RecordID) })
		if err != nil {
			return nil, true, err
		}
		if held.ok {
			return store.Unresolved(held.rec, row.now), true, nil
		}
	}
	// ClaimAcquire on a record the statement saw but did not write, or a
	// hold that found the row changed: the row changed under the statement.
	// A new one sees what changed it.
	return nil, false, nil
}

type claimCall = coalesce.Call[*store.ClaimParams, claimRow]

// runClaims sends one batch of Claims to the driver. A lone Claim of a key
// this process has not lately seen with a record goes as claimNew, the
// insert alone, and is read (readClaim) only when the key turns out to
// have a record: a new key, the common case, costs Postgres one statement
// with the least it can return. A key lately seen with a record in some
// state other than finished (a Claim answered IN_PROGRESS, a lease held or
// released) goes as claimIfAbsent, which reads it in the same round trip.
// Either way a record that may be taken over is then taken over by
// claimOne, which decides that again under the row's lock.
func (s *Store) runClaims(ctx context.Context, batch []*claimCall) error {
	d := driver{q: s.pool}
	if len(batch) == 1 && !s.manyOnly {
		p := batch[0].Params
		var (
			row     claimRow
			created bool
			err     error
		)
		if s.hints.present(p.RecordID) {
			row, err = d.claimIfAbsent(ctx, p)
		} else if row, created, err = d.claimNew(ctx, p); err == nil && !created {
			// ON CONFLICT waited for any transaction inserting the key, so
			// this read's snapshot has its record.
			row, err = d.readClaim(ctx, p.RecordID)
		}
		if err == nil && row.rec != nil && !row.acquired && store.DecideClaim(row.rec, p, row.now).Action == store.ClaimAcquire {
			row, err = d.claimOne(ctx, p)
		}
		batch[0].Res = row
		return err
	}
	calls := make([]*store.ClaimParams, len(batch))
	for i, c := range batch {
		calls[i] = c.Params
	}
	rows, err := d.claimMany(ctx, calls)
	if err != nil {
		return err
	}
	for i, c := range batch {
		c.Res = rows[i]
	}
	return nil
}

// followClaim answers f, a Claim of the key that leader's statement wrote or
// read, from what the statement found, as if f ran right after it, when
// f's decision on that record is an answer (store.ClaimAnswer): a replay,
// IN_PROGRESS on leader's lease, the same claimant's ACQUIRED again, a
// fingerprint mismatch. It leaves f to a statement of its own (false) when
// the statement found no record, or when f would write: take the record
// over, or make a held record whose lease ran out UNRESOLVED. A held lease
// that ran out is made UNRESOLVED by the leader's caller once this
// statement has answered; the follower, in a later statement, reads
// UNRESOLVED when that has committed, and otherwise finds the lease run out
// too and makes it UNRESOLVED itself (one of them wins; RecordClaim makes
// the others look again).
//
// The answer is true at a moment within f's call: f was queued before the
// statement began and is answered after it ended. A record that leader's
// statement wrote is f's from the statement's commit on, which no other
// write can come between while the statement holds the row's lock; a record
// it only read is the statement's snapshot, taken after f was queued, and is
// what leader itself is answered from.
func followClaim(leader, f *claimCall) bool {
	row := leader.Res
	if row.rec == nil || store.DecideClaim(row.rec, f.Params, row.now).Action != store.ClaimAnswer {
		return false
	}
	// A Record of its own (the byte slices it shares with the leader's are
	// never written).
	rec := *row.rec
	f.Res = claimRow{rec: &rec, now: row.now}
	return true
}
