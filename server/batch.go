package server

import (
	"context"
	"log/slog"
	"strings"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

// The batch calls (BatchClaim, BatchComplete, BatchFail, BatchHeartbeat,
// BatchLookup). Each item runs what its unary call runs, the very functions
// of service.go on either side of the store (claimParams and claimAnswer,
// …), so there is one implementation of the rules; the batch adds only what
// concerns the request as a whole (its size), the tenant's rate limit
// counted per item, and the order of the items: items of distinct keys go
// to the store together (store.RecordClaimMany, …), so that it puts them in
// as few statements as it can, and items of one key run one after the
// other, in the order of the request, as calls a client made in that
// order.

// Defaults of the batch bounds.
const (
	// DefaultBatchMaxItems is how many items one batch call may carry.
	DefaultBatchMaxItems = 500
	// DefaultBatchMaxBytes is how large one batch call's request may be,
	// encoded as protobuf.
	DefaultBatchMaxBytes = 4 << 20
)

// batchItemJSONHeadroom is what one item of a batch may add to its JSON
// beyond its base64 bytes: field names, durations, and ordinary escapes in
// its text.
const batchItemJSONHeadroom = 1 << 10

// batchJSONBodyLimit is the largest JSON body of a batch that the server's
// bounds admit: every byte of it base64 (4/3), plus batchItemJSONHeadroom
// per item.
func batchJSONBodyLimit(maxBytes, maxItems int) int64 {
	return int64(4*((maxBytes+2)/3)) + int64(maxItems)*batchItemJSONHeadroom + jsonHeadroom
}

// batchMethods are the batch calls by full method name. The rate-limit
// interceptor leaves them to the service, which takes a token per item.
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
	return checkBatchBytes(proto.Size(req), s.cfg.BatchMaxBytes)
}

// checkBatchBytes refuses a batch of n bytes of protobuf over limit. The
// HTTP/JSON API checks it too, to answer 413 as for any body too large.
func checkBatchBytes(n, limit int) error {
	if n > limit {
		return tooLarge("the batch is %d bytes; the limit is %d (--batch-max-bytes): split the batch", n, limit)
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

// unaryParts is a unary call cut at the store, for a batch of its items:
// before is the call up to the store (validation, the namespace allow-list,
// the policy), giving what the store is asked or the call's error; many is
// the store's method for many such calls at once; after is the call from
// the store's answer on (metrics, the error's status, the response).
type unaryParts[T batchItem, P, R, Resp any] struct {
	before func(ctx context.Context, i int, item T) (P, error)
	many   func(ctx context.Context, ps []P) ([]R, []error)
	after  func(ctx context.Context, item T, r R, err error) (Resp, error)
}

// runBatch runs every item of a batch through its unary call's parts and
// returns each item's response, or its error. Each item takes a token of
// the tenant's rate limit first (takeTokens); an item the limit refuses
// does not run. The items run in waves (waves): a wave's items that pass
// before go to the store in one call of many, each wave once the one before
// has answered. Each item is logged as its unary call would be.
func runBatch[T batchItem, P, R, Resp any](ctx context.Context, s *Service, method string, items []T, call unaryParts[T, P, R, Resp]) ([]Resp, []error) {
	resps := make([]Resp, len(items))
	errs := s.takeTokens(ctx, len(items))
	for _, wave := range waves(items, errs) {
		ps := make([]P, 0, len(wave))
		at := make([]int, 0, len(wave)) // the item of each of ps
		for _, i := range wave {
			p, err := call.before(ctx, i, items[i])
			if errs[i] = err; err == nil {
				ps, at = append(ps, p), append(at, i)
			}
		}
		if len(ps) == 0 {
			continue
		}
		res, storeErrs := call.many(ctx, ps)
		for j, i := range at {
			resps[i], errs[i] = call.after(ctx, items[i], res[j], storeErrs[j])
		}
	}
	s.logItems(ctx, method, errs)
	return resps, errs
}

// logItems logs each item of a batch as logCalls logs a unary call: a
// failed item at its code's level, an answered one at debug. The batch call
// has its own line too.
func (s *Service) logItems(ctx context.Context, method string, errs []error) {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	for i, err := range errs {
		code := status.Code(err)
		level := slog.LevelDebug
		if code != codes.OK {
			level = codeToLevel(code)
		}
		if !s.logger.Enabled(ctx, level) {
			continue
		}
		attrs := []slog.Attr{
			slog.String("grpc.service", service),
			slog.String("grpc.method", name),
			slog.Int("batch.item", i),
			slog.String("grpc.code", code.String()),
			slog.String("tenant", TenantFromContext(ctx)),
		}
		if err != nil {
			attrs = append(attrs, slog.String("grpc.error", err.Error()))
		}
		s.logger.LogAttrs(ctx, level, "finished batch item", attrs...)
	}
}

// itemStatus is an item's error as its result carries it: the status the
// unary call would have returned, ErrorInfo and all.
func itemStatus(err error) *spb.Status {
	return status.Convert(err).Proto()
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
	resps, errs := runBatch(ctx, s, idemv1.IdempotencyService_BatchClaim_FullMethodName, req.GetRequests(),
		unaryParts[*idemv1.ClaimRequest, *store.ClaimParams, *store.ClaimResult, *idemv1.ClaimResponse]{
			before: func(ctx context.Context, i int, item *idemv1.ClaimRequest) (*store.ClaimParams, error) {
				if err := noBatchWait(i, item); err != nil {
					return nil, err
				}
				return s.claimParams(ctx, item)
			},
			many:  s.store.RecordClaimMany,
			after: s.claimAnswer,
		})
	results := make([]*idemv1.BatchClaimResult, len(resps))
	for i, resp := range resps {
		if errs[i] != nil {
			results[i] = &idemv1.BatchClaimResult{Result: &idemv1.BatchClaimResult_Error{Error: itemStatus(errs[i])}}
		} else {
			results[i] = &idemv1.BatchClaimResult{Result: &idemv1.BatchClaimResult_Response{Response: resp}}
		}
	}
	return &idemv1.BatchClaimResponse{Results: results}, nil
}

// BatchComplete implements idem.v1.IdempotencyService.
func (s *Service) BatchComplete(ctx context.Context, req *idemv1.BatchCompleteRequest) (*idemv1.BatchCompleteResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	resps, errs := runBatch(ctx, s, idemv1.IdempotencyService_BatchComplete_FullMethodName, req.GetRequests(),
		unaryParts[*idemv1.CompleteRequest, *store.CompleteParams, *store.Record, *idemv1.CompleteResponse]{
			before: func(ctx context.Context, _ int, item *idemv1.CompleteRequest) (*store.CompleteParams, error) {
				return s.completeParams(ctx, item)
			},
			many: s.store.RecordCompleteMany,
			after: func(ctx context.Context, _ *idemv1.CompleteRequest, rec *store.Record, err error) (*idemv1.CompleteResponse, error) {
				return s.completeAnswer(ctx, rec, err)
			},
		})
	results := make([]*idemv1.BatchCompleteResult, len(resps))
	for i, resp := range resps {
		if errs[i] != nil {
			results[i] = &idemv1.BatchCompleteResult{Result: &idemv1.BatchCompleteResult_Error{Error: itemStatus(errs[i])}}
		} else {
			results[i] = &idemv1.BatchCompleteResult{Result: &idemv1.BatchCompleteResult_Response{Response: resp}}
		}
	}
	return &idemv1.BatchCompleteResponse{Results: results}, nil
}

// BatchFail implements idem.v1.IdempotencyService.
func (s *Service) BatchFail(ctx context.Context, req *idemv1.BatchFailRequest) (*idemv1.BatchFailResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	resps, errs := runBatch(ctx, s, idemv1.IdempotencyService_BatchFail_FullMethodName, req.GetRequests(),
		unaryParts[*idemv1.FailRequest, *store.FailParams, *store.Record, *idemv1.FailResponse]{
			before: func(ctx context.Context, _ int, item *idemv1.FailRequest) (*store.FailParams, error) {
				return s.failParams(ctx, item)
			},
			many: s.store.RecordFailMany,
			after: func(ctx context.Context, _ *idemv1.FailRequest, rec *store.Record, err error) (*idemv1.FailResponse, error) {
				return s.failAnswer(ctx, rec, err)
			},
		})
	results := make([]*idemv1.BatchFailResult, len(resps))
	for i, resp := range resps {
		if errs[i] != nil {
			results[i] = &idemv1.BatchFailResult{Result: &idemv1.BatchFailResult_Error{Error: itemStatus(errs[i])}}
		} else {
			results[i] = &idemv1.BatchFailResult{Result: &idemv1.BatchFailResult_Response{Response: resp}}
		}
	}
	return &idemv1.BatchFailResponse{Results: results}, nil
}

// BatchHeartbeat implements idem.v1.IdempotencyService.
func (s *Service) BatchHeartbeat(ctx context.Context, req *idemv1.BatchHeartbeatRequest) (*idemv1.BatchHeartbeatResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	resps, errs := runBatch(ctx, s, idemv1.IdempotencyService_BatchHeartbeat_FullMethodName, req.GetRequests(),
		unaryParts[*idemv1.HeartbeatRequest, *store.HeartbeatParams, *store.Record, *idemv1.HeartbeatResponse]{
			before: func(ctx context.Context, _ int, item *idemv1.HeartbeatRequest) (*store.HeartbeatParams, error) {
				return s.heartbeatParams(ctx, item)
			},
			many: s.store.RecordHeartbeatMany,
			after: func(ctx context.Context, _ *idemv1.HeartbeatRequest, rec *store.Record, err error) (*idemv1.HeartbeatResponse, error) {
				return s.heartbeatAnswer(ctx, rec, err)
			},
		})
	results := make([]*idemv1.BatchHeartbeatResult, len(resps))
	for i, resp := range resps {
		if errs[i] != nil {
			results[i] = &idemv1.BatchHeartbeatResult{Result: &idemv1.BatchHeartbeatResult_Error{Error: itemStatus(errs[i])}}
		} else {
			results[i] = &idemv1.BatchHeartbeatResult{Result: &idemv1.BatchHeartbeatResult_Response{Response: resp}}
		}
	}
	return &idemv1.BatchHeartbeatResponse{Results: results}, nil
}

// BatchLookup implements idem.v1.IdempotencyService.
func (s *Service) BatchLookup(ctx context.Context, req *idemv1.BatchLookupRequest) (*idemv1.BatchLookupResponse, error) {
	if err := s.checkBatch(req, len(req.GetRequests())); err != nil {
		return nil, err
	}
	resps, errs := runBatch(ctx, s, idemv1.IdempotencyService_BatchLookup_FullMethodName, req.GetRequests(),
		unaryParts[*idemv1.LookupRequest, store.RecordID, *store.Record, *idemv1.LookupResponse]{
			before: func(ctx context.Context, _ int, item *idemv1.LookupRequest) (store.RecordID, error) {
				return s.lookupID(ctx, item)
			},
			many: s.store.RecordGetMany,
			after: func(ctx context.Context, _ *idemv1.LookupRequest, rec *store.Record, err error) (*idemv1.LookupResponse, error) {
				return s.lookupAnswer(ctx, rec, err)
			},
		})
	results := make([]*idemv1.BatchLookupResult, len(resps))
	for i, resp := range resps {
		if errs[i] != nil {
			results[i] = &idemv1.BatchLookupResult{Result: &idemv1.BatchLookupResult_Error{Error: itemStatus(errs[i])}}
		} else {
			results[i] = &idemv1.BatchLookupResult{Result: &idemv1.BatchLookupResult_Response{Response: resp}}
		}
	}
	return &idemv1.BatchLookupResponse{Results: results}, nil
}
