package server_test

import (
	"slices"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
)

// TestHealthAndReflection: the standard health service answers SERVING for
// the server as a whole, and reflection lists idem's service.
func TestHealthAndReflection(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := testContext(t)

	resp, err := healthpb.NewHealthClient(ts.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: ""})
	if err != nil {
		t.Fatalf("health Check: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health status %s; want SERVING", resp.GetStatus())
	}

	stream, err := reflectionpb.NewServerReflectionClient(ts.Conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""},
	}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	reply, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection recv: %v", err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range reply.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"idem.v1.IdempotencyService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v; want %s among them", names, want)
		}
	}
}

// TestHealthKnowsTheServiceBeforeTheFirstCheck: before anything has checked
// the store, the IdempotencyService's health is NOT_SERVING, not an unknown
// service, so a readiness probe that comes early gets "not yet".
func TestHealthKnowsTheServiceBeforeTheFirstCheck(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	resp, err := healthpb.NewHealthClient(ts.Conn).Check(testContext(t), &healthpb.HealthCheckRequest{Service: server.HealthServiceName})
	if err != nil {
		t.Fatalf("health of %s before any check: %v", server.HealthServiceName, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health of %s before any check: %v, want NOT_SERVING", server.HealthServiceName, resp.GetStatus())
	}
}
