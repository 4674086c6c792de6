package postgres

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/idemhq/idem/store"
)

// recordHint remembers, lossily, what this process lately saw of records:
// that a record is finished (COMPLETED or FAILED), so that a Claim of it
// is first read in the read slot (replay.go), or that it is there in
// another state, so that a lone Claim of it reads it in the same round
// trip as its insert-if-absent (claimIfAbsent) rather than after
// (claimNew; runClaims in claim.go). It is a direct-mapped table of the
// ids' hashes, each tagged with what was seen: a new id overwrites the one
// in its slot, so the table stays bounded; two ids share a hash only by
// chance. A hint is never trusted for an answer: a wrong one costs a read
// or a round trip, never an answer.
type recordHint struct {
	seed  maphash.Seed
	slots [recordHintSlots]atomic.Uint64
}

// recordHintSlots is how many records recordHint remembers at most.
const recordHintSlots = 1 << 16

// The tags of a slot's value: its low two bits. Either makes it non-zero
// (the empty slot).
const (
	hintPresent  = 2
	hintFinished = 3
)

func newRecordHint() *recordHint { return &recordHint{seed: maphash.MakeSeed()} }

// hash is id's hash; its slot is hash modulo the slots, and what the slot
// holds is the hash with its low two bits replaced by a tag.
func (h *recordHint) hash(id store.RecordID) uint64 { return maphash.Comparable(h.seed, id) }

func (h *recordHint) slot(x uint64) *atomic.Uint64 { return &h.slots[x%recordHintSlots] }

func tagged(x, tag uint64) uint64 { return x&^3 | tag }

// finished reports whether id is remembered as finished.
func (h *recordHint) finished(id store.RecordID) bool {
	x := h.hash(id)
	return h.slot(x).Load() == tagged(x, hintFinished)
}

// present reports whether id is remembered as there in a state other than
// finished.
func (h *recordHint) present(id store.RecordID) bool {
	x := h.hash(id)
	return h.slot(x).Load() == tagged(x, hintPresent)
}

// forget drops id, leaving a slot that another id took over as it is.
func (h *recordHint) forget(id store.RecordID) {
	x := h.hash(id)
	slot := h.slot(x)
	if v := slot.Load(); v == tagged(x, hintFinished) || v == tagged(x, hintPresent) {
		slot.CompareAndSwap(v, 0)
	}
}

// note remembers rec as finished when it is COMPLETED or FAILED, and as
// present otherwise.
func (h *recordHint) note(rec *store.Record) {
	if rec == nil {
		return
	}
	tag := uint64(hintPresent)
	if finished(rec) {
		tag = hintFinished
	}
	x := h.hash(rec.RecordID)
	h.slot(x).Store(tagged(x, tag))
}

// saw notes rec, what a read of id found, and forgets id when it found no
// record.
func (h *recordHint) saw(id store.RecordID, rec *store.Record) {
	if rec == nil {
		h.forget(id)
		return
	}
	h.note(rec)
}
