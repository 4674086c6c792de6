//go:build unix

package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// TestServeBehindPgBouncerTransactionMode: behind PgBouncer in transaction
// mode, idemd without --database-pooler does not start and says which flag
// it needs; with --database-pooler=transaction it migrates and serves
// through PgBouncer, and a waiting Claim is woken by the Complete of
// another client, by polling without --database-listen-url and through
// LISTEN on the direct connection with it.
func TestServeBehindPgBouncerTransactionMode(t *testing.T) {
	t.Parallel()
	base := testdb.BaseURL(t)
	bouncer, err := testdb.StartPgBouncer(base, "transaction")
	if err != nil {
		t.Fatalf("start PgBouncer: %v", err)
	}
	t.Cleanup(bouncer.Close)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	newDatabase := func(t *testing.T) (*testdb.DB, string) {
		db := testdb.New(t, testdb.Unmigrated(), testdb.MaxConns(1))
		role, password := db.LoginRole(t)
		if err := bouncer.AddDatabase(role, strings.TrimPrefix(u.Path, "/"), role, password, 4); err != nil {
			t.Fatal(err)
		}
		return db, bouncer.URL(role)
	}

	t.Run("without the flag", func(t *testing.T) {
		t.Parallel()
		_, through := newDatabase(t)
		out, code := run(t, nil, "serve", "--database-url", through, "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", "")
		if code == 0 || !strings.Contains(out, "unsupported startup parameter") || !strings.Contains(out, "--database-pooler=transaction") {
			t.Fatalf("exit %d, output %q: want PgBouncer's refusal and the flag that fixes it", code, out)
		}
	})
	for _, listen := range []bool{false, true} {
		name := "polling"
		if listen {
			name = "listen URL"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, through := newDatabase(t)
			args := []string{"--database-url", through, "--database-pooler", "transaction"}
			if listen {
				args = append(args, "--database-listen-url", db.URL)
			}
			p := startServe(t, t.TempDir(), args...)
			if polled := strings.Contains(p.log(), "woken by polling"); polled == listen {
				t.Errorf("idemd's log says waiting Claims are woken by polling: %v, want %v; log:\n%s", polled, !listen, p.log())
			}
			conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := idemv1.NewIdempotencyServiceClient(conn)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			held, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: "k"})
			if err != nil || held.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
				t.Fatalf("Claim through PgBouncer: %v, %v", held, err)
			}
			type answer struct {
				resp *idemv1.ClaimResponse
				err  error
				took time.Duration
			}
			waited := make(chan answer, 1)
			go func() {
				start := time.Now()
				resp, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: "k", Wait: durationpb.New(20 * time.Second)})
				waited <- answer{resp, err, time.Since(start)}
			}()
			time.Sleep(500 * time.Millisecond) // the waiting Claim is waiting
			if _, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "jobs", Key: "k", Token: held.GetRecord().GetToken(), Result: []byte("ok")}); err != nil {
				t.Fatalf("Complete through PgBouncer: %v", err)
			}
			a := <-waited
			// Unwoken, the Claim would answer IN_PROGRESS when its 20 s ran out.
			if a.err != nil || a.resp.GetOutcome() != idemv1.Outcome_OUTCOME_COMPLETED || a.took > 15*time.Second {
				t.Fatalf("the waiting Claim answered %v, %v after %s; want COMPLETED once the Complete woke it", a.resp.GetOutcome(), a.err, a.took)
			}
		})
	}
}

// TestHealthFollowsCallsThroughPgBouncer: behind PgBouncer, the gRPC health
// status follows what calls see at once, not at the next of the watcher's
// pings (here an hour apart): a call that finds PgBouncer gone
// (UNAVAILABLE) leaves the health NOT_SERVING, and the first call that
// succeeds once PgBouncer is back leaves it SERVING.
func TestHealthFollowsCallsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	base := testdb.BaseURL(t)
	bouncer, err := testdb.StartPgBouncer(base, "transaction")
	if err != nil {
		t.Fatalf("start PgBouncer: %v", err)
	}
	t.Cleanup(bouncer.Close)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	db := testdb.New(t, testdb.Unmigrated(), testdb.MaxConns(1))
	role, password := db.LoginRole(t)
	if err := bouncer.AddDatabase(role, strings.TrimPrefix(u.Path, "/"), role, password, 4); err != nil {
		t.Fatal(err)
	}
	through := bouncer.URL(role) + "&connect_timeout=2"
	p := startServe(t, t.TempDir(), "--database-url", through, "--database-pooler", "transaction", "--health-interval", "1h")
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := idemv1.NewIdempotencyServiceClient(conn)
	hc := healthpb.NewHealthClient(conn)
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "idem.v1.IdempotencyService"})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	lookup := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		_, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: "jobs", Key: "none"})
		if status.Code(err) == codes.NotFound {
			return nil // the store answered
		}
		return err
	}
	if err := lookup(); err != nil {
		t.Fatalf("Lookup through PgBouncer: %v", err)
	}
	if s := health(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after a call that succeeded: %v; want SERVING", s)
	}

	if err := bouncer.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := lookup(); status.Code(err) != codes.Unavailable {
		t.Fatalf("Lookup with PgBouncer gone: %v; want UNAVAILABLE", err)
	}
	if s := health(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after a call that found the database unavailable: %v; want NOT_SERVING", s)
	}

	if err := bouncer.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for err := lookup(); err != nil; err = lookup() {
		if time.Now().After(deadline) {
			t.Fatalf("Lookup 30s after PgBouncer came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s := health(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after the first call that succeeded once PgBouncer was back: %v; want SERVING", s)
	}
}
