package store

import (
	"context"
	"sync"
	"sync/atomic"
)

// Watcher is the part of a Store that can wake a Claim waiting on a record (the Claim's
// wait) when the record changes, in this process or, where the database is
// shared, in any other. The waiting Claim itself decides what a change means
// by asking again (RecordClaim): a wake only says "look again", so a wake
// too many costs a read and never a wrong answer.
//
// A waiter's order of work is what makes it miss nothing:
//
//  1. RecordWatch, so that every wake from then on reaches it;
//  2. RecordMarkWaited with the token of the lease it waits on;
//  3. RecordClaim again, which sees any change made before the mark;
//  4. wait for the Watch, the lease's end, or the wait's end, and go back to
//     3 (or 2, when the record now has another token).
type Watcher interface {
	// RecordWatch starts watching id in this process. The Watch's C receives
	// when the record may have changed, or when a change may have gone
	// unannounced (a lost connection to the database). Close it when done.
	// It reads and writes nothing.
	RecordWatch(id RecordID) *Watch
	// RecordMarkWaited asks that the call that ends the lease held with
	// token (a Complete, a Fail, the sweeper's expiry) announce it. It
	// changes nothing else, and nothing when the record no longer holds that
	// token. A store whose writes are all in this process announces every
	// change anyway and does nothing here.
	RecordMarkWaited(ctx context.Context, id RecordID, token int64) error
}

// Watch is one waiter's interest in one record, from Watches.Watch.
type Watch struct {
	// C receives when the record may have changed. It holds one wake at
	// most: wakes that come while one is pending are one.
	C <-chan struct{}

	c   chan struct{}
	id  RecordID
	hub *Watches
}

// Close stops the watch. Closing twice is not an error.
func (w *Watch) Close() {
	if w == nil || w.hub == nil {
		return
	}
	w.hub.remove(w)
}

func (w *Watch) wake() {
	select {
	case w.c <- struct{}{}:
	default: // a wake is pending already
	}
}

// Watches fans wakes out to the watches of one process: the in-process half
// of a Watcher. Its zero value is ready to use and safe for concurrent use.
// Wake and WakeAll cost one atomic load when nobody watches, so that the
// calls that end a lease pay nothing for waiters that do not exist.
type Watches struct {
	n  atomic.Int64 // watches open
	mu sync.Mutex
	by map[RecordID]map[*Watch]struct{}
	// OnFirst, when set before first use, runs (under the lock) when a
	// watch opens while none is: a store starts what it needs to hear
	// changes (a Postgres listener) there.
	OnFirst func()
	// OnLast, when set before first use, runs (under the lock) when the
	// last watch closes.
	OnLast func()
}

// Watch starts watching id.
func (h *Watches) Watch(id RecordID) *Watch {
	c := make(chan struct{}, 1)
	w := &Watch{C: c, c: c, id: id, hub: h}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[RecordID]map[*Watch]struct{}{}
	}
	set := h.by[id]
	if set == nil {
		set = map[*Watch]struct{}{}
		h.by[id] = set
	}
	set[w] = struct{}{}
	if h.n.Add(1) == 1 && h.OnFirst != nil {
		h.OnFirst()
	}
	return w
}

func (h *Watches) remove(w *Watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.by[w.id]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(h.by, w.id)
	}
	if h.n.Add(-1) == 0 && h.OnLast != nil {
		h.OnLast()
	}
}

// IDs returns the records watched now, for a store that looks for their
// changes itself rather than hearing of them.
func (h *Watches) IDs() []RecordID {
	if !h.Active() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]RecordID, 0, len(h.by))
	for id := range h.by {
		ids = append(ids, id)
	}
	return ids
}

// Active reports whether any watch is open.
func (h *Watches) Active() bool { return h.n.Load() > 0 }

// Wake wakes the watches of id.
func (h *Watches) Wake(id RecordID) {
	if !h.Active() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.by[id] {
		w.wake()
	}
}

// WakeAll wakes every watch: changes may have gone unannounced.
func (h *Watches) WakeAll() {
	if !h.Active() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.by {
		for w := range set {
			w.wake()
		}
	}
}
