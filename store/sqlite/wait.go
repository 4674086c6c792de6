package sqlite

import (
	"context"

	"github.com/idemhq/idem/store"
)

var _ store.Watcher = (*Store)(nil)

// Waking waiting Claims (store.Watcher). Every write to the file goes through
// this process (idemd keeps a second server off it), so the calls that end a
// lease (Complete, Fail, the sweeper's expiry, a delete) wake the Claims
// waiting on the record themselves, once their batch has committed. When
// nobody waits that costs them one atomic load.

// RecordWatch implements store.Watcher.
func (s *Store) RecordWatch(id store.RecordID) *store.Watch {
	return s.watches.Watch(id)
}

// RecordMarkWaited implements store.Watcher. Nothing to mark: every change
// is announced in the process that makes it.
func (s *Store) RecordMarkWaited(context.Context, store.RecordID, int64) error {
	return nil
}
