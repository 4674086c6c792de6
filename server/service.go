// Package server is idem's gRPC layer: it validates requests, calls the
// store, and maps the store's errors to gRPC codes with an ErrorInfo. It never
// builds SQL. It also runs the sweeper.
package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/store"
)

// Config holds the service's defaults and limits.
type Config struct {
	// DefaultLeaseTTL is the lease of a Claim or Heartbeat that sends none.
	// It defaults to limits.DefaultLeaseTTL.
	DefaultLeaseTTL time.Duration
	// DefaultRetention is how long a record is kept after it leaves
	// PROCESSING when the Claim sends no retention. It defaults to
	// limits.DefaultRetention.
	DefaultRetention time.Duration
	// MaxResultBytes bounds Complete's result. It defaults to
	// limits.DefaultMaxResultBytes.
	MaxResultBytes int
	// Metrics, when set, counts claims, takeovers and lost leases.
	Metrics *Metrics
	// Tenants, when set, are the tenants of idemd's config file: every call
	// must authenticate as one of them, and each is held to its namespaces,
	// rate limit and result limit. Nil (the default) serves one tenant,
	// DefaultTenant, without authentication.
	Tenants *Tenants
	// Policies are the namespace policies of the tenant DefaultTenant when
	// Tenants is nil (each configured tenant has its own): the first whose
	// globs match a namespace sets its lease and retention defaults, its
	// lease bound, and the policy name its records show. The file was
	// validated (config.File.Validate).
	Policies []config.Policy
	// ConnLimits bound what one client connection can make the server
	// hold; zero fields take DefaultConnLimits.
	ConnLimits ConnLimits
	// Tracing, when set, gives every RPC a server span (otelgrpc), its
	// parent taken from the caller's W3C traceparent, and puts the trace id
	// on the call's log line. Nil (the default) installs nothing: no stats
	// handler, no work per call.
	Tracing trace.TracerProvider
	// MaxWaiters bounds the Claims waiting at once (ClaimRequest.wait) in
	// all; a Claim that would wait beyond it answers IN_PROGRESS at once. It
	// defaults to DefaultMaxWaiters (10000).
	MaxWaiters int
	// MaxWaitersPerTenant bounds the Claims of one tenant waiting at once
	// (without tenants, of the one default tenant). It defaults to
	// DefaultMaxWaitersPerTenant (1000).
	MaxWaitersPerTenant int
	// BatchMaxItems bounds the items of one batch call (BatchClaim, …). It
	// defaults to DefaultBatchMaxItems (500).
	BatchMaxItems int
	// BatchMaxBytes bounds the encoded size of one batch call's request; the
	// gRPC server and the HTTP/JSON API read requests that large. It
	// defaults to DefaultBatchMaxBytes (4 MiB).
	BatchMaxBytes int
}

// DefaultConfig returns the defaults of DESIGN §2.
func DefaultConfig() Config {
	return Config{
		DefaultLeaseTTL:     limits.DefaultLeaseTTL,
		DefaultRetention:    limits.DefaultRetention,
		MaxResultBytes:      limits.DefaultMaxResultBytes,
		MaxWaiters:          DefaultMaxWaiters,
		MaxWaitersPerTenant: DefaultMaxWaitersPerTenant,
		BatchMaxItems:       DefaultBatchMaxItems,
		BatchMaxBytes:       DefaultBatchMaxBytes,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.DefaultLeaseTTL == 0 {
		c.DefaultLeaseTTL = d.DefaultLeaseTTL
	}
	if c.DefaultRetention == 0 {
		c.DefaultRetention = d.DefaultRetention
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = d.MaxResultBytes
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = d.MaxWaiters
	}
	if c.MaxWaitersPerTenant == 0 {
		c.MaxWaitersPerTenant = d.MaxWaitersPerTenant
	}
	if c.BatchMaxItems == 0 {
		c.BatchMaxItems = d.BatchMaxItems
	}
	if c.BatchMaxBytes == 0 {
		c.BatchMaxBytes = d.BatchMaxBytes
	}
	return c
}

// Service implements idem.v1.IdempotencyService.
type Service struct {
	idemv1.UnimplementedIdempotencyServiceServer

	store    store.Store // tells health what each call saw (healthStore)
	health   *storeHealth
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
	if cfg.Metrics != nil && cfg.Tenants != nil {
		// Namespaces the config names literally keep their own label,
		// whatever else is claimed first.
		for _, t := range cfg.Tenants.byName {
			cfg.Metrics.namespaces.addLiteral(t.namespaces)
		}
	}
	cfg = cfg.withDefaults()
	h := &storeHealth{logger: logger}
	return &Service{store: healthStore{Store: st, health: h}, health: h, cfg: cfg, policies: newPolicies(cfg.Policies), logger: logger,
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
	s.cfg.Metrics.observeClaim(req.GetNamespace(), res)
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
	return s.completeAnswer(ctx, rec, err)
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
func (s *Service) completeAnswer(ctx context.Context, rec *store.Record, err error) (*idemv1.CompleteResponse, error) {
	s.cfg.Metrics.observeTokenCall(err)
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
	return s.failAnswer(ctx, rec, err)
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
func (s *Service) failAnswer(ctx context.Context, rec *store.Record, err error) (*idemv1.FailResponse, error) {
	s.cfg.Metrics.observeTokenCall(err)
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
	return s.heartbeatAnswer(ctx, rec, err)
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
func (s *Service) heartbeatAnswer(ctx context.Context, rec *store.Record, err error) (*idemv1.HeartbeatResponse, error) {
	s.cfg.Metrics.observeTokenCall(err)
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
	return s.lookupAnswer(ctx, rec, err)
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

// lookupAnswer is a Lookup's answer from the store's, rec or err.
func (s *Service) lookupAnswer(ctx context.Context, rec *store.Record, err error) (*idemv1.LookupResponse, error) {
	if err != nil {
		return nil, rewriteError(ctx, s.logger, err)
	}
	return &idemv1.LookupResponse{Record: recordToProto(rec)}, nil
}
