package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testsupport/refusingpg"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/postgres/migrations"
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

// refusals are the errors a server answers a new connection with when it
// will not serve it, by SQLSTATE, in PostgreSQL's words.
var refusals = []struct{ code, message string }{
	{"55000", `database "idem" is not currently accepting connections`},
	{"3D000", `database "idem" does not exist`},
	{"28000", `role "idem" is not permitted to log in`},
	{"28P01", `password authentication failed for user "idem"`},
	{"53300", `too many connections for role "idem"`},
	{"57P01", "terminating connection due to administrator command"},
	{"57P02", "terminating connection because of crash of another server process"},
	{"57P03", "the database system is starting up"},
}

// TestRefusedConnectionIsUnavailable: a server that answers but refuses the
// connection, whatever its reason, is a database that cannot be reached:
// every call is ErrUnavailable, also Connect's. pgx reports the refusal as
// a *pgconn.ConnectError wrapping the server's *pgconn.PgError, whose code
// alone (a missing database, a role that may not log in) says nothing about
// the database being unreachable.
func TestRefusedConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, r := range refusals {
		t.Run(r.code, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			url := refusingpg.Start(t, r.code, r.message)

			_, err := postgres.Connect(ctx, url)
			requireErr(t, "Connect", err, store.ErrUnavailable)
			var connectErr *pgconn.ConnectError
			var pgErr *pgconn.PgError
			if !errors.As(err, &connectErr) || !errors.As(err, &pgErr) || pgErr.Code != r.code {
				t.Fatalf("Connect: %v; want a ConnectError wrapping the server's %s, as a real refusal", err, r.code)
			}

			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			pool, err := pgxpool.NewWithConfig(ctx, cfg) // lazy: connects on first use
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			s := postgres.New(pool)
			defer s.Close()
			for name, err := range storeCalls(ctx, s) {
				requireErr(t, name, err, store.ErrUnavailable)
			}
			_, err = s.RecordList(ctx, &store.ListParams{Tenant: "acme", Limit: 10})
			requireErr(t, "RecordList", err, store.ErrUnavailable)
			_, err = s.RecordStats(ctx, &store.StatsParams{Tenant: "acme"})
			requireErr(t, "RecordStats", err, store.ErrUnavailable)
			_, err = s.RecordDelete(ctx, &store.DeleteParams{RecordID: recordID("k")})
			requireErr(t, "RecordDelete", err, store.ErrUnavailable)
			_, err = s.RecordResolve(ctx, &store.ResolveParams{RecordID: recordID("k"), Resolution: store.ResolveReleased})
			requireErr(t, "RecordResolve", err, store.ErrUnavailable)
			_, err = s.CountByState(ctx)
			requireErr(t, "CountByState", err, store.ErrUnavailable)
		})
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
	if v, err := migrations.SchemaVersion(b.ctx, pool); err != nil || v != postgres.LatestVersion() {
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
