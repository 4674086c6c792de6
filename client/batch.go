package client

import (
	"context"
	"fmt"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// BatchItem is one item's answer in a batch: what the unary call would have
// returned for that request, Value and Err alike. An item's Err is typed as
// the unary call's error is (ErrLeaseLost, *InProgressError, …), and
// carries its own gRPC status.
type BatchItem[T any] struct {
	Value T
	Err   error
}

// The batch calls send their requests in one RPC, without retries, as the
// unary typed calls do, and return one BatchItem per request, in the order
// of the requests. Two requests of one key are answered as two calls made
// in that order. The error they return is the request's as a whole, when
// the server answered none of its items: INVALID_BATCH_SIZE for no request
// or more than the server takes (--batch-max-items, 500 unless configured
// otherwise), REQUEST_TOO_LARGE over its byte limit (4 MiB unless configured
// otherwise), UNAVAILABLE when the server is unreachable, and the like. They
// do not split a long slice: one call is one RPC, and the caller decides
// what a delivery too large for one batch means. DoBatch and WithCoalescing,
// which choose the batches themselves, halve a batch the server refuses for
// its size and send the halves.

// BatchClaim is Claim for many jobs. Every request's Wait must be zero: a
// batch answers at once (INVALID_WAIT for that item otherwise). As Claim
// does, an IN_PROGRESS item has both its ClaimResult and an
// *InProgressError, and an UNRESOLVED one an *UnresolvedError.
func (c *Client) BatchClaim(ctx context.Context, reqs []ClaimRequest, opts ...grpc.CallOption) ([]BatchItem[ClaimResult], error) {
	return c.batchClaim(ctx, protos(reqs, ClaimRequest.proto), opts)
}

// BatchComplete is Complete for many jobs.
func (c *Client) BatchComplete(ctx context.Context, reqs []CompleteRequest, opts ...grpc.CallOption) ([]BatchItem[Record], error) {
	return c.batchComplete(ctx, protos(reqs, CompleteRequest.proto), opts)
}

// BatchFail is Fail for many jobs.
func (c *Client) BatchFail(ctx context.Context, reqs []FailRequest, opts ...grpc.CallOption) ([]BatchItem[Record], error) {
	return c.batchFail(ctx, protos(reqs, FailRequest.proto), opts)
}

// BatchHeartbeat is Heartbeat for many jobs: one RPC keeps a whole
// delivery's leases alive.
func (c *Client) BatchHeartbeat(ctx context.Context, reqs []HeartbeatRequest, opts ...grpc.CallOption) ([]BatchItem[Record], error) {
	return c.batchHeartbeat(ctx, protos(reqs, HeartbeatRequest.proto), opts)
}

// BatchLookup is Lookup for many records; a record that does not exist is
// an item with ErrNotFound.
func (c *Client) BatchLookup(ctx context.Context, reqs []LookupRequest, opts ...grpc.CallOption) ([]BatchItem[Record], error) {
	resp, err := c.service.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: protos(reqs, LookupRequest.proto)}, opts...)
	if err != nil {
		return nil, decodeError(ctx, err)
	}
	return batchItems(ctx, len(reqs), resp.GetResults(), func(r *idemv1.LookupResponse) (Record, error) {
		return recordFromProto(r.GetRecord()), nil
	})
}

func (c *Client) batchClaim(ctx context.Context, reqs []*idemv1.ClaimRequest, opts []grpc.CallOption) ([]BatchItem[ClaimResult], error) {
	resp, err := c.service.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: reqs}, opts...)
	if err != nil {
		return nil, decodeError(ctx, err)
	}
	return batchItems(ctx, len(reqs), resp.GetResults(), claimResultFromProto)
}

func (c *Client) batchComplete(ctx context.Context, reqs []*idemv1.CompleteRequest, opts []grpc.CallOption) ([]BatchItem[Record], error) {
	resp, err := c.service.BatchComplete(ctx, &idemv1.BatchCompleteRequest{Requests: reqs}, opts...)
	if err != nil {
		return nil, decodeError(ctx, err)
	}
	return batchItems(ctx, len(reqs), resp.GetResults(), func(r *idemv1.CompleteResponse) (Record, error) {
		return recordFromProto(r.GetRecord()), nil
	})
}

func (c *Client) batchFail(ctx context.Context, reqs []*idemv1.FailRequest, opts []grpc.CallOption) ([]BatchItem[Record], error) {
	resp, err := c.service.BatchFail(ctx, &idemv1.BatchFailRequest{Requests: reqs}, opts...)
	if err != nil {
		return nil, decodeError(ctx, err)
	}
	return batchItems(ctx, len(reqs), resp.GetResults(), func(r *idemv1.FailResponse) (Record, error) {
		return recordFromProto(r.GetRecord()), nil
	})
}

func (c *Client) batchHeartbeat(ctx context.Context, reqs []*idemv1.HeartbeatRequest, opts []grpc.CallOption) ([]BatchItem[Record], error) {
	resp, err := c.service.BatchHeartbeat(ctx, &idemv1.BatchHeartbeatRequest{Requests: reqs}, opts...)
	if err != nil {
		return nil, decodeError(ctx, err)
	}
	return batchItems(ctx, len(reqs), resp.GetResults(), func(r *idemv1.HeartbeatResponse) (Record, error) {
		return recordFromProto(r.GetRecord()), nil
	})
}

// kind is the two ways to send requests of one kind: many in a batch
// RPC, or one in the unary RPC, each without call options.
type kind[Q, T any] struct {
	batch func(context.Context, []Q) ([]BatchItem[T], error)
	one   func(context.Context, Q) (T, error)
}

func (c *Client) claimKind() kind[*idemv1.ClaimRequest, ClaimResult] {
	return kind[*idemv1.ClaimRequest, ClaimResult]{
		batch: func(ctx context.Context, reqs []*idemv1.ClaimRequest) ([]BatchItem[ClaimResult], error) {
			return c.batchClaim(ctx, reqs, nil)
		},
		one: func(ctx context.Context, req *idemv1.ClaimRequest) (ClaimResult, error) {
			resp, err := c.service.Claim(ctx, req)
			if err != nil {
				return ClaimResult{}, decodeError(ctx, err)
			}
			return claimResultFromProto(resp)
		},
	}
}

func (c *Client) completeKind() kind[*idemv1.CompleteRequest, Record] {
	return kind[*idemv1.CompleteRequest, Record]{
		batch: func(ctx context.Context, reqs []*idemv1.CompleteRequest) ([]BatchItem[Record], error) {
			return c.batchComplete(ctx, reqs, nil)
		},
		one: func(ctx context.Context, req *idemv1.CompleteRequest) (Record, error) {
			return c.complete(ctx, req)
		},
	}
}

func (c *Client) failKind() kind[*idemv1.FailRequest, Record] {
	return kind[*idemv1.FailRequest, Record]{
		batch: func(ctx context.Context, reqs []*idemv1.FailRequest) ([]BatchItem[Record], error) {
			return c.batchFail(ctx, reqs, nil)
		},
		one: func(ctx context.Context, req *idemv1.FailRequest) (Record, error) {
			resp, err := c.service.Fail(ctx, req)
			if err != nil {
				return Record{}, decodeError(ctx, err)
			}
			return recordFromProto(resp.GetRecord()), nil
		},
	}
}

func (c *Client) heartbeatKind() kind[*idemv1.HeartbeatRequest, Record] {
	return kind[*idemv1.HeartbeatRequest, Record]{
		batch: func(ctx context.Context, reqs []*idemv1.HeartbeatRequest) ([]BatchItem[Record], error) {
			return c.batchHeartbeat(ctx, reqs, nil)
		},
		one: func(ctx context.Context, req *idemv1.HeartbeatRequest) (Record, error) {
			resp, err := c.service.Heartbeat(ctx, req)
			if err != nil {
				return Record{}, decodeError(ctx, err)
			}
			return recordFromProto(resp.GetRecord()), nil
		},
	}
}

func protos[R any, P any](reqs []R, conv func(R) P) []P {
	out := make([]P, len(reqs))
	for i, r := range reqs {
		out[i] = conv(r)
	}
	return out
}

// batchResult is the generated result message of a batch call: one item's
// response or its error.
type batchResult[P any] interface {
	GetResponse() P
	GetError() *rpcstatus.Status
}

// batchItems turns the n results of a batch into items, each with the
// error the unary call would have returned.
func batchItems[P any, R batchResult[P], T any](ctx context.Context, n int, results []R, conv func(P) (T, error)) ([]BatchItem[T], error) {
	if len(results) != n {
		return nil, fmt.Errorf("idem: the server answered %d items of a batch of %d", len(results), n)
	}
	items := make([]BatchItem[T], n)
	for i, r := range results {
		if st := r.GetError(); st != nil {
			err := status.FromProto(st).Err()
			if err == nil {
				err = status.Error(codes.Unknown, "the server answered an item with an error status of code OK")
			}
			items[i].Err = decodeError(ctx, err)
			continue
		}
		items[i].Value, items[i].Err = conv(r.GetResponse())
	}
	return items, nil
}

// refusedForSize reports whether a batch was refused as a whole for its
// number of items or its size, so that smaller batches of the same items
// would be taken: the server's INVALID_BATCH_SIZE or REQUEST_TOO_LARGE, or
// gRPC's own message size limit (RESOURCE_EXHAUSTED with neither an
// ErrorInfo nor a RetryInfo), which grpc-go applies before idem reads the
// request, or to an answer on its way back (more than gRPC carries, or a
// proxy or a caller's receive limit passes). In that last case the server
// did the items; each carries its claimant (DoBatch's, or the one a
// coalesced Claim is given), or its token and value, so sending it again
// is a repeat, answered as the first time.
func refusedForSize(err error) bool {
	switch ReasonOf(err) {
	case idemv1.ErrorReason_ERROR_REASON_INVALID_BATCH_SIZE, idemv1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE:
		return true
	case idemv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		if status.Code(err) == codes.ResourceExhausted {
			_, hinted := retryInfoDelay(err)
			return !hinted
		}
	}
	return false
}

// sendHalving sends reqs in a batch and answers every one of them: a batch
// the server refuses for its size is halved and the halves sent in turn, a
// single request it refuses so goes out as the unary call (which a server
// configured with a larger result limit than batch limit takes), and a
// batch that fails as a whole gives each of its items that error.
func sendHalving[Q, T any](ctx context.Context, reqs []Q, send kind[Q, T]) []BatchItem[T] {
	items, err := send.batch(ctx, reqs)
	if err == nil {
		return items
	}
	if refusedForSize(err) {
		if len(reqs) == 1 {
			v, err := send.one(ctx, reqs[0])
			return []BatchItem[T]{{Value: v, Err: err}}
		}
		half := len(reqs) / 2
		return append(sendHalving(ctx, reqs[:half], send), sendHalving(ctx, reqs[half:], send)...)
	}
	items = make([]BatchItem[T], len(reqs))
	for i := range items {
		items[i].Err = err
	}
	return items
}

// retryItems sends reqs (see sendHalving) until every item has an answer that is
// not transient or has reached its limit, limits[i] for reqs[i] (see
// retryLimit; the attempts count the tries of that item): each retry
// carries only the items that are still owed an answer, so an item already
// answered is never sent again. It waits between tries as retry does. sent
// reports when the try that gave each item its answer went out.
func retryItems[Q, T any](ctx context.Context, c *Client, reqs []Q, limits []retryLimit, send kind[Q, T]) (items []BatchItem[T], sent []time.Time) {
	items = make([]BatchItem[T], len(reqs))
	sent = make([]time.Time, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 1; len(pending) > 0; attempt++ {
		batch := make([]Q, len(pending))
		for j, i := range pending {
			batch[j] = reqs[i]
		}
		at := time.Now()
		answers := sendHalving(ctx, batch, send)
		var (
			next    []int
			hintErr error // the error with the longest RetryInfo delay
			hint    time.Duration
			until   time.Time // the earliest limit of the items retried
		)
		for j, i := range pending {
			items[i], sent[i] = answers[j], at
			err := answers[j].Err
			if err == nil || !isTransient(err) {
				continue
			}
			lim := limits[i]
			if lim.attempts > 0 && attempt >= lim.attempts {
				continue
			}
			if !lim.until.IsZero() {
				if !time.Now().Before(lim.until) {
					continue // its last try was this one
				}
				if until.IsZero() || lim.until.Before(until) {
					until = lim.until
				}
			}
			next = append(next, i)
			if d, _ := retryInfoDelay(err); hintErr == nil || d > hint {
				hintErr, hint = err, d
			}
		}
		if len(next) == 0 {
			break
		}
		d := c.retry.backoff(attempt-1, hintErr)
		if !until.IsZero() {
			d = min(d, time.Until(until))
		}
		if !c.pause(ctx, d) {
			break
		}
		pending = next
	}
	return items, sent
}
