package sqlite

import (
	"context"
	"sync"

	"github.com/idemhq/idem/store"
)

// RecordClaimMany implements store.Store. The calls run at once, each as
// RecordClaim: the writer's group commit (writer.go) takes the ones that
// write in as few transactions as it can, and those that only report are
// answered from reads beside them.
func (s *Store) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	res, errs := make([]*store.ClaimResult, len(ps)), make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { res[i], errs[i] = s.RecordClaim(ctx, p) })
	}
	wg.Wait()
	return res, errs
}
