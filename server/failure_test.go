package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/maintenance"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// everyRPC calls each RPC once with valid arguments, for tests of what the
// server does when the store misbehaves.
var everyRPC = []struct {
	name string
	call func(ctx context.Context, c idemv1.IdempotencyServiceClient) error
}{
	{"Claim", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		_, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: "k"})
		return err
	}},
	{"Complete", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		_, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "k", Token: 1, Result: []byte("r")})
		return err
	}},
	{"Fail", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		_, err := c.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: "k", Token: 1, Error: "e"})
		return err
	}},
	{"Heartbeat", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		_, err := c.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: ns, Key: "k", Token: 1})
		return err
	}},
	{"Lookup", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		_, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: "k"})
		return err
	}},
	// The batch calls, of two keys: the error every item got (sameItemErrors).
	{"BatchClaim", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		resp, err := c.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: []*idemv1.ClaimRequest{{Namespace: ns, Key: "k"}, {Namespace: ns, Key: "k2"}}})
		return sameItemErrors(resp.GetResults(), err)
	}},
	{"BatchComplete", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		resp, err := c.BatchComplete(ctx, &idemv1.BatchCompleteRequest{Requests: []*idemv1.CompleteRequest{{Namespace: ns, Key: "k", Token: 1}, {Namespace: ns, Key: "k2", Token: 1}}})
		return sameItemErrors(resp.GetResults(), err)
	}},
	{"BatchFail", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		resp, err := c.BatchFail(ctx, &idemv1.BatchFailRequest{Requests: []*idemv1.FailRequest{{Namespace: ns, Key: "k", Token: 1, Error: "e"}, {Namespace: ns, Key: "k2", Token: 1}}})
		return sameItemErrors(resp.GetResults(), err)
	}},
	{"BatchHeartbeat", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		resp, err := c.BatchHeartbeat(ctx, &idemv1.BatchHeartbeatRequest{Requests: []*idemv1.HeartbeatRequest{{Namespace: ns, Key: "k", Token: 1}, {Namespace: ns, Key: "k2", Token: 1}}})
		return sameItemErrors(resp.GetResults(), err)
	}},
	{"BatchLookup", func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
		resp, err := c.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: []*idemv1.LookupRequest{{Namespace: ns, Key: "k"}, {Namespace: ns, Key: "k2"}}})
		return sameItemErrors(resp.GetResults(), err)
	}},
}

// sameItemErrors is a batch call's outcome as one error: the call's own
// error, or the error every item got, or an error saying that the items
// got different answers (nil when every item answered).
func sameItemErrors[R batchResult](results []R, err error) error {
	if err != nil {
		return err
	}
	var first error
	for i, r := range results {
		e := itemError(r)
		switch {
		case i == 0:
			first = e
		case (e == nil) != (first == nil) || (e != nil && !sameStatus(status.Convert(e), status.Convert(first))):
			return fmt.Errorf("the items of one batch got different answers: item 0 %v, item %d %v", first, i, e)
		}
	}
	return first
}

// TestStoreUnavailable: with the database unreachable, every RPC answers
// UNAVAILABLE / STORE_UNAVAILABLE promptly, and the sweeper reports
// store.ErrUnavailable.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/x?connect_timeout=1&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg) // lazy: connects on first use
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := postgres.New(pool)
	client, _ := serve(t, st, server.Config{})

	for _, rpc := range everyRPC {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		start := time.Now()
		err := rpc.call(ctx, client)
		cancel()
		s := requireStatus(t, err, codes.Unavailable, "STORE_UNAVAILABLE")
		if strings.Contains(s.Message(), "127.0.0.1") || strings.Contains(s.Message(), "refused") {
			t.Errorf("%s: message %q leaks the cause", rpc.name, s.Message())
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %s to report the outage", rpc.name, d)
		}
	}

	if _, err := maintenance.NewSweeper(st, maintenance.SweeperConfig{}).SweepOnce(testContext(t)); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("SweepOnce: %v; want store.ErrUnavailable", err)
	}
	if err := st.Ping(testContext(t)); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ping: %v; want store.ErrUnavailable", err)
	}
}

// TestPanicIsInternal: a panic in the store becomes INTERNAL without its
// value, and the server goes on serving.
func TestPanicIsInternal(t *testing.T) {
	t.Parallel()
	var panics atomic.Bool
	ts := testserver.StartWith(t, testserver.Options{Store: func(pg *postgres.Store) store.Store {
		return &hookStore{Store: pg, hook: func(context.Context, string) error {
			if panics.Load() {
				panic("secret panic value")
			}
			return nil
		}}
	}})
	ctx := testContext(t)

	panics.Store(true)
	for _, rpc := range everyRPC {
		s := requireStatus(t, rpc.call(ctx, ts.Client), codes.Internal, "INTERNAL")
		if strings.Contains(s.Message(), "secret") {
			t.Errorf("%s: message %q leaks the panic", rpc.name, s.Message())
		}
	}
	panics.Store(false)
	if out := mustClaim(t, ts.Client, &idemv1.ClaimRequest{Key: "after-panic"}).GetOutcome(); out != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Errorf("Claim after the panics: %s; want ACQUIRED", out)
	}
}

// TestUnknownStoreErrorIsInternal: an error the server does not know becomes
// a generic INTERNAL that does not carry the cause's text.
func TestUnknownStoreErrorIsInternal(t *testing.T) {
	t.Parallel()
	cause := errors.New(`pq: relation "idem_records" does not exist; password=hunter2`)
	ts := testserver.StartWith(t, testserver.Options{Store: func(pg *postgres.Store) store.Store {
		return &hookStore{Store: pg, hook: func(context.Context, string) error { return cause }}
	}})
	ctx := testContext(t)
	for _, rpc := range everyRPC {
		s := requireStatus(t, rpc.call(ctx, ts.Client), codes.Internal, "INTERNAL")
		for _, leak := range []string{"hunter2", "idem_records", "relation"} {
			if strings.Contains(s.Message(), leak) {
				t.Errorf("%s: message %q leaks %q from the cause", rpc.name, s.Message(), leak)
			}
		}
		if md := errorInfo(s).GetMetadata(); len(md) != 0 {
			t.Errorf("%s: ErrorInfo metadata %v; want none", rpc.name, md)
		}
	}
}

// TestDeadlineExceeded: a store call that outlives the client's deadline
// ends with DEADLINE_EXCEEDED, and the store's context ends too (grpc
// propagates the deadline), so nothing keeps running on the server.
func TestDeadlineExceeded(t *testing.T) {
	t.Parallel()
	storeSaw := make(chan error, len(everyRPC))
	ts := testserver.StartWith(t, testserver.Options{Store: func(pg *postgres.Store) store.Store {
		return &hookStore{Store: pg, hook: func(ctx context.Context, _ string) error {
			<-ctx.Done()
			storeSaw <- ctx.Err()
			return ctx.Err()
		}}
	}})
	for _, rpc := range everyRPC {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		err := rpc.call(ctx, ts.Client)
		cancel()
		requireStatus(t, err, codes.DeadlineExceeded, "")
		select {
		case got := <-storeSaw:
			// The client resets the stream when its deadline passes, which
			// may reach the server before the server's own timer fires.
			if !errors.Is(got, context.DeadlineExceeded) && !errors.Is(got, context.Canceled) {
				t.Errorf("%s: the store's context ended with %v; want it done", rpc.name, got)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the store call was still running 5s after the deadline", rpc.name)
		}
	}
}

// TestServerDeadlineAnswer checks the server's own answer when the store
// returns the context's error: DEADLINE_EXCEEDED and CANCELLED, not INTERNAL
// (the client above gives up before the server's answer arrives).
func TestServerDeadlineAnswer(t *testing.T) {
	t.Parallel()
	svc := services.NewService(&hookStore{hook: func(ctx context.Context, _ string) error {
		<-ctx.Done()
		return ctx.Err()
	}}, services.Config{}, nil)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := svc.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: "k"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Claim past its deadline: %v; want DEADLINE_EXCEEDED", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err = svc.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: "k"})
	if status.Code(err) != codes.Canceled {
		t.Errorf("cancelled Lookup: %v; want CANCELLED", err)
	}
}

// TestDeadlineThroughRealStore: a Claim or Complete that waits on a row lock
// in Postgres past its deadline is answered DEADLINE_EXCEEDED by the service
// over the real store (not UNAVAILABLE or INTERNAL), and a cancelled one
// CANCELLED. The service is called directly: over gRPC the client would give
// up before the server's answer arrives.
func TestDeadlineThroughRealStore(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	held := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "locked", LeaseTtl: dur(time.Second)})
	lapse(t, ts.DB.Pool, "locked") // so that a Claim must take the row lock to take over

	tx, err := ts.DB.Pool.Begin(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := tx.Exec(testContext(t), `SELECT 1 FROM idem_records WHERE namespace = $1 AND key = $2 FOR UPDATE`, ns, "locked"); err != nil {
		t.Fatal(err)
	}

	svc := services.NewService(ts.Store, services.Config{}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = svc.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: "locked"})
	requireStatus(t, err, codes.DeadlineExceeded, "")

	ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = svc.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "locked", Token: held.GetToken()})
	requireStatus(t, err, codes.DeadlineExceeded, "")

	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err = svc.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: ns, Key: "locked", Token: held.GetToken()})
	requireStatus(t, err, codes.Canceled, "")

	if err := tx.Rollback(testContext(t)); err != nil {
		t.Fatal(err)
	}
	// The abandoned statements run detached from their callers (so that a
	// cancelled call does not cost Postgres a connection): once the lock is
	// gone they may still apply, in the order they queued on the row. The
	// record then shows either the Claim's takeover (a greater token, still
	// PROCESSING: the old token's Complete and Heartbeat lost the lease) or
	// the holder's own token, PROCESSING or COMPLETED. Nothing else.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := mustLookup(t, ts.Client, "locked")
		takeover := got.GetToken() > held.GetToken() && got.GetState() == idemv1.State_STATE_PROCESSING
		holder := got.GetToken() == held.GetToken() &&
			(got.GetState() == idemv1.State_STATE_PROCESSING || got.GetState() == idemv1.State_STATE_COMPLETED)
		if takeover || holder {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the abandoned calls: state %s token %d; want a takeover (token > %d, PROCESSING) or the holder's token", got.GetState(), got.GetToken(), held.GetToken())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
