// Package readfirst is a decorator of any store.Store that reads a record
// before it claims it, when this process lately saw that record finished
// (COMPLETED or FAILED). A redelivered job's Claim is then answered by a
// plain read, which takes no lock, writes nothing and waits for no other
// call's commit; every other Claim goes to the inner store as it came.
//
// Answering from a read is as true as the inner store's own answer: a
// finished record stays as it is until it is deleted or purged, and a read
// that finds it so answers at the moment of the read. A record the read does
// not find finished (deleted, purged, or its key claimed anew) goes to the
// inner store's Claim, and is forgotten.
package readfirst

import (
	"context"
	"errors"
	"hash/maphash"
	"sync/atomic"

	"github.com/idemhq/idem/store"
)

// DefaultSlots is how many records a Store remembers as finished unless
// told otherwise.
const DefaultSlots = 1 << 16

// Store is a store.Store whose Claims of records lately seen finished are
// read first. Put it outside any coalescer, so that those reads never queue
// behind a batch of writes.
type Store struct {
	store.Store
	seed  maphash.Seed
	slots []atomic.Uint64 // a hash of each record lately seen finished; 0 is empty
}

var _ store.Store = (*Store)(nil)

// New returns inner with Claims of records lately seen finished read first.
// slots bounds how many it remembers (DefaultSlots when 0 or less); a record
// it forgot is claimed as any other.
func New(inner store.Store, slots int) *Store {
	if slots <= 0 {
		slots = DefaultSlots
	}
	return &Store{Store: inner, seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, slots)}
}

// RecordClaim implements store.Store.
func (s *Store) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if s.finished(p.RecordID) && p.CheckText() == nil {
		rec, err := s.Store.RecordGet(ctx, p.RecordID)
		if res, answered, err := s.answer(p, rec, err); answered {
			return res, err
		}
	}
	res, err := s.Store.RecordClaim(ctx, p)
	s.noteClaim(p.RecordID, res, err)
	return res, err
}

// RecordClaimMany implements store.Store: the calls of records lately seen
// finished are read together first, and the rest, with those the read did
// not answer, go to the inner store together.
func (s *Store) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	res, errs := make([]*store.ClaimResult, len(ps)), make([]error, len(ps))
	var readAt []int
	for i, p := range ps {
		if s.finished(p.RecordID) && p.CheckText() == nil {
			readAt = append(readAt, i)
		}
	}
	answered := make([]bool, len(ps))
	if len(readAt) > 0 {
		ids := make([]store.RecordID, len(readAt))
		for j, i := range readAt {
			ids[j] = ps[i].RecordID
		}
		recs, readErrs := s.Store.RecordGetMany(ctx, ids)
		for j, i := range readAt {
			res[i], answered[i], errs[i] = s.answer(ps[i], recs[j], readErrs[j])
		}
	}
	var rest []*store.ClaimParams
	var restAt []int
	for i, p := range ps {
		if !answered[i] {
			rest, restAt = append(rest, p), append(restAt, i)
		}
	}
	if len(rest) == 0 {
		return res, errs
	}
	restRes, restErrs := s.Store.RecordClaimMany(ctx, rest)
	for j, i := range restAt {
		res[i], errs[i] = restRes[j], restErrs[j]
		s.noteClaim(ps[i].RecordID, res[i], errs[i])
	}
	return res, errs
}

// answer is the Claim p's answer from rec, the record as a read found it,
// when that read settles it: a record still finished is replayed, as
// store.DecideClaim says for any store. Anything else leaves p to the inner
// store's Claim (answered false), and so does a refused fingerprint, which
// the inner store keeps on the record's timeline.
func (s *Store) answer(p *store.ClaimParams, rec *store.Record, err error) (*store.ClaimResult, bool, error) {
	if err != nil || (rec.State != store.StateCompleted && rec.State != store.StateFailed) {
		s.forget(p.RecordID)
		return nil, false, nil
	}
	// A finished record's answer does not depend on the clock.
	d := store.DecideClaim(rec, p, rec.UpdatedAt)
	if d.Action != store.ClaimAnswer || errors.Is(d.Err, store.ErrFingerprintMismatch) {
		return nil, false, nil
	}
	return d.Answer, true, d.Err
}

// RecordComplete implements store.Store.
func (s *Store) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	rec, err := s.Store.RecordComplete(ctx, p)
	s.noteRecord(rec, err)
	return rec, err
}

// RecordCompleteMany implements store.Store.
func (s *Store) RecordCompleteMany(ctx context.Context, ps []*store.CompleteParams) ([]*store.Record, []error) {
	recs, errs := s.Store.RecordCompleteMany(ctx, ps)
	for i := range recs {
		s.noteRecord(recs[i], errs[i])
	}
	return recs, errs
}

// RecordFail implements store.Store.
func (s *Store) RecordFail(ctx context.Context, p *store.FailParams) (*store.Record, error) {
	rec, err := s.Store.RecordFail(ctx, p)
	s.noteRecord(rec, err)
	return rec, err
}

// RecordFailMany implements store.Store.
func (s *Store) RecordFailMany(ctx context.Context, ps []*store.FailParams) ([]*store.Record, []error) {
	recs, errs := s.Store.RecordFailMany(ctx, ps)
	for i := range recs {
		s.noteRecord(recs[i], errs[i])
	}
	return recs, errs
}

// noteClaim remembers the record of a Claim answered with it finished.
func (s *Store) noteClaim(id store.RecordID, res *store.ClaimResult, err error) {
	if err == nil && res != nil && (res.Outcome == store.OutcomeCompleted || res.Outcome == store.OutcomeFailed) {
		s.remember(id)
	}
}

// noteRecord remembers rec when a call left it finished.
func (s *Store) noteRecord(rec *store.Record, err error) {
	if err == nil && rec != nil && (rec.State == store.StateCompleted || rec.State == store.StateFailed) {
		s.remember(rec.RecordID)
	}
}

// hash is id's hash, never 0 (an empty slot).
func (s *Store) hash(id store.RecordID) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(id.Tenant)
	h.WriteByte(0)
	h.WriteString(id.Namespace)
	h.WriteByte(0)
	h.WriteString(id.Key)
	return h.Sum64() | 1
}

func (s *Store) slot(h uint64) *atomic.Uint64 { return &s.slots[h%uint64(len(s.slots))] }

// remember notes id as finished, in place of whatever its slot held.
func (s *Store) remember(id store.RecordID) {
	h := s.hash(id)
	s.slot(h).Store(h)
}

// forget clears id's slot if it still holds id.
func (s *Store) forget(id store.RecordID) {
	h := s.hash(id)
	s.slot(h).CompareAndSwap(h, 0)
}

// finished reports whether id was lately seen finished. Two records whose
// hashes collide fully would share a slot: the worse that does is a read
// that answers nothing.
func (s *Store) finished(id store.RecordID) bool {
	h := s.hash(id)
	return s.slot(h).Load() == h
}
