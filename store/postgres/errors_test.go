package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// closedPortURL points at a port nobody listens on.
const closedPortURL = "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5"

// storeCalls runs every store method once against s and returns their errors
// by name.
func storeCalls(ctx context.Context, s *postgres.Store) map[string]error {
	id := recordID("k")
	errs := map[string]error{}
	_, errs["RecordClaim"] = s.RecordClaim(ctx, claimParams(id, "w"))
	_, errs["RecordComplete"] = s.RecordComplete(ctx, &store.CompleteParams{RecordID: id, Token: 1, Result: []byte("r")})
	_, errs["RecordFail"] = s.RecordFail(ctx, &store.FailParams{RecordID: id, Token: 1, Error: "e"})
	_, errs["RecordHeartbeat"] = s.RecordHeartbeat(ctx, &store.HeartbeatParams{RecordID: id, Token: 1, LeaseTTL: testLease})
	_, errs["RecordGet"] = s.RecordGet(ctx, id)
	_, errs["SweepExpire"] = s.SweepExpire(ctx, 10)
	_, errs["SweepPurge"] = s.SweepPurge(ctx, 10)
	errs["Ping"] = s.Ping(ctx)
	return errs
}

func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(closedPortURL)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // lazy: connects on first use
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	defer pool.Close()

	for name, err := range storeCalls(ctx, postgres.New(pool)) {
		requireErr(t, name+" on a closed port", err, store.ErrUnavailable)
		for _, wrong := range []error{store.ErrNotFound, store.ErrContention, context.DeadlineExceeded} {
			if errors.Is(err, wrong) {
				t.Fatalf("%s: %v is also %v", name, err, wrong)
			}
		}
	}
}

func TestConnect(t *testing.T) {
	t.Parallel()
	b := setup(t)

	pool, err := postgres.Connect(b.ctx, b.db.URL)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer pool.Close()
	// The pool follows the URL's search_path into the test's schema.
	if v, err := postgres.SchemaVersion(b.ctx, pool); err != nil || v != postgres.LatestVersion() {
		t.Fatalf("SchemaVersion through Connect's pool: %d, %v", v, err)
	}

	start := time.Now()
	pool2, err := postgres.Connect(b.ctx, closedPortURL)
	requireErr(t, "Connect to a closed port", err, store.ErrUnavailable)
	if pool2 != nil {
		t.Fatal("Connect returned a pool alongside the error")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Connect to a closed port took %v", d)
	}

	_, err = postgres.Connect(b.ctx, "postgres://%zz")
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Connect with a malformed URL: %v; want a configuration error, not unavailable", err)
	}
}

// TestTerminatedBackendIsUnavailable: the database goes away in the middle
// of a call (here: the backend running it is terminated, as in a restart).
func TestTerminatedBackendIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("k")
	tx, pid := b.begin(t)
	if _, err := tx.Exec(b.ctx, insertProcessingSQL, id.Tenant, id.Namespace, id.Key, "other-replica"); err != nil {
		t.Fatalf("insert in the other transaction: %v", err)
	}

	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := b.store.RecordClaim(b.ctx, claimParams(id, "me"))
		errc <- err
	}()
	waiting := b.waitBlockedBy(t, pid, done)
	for _, w := range waiting {
		b.exec(t, "SELECT pg_terminate_backend($1)", w)
	}
	requireErr(t, "RecordClaim whose backend was terminated", <-errc, store.ErrUnavailable)

	// The pool recovers by itself.
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if err := b.store.Ping(b.ctx); err != nil {
		t.Fatalf("Ping after the terminated backend: %v", err)
	}
	b.acquire(t, id, "me")
}

// TestDeadlineWhileWaitingForRowLock: a caller's deadline that passes while
// the call waits for a row lock is reported as the deadline, not as the
// database being unavailable. (A canceled context is in the conformance
// suite.)
func TestDeadlineWhileWaitingForRowLock(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// A deadline that passes while the call waits for a row lock that
	// another transaction holds for longer.
	id := recordID("locked")
	tx, _ := b.begin(t)
	if _, err := tx.Exec(b.ctx, insertProcessingSQL, id.Tenant, id.Namespace, id.Key, "other-replica"); err != nil {
		t.Fatalf("insert in the other transaction: %v", err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 500*time.Millisecond)
	defer cancel()
	_, err := b.store.RecordClaim(ctx, claimParams(id, "me"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("RecordClaim past its deadline: %v; want context.DeadlineExceeded", err)
	}
}

func TestServerSideTimeoutsAreUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("locked")
	rec := b.acquire(t, id, "holder")

	// A transaction holds the row, so a Complete under lock_timeout gives up
	// with SQLSTATE 55P03; a statement_timeout gives 57014. Both mean "the
	// database could not answer in time": retryable, not a bug.
	tx, _ := b.begin(t)
	if _, err := tx.Exec(b.ctx, `SELECT 1 FROM idem_records WHERE key = $1 FOR UPDATE`, id.Key); err != nil {
		t.Fatal(err)
	}
	for _, setting := range []string{"lock_timeout", "statement_timeout"} {
		cfg, err := pgxpool.ParseConfig(b.db.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 1
		cfg.ConnConfig.RuntimeParams[setting] = "50ms"
		pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = postgres.New(pool).RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: rec.Token, Result: []byte("r")})
		pool.Close()
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Complete under %s on a locked row: %v, want ErrUnavailable", setting, err)
		}
	}
}
