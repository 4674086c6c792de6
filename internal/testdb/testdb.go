// Package testdb gives tests a real, freshly migrated PostgreSQL schema of
// their own. It reads IDEM_TEST_DATABASE_URL (default: the local Postgres on
// 127.0.0.1:5432) and fails the test with a clear message, never a skip, when
// no database answers.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store/postgres"
)

// DefaultURL is used when IDEM_TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// BaseURL is the database the tests create their schemas in.
func BaseURL() string {
	if u := os.Getenv("IDEM_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	base := BaseURL()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("idem's tests need PostgreSQL and none answers at %s: %v\n"+
			"Start one (on Debian: pg_ctlcluster 15 main start) or point IDEM_TEST_DATABASE_URL at one.", redact(base), err)
	}
	defer admin.Close(ctx)

	var buf [6]byte
	_, _ = rand.Read(buf[:])
	schema := "idem_test_" + hex.EncodeToString(buf[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() { dropSchema(t, base, schema) })

	schemaURL, err := withSearchPath(base, schema)
	if err != nil {
		t.Fatalf("IDEM_TEST_DATABASE_URL: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(schemaURL)
	if err != nil {
		t.Fatalf("IDEM_TEST_DATABASE_URL: %v", err)
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
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Errorf("drop test schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		t.Errorf("drop test schema %s: %v", schema, err)
	}
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
