package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/store"
)

// Replays. A Claim of a COMPLETED or FAILED record only reads, but in the
// Claim coalescer it would wait for the statements of the Claims that
// write (inserts, takeovers) and for their commits. So a Claim of a record
// this process has lately seen finished is first read through a coalescer
// of its own, the read slot (s.replays, kind claim_read), whose statements
// write nothing and so wait for no WAL flush. When the record it reads is
// COMPLETED or FAILED and the Claim is answered from it (a replay, or a
// fingerprint mismatch), that is the answer: the read is a snapshot taken
// during the call, and a finished record changes only by going away
// (expiry, purge, delete), so the answer was true at a moment within the
// call. Anything else (no record, another state) drops the hint and the
// Claim goes through the Claim coalescer as any other. RecordClaimMany
// does the same for the calls of its batch. SQLite has its own way to the
// same end: its Claims read a committed snapshot first, without waiting for
// its in-process writer, while such reads have been answering them.
//
// The hint (recordHint, hint.go) is never trusted for an answer: a stale
// one (the record was purged, deleted or expired here or by another
// replica) costs one read.

// finished reports whether rec is COMPLETED or FAILED: the states a Claim
// only replays.
func finished(rec *store.Record) bool {
	return rec.State == store.StateCompleted || rec.State == store.StateFailed
}

// claimReplay answers the Claim p from a read of its record through the
// read slot when the record is finished, and reports false, having noted
// what the read found in the hint, when the Claim must go through the
// Claim coalescer.
// An error of the read is the Claim's: the Claim's own statement would
// meet the same database.
func (s *Store) claimReplay(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, bool, error) {
	row, err := s.replays.Do(ctx, p.RecordID, p)
	if err != nil {
		return nil, true, err
	}
	if d, ok := replayFrom(p, row); ok {
		return d.Answer, true, d.Err
	}
	s.hints.saw(p.RecordID, row.rec)
	return nil, false, nil
}

// replayFrom is store.DecideClaim's answer to p from row, the read of its
// record, and true, when the record is finished and the decision is an
// answer. DecideClaim does not look at the clock for a finished record;
// row.now is the database's all the same.
func replayFrom(p *store.ClaimParams, row claimRow) (store.ClaimDecision, bool) {
	if row.rec == nil || !finished(row.rec) {
		return store.ClaimDecision{}, false
	}
	d := store.DecideClaim(row.rec, p, row.now)
	return d, d.Action == store.ClaimAnswer
}

// runReplays sends one batch of the read slot: a lone Claim as claimSeenSQL,
// the one-row read, and more as getManySQL.
func (s *Store) runReplays(ctx context.Context, batch []*claimCall) error {
	d := driver{q: s.pool}
	if len(batch) == 1 && !s.manyOnly {
		row, err := d.readClaim(ctx, batch[0].ID)
		batch[0].Res = row
		return err
	}
	ids := make([]store.RecordID, len(batch))
	for i, c := range batch {
		ids[i] = c.ID
	}
	recs, now, err := d.getMany(ctx, ids)
	if err != nil {
		return err
	}
	for i, c := range batch {
		c.Res = claimRow{rec: recs[i], now: now}
	}
	return nil
}

// followReplay answers f, a second Claim of leader's key in the read slot,
// from the same read: the statement's snapshot was taken after f was
// queued. A copy of the record, so that each call has its own.
func followReplay(leader, f *claimCall) bool {
	row := leader.Res
	if row.rec != nil {
		rec := *row.rec
		row.rec = &rec
	}
	f.Res = row
	return true
}

// readClaim reads id's record as claimSeenSQL: the record (nil when there
// is none) and the database's clock.
func (d driver) readClaim(ctx context.Context, id store.RecordID) (claimRow, error) {
	var row claimRow
	var dbNow pgtype.Timestamptz
	rec, err := scanRecord(d.q.QueryRow(ctx, claimSeenSQL, id.Tenant, id.Namespace, id.Key), &row.acquired, &dbNow)
	if err != nil {
		if err = interpretError(err); err == store.ErrNotFound {
			return claimRow{}, nil
		}
		return claimRow{}, err
	}
	row.rec, row.now = rec, dbNow.Time
	return row, nil
}
