package services

import (
	"context"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

// The batch calls. Each item runs what its unary call runs, the very
// functions on either side of the store (claimParams and claimAnswer, …);
// the batch adds only its size, the rate limit counted per item, and the
// order of the items: items of distinct keys go to the store together
// (store.RecordClaimMany, …), items of one key one after the other, in the
// order of the request, as calls a client made in that order.

// IsBatch reports whether fullMethod (/idem.v1.IdempotencyService/BatchClaim)
// is a batch call. The rate limit's interceptor leaves them to the service,
// which takes a token per item.
func IsBatch(fullMethod string) bool { return batchMethods[fullMethod] }

var batchMethods = map[string]bool{
	idemv1.IdempotencyService_BatchClaim_FullMethodName:     true,
	idemv1.IdempotencyService_BatchComplete_FullMethodName:  true,
	idemv1.IdempotencyService_BatchFail_FullMethodName:      true,
	idemv1.IdempotencyService_BatchHeartbeat_FullMethodName: true,
	idemv1.IdempotencyService_BatchLookup_FullMethodName:    true,
}

// batchItem is what every item of a batch has: the record it addresses.
type batchItem interface {
	proto.Message
	GetNamespace() string
	GetKey() string
}

// checkBatch refuses a batch request as a whole: no items, too many, or too
// many bytes.
func (s *Service) checkBatch(req proto.Message, items int) error {
	switch {
	case items == 0:
		return invalid("requests", idemv1.ErrorReason_ERROR_REASON_INVALID_BATCH_SIZE,
			"requests is empty; a batch holds 1 to %d requests", s.cfg.BatchMaxItems)
	case items > s.cfg.BatchMaxItems:
		return invalid("requests", idemv1.ErrorReason_ERROR_REASON_INVALID_BATCH_SIZE,
			"requests holds %d requests; the limit is %d (--batch-max-items): split the batch", items, s.cfg.BatchMaxItems)
	}
	if n := proto.Size(req); n > s.cfg.BatchMaxBytes {
		return TooLarge("the batch is %d bytes; the limit is %d (--batch-max-bytes): split the batch", n, s.cfg.BatchMaxBytes)
	}
	return nil
}

// takeTokens takes a token of the caller's rate limit for each of n items,
// in request order, and returns RATE_LIMITED for those the bucket had none
// for (nil for the others).
func (s *Service) takeTokens(ctx context.Context, n int) []error {
	errs := make([]error, n)
	t := s.cfg.Tenants.callerTenant(ctx)
	if t == nil || t.limiter == nil {
		return errs
	}
	for i := range errs {
		if !t.limiter.Allow() {
			_, errs[i] = rateLimited(t)
		}
	}
	return errs
}

// recordKey is the record an item addresses, within the caller's tenant.
type recordKey struct{ namespace, key string }

// waves orders the items that errs does not refuse in waves of distinct
// records: wave k holds the k-th item of each record, in request order. A
// wave runs once the one before it has answered, so two items of one
// record run one after the other, as calls made in that order.
func waves[T batchItem](items []T, errs []error) [][]int {
	var out [][]int
	seen := make(map[recordKey]int, len(items)) // items of each record so far
	for i, item := range items {
		if errs[i] != nil {
			continue
		}
		k := recordKey{item.GetNamespace(), item.GetKey()}
		n := seen[k]
		seen[k] = n + 1
		if n == len(out) {
			out = append(out, nil)
		}
		out[n] = append(out[n], i)
	}
	return out
}

// runBatch runs every item of a batch through its unary call, cut at the
// store: before is the call up to the store (validation, the namespace
// allow-list, the policy), giving what the store is asked or the item's
// error; many is the store's method for many such calls at once; after is
// the call from the store's answer on. It returns each item's response, or
// its error. Each item takes a token of the tenant's rate limit first
// (takeTokens); an item the limit refuses does not run. The items run in
// waves: a wave's items that pass before go to the store in one call of
// many, each wave once the one before has answered.
func runBatch[T batchItem, P, R, Resp any](ctx context.Context, s *Service, items []T, before func(context.Context, int, T) (P, error),
	many func(context.Context, []P) ([]R, []error), after func(context.Context, T, R, error) (Resp, error),
) ([]Resp, []error) {
	resps := make([]Resp, len(items))
	errs := s.takeTokens(ctx, len(items))
	for _, wave := range waves(items, errs) {
		ps := make([]P, 0, len(wave))
		at := make([]int, 0, len(wave)) // the item of each of ps
		for _, i := range wave {
			p, err := before(ctx, i, items[i])
			if errs[i] = err; err == nil {
				ps, at = append(ps, p), append(at, i)
			}
		}
		if len(ps) == 0 {
			continue
		}
		res, storeErrs := many(ctx, ps)
		for j, i := range at {
			resps[i], errs[i] = after(ctx, items[i], res[j], storeErrs[j])
		}
	}
	return resps, errs
}

// anyIndex is before, for a call whose items need not know their place.
func anyIndex[T, P any](before func(context.Context, T) (P, error)) func(context.Context, int, T) (P, error) {
	return func(ctx context.Context, _ int, item T) (P, error) { return before(ctx, item) }
}

// results are a batch's results, each item's response or, as the unary
// call would have returned it, its error, ErrorInfo and all.
func results[Resp, Result any](resps []Resp, errs []error, answered func(Resp) Result, failed func(*spb.Status) Result) []Result {
	out := make([]Result, len(resps))
	for i, resp := range resps {
		if errs[i] != nil {
			out[i] = failed(status.Convert(errs[i]).Proto())
		} else {
			out[i] = answered(resp)
		}
	}
	return out
}

// noBatchWait refuses a Claim of a batch that asks to wait: a batch answers
// at once.
func noBatchWait(i int, req *idemv1.ClaimRequest) error {
	w := req.GetWait()
	if w == nil || (w.GetSeconds() == 0 && w.GetNanos() == 0) {
		return nil
	}
	return invalid("wait", idemv1.ErrorReason_ERROR_REASON_INVALID_WAIT,
		"requests[%d].wait is %s; a batch answers at once, so leave wait unset or 0 (call Claim to wait)", i, w.AsDuration())
}

// BatchClaim implements idem.v1.IdempotencyService.
func (s *Service) BatchClaim(ctx context.Context, req *idemv1.BatchClaimRequest) (*idemv1.BatchClaimResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	before := func(ctx context.Context, i int, item *idemv1.ClaimRequest) (*store.ClaimParams, error) {
		if err := noBatchWait(i, item); err != nil {
			return nil, err
		}
		return s.claimParams(ctx, item)
	}
	resps, errs := runBatch(ctx, s, req.GetRequests(), before, s.store.RecordClaimMany, s.claimAnswer)
	return &idemv1.BatchClaimResponse{Results: results(resps, errs,
		func(r *idemv1.ClaimResponse) *idemv1.BatchClaimResult {
			return &idemv1.BatchClaimResult{Result: &idemv1.BatchClaimResult_Response{Response: r}}
		},
		func(st *spb.Status) *idemv1.BatchClaimResult {
			return &idemv1.BatchClaimResult{Result: &idemv1.BatchClaimResult_Error{Error: st}}
		})}, nil
}

// BatchComplete implements idem.v1.IdempotencyService.
func (s *Service) BatchComplete(ctx context.Context, req *idemv1.BatchCompleteRequest) (*idemv1.BatchCompleteResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	resps, errs := runBatch(ctx, s, req.GetRequests(), anyIndex(s.completeParams), s.store.RecordCompleteMany, s.completeAnswer)
	return &idemv1.BatchCompleteResponse{Results: results(resps, errs,
		func(r *idemv1.CompleteResponse) *idemv1.BatchCompleteResult {
			return &idemv1.BatchCompleteResult{Result: &idemv1.BatchCompleteResult_Response{Response: r}}
		},
		func(st *spb.Status) *idemv1.BatchCompleteResult {
			return &idemv1.BatchCompleteResult{Result: &idemv1.BatchCompleteResult_Error{Error: st}}
		})}, nil
}

// BatchFail implements idem.v1.IdempotencyService.
func (s *Service) BatchFail(ctx context.Context, req *idemv1.BatchFailRequest) (*idemv1.BatchFailResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	resps, errs := runBatch(ctx, s, req.GetRequests(), anyIndex(s.failParams), s.store.RecordFailMany, s.failAnswer)
	return &idemv1.BatchFailResponse{Results: results(resps, errs,
		func(r *idemv1.FailResponse) *idemv1.BatchFailResult {
			return &idemv1.BatchFailResult{Result: &idemv1.BatchFailResult_Response{Response: r}}
		},
		func(st *spb.Status) *idemv1.BatchFailResult {
			return &idemv1.BatchFailResult{Result: &idemv1.BatchFailResult_Error{Error: st}}
		})}, nil
}

// BatchHeartbeat implements idem.v1.IdempotencyService.
func (s *Service) BatchHeartbeat(ctx context.Context, req *idemv1.BatchHeartbeatRequest) (*idemv1.BatchHeartbeatResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	resps, errs := runBatch(ctx, s, req.GetRequests(), anyIndex(s.heartbeatParams), s.store.RecordHeartbeatMany, s.heartbeatAnswer)
	return &idemv1.BatchHeartbeatResponse{Results: results(resps, errs,
		func(r *idemv1.HeartbeatResponse) *idemv1.BatchHeartbeatResult {
			return &idemv1.BatchHeartbeatResult{Result: &idemv1.BatchHeartbeatResult_Response{Response: r}}
		},
		func(st *spb.Status) *idemv1.BatchHeartbeatResult {
			return &idemv1.BatchHeartbeatResult{Result: &idemv1.BatchHeartbeatResult_Error{Error: st}}
		})}, nil
}

// BatchLookup implements idem.v1.IdempotencyService.
func (s *Service) BatchLookup(ctx context.Context, req *idemv1.BatchLookupRequest) (*idemv1.BatchLookupResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	resps, errs := runBatch(ctx, s, req.GetRequests(), anyIndex(s.lookupID), s.store.RecordGetMany, s.lookupAnswer)
	return &idemv1.BatchLookupResponse{Results: results(resps, errs,
		func(r *idemv1.LookupResponse) *idemv1.BatchLookupResult {
			return &idemv1.BatchLookupResult{Result: &idemv1.BatchLookupResult_Response{Response: r}}
		},
		func(st *spb.Status) *idemv1.BatchLookupResult {
			return &idemv1.BatchLookupResult{Result: &idemv1.BatchLookupResult_Error{Error: st}}
		})}, nil
}
