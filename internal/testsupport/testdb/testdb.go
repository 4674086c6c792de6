// Package testdb gives tests a real, freshly migrated PostgreSQL schema of
// their own, and finds or starts the PostgreSQL to create it in.
//
// Which PostgreSQL, decided once per test binary:
//
//  1. IDEM_TEST_DATABASE_URL, when set, and nothing else: a database named
//     on purpose that does not answer fails the tests.
//  2. The local Postgres at DefaultURL, when it answers.
//  3. Otherwise a throwaway cluster that testdb starts itself with the
//     PostgreSQL server binaries (initdb and pg_ctl on PATH, under
//     /usr/lib/postgresql/*/bin or another usual place; IDEM_TEST_PG_BINDIR
//     names the directory). It lives in a temporary directory, listens on a
//     free loopback port with a random password, and is shared by every
//     test binary of the user: the first one starts it, the others reuse it,
//     and a small supervisor process removes it once no test binary has used
//     it for a few seconds. See throwaway_unix.go for how.
//
// Only when none of these works does a test fail, with a message that says
// what to install or which variable to set; it never skips.
// IDEM_TEST_FORCE_THROWAWAY=1 skips 1 and 2, to exercise the throwaway path on
// a machine that has a Postgres running.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store/postgres"
)

// DefaultURL is the local Postgres the tests use when IDEM_TEST_DATABASE_URL
// is unset and it answers.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// The environment variables testdb reads.
const (
	// EnvDatabaseURL names the database to create test schemas in.
	EnvDatabaseURL = "IDEM_TEST_DATABASE_URL"
	// EnvForceThrowaway, set to 1, makes testdb start (or reuse) its own
	// throwaway cluster whatever else answers.
	EnvForceThrowaway = "IDEM_TEST_FORCE_THROWAWAY"
	// EnvPGBinDir names the directory holding initdb and pg_ctl; when set,
	// testdb looks nowhere else.
	EnvPGBinDir = "IDEM_TEST_PG_BINDIR"
	// EnvStateDir is where the shared throwaway cluster and its lock files
	// live. It defaults to $TMPDIR/idem-testpg-<uid>.
	EnvStateDir = "IDEM_TEST_PG_STATE_DIR"
	// EnvLinger is how long the throwaway cluster outlives its last user
	// (a Go duration). It defaults to 15s, so the packages of one `go test
	// ./...`, which start one after another, share one cluster.
	EnvLinger = "IDEM_TEST_PG_LINGER"
)

var (
	resolveOnce sync.Once
	resolvedURL string
	resolveErr  error
)

// BaseURL returns the database the tests create their schemas in, finding or
// starting it on the first call; it fails t when there is none.
func BaseURL(t testing.TB) string {
	t.Helper()
	u, err := Acquire()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Acquire is BaseURL for code that has no testing.TB, such as a TestMain or
// a command that runs another test suite against the same database. When it
// returns a throwaway cluster, the calling process counts as one of its users
// until it exits.
func Acquire() (string, error) {
	resolveOnce.Do(func() { resolvedURL, resolveErr = resolve() })
	return resolvedURL, resolveErr
}

func resolve() (string, error) {
	forced := os.Getenv(EnvForceThrowaway) == "1"
	var defaultErr error
	if !forced {
		if u := os.Getenv(EnvDatabaseURL); u != "" {
			return u, nil
		}
		if defaultErr = ping(DefaultURL, 3*time.Second); defaultErr == nil {
			return DefaultURL, nil
		}
	}
	u, err := throwaway()
	if err == nil {
		return u, nil
	}
	why := fmt.Sprintf("%s=1 asked for a throwaway cluster", EnvForceThrowaway)
	if !forced {
		why = fmt.Sprintf("%s is unset and nothing answers at %s (%v)", EnvDatabaseURL, redact(DefaultURL), oneLine(defaultErr))
	}
	return "", fmt.Errorf("idem's tests need PostgreSQL: %s, and no throwaway cluster could be started: %v.\n"+
		"Either install PostgreSQL's server binaries (initdb, pg_ctl; Debian/Ubuntu: apt-get install postgresql, "+
		"Fedora: dnf install postgresql-server, macOS: brew install postgresql@15) and the tests start a throwaway cluster themselves "+
		"(%s=DIR if they are somewhere unusual), or set %s to a database the tests may create schemas in", why, err, EnvPGBinDir, EnvDatabaseURL)
}

// ping reports whether a database answers at u within timeout.
func ping(u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// DB is one test's schema.
type DB struct {
	// URL connects to the schema (its search_path names it), for code under
	// test that opens its own pool, such as an idemd subprocess.
	URL string
	// Schema is the schema's name.
	Schema string
	// Pool is a small pool on the schema.
	Pool *pgxpool.Pool
}

// Option changes how New builds the schema.
type Option func(*options)

type options struct {
	maxConns int32
	migrate  bool
}

// MaxConns sets the pool's size. It defaults to 4: the local Postgres allows
// 100 connections across every test package running at once.
func MaxConns(n int32) Option { return func(o *options) { o.maxConns = n } }

// Unmigrated leaves the schema empty, for tests of the migrations.
func Unmigrated() Option { return func(o *options) { o.migrate = false } }

// New creates a schema of its own for t, migrates it and drops it in
// t.Cleanup.
func New(t testing.TB, opts ...Option) *DB {
	t.Helper()
	o := options{maxConns: 4, migrate: true}
	for _, opt := range opts {
		opt(&o)
	}
	base := BaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("idem's tests need PostgreSQL and none answers at %s: %v\n"+
			"Start it, point %s at another one, or unset %s to let the tests find or start one.", redact(base), err, EnvDatabaseURL, EnvDatabaseURL)
	}
	defer admin.Close(ctx)

	schema := newSchemaName()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() { dropSchema(t, base, schema) })

	schemaURL, err := withSearchPath(base, schema)
	if err != nil {
		t.Fatalf("%s: %v", EnvDatabaseURL, err)
	}
	cfg, err := pgxpool.ParseConfig(schemaURL)
	if err != nil {
		t.Fatalf("%s: %v", EnvDatabaseURL, err)
	}
	cfg.MaxConns = o.maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("test pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before dropSchema: cleanups run last-in first-out
	if o.migrate {
		if _, err := postgres.Migrate(ctx, pool); err != nil {
			t.Fatalf("migrate test schema: %v", err)
		}
	}
	return &DB{URL: schemaURL, Schema: schema, Pool: pool}
}

func dropSchema(t testing.TB, base, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := DropSchema(ctx, base, schema); err != nil {
		t.Error(err)
	}
}

// newSchemaName is a fresh name for a test schema.
func newSchemaName() string {
	var buf [6]byte
	_, _ = rand.Read(buf[:])
	return "idem_test_" + hex.EncodeToString(buf[:])
}

// CreateSchema is New for code that has no testing.TB, such as a command
// that serves another language's test suite: it creates an empty schema in
// base, named as New names them, and returns its name and a URL whose
// search_path names it. idemd migrates it on start. Drop it with
// DropSchema.
func CreateSchema(ctx context.Context, base string) (schema, schemaURL string, err error) {
	schema = newSchemaName()
	schemaURL, err = withSearchPath(base, schema)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", EnvDatabaseURL, err)
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", "", fmt.Errorf("idem's tests need PostgreSQL and none answers at %s: %w", redact(base), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", "", fmt.Errorf("create test schema: %w", err)
	}
	return schema, schemaURL, nil
}

// DropSchema drops a schema that New or CreateSchema made, with everything
// in it.
func DropSchema(ctx context.Context, base, schema string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("drop test schema %s: %w", schema, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		return fmt.Errorf("drop test schema %s: %w", schema, err)
	}
	return nil
}

// withSearchPath returns base with its search_path set to schema.
func withSearchPath(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// oneLine flattens an error pgx spreads over several lines.
func oneLine(err error) string {
	if err == nil {
		return "no error"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// LoginRole creates a role that may log in with password and use and change
// db's schema, whose settings are its own as a transaction pooler needs them
// (ALTER ROLE … SET search_path to the schema, statement_timeout to
// postgres.StatementTimeout): a pooler opens every server connection as that
// role, so they start with them. It is dropped in t.Cleanup, its sessions
// ended first.
func (db *DB) LoginRole(t testing.TB) (role, password string) {
	t.Helper()
	role = db.Schema
	var buf [12]byte
	_, _ = rand.Read(buf[:])
	password = hex.EncodeToString(buf[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := pgx.Identifier{role}.Sanitize()
	for _, sql := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", id, password),
		fmt.Sprintf("GRANT ALL ON SCHEMA %s TO %s", id, id),
		fmt.Sprintf("GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s", id, id),
		fmt.Sprintf("GRANT ALL ON ALL SEQUENCES IN SCHEMA %s TO %s", id, id),
		fmt.Sprintf("ALTER ROLE %s SET search_path = %s", id, id),
		fmt.Sprintf("ALTER ROLE %s SET statement_timeout = '%dms'", id, postgres.StatementTimeout.Milliseconds()),
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		base := BaseURL(t)
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
			return
		}
		defer conn.Close(ctx)
		for _, sql := range []string{
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '" + role + "'",
			"DROP OWNED BY " + id,
			"DROP ROLE " + id,
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	return role, password
}
