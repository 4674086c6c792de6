package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/server/middleware"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
)

// HealthServiceName is the name under which the health service reports the
// IdempotencyService.
const HealthServiceName = "idem.v1.IdempotencyService"

// storeHealth is the store's health as the calls and pings see it,
// reported by the gRPC health server (the overall status "" and
// HealthServiceName's): a call the database answered makes it
// SERVING at once and one that found the database unavailable NOT_SERVING
// (observe), so that after an outage the status turns with the first call
// that succeeds rather than at the next ping (watch); a ping counts too,
// unless a call changed the status after the ping started. A load balancer
// then stops sending work to a replica that cannot reach the database, and
// sends it again when it can.
type storeHealth struct {
	logger *slog.Logger
	server *health.Server
	state  atomic.Int32 // read without mu on every call

	mu         sync.Mutex
	callChange time.Time // when a call last changed the state
}

// newStoreHealth reports to a new health server, which answers NOT_SERVING
// for idem's service until a call or a ping has seen the store answer: a
// readiness probe that asks before the first check gets "not yet", not
// "unknown service".
func newStoreHealth(logger *slog.Logger) *storeHealth {
	h := &storeHealth{logger: logger, server: health.NewServer()}
	h.server.SetServingStatus(HealthServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	return h
}

// watch pings st every interval until ctx is done, so that the health
// status follows the database while no call comes.
func (h *storeHealth) watch(ctx context.Context, st store.Store, interval time.Duration) {
	check := func() {
		start := time.Now()
		pingCtx, cancel := context.WithTimeout(ctx, interval)
		err := st.Ping(pingCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.pinged(start, err)
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

// observe makes a call of idem's services tell h what the database
// answered: an answer of the store (OK, not found, lease lost, …; a batch's
// items likewise) says it answers, STORE_UNAVAILABLE that it does not.
// Anything else, a call refused before it reached the store or a cancelled
// one, says nothing.
func (h *storeHealth) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if !strings.HasPrefix(info.FullMethod, "/idem.v1.") {
		return resp, err
	}
	errs := []error{err}
	if err == nil && services.IsBatch(info.FullMethod) {
		errs = middleware.BatchErrors(resp)
	}
	var unavailable error
	for _, e := range errs {
		if e == nil {
			h.call(true, nil)
			return resp, err
		}
		switch reason := errorReason(e); {
		case answers[reason]:
			h.call(true, nil)
			return resp, err
		case reason == "STORE_UNAVAILABLE":
			unavailable = e
		}
	}
	if unavailable != nil {
		h.call(false, unavailable)
	}
	return resp, err
}

// answers are the reasons of the answers the store got from the database.
var answers = map[string]bool{"NOT_FOUND": true, "LEASE_LOST": true, "ALREADY_TERMINAL": true, "RESOLVED_BY_OPERATOR": true,
	"NOT_UNRESOLVED": true, "FINGERPRINT_MISMATCH": true, "CONTENTION": true}

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
	setServing(h.server, serving)
	return true
}

func stateOf(serving bool) int32 {
	if serving {
		return healthServing
	}
	return healthNotServing
}

func setServing(hs *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !serving {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	hs.SetServingStatus("", st)
	hs.SetServingStatus(HealthServiceName, st)
}

// errorReason is the ErrorInfo reason of err, "" for none.
func errorReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
