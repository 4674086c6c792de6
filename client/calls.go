package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
)

// State is where a record is in its life. The values match idem.v1.State;
// String gives the name without the prefix ("PROCESSING").
type State int32

// States of a record; see DESIGN §1.
const (
	StateUnspecified State = iota
	StateProcessing        // a worker holds a lease
	StateCompleted         // terminal success; the result is stored
	StateFailed            // terminal failure; the error is stored
	StateReleased          // given back by a retryable Fail; the next Claim acquires it
	StateExpired           // the lease ran out; the next Claim acquires it
	StateUnresolved        // the lease ran out under a hold policy; no Claim acquires it until resolved
)

func (s State) String() string {
	return strings.TrimPrefix(idemv1.State(s).String(), "STATE_")
}

// Outcome is the answer to a Claim. The values match idem.v1.Outcome;
// String gives the name without the prefix ("ACQUIRED").
type Outcome int32

// Outcomes of a Claim.
const (
	OutcomeUnspecified Outcome = iota
	OutcomeAcquired            // perform the side effect, then Complete or Fail
	OutcomeInProgress          // another worker holds a live lease
	OutcomeCompleted           // done earlier: Record.Result is the stored result
	OutcomeFailed              // failed permanently earlier: Record.Error is the stored error
	OutcomeUnresolved          // held for resolution: do not run it; park the message
)

func (o Outcome) String() string {
	return strings.TrimPrefix(idemv1.Outcome(o).String(), "OUTCOME_")
}

// Record is the server's state for one (namespace, key). Times are UTC from
// the database's clock; a zero time means unset.
type Record struct {
	Namespace string
	Key       string
	State     State
	// Token is the fencing token of the latest acquisition.
	Token int64
	// Attempt is how many times the record was acquired since it was
	// created.
	Attempt     int
	Claimant    string
	Fingerprint []byte
	// LeaseExpiresAt is set while PROCESSING (and kept when EXPIRED).
	LeaseExpiresAt time.Time
	// Result is the stored result (COMPLETED only).
	Result []byte
	// Error is the stored error (FAILED and RELEASED only).
	Error       string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt time.Time
	// ExpiresAt is when the record may be purged; unset while PROCESSING
	// and UNRESOLVED.
	ExpiresAt time.Time
	// Policy names the policy of idemd's config file that applied when the
	// record was acquired (its namespace globs joined by commas); empty for
	// none.
	Policy string
	// Hold is true when that policy holds the record for resolution when
	// its lease runs out (UNRESOLVED) instead of letting a Claim take it
	// over.
	Hold bool
	// Steps are the job's steps (see Attempt.Step), in the order they were
	// first recorded.
	Steps []Step
}

// StepKey is the key of the record's step name that a downstream system
// takes as an idempotency key (see StepKey).
func (r Record) StepKey(name string) string { return StepKey(r.Namespace, r.Key, name) }

func recordFromProto(r *idemv1.Record) Record {
	return Record{
		Namespace:      r.GetNamespace(),
		Key:            r.GetKey(),
		State:          State(r.GetState()),
		Token:          r.GetToken(),
		Attempt:        int(r.GetAttempt()),
		Claimant:       r.GetClaimant(),
		Fingerprint:    r.GetFingerprint(),
		LeaseExpiresAt: timeFromProto(r.GetLeaseExpiresAt()),
		Result:         r.GetResult(),
		Error:          r.GetError(),
		CreatedAt:      timeFromProto(r.GetCreatedAt()),
		UpdatedAt:      timeFromProto(r.GetUpdatedAt()),
		CompletedAt:    timeFromProto(r.GetCompletedAt()),
		ExpiresAt:      timeFromProto(r.GetExpiresAt()),
		Policy:         r.GetPolicy(),
		Hold:           r.GetHold(),
		Steps:          stepsFromProto(r.GetSteps()),
	}
}

func timeFromProto(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{} // AsTime would say 1970
	}
	return ts.AsTime()
}

// durationToProto leaves a zero duration unset so that the server applies
// its own default.
func durationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// ClaimRequest asks for the right to perform one job.
type ClaimRequest struct {
	// Namespace is the job type, matching ^[a-z0-9][a-z0-9_.-]{0,63}$.
	Namespace string
	// Key is the idempotency key: 1 to 256 bytes of printable UTF-8.
	Key string
	// Fingerprint is an optional hash of the request (at most 64 bytes; see
	// Fingerprint and FingerprintJSON). None by default.
	Fingerprint []byte
	// LeaseTTL is how long the lease lasts without a heartbeat. Zero means
	// the server's default, 5 minutes unless configured otherwise; bounds
	// 1 s to 24 h.
	LeaseTTL time.Duration
	// Claimant identifies this attempt (at most 128 bytes). Repeating a Claim
	// with the same claimant while its lease lives returns ACQUIRED with the
	// same token, so a Claim whose response was lost can be retried. None by
	// default; with WithCoalescing, a Claim that goes out in a batch gets a
	// fresh UUID, so that the batch can be sent again (see WithCoalescing).
	Claimant string
	// Retention is how long the record is kept after it leaves PROCESSING.
	// Zero means the server's default, 24 hours unless configured otherwise;
	// bounds 1 min to 90 days.
	Retention time.Duration
	// Wait is how long the server waits, when another worker holds the job,
	// for it to finish before it answers: the Claim then returns the job's
	// outcome (COMPLETED, FAILED, or ACQUIRED when the holder gave it back
	// or its lease ran out), or IN_PROGRESS when Wait runs out. Zero, the
	// default, answers IN_PROGRESS at once; at most MaxWait. The server ends
	// the wait early enough to answer within ctx's deadline, and answers
	// IN_PROGRESS at once when too many Claims wait already.
	Wait time.Duration
}

// MaxWait is the longest ClaimRequest.Wait the server accepts.
const MaxWait = limits.MaxWait

// ClaimResult is the answer to a Claim.
type ClaimResult struct {
	Outcome Outcome
	// Record is the record after the Claim.
	Record Record
	// RetryAfter is, for IN_PROGRESS, how long until the holder's lease runs
	// out.
	RetryAfter time.Duration
}

// Claim asks for the right to perform a job, in one RPC without retries.
//
// ACQUIRED, COMPLETED and FAILED come back with a nil error: act on
// res.Outcome. IN_PROGRESS comes back as a filled-in ClaimResult together
// with an *InProgressError (RetryAfter set), and UNRESOLVED with an
// *UnresolvedError, so that code which only checks the error can never run a
// side effect that another worker is running or that waits for a decision.
// ErrFingerprintMismatch is returned when the key was claimed with another
// fingerprint. With WithCoalescing, a Claim without a Wait may go out in a
// BatchClaim with concurrent ones; its answer is the same.
func (c *Client) Claim(ctx context.Context, req ClaimRequest, opts ...grpc.CallOption) (ClaimResult, error) {
	if c.claims != nil && req.Wait == 0 && coalescible(ctx, opts) {
		if req.Claimant == "" {
			// A batch whose answer could not be read is sent again
			// (sendHalving), and the server may have acquired the job in
			// it: only a claimant tells it that the Claim is the same call.
			req.Claimant = uuid.NewString()
		}
		return c.claims.do(ctx, req.proto())
	}
	resp, err := c.service.Claim(ctx, req.proto(), opts...)
	if err != nil {
		return ClaimResult{}, decodeError(ctx, err)
	}
	return claimResultFromProto(resp)
}

func (req ClaimRequest) proto() *idemv1.ClaimRequest {
	return &idemv1.ClaimRequest{
		Namespace:   req.Namespace,
		Key:         req.Key,
		Fingerprint: req.Fingerprint,
		LeaseTtl:    durationToProto(req.LeaseTTL),
		Claimant:    req.Claimant,
		Retention:   durationToProto(req.Retention),
		Wait:        durationToProto(req.Wait),
	}
}

// claimResultFromProto is a Claim's answer with the outcomes that must not
// be mistaken for a go-ahead made errors (see Claim).
func claimResultFromProto(resp *idemv1.ClaimResponse) (ClaimResult, error) {
	res := ClaimResult{
		Outcome:    Outcome(resp.GetOutcome()),
		Record:     recordFromProto(resp.GetRecord()),
		RetryAfter: resp.GetRetryAfter().AsDuration(),
	}
	switch res.Outcome {
	case OutcomeAcquired, OutcomeCompleted, OutcomeFailed:
		return res, nil
	case OutcomeInProgress:
		return res, &InProgressError{RetryAfter: res.RetryAfter, Record: res.Record}
	case OutcomeUnresolved:
		return res, &UnresolvedError{Record: res.Record}
	}
	return res, fmt.Errorf("idem: Claim answered with unknown outcome %v", resp.GetOutcome())
}

// CompleteRequest records a job's success.
type CompleteRequest struct {
	Namespace string
	Key       string
	// Token is the token of the ACQUIRED Claim.
	Token int64
	// Result is stored and replayed to later Claims: at most 64 KiB unless
	// the server is configured otherwise (idemd's --max-result-bytes, at
	// most limits.ResultBytesCeiling; a tenant's max_result_bytes may
	// lower it).
	Result []byte
}

// Complete records a job's success with the acquired token, in one RPC
// without retries. Repeating it with the same result after a lost response
// returns the stored record. Errors: ErrLeaseLost (another worker took
// over), ErrAlreadyTerminal, ErrResolvedByOperator, ErrNotFound. With
// WithCoalescing, it may go out in a BatchComplete with concurrent ones.
//
// A result over the server's limit is refused, its error naming the
// result's size and the limit: INVALID_RESULT from the server, or
// RESOURCE_EXHAUSTED when it is more than idemd reads in one message at
// all. A result over limits.ResultBytesCeiling, which no server takes, is
// refused with INVALID_RESULT without an RPC.
func (c *Client) Complete(ctx context.Context, req CompleteRequest, opts ...grpc.CallOption) (Record, error) {
	if c.completes != nil && coalescible(ctx, opts) {
		if err := checkResultSize(len(req.Result)); err != nil {
			return Record{}, err
		}
		return c.completes.do(ctx, req.proto())
	}
	return c.complete(ctx, req.proto(), opts...)
}

// complete is the unary Complete RPC, with the errors of a result too large
// made to say so (see Complete).
func (c *Client) complete(ctx context.Context, req *idemv1.CompleteRequest, opts ...grpc.CallOption) (Record, error) {
	n := len(req.GetResult())
	if err := checkResultSize(n); err != nil {
		return Record{}, err
	}
	resp, err := c.service.Complete(ctx, req, opts...)
	if err != nil {
		return Record{}, resultRefused(decodeError(ctx, err), n)
	}
	return recordFromProto(resp.GetRecord()), nil
}

// checkResultSize refuses a result of n bytes that no server takes, over
// the most --max-result-bytes may be, as the server refuses one over its
// own limit.
func checkResultSize(n int) error {
	if n <= limits.ResultBytesCeiling {
		return nil
	}
	st, err := status.New(codes.InvalidArgument, fmt.Sprintf("result is %d bytes; no server takes more than %d (the most idemd's --max-result-bytes may be)", n, limits.ResultBytesCeiling)).
		WithDetails(&errdetails.ErrorInfo{Reason: "INVALID_RESULT", Domain: errorDomain, Metadata: map[string]string{"field": "result"}})
	if err != nil {
		panic(err) // an ErrorInfo always marshals
	}
	return &rpcError{st: st}
}

// resultRefused is err, the error of a Complete of a result of n bytes,
// with the result's size and the limit in its message when gRPC refused
// the request for its size (RESOURCE_EXHAUSTED with neither an ErrorInfo
// nor a RetryInfo): grpc-go says only that a message was larger than its
// maximum, before idem's own check could name the limit.
func resultRefused(err error, n int) error {
	if status.Code(err) != codes.ResourceExhausted || Reason(err) != "" {
		return err
	}
	if _, hinted := retryInfoDelay(err); hinted {
		return err
	}
	return &rpcError{st: status.New(codes.ResourceExhausted, fmt.Sprintf(
		"result is %d bytes, more than the server reads (%s); idemd's --max-result-bytes bounds results, at most %d",
		n, status.Convert(err).Message(), limits.ResultBytesCeiling))}
}

func (req CompleteRequest) proto() *idemv1.CompleteRequest {
	return &idemv1.CompleteRequest{Namespace: req.Namespace, Key: req.Key, Token: req.Token, Result: req.Result}
}

// FailRequest records a job's failure.
type FailRequest struct {
	Namespace string
	Key       string
	// Token is the token of the ACQUIRED Claim.
	Token int64
	// Error says what went wrong, at most 4 KiB.
	Error string
	// Retryable true releases the record (RELEASED) so that the next Claim
	// acquires it; false makes the failure permanent (FAILED) and replays
	// Error to every later Claim.
	Retryable bool
}

// Fail records a job's failure with the acquired token, in one RPC without
// retries. Repeating it with the same error and retryable after a lost
// response returns the stored record. Errors: ErrLeaseLost,
// ErrAlreadyTerminal, ErrResolvedByOperator, ErrNotFound. With
// WithCoalescing, it may go out in a BatchFail with concurrent ones.
func (c *Client) Fail(ctx context.Context, req FailRequest, opts ...grpc.CallOption) (Record, error) {
	if c.fails != nil && coalescible(ctx, opts) {
		return c.fails.do(ctx, req.proto())
	}
	resp, err := c.service.Fail(ctx, req.proto(), opts...)
	if err != nil {
		return Record{}, decodeError(ctx, err)
	}
	return recordFromProto(resp.GetRecord()), nil
}

func (req FailRequest) proto() *idemv1.FailRequest {
	return &idemv1.FailRequest{Namespace: req.Namespace, Key: req.Key, Token: req.Token, Error: req.Error, Retryable: req.Retryable}
}

// HeartbeatRequest extends a lease.
type HeartbeatRequest struct {
	Namespace string
	Key       string
	// Token is the token of the ACQUIRED Claim.
	Token int64
	// LeaseTTL is the new lease, counted from now. Zero means the server's
	// default, 5 minutes unless configured otherwise.
	LeaseTTL time.Duration
}

// Heartbeat extends the lease held with the token, in one RPC without
// retries; it returns the record with its new LeaseExpiresAt. Errors:
// ErrLeaseLost, ErrAlreadyTerminal, ErrResolvedByOperator, ErrNotFound.
func (c *Client) Heartbeat(ctx context.Context, req HeartbeatRequest, opts ...grpc.CallOption) (Record, error) {
	resp, err := c.service.Heartbeat(ctx, req.proto(), opts...)
	if err != nil {
		return Record{}, decodeError(ctx, err)
	}
	return recordFromProto(resp.GetRecord()), nil
}

func (req HeartbeatRequest) proto() *idemv1.HeartbeatRequest {
	return &idemv1.HeartbeatRequest{Namespace: req.Namespace, Key: req.Key, Token: req.Token, LeaseTtl: durationToProto(req.LeaseTTL)}
}

// LookupRequest reads a record.
type LookupRequest struct {
	Namespace string
	Key       string
}

// Lookup reads a record without changing it, in one RPC without retries.
// Errors: ErrNotFound.
func (c *Client) Lookup(ctx context.Context, req LookupRequest, opts ...grpc.CallOption) (Record, error) {
	resp, err := c.service.Lookup(ctx, req.proto(), opts...)
	if err != nil {
		return Record{}, decodeError(ctx, err)
	}
	return recordFromProto(resp.GetRecord()), nil
}

func (req LookupRequest) proto() *idemv1.LookupRequest {
	return &idemv1.LookupRequest{Namespace: req.Namespace, Key: req.Key}
}

// TimelineEntry is one exception in the life of a record's key (a takeover,
// a failure, a hold, a resolution, a deletion, a refused fingerprint):
// what happened, when, and who did it. See idem.v1.TimelineEntry for which
// fields each kind sets.
type TimelineEntry struct {
	// Kind is the kind without its prefix: "TAKEN_OVER", "FAILED",
	// "RELEASED", "HELD", "RESOLVED", "DELETED" or "FINGERPRINT_MISMATCH".
	Kind             string
	At               time.Time
	Token            int64
	State            State
	PreviousToken    int64
	PreviousState    State
	Claimant         string
	PreviousClaimant string
	Error            string
	// Actor is who made a RESOLVED or DELETED call.
	Actor Actor
	// Reason is the reason a RESOLVED or DELETED call gave.
	Reason      string
	Fingerprint []byte
}

// Actor is who made a call that a timeline entry records.
type Actor struct {
	Tenant string
	// Operator is the name idemd's config gives the caller's token.
	Operator string
	// Resolver is the name a resolver gave (Resolve, RunResolver); empty for
	// a person's call.
	Resolver string
}

func timelineFromProto(entries []*idemv1.TimelineEntry) []TimelineEntry {
	out := make([]TimelineEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, TimelineEntry{
			Kind:             strings.TrimPrefix(e.GetKind().String(), "TIMELINE_ENTRY_KIND_"),
			At:               timeFromProto(e.GetAt()),
			Token:            e.GetToken(),
			State:            State(e.GetState()),
			PreviousToken:    e.GetPreviousToken(),
			PreviousState:    State(e.GetPreviousState()),
			Claimant:         e.GetClaimant(),
			PreviousClaimant: e.GetPreviousClaimant(),
			Error:            e.GetError(),
			Actor:            Actor{Tenant: e.GetActor().GetTenant(), Operator: e.GetActor().GetOperator(), Resolver: e.GetActor().GetResolver()},
			Reason:           e.GetReason(),
			Fingerprint:      e.GetFingerprint(),
		})
	}
	return out
}

// LookupHistory is Lookup that also reads the record's timeline, oldest
// entry first (at most the latest 1000), in one RPC without retries.
// Errors: ErrNotFound.
func (c *Client) LookupHistory(ctx context.Context, req LookupRequest, opts ...grpc.CallOption) (Record, []TimelineEntry, error) {
	p := req.proto()
	p.IncludeHistory = true
	resp, err := c.service.Lookup(ctx, p, opts...)
	if err != nil {
		return Record{}, nil, decodeError(ctx, err)
	}
	return recordFromProto(resp.GetRecord()), timelineFromProto(resp.GetHistory()), nil
}
