package store

import (
	"context"
	"sync"
)

// TokenCallsMany runs many TokenCalls of one kind at once (a batch
// request): each gets what TokenCalls would answer it, in the order of
// calls. A store embeds it, set to its own runner, beside TokenCalls, and
// so implements RecordCompleteMany, RecordFailMany and RecordHeartbeatMany
// the same way as every other store.
type TokenCallsMany func(ctx context.Context, calls []*TokenCall) ([]*Record, []error)

// Concurrently is a TokenCallsMany that runs each call through run, all at
// once: for a store that batches concurrent calls by itself.
func Concurrently(run TokenCalls) TokenCallsMany {
	return func(ctx context.Context, calls []*TokenCall) ([]*Record, []error) {
		recs, errs := make([]*Record, len(calls)), make([]error, len(calls))
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() { recs[i], errs[i] = run(ctx, c) })
		}
		wg.Wait()
		return recs, errs
	}
}

// RecordCompleteMany implements Store.
func (run TokenCallsMany) RecordCompleteMany(ctx context.Context, ps []*CompleteParams) ([]*Record, []error) {
	return runMany(ctx, run, ps, (*CompleteParams).CheckText, (*CompleteParams).Call)
}

// RecordFailMany implements Store.
func (run TokenCallsMany) RecordFailMany(ctx context.Context, ps []*FailParams) ([]*Record, []error) {
	return runMany(ctx, run, ps, (*FailParams).CheckText, (*FailParams).Call)
}

// RecordHeartbeatMany implements Store.
func (run TokenCallsMany) RecordHeartbeatMany(ctx context.Context, ps []*HeartbeatParams) ([]*Record, []error) {
	return runMany(ctx, run, ps, (*HeartbeatParams).CheckText, (*HeartbeatParams).Call)
}

// runMany checks the text of each of ps, and runs the TokenCalls of those
// that pass together.
func runMany[P any](ctx context.Context, run TokenCallsMany, ps []P, check func(P) error, call func(P) *TokenCall) ([]*Record, []error) {
	recs, errs := make([]*Record, len(ps)), make([]error, len(ps))
	calls := make([]*TokenCall, 0, len(ps))
	at := make([]int, 0, len(ps)) // the index in ps of each call run
	for i, p := range ps {
		if errs[i] = check(p); errs[i] == nil {
			calls, at = append(calls, call(p)), append(at, i)
		}
	}
	if len(calls) == 0 {
		return recs, errs
	}
	r, e := run(ctx, calls)
	for j, i := range at {
		recs[i], errs[i] = r[j], e[j]
	}
	return recs, errs
}
