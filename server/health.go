package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/idemhq/idem/store"
)

// HealthServiceName is the name under which the health service reports the
// IdempotencyService.
const HealthServiceName = "idem.v1.IdempotencyService"

// WatchHealth pings the store every interval until ctx is done, so that the
// health status follows the database while no call comes: SERVING while a
// ping answers, NOT_SERVING while it does not. Between pings the status
// follows the calls (storeHealth). A load balancer then stops sending work
// to a replica that cannot reach the database, and sends it again when it
// can.
func (s *Service) WatchHealth(ctx context.Context, interval time.Duration) {
	check := func() {
		start := time.Now()
		pingCtx, cancel := context.WithTimeout(ctx, interval)
		err := s.store.Ping(pingCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.health.pinged(start, err)
	}
	check()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}

// The states of storeHealth.
const (
	healthUnknown int32 = iota
	healthServing
	healthNotServing
)

// storeHealth is the store's health as the service sees it, reported by
// the health servers attached to it (the overall status "" and
// HealthServiceName's). A store call the database answered makes it
// SERVING at once and one that found the database unavailable NOT_SERVING,
// so that after an outage the status turns with the first call that
// succeeds rather than at the next ping; a ping counts too, unless a call
// changed the status after the ping started.
type storeHealth struct {
	logger *slog.Logger
	state  atomic.Int32 // read without mu on every store call

	mu         sync.Mutex
	servers    []*health.Server
	callChange time.Time // when a call last changed the state
}

// attach makes hs report the health from now on.
func (h *storeHealth) attach(hs *health.Server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append(h.servers, hs)
	if s := h.state.Load(); s != healthUnknown {
		setServing(hs, s == healthServing)
	}
}

// saw records what a store call's error says of the database: nil or an
// answer of the store (not found, lease lost, …) that it answers, and
// store.ErrUnavailable that it does not. Anything else, a cancelled call or
// input the store refused before sending it, says nothing.
func (h *storeHealth) saw(err error) {
	switch {
	case err == nil || answered(err):
		h.call(true, nil)
	case errors.Is(err, store.ErrUnavailable):
		h.call(false, err)
	}
}

// sawMany is saw for the items of a batch: one item the database answered
// is enough to say it answers.
func (h *storeHealth) sawMany(errs []error) {
	var unavailable error
	for _, err := range errs {
		switch {
		case err == nil || answered(err):
			h.call(true, nil)
			return
		case errors.Is(err, store.ErrUnavailable):
			unavailable = err
		}
	}
	if unavailable != nil {
		h.call(false, unavailable)
	}
}

// answered reports whether err is an answer the store got from the
// database.
func answered(err error) bool {
	for _, answer := range []error{store.ErrNotFound, store.ErrLeaseLost, store.ErrAlreadyTerminal, store.ErrResolvedByOperator,
		store.ErrNotUnresolved, store.ErrFingerprintMismatch, store.ErrContention} {
		if errors.Is(err, answer) {
			return true
		}
	}
	return false
}

func (h *storeHealth) call(serving bool, err error) {
	if h.state.Load() == stateOf(serving) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.change(serving, "a call", err) {
		h.callChange = time.Now()
	}
}

// pinged records the answer of a ping that started at start.
func (h *storeHealth) pinged(start time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if start.Before(h.callChange) {
		return // a call saw the database since, and is the fresher news
	}
	h.change(err == nil, "a ping", err)
}

// change sets the state, with h.mu held, and reports whether it changed.
func (h *storeHealth) change(serving bool, by string, err error) bool {
	was := h.state.Swap(stateOf(serving))
	if was == stateOf(serving) {
		return false
	}
	switch {
	case !serving:
		h.logger.Warn("database unreachable: health is NOT_SERVING", "seen_by", by, "error", err)
	case was == healthNotServing:
		h.logger.Info("database reachable again: health is SERVING", "seen_by", by)
	}
	for _, hs := range h.servers {
		setServing(hs, serving)
	}
	return true
}

func stateOf(serving bool) int32 {
	if serving {
		return healthServing
	}
	return healthNotServing
}

func setServing(hs *health.Server, serving bool) {
	status := healthpb.HealthCheckResponse_SERVING
	if !serving {
		status = healthpb.HealthCheckResponse_NOT_SERVING
	}
	hs.SetServingStatus("", status)
	hs.SetServingStatus(HealthServiceName, status)
}

// healthStore is the store of a service: every call's outcome tells its
// storeHealth what the database answered.
type healthStore struct {
	store.Store
	health *storeHealth
}

func (s healthStore) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	res, err := s.Store.RecordClaim(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	res, errs := s.Store.RecordClaimMany(ctx, ps)
	s.health.sawMany(errs)
	return res, errs
}

func (s healthStore) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	res, err := s.Store.RecordComplete(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordCompleteMany(ctx context.Context, ps []*store.CompleteParams) ([]*store.Record, []error) {
	res, errs := s.Store.RecordCompleteMany(ctx, ps)
	s.health.sawMany(errs)
	return res, errs
}

func (s healthStore) RecordFail(ctx context.Context, p *store.FailParams) (*store.Record, error) {
	res, err := s.Store.RecordFail(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordFailMany(ctx context.Context, ps []*store.FailParams) ([]*store.Record, []error) {
	res, errs := s.Store.RecordFailMany(ctx, ps)
	s.health.sawMany(errs)
	return res, errs
}

func (s healthStore) RecordHeartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.Record, error) {
	res, err := s.Store.RecordHeartbeat(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordHeartbeatMany(ctx context.Context, ps []*store.HeartbeatParams) ([]*store.Record, []error) {
	res, errs := s.Store.RecordHeartbeatMany(ctx, ps)
	s.health.sawMany(errs)
	return res, errs
}

func (s healthStore) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	res, err := s.Store.RecordGet(ctx, id)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordGetMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, []error) {
	res, errs := s.Store.RecordGetMany(ctx, ids)
	s.health.sawMany(errs)
	return res, errs
}

func (s healthStore) RecordList(ctx context.Context, p *store.ListParams) ([]*store.Record, error) {
	res, err := s.Store.RecordList(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordDelete(ctx context.Context, p *store.DeleteParams) (*store.Record, error) {
	res, err := s.Store.RecordDelete(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordResolve(ctx context.Context, p *store.ResolveParams) (*store.Record, error) {
	res, err := s.Store.RecordResolve(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordTimeline(ctx context.Context, p *store.TimelineParams) ([]store.TimelineEntry, error) {
	res, err := s.Store.RecordTimeline(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordListHeld(ctx context.Context, p *store.ListHeldParams) ([]*store.Record, error) {
	res, err := s.Store.RecordListHeld(ctx, p)
	s.health.saw(err)
	return res, err
}

func (s healthStore) RecordStats(ctx context.Context, p *store.StatsParams) ([]store.StatsRow, error) {
	res, err := s.Store.RecordStats(ctx, p)
	s.health.saw(err)
	return res, err
}
