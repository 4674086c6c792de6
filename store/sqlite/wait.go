package sqlite

import (
	"context"

	"github.com/idemhq/idem/store"
)

// Waking waiting Claims (store.Watcher). Every write to the file goes through
// this process (idemd keeps a second server off it), so the calls that end a
// lease or the record (Complete, Fail, the sweeper's expiry, a held lease
// made UNRESOLVED, an operator's resolve, a delete) ask the writer to wake
// the Claims waiting on it (writeTx.WakeAfterCommit), which it does once
// their batch has committed and before it answers them, whether or not
// their caller still waits. When nobody waits that costs one atomic load.

// RecordWatch implements store.Watcher.
func (s *Store) RecordWatch(id store.RecordID) *store.Watch {
	return s.watches.Watch(id)
}

// RecordMarkWaited implements store.Watcher. Nothing to mark: every change
// is announced in the process that makes it.
func (s *Store) RecordMarkWaited(context.Context, store.RecordID, int64) error {
	return nil
}
