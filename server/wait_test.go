package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/sqlite"
)

// The tests of ClaimRequest.wait, through the gRPC API, on both stores. The
// holder's lease is long (waitLease), so a waiter answered quickly was woken
// by the change, not by the lease running out.

const waitLease = 5 * time.Minute

// waitServer is one idem server for the wait tests.
type waitServer struct {
	client  idemv1.IdempotencyServiceClient
	metrics *server.Metrics
	store   store.Store
}

// waitStores opens a fresh store of each kind.
var waitStores = map[string]func(t *testing.T) store.Store{
	"postgres": func(t *testing.T) store.Store {
		st := postgres.New(testdb.New(t).Pool)
		t.Cleanup(st.Close)
		return st
	},
	"sqlite": func(t *testing.T) store.Store {
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
}

func startWaitServer(t *testing.T, st store.Store, cfg server.Config) *waitServer {
	t.Helper()
	cfg.Metrics = server.NewMetrics()
	c, _ := serve(t, st, cfg)
	return &waitServer{client: c, metrics: cfg.Metrics, store: st}
}

// forEachStore runs test on a server over each kind of store.
func forEachStore(t *testing.T, cfg server.Config, test func(t *testing.T, s *waitServer)) {
	for name, open := range waitStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, startWaitServer(t, open(t), cfg))
		})
	}
}

// waiting is the idem_waiting_claims gauge.
func (s *waitServer) waiting(t *testing.T) int {
	t.Helper()
	families, err := s.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "idem_waiting_claims" {
			return int(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	t.Fatal("no idem_waiting_claims")
	return 0
}

// awaitWaiting waits until n Claims wait on s.
func (s *waitServer) awaitWaiting(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.waiting(t) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d Claims wait, want %d", s.waiting(t), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitKey is a key of the test's own.
func waitKey() string {
	var buf [6]byte
	_, _ = rand.Read(buf[:])
	return "wait-" + hex.EncodeToString(buf[:])
}

// hold acquires key for a holder with a long lease and returns its token.
func hold(t *testing.T, c idemv1.IdempotencyServiceClient, key string) int64 {
	t.Helper()
	return mustAcquire(t, c, &idemv1.ClaimRequest{Namespace: ns, Key: key, Claimant: "holder", LeaseTtl: dur(waitLease)}).GetToken()
}

// waitResult is a waiting Claim's answer and how long it took.
type waitResult struct {
	resp *idemv1.ClaimResponse
	err  error
	took time.Duration
}

// startWait sends a Claim of key that waits for wait, in the background.
func startWait(ctx context.Context, c idemv1.IdempotencyServiceClient, key, claimant string, wait time.Duration) <-chan waitResult {
	out := make(chan waitResult, 1)
	go func() {
		start := time.Now()
		resp, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: key, Claimant: claimant, Wait: dur(wait)})
		out <- waitResult{resp, err, time.Since(start)}
	}()
	return out
}

func await(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(45 * time.Second):
		t.Fatal("the waiting Claim was not answered")
	}
	return waitResult{}
}

// wantOutcome checks a waiting Claim's answer: outcome, and answered within
// within.
func wantOutcome(t *testing.T, r waitResult, outcome idemv1.Outcome, within time.Duration) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("waiting Claim: %v", r.err)
	}
	if r.resp.GetOutcome() != outcome {
		t.Fatalf("waiting Claim: %v, want %v (record %v)", r.resp.GetOutcome(), outcome, r.resp.GetRecord())
	}
	if r.took > within {
		t.Fatalf("waiting Claim answered after %s, want within %s", r.took, within)
	}
}

func TestWaitWokenByComplete(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		ctx := testContext(t)
		key := waitKey()
		token := hold(t, s.client, key)
		ch := startWait(ctx, s.client, key, "waiter", 30*time.Second)
		s.awaitWaiting(t, 1)
		if _, err := s.client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: token, Result: []byte("done")}); err != nil {
			t.Fatal(err)
		}
		r := await(t, ch)
		wantOutcome(t, r, idemv1.Outcome_OUTCOME_COMPLETED, 5*time.Second)
		if got := string(r.resp.GetRecord().GetResult()); got != "done" {
			t.Fatalf("result %q, want %q", got, "done")
		}
		s.awaitWaiting(t, 0)
	})
}

func TestWaitWokenByFail(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		ctx := testContext(t)
		key := waitKey()
		token := hold(t, s.client, key)
		ch := startWait(ctx, s.client, key, "waiter", 30*time.Second)
		s.awaitWaiting(t, 1)
		if _, err := s.client.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: key, Token: token, Error: "card declined"}); err != nil {
			t.Fatal(err)
		}
		r := await(t, ch)
		wantOutcome(t, r, idemv1.Outcome_OUTCOME_FAILED, 5*time.Second)
		if got := r.resp.GetRecord().GetError(); got != "card declined" {
			t.Fatalf("error %q, want %q", got, "card declined")
		}
	})
}

// TestWaitWokenByRelease: of three waiting Claims, the Release lets exactly
// one acquire; the others keep waiting, and get the acquirer's result when
// it completes.
func TestWaitWokenByRelease(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		ctx := testContext(t)
		key := waitKey()
		token := hold(t, s.client, key)
		const n = 3
		answers := make(chan waitResult, n)
		for i := range n {
			ch := startWait(ctx, s.client, key, "waiter-"+string(rune('a'+i)), 30*time.Second)
			go func() { answers <- <-ch }()
		}
		s.awaitWaiting(t, n)
		if _, err := s.client.Fail(ctx, &idemv1.FailRequest{Namespace: ns, Key: key, Token: token, Error: "try again", Retryable: true}); err != nil {
			t.Fatal(err)
		}
		first := await(t, answers)
		wantOutcome(t, first, idemv1.Outcome_OUTCOME_ACQUIRED, 5*time.Second)
		select {
		case r := <-answers:
			t.Fatalf("a second waiting Claim was answered: %v, %v", r.resp.GetOutcome(), r.err)
		case <-time.After(200 * time.Millisecond):
		}
		s.awaitWaiting(t, n-1)
		rec := first.resp.GetRecord()
		if _, err := s.client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: rec.GetToken(), Result: []byte("second try")}); err != nil {
			t.Fatal(err)
		}
		for range n - 1 {
			r := await(t, answers)
			wantOutcome(t, r, idemv1.Outcome_OUTCOME_COMPLETED, 10*time.Second)
		}
	})
}

// TestWaitRecordDeleted: deleting a record that Claims wait on (an
// operator's DeleteRecord) wakes them, and the first takes the key, long
// before its wait or the holder's lease would end.
func TestWaitRecordDeleted(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		ctx := testContext(t)
		key := waitKey()
		hold(t, s.client, key)
		ch := startWait(ctx, s.client, key, "waiter", 30*time.Second)
		s.awaitWaiting(t, 1)
		if _, err := s.store.RecordDelete(ctx, &store.DeleteParams{RecordID: store.RecordID{Tenant: "default", Namespace: ns, Key: key}}); err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, await(t, ch), idemv1.Outcome_OUTCOME_ACQUIRED, 10*time.Second)
	})
}

// TestWaitLeaseRunsOut: nobody announces a lease running out; the waiting
// Claim looks again when it does and takes the record over.
func TestWaitLeaseRunsOut(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		ctx := testContext(t)
		key := waitKey()
		mustAcquire(t, s.client, &idemv1.ClaimRequest{Namespace: ns, Key: key, Claimant: "holder", LeaseTtl: dur(time.Second)})
		r := await(t, startWait(ctx, s.client, key, "waiter", 30*time.Second))
		wantOutcome(t, r, idemv1.Outcome_OUTCOME_ACQUIRED, 10*time.Second)
		if got := r.resp.GetRecord().GetAttempt(); got != 2 {
			t.Fatalf("attempt %d, want 2 (a takeover)", got)
		}
	})
}

func TestWaitRunsOut(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		ctx := testContext(t)
		key := waitKey()
		hold(t, s.client, key)
		const wait = 300 * time.Millisecond
		r := await(t, startWait(ctx, s.client, key, "waiter", wait))
		wantOutcome(t, r, idemv1.Outcome_OUTCOME_IN_PROGRESS, 5*time.Second)
		if r.took < wait {
			t.Fatalf("answered after %s, before the wait of %s ran out", r.took, wait)
		}
		if ra := r.resp.GetRetryAfter().AsDuration(); ra <= 0 || ra > waitLease {
			t.Fatalf("retry_after %s, want the rest of the holder's lease", ra)
		}
	})
}

// TestWaitDeadline: a call whose deadline comes before its wait ends is
// answered IN_PROGRESS before the deadline, not DEADLINE_EXCEEDED.
func TestWaitDeadline(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		key := waitKey()
		hold(t, s.client, key)
		const deadline = time.Second
		ctx, cancel := context.WithTimeout(testContext(t), deadline)
		defer cancel()
		r := await(t, startWait(ctx, s.client, key, "waiter", 30*time.Second))
		wantOutcome(t, r, idemv1.Outcome_OUTCOME_IN_PROGRESS, deadline)
		if r.took < deadline/2 {
			t.Fatalf("answered after %s: it did not wait", r.took)
		}
	})
}

// TestWaitCap: beyond the caps on waiting Claims, in all and per tenant, a
// Claim that asks to wait answers IN_PROGRESS at once.
func TestWaitCap(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]server.Config{
		"in all":     {MaxWaiters: 2, MaxWaitersPerTenant: 10},
		"per tenant": {MaxWaiters: 10, MaxWaitersPerTenant: 2},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			forEachStore(t, cfg, func(t *testing.T, s *waitServer) {
				ctx, cancel := context.WithCancel(testContext(t))
				defer cancel()
				key := waitKey()
				hold(t, s.client, key)
				for i := range 2 {
					startWait(ctx, s.client, key, "waiter-"+string(rune('a'+i)), 30*time.Second)
				}
				s.awaitWaiting(t, 2)
				r := await(t, startWait(ctx, s.client, key, "over", 30*time.Second))
				wantOutcome(t, r, idemv1.Outcome_OUTCOME_IN_PROGRESS, 2*time.Second)
				if r.resp.GetRetryAfter() == nil {
					t.Fatal("no retry_after")
				}
			})
		})
	}
}

func TestWaitInvalid(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		ctx := testContext(t)
		for _, wait := range []time.Duration{-time.Second, limits.MaxWait + time.Millisecond} {
			_, err := s.client.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: waitKey(), Wait: dur(wait)})
			st := requireStatus(t, err, codes.InvalidArgument, "INVALID_WAIT")
			if info := errorInfo(st); info.GetMetadata()["field"] != "wait" {
				t.Fatalf("wait %s: field %q, want wait", wait, info.GetMetadata()["field"])
			}
			if msg := st.Message(); !strings.Contains(msg, "wait") || !strings.Contains(msg, "1m0s") {
				t.Fatalf("wait %s: message %q names neither the field nor the bound", wait, msg)
			}
		}
		// Nothing was written.
		if _, err := s.client.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: waitKey(), Wait: dur(limits.MaxWait)}); err != nil {
			t.Fatalf("wait of %s: %v", limits.MaxWait, err)
		}
	})
}

// twoReplicas starts two servers, each with a store and pool of its own, on
// one Postgres schema; the second's connections carry application name app.
// It returns the schema too.
func twoReplicas(t *testing.T, app string) (a, b *waitServer, db *testdb.DB) {
	t.Helper()
	db = testdb.New(t)
	stA := postgres.New(db.Pool)
	t.Cleanup(stA.Close)
	pool, err := postgres.Connect(testContext(t), db.URL+"&application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	stB := postgres.New(pool)
	t.Cleanup(stB.Close)
	return startWaitServer(t, stA, server.Config{}), startWaitServer(t, stB, server.Config{}), db
}

// TestWaitAcrossReplicas: a Complete on one replica wakes a Claim waiting on
// another within milliseconds (the bound here leaves room for a loaded
// machine; the holder's lease and the wait are minutes and seconds).
func TestWaitAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b, _ := twoReplicas(t, "idem-wait-test-"+waitKey())
	ctx := testContext(t)
	key := waitKey()
	token := hold(t, a.client, key)
	ch := startWait(ctx, b.client, key, "waiter", 30*time.Second)
	b.awaitWaiting(t, 1)
	start := time.Now()
	if _, err := a.client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: token, Result: []byte("done")}); err != nil {
		t.Fatal(err)
	}
	r := await(t, ch)
	wantOutcome(t, r, idemv1.Outcome_OUTCOME_COMPLETED, 30*time.Second)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("answered %s after the Complete, want at once", took)
	}
}

// TestWaitListenerKilled: when the listening connection of the waiter's
// replica is killed, a Complete sent while it is gone is not heard; the
// waiter is still answered, when the listener is back.
func TestWaitListenerKilled(t *testing.T) {
	t.Parallel()
	app := "idem-wait-test-" + waitKey()
	a, b, db := twoReplicas(t, app)
	ctx := testContext(t)
	key := waitKey()
	token := hold(t, a.client, key)
	ch := startWait(ctx, b.client, key, "waiter", 30*time.Second)
	b.awaitWaiting(t, 1)

	var killed int
	deadline := time.Now().Add(10 * time.Second)
	for killed == 0 {
		if err := db.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if killed == 0 && time.Now().After(deadline) {
			t.Fatal("no listener to kill")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := a.client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: token, Result: []byte("done")}); err != nil {
		t.Fatal(err)
	}
	r := await(t, ch)
	wantOutcome(t, r, idemv1.Outcome_OUTCOME_COMPLETED, 15*time.Second)
}

// TestWaitManyKeys: many Claims wait on many keys at once, and every one is
// answered by its own key's Complete.
func TestWaitManyKeys(t *testing.T) {
	t.Parallel()
	forEachStore(t, server.Config{}, func(t *testing.T, s *waitServer) {
		ctx := testContext(t)
		const n = 20
		keys := make([]string, n)
		tokens := make([]int64, n)
		for i := range keys {
			keys[i] = waitKey()
			tokens[i] = hold(t, s.client, keys[i])
		}
		var wg sync.WaitGroup
		results := make([]waitResult, n)
		for i, key := range keys {
			ch := startWait(ctx, s.client, key, "waiter", 30*time.Second)
			wg.Go(func() { results[i] = <-ch })
		}
		s.awaitWaiting(t, n)
		for i, key := range keys {
			if _, err := s.client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: tokens[i], Result: []byte(key)}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		for i, r := range results {
			wantOutcome(t, r, idemv1.Outcome_OUTCOME_COMPLETED, 15*time.Second)
			if got := string(r.resp.GetRecord().GetResult()); got != keys[i] {
				t.Fatalf("key %s: result %q", keys[i], got)
			}
		}
	})
}

// TestEndWaits: once EndWaits is called, waiting Claims answer IN_PROGRESS
// at once, and later Claims do not wait.
func TestEndWaits(t *testing.T) {
	t.Parallel()
	for name, open := range waitStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			svc := services.NewService(open(t), services.Config{}, nil)
			srv := grpc.NewServer()
			idemv1.RegisterIdempotencyServiceServer(srv, svc)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(lis) }()
			t.Cleanup(srv.Stop)
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			client := idemv1.NewIdempotencyServiceClient(conn)

			ctx := testContext(t)
			key := waitKey()
			hold(t, client, key)
			ch := startWait(ctx, client, key, "waiter", 30*time.Second)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if waiting, _ := svc.Waiting(); waiting == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the Claim does not wait")
				}
			}
			svc.EndWaits()
			wantOutcome(t, await(t, ch), idemv1.Outcome_OUTCOME_IN_PROGRESS, 10*time.Second)
			r := await(t, startWait(ctx, client, key, "late", 30*time.Second))
			wantOutcome(t, r, idemv1.Outcome_OUTCOME_IN_PROGRESS, 2*time.Second)
		})
	}
}

// TestShutdownEndsWaits: a Claim that waits answers IN_PROGRESS as soon as
// the server starts to shut down, rather than hold the drain up for its
// wait.
func TestShutdownEndsWaits(t *testing.T) {
	t.Parallel()
	st := waitStores["sqlite"](t)
	metrics := server.NewMetrics()
	srv, err := server.New(server.Options{Store: st, Config: server.Config{Metrics: metrics}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s := &waitServer{client: idemv1.NewIdempotencyServiceClient(conn), metrics: metrics}

	ctx := testContext(t)
	key := waitKey()
	hold(t, s.client, key)
	ch := startWait(ctx, s.client, key, "waiter", 30*time.Second)
	s.awaitWaiting(t, 1)
	shutdownCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wantOutcome(t, await(t, ch), idemv1.Outcome_OUTCOME_IN_PROGRESS, 10*time.Second)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Shutdown took %s with a Claim waiting 30s; want the wait ended", took)
	}
}
