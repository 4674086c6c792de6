package server_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// TestHealthFollowsWhatCallsSee: with no ping to go by, the health status
// follows the calls: one the store answers (even NOT_FOUND) makes it
// SERVING, one that finds the database unavailable NOT_SERVING, a batch
// likewise by its items; a call refused before it reached the store
// changes nothing.
func TestHealthFollowsWhatCallsSee(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	ts := testserver.StartWith(t, testserver.Options{Store: func(s *postgres.Store) store.Store {
		return &hookStore{Store: s, hook: func(context.Context, string) error {
			if down.Load() {
				return store.ErrUnavailable
			}
			return nil
		}}
	}})
	ctx := testContext(t)
	hc := healthpb.NewHealthClient(ts.Conn)
	want := func(what string, s healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, name := range []string{"", server.HealthServiceName} {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			if err != nil || r.GetStatus() != s {
				t.Fatalf("health of %q after %s: %v, %v; want %v", name, what, r.GetStatus(), err, s)
			}
		}
	}
	refused := func() {
		t.Helper()
		_, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: ""})
		requireStatus(t, err, codes.InvalidArgument, "INVALID_KEY")
	}
	lookup := func() error {
		_, err := ts.Client.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: "none"})
		return err
	}

	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: server.HealthServiceName}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health before any call: %v, %v; want NOT_SERVING", r.GetStatus(), err)
	}
	requireStatus(t, lookup(), codes.NotFound, "NOT_FOUND")
	want("a Lookup the store answered NOT_FOUND", healthpb.HealthCheckResponse_SERVING)

	down.Store(true)
	refused()
	want("a Claim refused before the store, with the database down", healthpb.HealthCheckResponse_SERVING)
	requireStatus(t, lookup(), codes.Unavailable, "STORE_UNAVAILABLE")
	want("a Lookup that found the database unavailable", healthpb.HealthCheckResponse_NOT_SERVING)

	down.Store(false)
	refused()
	want("a Claim refused before the store, with the database back", healthpb.HealthCheckResponse_NOT_SERVING)
	if _, err := ts.Client.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: []*idemv1.LookupRequest{{Namespace: ns, Key: "a"}, {Namespace: ns, Key: "b"}}}); err != nil {
		t.Fatal(err)
	}
	want("a BatchLookup the store answered", healthpb.HealthCheckResponse_SERVING)

	down.Store(true)
	resp, err := ts.Client.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: []*idemv1.LookupRequest{{Namespace: ns, Key: "a"}, {Namespace: ns, Key: "b"}}})
	if err != nil || status.FromProto(resp.GetResults()[0].GetError()).Code() != codes.Unavailable {
		t.Fatalf("BatchLookup with the database down: %v, %v; want its items UNAVAILABLE", resp, err)
	}
	want("a BatchLookup whose items found the database unavailable", healthpb.HealthCheckResponse_NOT_SERVING)
}
