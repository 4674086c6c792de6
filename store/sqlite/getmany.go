package sqlite

import (
	"context"

	"github.com/idemhq/idem/store"
)

// RecordGetMany implements store.Store: the reads one after the other, each
// a lookup of the local file that needs no round trip.
func (s *Store) RecordGetMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, []error) {
	recs, errs := make([]*store.Record, len(ids)), make([]error, len(ids))
	for i, id := range ids {
		recs[i], errs[i] = s.RecordGet(ctx, id)
	}
	return recs, errs
}
