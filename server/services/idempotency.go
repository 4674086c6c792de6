package services

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/store"
)

// Service implements idem.v1.IdempotencyService.
type Service struct {
	idemv1.UnimplementedIdempotencyServiceServer

	store    store.Store
	cfg      Config
	policies []*policy // of DefaultTenant, when cfg.Tenants is nil
	logger   *slog.Logger
	waiters  *waiters
	// endWaits is closed by EndWaits.
	endWaits     chan struct{}
	endWaitsOnce sync.Once
}

var _ idemv1.IdempotencyServiceServer = (*Service)(nil)

// NewService returns the service over st. Zero fields of cfg take their
// defaults.
func NewService(st store.Store, cfg Config, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.WithDefaults()
	return &Service{store: st, cfg: cfg, policies: newPolicies(cfg.Policies), logger: logger,
		waiters: &waiters{max: cfg.MaxWaiters, maxPerTenant: cfg.MaxWaitersPerTenant}, endWaits: make(chan struct{})}
}

func (s *Service) id(ctx context.Context, namespace, key string) store.RecordID {
	return store.RecordID{Tenant: TenantFromContext(ctx), Namespace: namespace, Key: key}
}

// Claim implements idem.v1.IdempotencyService.
func (s *Service) Claim(ctx context.Context, req *idemv1.ClaimRequest) (*idemv1.ClaimResponse, error) {
	params, err := s.claimParams(ctx, req)
	if err != nil {
		return nil, err
	}
	res, err := s.store.RecordClaim(ctx, params)
	if err == nil && res.Outcome == store.OutcomeInProgress && req.GetWait().AsDuration() > 0 {
		res, err = s.waitClaim(ctx, params, res, req.GetWait().AsDuration())
	}
	return s.claimAnswer(ctx, req, res, err)
}

// claimParams is what the store is asked for the Claim req, after its
// validation, the namespace allow-list and the namespace's policy: the part
// of a Claim before the store, shared by Claim and BatchClaim's items. Its
// errors are statuses.
func (s *Service) claimParams(ctx context.Context, req *idemv1.ClaimRequest) (*store.ClaimParams, error) {
	leaseTTL, retention, err := validateClaim(req, s.cfg)
	if err != nil {
		return nil, err
	}
	t, err := s.authorize(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	pol := s.policyFor(t, req.GetNamespace())
	if leaseTTL, err = pol.lease(req.GetLeaseTtl() != nil, leaseTTL); err != nil {
		return nil, err
	}
	return &store.ClaimParams{
		RecordID:    s.id(ctx, req.GetNamespace(), req.GetKey()),
		Fingerprint: req.GetFingerprint(),
		Claimant:    req.GetClaimant(),
		LeaseTTL:    leaseTTL,
		Retention:   pol.retentionOf(req.GetRetention() != nil, retention),
		Policy:      pol.nameOf(),
		Hold:        pol.holds(),
	}, nil
}

// claimAnswer is the Claim req's answer from the store's, res or err: the
// part of a Claim after the store, shared by Claim and BatchClaim's items.
func (s *Service) claimAnswer(ctx context.Context, req *idemv1.ClaimRequest, res *store.ClaimResult, err error) (*idemv1.ClaimResponse, error) {
	if err != nil {
		return nil, rewriteError(ctx, s.logger, err)
	}
	resp := &idemv1.ClaimResponse{Outcome: outcomeToProto[res.Outcome], Record: recordToProto(res.Record)}
	if res.Outcome == store.OutcomeInProgress {
		resp.RetryAfter = durationpb.New(res.RetryAfter)
	}
	return resp, nil
}

// Complete implements idem.v1.IdempotencyService.
func (s *Service) Complete(ctx context.Context, req *idemv1.CompleteRequest) (*idemv1.CompleteResponse, error) {
	p, err := s.completeParams(ctx, req)
	if err != nil {
		return nil, err
	}
	rec, err := s.store.RecordComplete(ctx, p)
	return s.completeAnswer(ctx, req, rec, err)
}

// completeParams is what the store is asked for the Complete req, after
// its validation, the namespace allow-list and the result limit: the part
// of a Complete before the store, shared by Complete and BatchComplete's
// items. Its errors are statuses.
func (s *Service) completeParams(ctx context.Context, req *idemv1.CompleteRequest) (*store.CompleteParams, error) {
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return nil, err
	}
	if err := validateToken(req.GetToken()); err != nil {
		return nil, err
	}
	t, err := s.authorize(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	if err := s.checkResult(t, len(req.GetResult())); err != nil {
		return nil, err
	}
	return &store.CompleteParams{
		RecordID: s.id(ctx, req.GetNamespace(), req.GetKey()),
		Token:    req.GetToken(),
		Result:   req.GetResult(),
	}, nil
}

// completeAnswer is a Complete's answer from the store's, rec or err.
func (s *Service) completeAnswer(ctx context.Context, _ *idemv1.CompleteRequest, rec *store.Record, err error) (*idemv1.CompleteResponse, error) {
	if err != nil {
		return nil, rewriteError(ctx, s.logger, err)
	}
	return &idemv1.CompleteResponse{Record: recordToProto(rec)}, nil
}

// Fail implements idem.v1.IdempotencyService.
func (s *Service) Fail(ctx context.Context, req *idemv1.FailRequest) (*idemv1.FailResponse, error) {
	p, err := s.failParams(ctx, req)
	if err != nil {
		return nil, err
	}
	rec, err := s.store.RecordFail(ctx, p)
	return s.failAnswer(ctx, req, rec, err)
}

// failParams is what the store is asked for the Fail req, after its
// validation and the namespace allow-list: the part of a Fail before the
// store, shared by Fail and BatchFail's items. Its errors are statuses.
func (s *Service) failParams(ctx context.Context, req *idemv1.FailRequest) (*store.FailParams, error) {
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return nil, err
	}
	if err := validateToken(req.GetToken()); err != nil {
		return nil, err
	}
	if err := validateErrorText(req.GetError()); err != nil {
		return nil, err
	}
	if _, err := s.authorize(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	return &store.FailParams{
		RecordID:  s.id(ctx, req.GetNamespace(), req.GetKey()),
		Token:     req.GetToken(),
		Error:     req.GetError(),
		Retryable: req.GetRetryable(),
	}, nil
}

// failAnswer is a Fail's answer from the store's, rec or err.
func (s *Service) failAnswer(ctx context.Context, _ *idemv1.FailRequest, rec *store.Record, err error) (*idemv1.FailResponse, error) {
	if err != nil {
		return nil, rewriteError(ctx, s.logger, err)
	}
	return &idemv1.FailResponse{Record: recordToProto(rec)}, nil
}

// Heartbeat implements idem.v1.IdempotencyService.
func (s *Service) Heartbeat(ctx context.Context, req *idemv1.HeartbeatRequest) (*idemv1.HeartbeatResponse, error) {
	p, err := s.heartbeatParams(ctx, req)
	if err != nil {
		return nil, err
	}
	rec, err := s.store.RecordHeartbeat(ctx, p)
	return s.heartbeatAnswer(ctx, req, rec, err)
}

// heartbeatParams is what the store is asked for the Heartbeat req, after
// its validation, the namespace allow-list and the namespace's policy: the
// part of a Heartbeat before the store, shared by Heartbeat and
// BatchHeartbeat's items. Its errors are statuses.
func (s *Service) heartbeatParams(ctx context.Context, req *idemv1.HeartbeatRequest) (*store.HeartbeatParams, error) {
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return nil, err
	}
	if err := validateToken(req.GetToken()); err != nil {
		return nil, err
	}
	leaseTTL, err := duration("lease_ttl", idemv1.ErrorReason_ERROR_REASON_INVALID_LEASE_TTL, req.GetLeaseTtl(), s.cfg.DefaultLeaseTTL, limits.MinLeaseTTL, limits.MaxLeaseTTL)
	if err != nil {
		return nil, err
	}
	t, err := s.authorize(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	if leaseTTL, err = s.policyFor(t, req.GetNamespace()).lease(req.GetLeaseTtl() != nil, leaseTTL); err != nil {
		return nil, err
	}
	return &store.HeartbeatParams{
		RecordID: s.id(ctx, req.GetNamespace(), req.GetKey()),
		Token:    req.GetToken(),
		LeaseTTL: leaseTTL,
	}, nil
}

// heartbeatAnswer is a Heartbeat's answer from the store's, rec or err.
func (s *Service) heartbeatAnswer(ctx context.Context, _ *idemv1.HeartbeatRequest, rec *store.Record, err error) (*idemv1.HeartbeatResponse, error) {
	if err != nil {
		return nil, rewriteError(ctx, s.logger, err)
	}
	return &idemv1.HeartbeatResponse{Record: recordToProto(rec)}, nil
}

// Lookup implements idem.v1.IdempotencyService.
func (s *Service) Lookup(ctx context.Context, req *idemv1.LookupRequest) (*idemv1.LookupResponse, error) {
	id, err := s.lookupID(ctx, req)
	if err != nil {
		return nil, err
	}
	rec, err := s.store.RecordGet(ctx, id)
	return s.lookupAnswer(ctx, req, rec, err)
}

// lookupID is the record the Lookup req reads, after its validation and the
// namespace allow-list: the part of a Lookup before the store, shared by
// Lookup and BatchLookup's items. Its errors are statuses.
func (s *Service) lookupID(ctx context.Context, req *idemv1.LookupRequest) (store.RecordID, error) {
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return store.RecordID{}, err
	}
	if _, err := s.authorize(ctx, req.GetNamespace()); err != nil {
		return store.RecordID{}, err
	}
	return s.id(ctx, req.GetNamespace(), req.GetKey()), nil
}

// lookupAnswer is a Lookup's answer from the store's, rec or err, with
// the record's timeline when req asks for it.
func (s *Service) lookupAnswer(ctx context.Context, req *idemv1.LookupRequest, rec *store.Record, err error) (*idemv1.LookupResponse, error) {
	if err != nil {
		return nil, rewriteError(ctx, s.logger, err)
	}
	resp := &idemv1.LookupResponse{Record: recordToProto(rec)}
	if req.GetIncludeHistory() {
		if resp.History, err = history(ctx, s.store, rec.RecordID); err != nil {
			return nil, rewriteError(ctx, s.logger, err)
		}
	}
	return resp, nil
}

var stateToProto = map[store.State]idemv1.State{
	store.StateProcessing: idemv1.State_STATE_PROCESSING,
	store.StateCompleted:  idemv1.State_STATE_COMPLETED,
	store.StateFailed:     idemv1.State_STATE_FAILED,
	store.StateReleased:   idemv1.State_STATE_RELEASED,
	store.StateExpired:    idemv1.State_STATE_EXPIRED,
	store.StateUnresolved: idemv1.State_STATE_UNRESOLVED,
}

var outcomeToProto = map[store.Outcome]idemv1.Outcome{
	store.OutcomeAcquired:   idemv1.Outcome_OUTCOME_ACQUIRED,
	store.OutcomeInProgress: idemv1.Outcome_OUTCOME_IN_PROGRESS,
	store.OutcomeCompleted:  idemv1.Outcome_OUTCOME_COMPLETED,
	store.OutcomeFailed:     idemv1.Outcome_OUTCOME_FAILED,
	store.OutcomeUnresolved: idemv1.Outcome_OUTCOME_UNRESOLVED,
}

func recordToProto(r *store.Record) *idemv1.Record {
	return &idemv1.Record{
		Namespace:      r.Namespace,
		Key:            r.Key,
		State:          stateToProto[r.State],
		Token:          r.Token,
		Attempt:        r.Attempt,
		Claimant:       r.Claimant,
		Fingerprint:    r.Fingerprint,
		LeaseExpiresAt: timestamp(r.LeaseExpiresAt),
		Result:         r.Result,
		Error:          r.Error,
		CreatedAt:      timestamp(r.CreatedAt),
		UpdatedAt:      timestamp(r.UpdatedAt),
		CompletedAt:    timestamp(r.CompletedAt),
		ExpiresAt:      timestamp(r.ExpiresAt),
		Policy:         r.Policy,
		Hold:           r.Hold,
		Steps:          stepsToProto(r.Steps),
		HoldUnfinished: r.HoldUnfinished,
	}
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
