package server

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/idemhq/idem/store"
)

// WatchHealth keeps the gRPC health service's overall status ("") and the
// IdempotencyService's in step with the store: SERVING while a ping answers,
// NOT_SERVING while it does not, checked every interval until ctx is done.
// A load balancer then stops sending work to a replica that cannot reach the
// database, and sends it again when it can.
func WatchHealth(ctx context.Context, st store.Store, hs *health.Server, interval time.Duration, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	serving := true
	check := func() {
		pingCtx, cancel := context.WithTimeout(ctx, interval)
		err := st.Ping(pingCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && serving:
			logger.WarnContext(ctx, "database unreachable: health is NOT_SERVING", "error", err)
		case err == nil && !serving:
			logger.InfoContext(ctx, "database reachable again: health is SERVING")
		}
		serving = err == nil
		status := healthpb.HealthCheckResponse_SERVING
		if !serving {
			status = healthpb.HealthCheckResponse_NOT_SERVING
		}
		hs.SetServingStatus("", status)
		hs.SetServingStatus(HealthServiceName, status)
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

// HealthServiceName is the name under which the health service reports the
// IdempotencyService.
const HealthServiceName = "idem.v1.IdempotencyService"
