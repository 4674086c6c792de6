package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/maintenance"
	"github.com/idemhq/idem/internal/testsupport/refusingpg"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/sqlite"
)

// ownDatabase is a PostgreSQL database and a login role of one test's own,
// which the test may make refuse connections without disturbing anyone
// else: idem runs on it as the role.
type ownDatabase struct {
	ctx   context.Context
	admin *pgx.Conn // to the base database, as the tests' own user
	// name is the database's and the role's name.
	name string
	// url connects to the database as the role.
	url  string
	pool *pgxpool.Pool
}

// newOwnDatabase creates the database and the role, migrates the schema
// into it, and drops both in t.Cleanup.
func newOwnDatabase(t *testing.T) *ownDatabase {
	t.Helper()
	ctx := testContext(t)
	base := testdb.BaseURL(t)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to the tests' PostgreSQL: %v", err)
	}
	var buf [6]byte
	_, _ = rand.Read(buf[:])
	name := "idem_refuse_" + hex.EncodeToString(buf[:])
	password := hex.EncodeToString(buf[:]) // the server may ask for one
	t.Cleanup(func() {
		// Under any name the test gave the database, whatever it let in.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, sql := range []string{
			"DROP DATABASE IF EXISTS " + name + " WITH (FORCE)",
			"DROP DATABASE IF EXISTS " + name + "_renamed WITH (FORCE)",
			"DROP ROLE IF EXISTS " + name,
		} {
			if _, err := admin.Exec(ctx, sql); err != nil {
				t.Errorf("clean up: %s: %v", sql, err)
			}
		}
		_ = admin.Close(ctx)
	})
	for _, sql := range []string{
		"CREATE ROLE " + name + " LOGIN PASSWORD '" + password + "'",
		"CREATE DATABASE " + name + " OWNER " + name,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v (the tests' PostgreSQL user must be allowed to create roles and databases)", sql, err)
		}
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	u.Path = "/" + name
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()

	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before the database is dropped
	if _, err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate %s: %v", name, err)
	}
	return &ownDatabase{ctx: ctx, admin: admin, name: name, url: u.String(), pool: pool}
}

// exec runs sql as the tests' own user.
func (d *ownDatabase) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := d.admin.Exec(d.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// terminate ends every backend of the role, idle or not, as an operator
// would after changing what the role or database may do: the pool's next
// call has to connect anew.
func (d *ownDatabase) terminate(t *testing.T) {
	t.Helper()
	d.exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", d.name)
}

// refusedCase makes a running idem's database refuse, as one SQLSTATE
// class does, and then lets it in again; or, for the classes no test can
// produce on a real server, names the refusal a stand-in server gives.
type refusedCase struct {
	code string
	// refuse makes d refuse idem's connections; heal undoes it.
	refuse, heal func(t *testing.T, d *ownDatabase)
	// message is the stand-in server's refusal when refuse is nil.
	message string
}

var refusedCases = []refusedCase{
	{code: "55000", refuse: func(t *testing.T, d *ownDatabase) {
		d.exec(t, "ALTER DATABASE "+d.name+" ALLOW_CONNECTIONS false")
		d.terminate(t)
	}, heal: func(t *testing.T, d *ownDatabase) {
		d.exec(t, "ALTER DATABASE "+d.name+" ALLOW_CONNECTIONS true")
	}},
	{code: "3D000", refuse: func(t *testing.T, d *ownDatabase) {
		// A database with sessions cannot be renamed; the pool opens none
		// while no call runs, but try again should one slip in.
		for try := 0; ; try++ {
			d.terminate(t)
			_, err := d.admin.Exec(d.ctx, "ALTER DATABASE "+d.name+" RENAME TO "+d.name+"_renamed")
			if err == nil {
				return
			}
			if try == 20 {
				t.Fatalf("rename the database: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}, heal: func(t *testing.T, d *ownDatabase) {
		d.exec(t, "ALTER DATABASE "+d.name+"_renamed RENAME TO "+d.name)
	}},
	{code: "28000", refuse: func(t *testing.T, d *ownDatabase) {
		d.exec(t, "ALTER ROLE "+d.name+" NOLOGIN")
		d.terminate(t)
	}, heal: func(t *testing.T, d *ownDatabase) {
		d.exec(t, "ALTER ROLE "+d.name+" LOGIN")
	}},
	{code: "53300", refuse: func(t *testing.T, d *ownDatabase) {
		d.exec(t, "ALTER ROLE "+d.name+" CONNECTION LIMIT 0")
		d.terminate(t)
	}, heal: func(t *testing.T, d *ownDatabase) {
		d.exec(t, "ALTER ROLE "+d.name+" CONNECTION LIMIT -1")
	}},
	// With trust authentication no password is wrong, and no test can
	// crash or start the server under the others: a stand-in server refuses
	// as PostgreSQL does (refusingpg).
	{code: "28P01", message: `password authentication failed for user "idem"`},
	{code: "57P01", message: "terminating connection due to administrator command"},
	{code: "57P02", message: "terminating connection because of crash of another server process"},
	{code: "57P03", message: "the database system is starting up"},
}

// TestRefusedDatabaseIsUnavailable: a database that refuses idem's
// connections, for any reason PostgreSQL gives, is UNAVAILABLE with
// STORE_UNAVAILABLE on every RPC of both services, over gRPC and over the
// HTTP/JSON API (Connect and REST), and the sweeper's pass fails with
// store.ErrUnavailable, never INTERNAL; once the database lets idem in
// again, the same server serves without a restart.
func TestRefusedDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	// One after another: each case holds a few of the connections that
	// every test package shares.
	for _, c := range refusedCases {
		t.Run(c.code, func(t *testing.T) {
			var (
				d  *ownDatabase
				st *postgres.Store
			)
			if c.refuse != nil {
				d = newOwnDatabase(t)
				st = postgres.New(d.pool)
			} else {
				cfg, err := pgxpool.ParseConfig(refusingpg.Start(t, c.code, c.message))
				if err != nil {
					t.Fatal(err)
				}
				pool, err := pgxpool.NewWithConfig(testContext(t), cfg) // lazy: connects on first use
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				st = postgres.New(pool)
			}
			t.Cleanup(st.Close)
			ts := testserver.StartWith(t, testserver.Options{JSON: true, DBOptions: []testdb.Option{testdb.MaxConns(1)},
				Store: func(*postgres.Store) store.Store { return st }})

			if d != nil {
				mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "before"})
				c.refuse(t, d)
			}
			requireUnavailableEverywhere(t, ts, st)
			if d == nil {
				return
			}
			c.heal(t, d)
			mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "after"})
			if rec := mustLookup(t, ts.Client, "before"); rec.GetState() != idemv1.State_STATE_PROCESSING {
				t.Fatalf("the record claimed before the refusal: %s", rec.GetState())
			}
		})
	}
}

// TestTerminatedMidCallIsUnavailable: a backend terminated while it runs
// the call (SQLSTATE 57P01, as in a restart or an operator's
// pg_terminate_backend) is UNAVAILABLE over gRPC and over HTTP/JSON, and
// the pool recovers by itself.
func TestTerminatedMidCallIsUnavailable(t *testing.T) {
	t.Parallel()
	d := newOwnDatabase(t)
	st := postgres.New(d.pool)
	t.Cleanup(st.Close)
	ts := testserver.StartWith(t, testserver.Options{JSON: true, DBOptions: []testdb.Option{testdb.MaxConns(1)},
		Store: func(*postgres.Store) store.Store { return st }})
	rec := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "locked"})

	// A transaction of the test's holds the record's row, so the Complete
	// waits for it inside Postgres until its backend is terminated.
	locker, err := pgx.Connect(d.ctx, d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	lockerPID := int64(locker.PgConn().PID())

	// Each call runs in a goroutine while the test terminates its backend,
	// and returns the check of its answer, for the test's goroutine to run.
	complete := map[string]func() func(t *testing.T){
		"grpc": func() func(t *testing.T) {
			_, err := ts.Client.Complete(testContext(t), &idemv1.CompleteRequest{Namespace: ns, Key: "locked", Token: rec.GetToken(), Result: []byte("r")})
			return func(t *testing.T) { requireStatus(t, err, codes.Unavailable, "STORE_UNAVAILABLE") }
		},
	}
	for _, p := range protocols {
		complete[p.name] = func() func(t *testing.T) {
			a := p.call(t, ts.JSONURL, "Complete", map[string]any{"namespace": ns, "key": "locked", "token": rec.GetToken(), "result": "cg=="}, "")
			return func(t *testing.T) { checkJSONError(t, a, p.name == "rest", "unavailable", "STORE_UNAVAILABLE") }
		}
	}
	for name, call := range complete {
		tx, err := locker.Begin(d.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(d.ctx, "SELECT 1 FROM idem_records WHERE key = 'locked' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		var check func(t *testing.T)
		done := make(chan struct{})
		go func() {
			defer close(done)
			check = call()
		}()
		var waiting int64
		for deadline := time.Now().Add(20 * time.Second); waiting == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no backend of idem's waited for the row lock", name)
			}
			err := d.admin.QueryRow(d.ctx, `SELECT pid FROM pg_stat_activity
				WHERE usename = $1 AND $2::int = ANY(pg_blocking_pids(pid))`, d.name, lockerPID).Scan(&waiting)
			if errors.Is(err, pgx.ErrNoRows) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		d.exec(t, "SELECT pg_terminate_backend($1::int)", waiting)
		<-done
		if check == nil {
			t.Fatalf("%s: the call did not answer", name)
		}
		t.Run(name, check)
		if err := tx.Rollback(d.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustLookup(t, ts.Client, "locked"); got.GetState() != idemv1.State_STATE_PROCESSING {
		t.Fatalf("after the terminated Completes: %s; want PROCESSING", got.GetState())
	}
}

// TestUnreadableSQLiteFileIsUnavailable: on the SQLite store, a file that
// can no longer be read as a database (here its contents, journal and all,
// were overwritten in place) is UNAVAILABLE with STORE_UNAVAILABLE on every
// RPC, over gRPC and HTTP/JSON, reads and writes alike, never INTERNAL.
func TestUnreadableSQLiteFileIsUnavailable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlite.Open(testContext(t), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ts := testserver.StartWith(t, testserver.Options{JSON: true, DBOptions: []testdb.Option{testdb.MaxConns(1)},
		Store: func(*postgres.Store) store.Store { return st }})
	mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "before"})

	garbage := bytes.Repeat([]byte("not a database "), 1<<10)
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.WriteFile(name, garbage, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	requireUnavailableEverywhere(t, ts, st)
}

// requireUnavailableEverywhere calls every RPC of both services over gRPC,
// Connect JSON and REST, and the sweeper, and requires each to report the
// store unavailable.
func requireUnavailableEverywhere(t *testing.T, ts *testserver.Server, st store.Store) {
	t.Helper()
	ctx := testContext(t)
	for _, rpc := range everyRPC {
		requireStatus(t, rpc.call(ctx, ts.Client), codes.Unavailable, "STORE_UNAVAILABLE")
	}
	for name, call := range map[string]func() error{
		"ListRecords": func() error { _, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{}); return err },
		"DeleteRecord": func() error {
			_, err := ts.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: ns, Key: "k"})
			return err
		},
		"Stats": func() error { _, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{}); return err },
		"ResolveRecord": func() error {
			_, err := ts.Admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Namespace: ns, Key: "k",
				Resolution: &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}})
			return err
		},
	} {
		t.Run("grpc/"+name, func(t *testing.T) { requireStatus(t, call(), codes.Unavailable, "STORE_UNAVAILABLE") })
	}

	id := map[string]any{"namespace": ns, "key": "k"}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{"namespace": ns, "key": "k"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, p := range protocols {
		for method, msg := range map[string]map[string]any{
			"Claim":     id,
			"Complete":  with(map[string]any{"token": "1", "result": "cg=="}),
			"Fail":      with(map[string]any{"token": "1", "error": "e"}),
			"Heartbeat": with(map[string]any{"token": "1"}),
			"Lookup":    id,
		} {
			a := p.call(t, ts.JSONURL, method, msg, "")
			t.Run(p.name+"/"+method, func(t *testing.T) { checkJSONError(t, a, p.name == "rest", "unavailable", "STORE_UNAVAILABLE") })
		}
	}
	for _, p := range protocols {
		for _, method := range []string{"BatchClaim", "BatchComplete", "BatchFail", "BatchHeartbeat", "BatchLookup"} {
			items := []any{with(map[string]any{"token": "1"}), map[string]any{"namespace": ns, "key": "k2", "token": "1"}}
			if method == "BatchClaim" || method == "BatchLookup" {
				items = []any{id, map[string]any{"namespace": ns, "key": "k2"}}
			}
			a := p.call(t, ts.JSONURL, method, map[string]any{"requests": items}, "")
			t.Run(p.name+"/"+method, func(t *testing.T) {
				results, _ := wantOK(t, method, a)["results"].([]any)
				if len(results) != len(items) {
					t.Fatalf("%d results in %s; want %d", len(results), a.raw, len(items))
				}
				for i, r := range results {
					if code, reason := jsonItemReason(t, r); code != float64(codes.Unavailable) || reason != "STORE_UNAVAILABLE" {
						t.Fatalf("item %d: %v / %q; want 14 / STORE_UNAVAILABLE", i, code, reason)
					}
				}
			})
		}
	}
	for method, msg := range map[string]map[string]any{
		"ListRecords":   {},
		"DeleteRecord":  id,
		"Stats":         {},
		"ResolveRecord": with(map[string]any{"released": map[string]any{}}),
	} {
		a := connectCall(t, ts.JSONURL, "AdminService", method, msg, "")
		t.Run("connect/"+method, func(t *testing.T) { checkJSONError(t, a, false, "unavailable", "STORE_UNAVAILABLE") })
	}

	if _, err := maintenance.NewSweeper(st, maintenance.SweeperConfig{}).SweepOnce(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("SweepOnce: %v; want store.ErrUnavailable", err)
	}
	if err := st.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ping: %v; want store.ErrUnavailable", err)
	}
}
