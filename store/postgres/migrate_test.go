package postgres_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/postgres/migrations"
)

func allVersions(t *testing.T) []int {
	t.Helper()
	ms, err := migrations.All()
	if err != nil {
		t.Fatalf("Migrations: %v", err)
	}
	var versions []int
	for _, m := range ms {
		versions = append(versions, m.Version)
	}
	return versions
}

func TestMigrationsAreWellFormed(t *testing.T) {
	t.Parallel()
	ms, err := migrations.All()
	if err != nil {
		t.Fatalf("Migrations: %v", err)
	}
	if len(ms) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range ms {
		if m.Version <= 0 || !strings.HasSuffix(m.Name, ".sql") || strings.TrimSpace(m.SQL) == "" {
			t.Errorf("migration %d: %+v", i, m)
		}
		if i > 0 && m.Version <= ms[i-1].Version {
			t.Errorf("migration %s is not after %s", m.Name, ms[i-1].Name)
		}
	}
	if got, want := postgres.LatestVersion(), ms[len(ms)-1].Version; got != want {
		t.Fatalf("LatestVersion %d, want %d", got, want)
	}
}

func TestMigrateFreshSchema(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Unmigrated())

	if v, err := migrations.SchemaVersion(b.ctx, b.pool); err != nil || v != 0 {
		t.Fatalf("SchemaVersion of an empty schema: %d, %v; want 0", v, err)
	}
	applied, err := postgres.Migrate(b.ctx, b.pool)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if want := allVersions(t); !slices.Equal(applied, want) {
		t.Fatalf("Migrate applied %v, want every migration %v", applied, want)
	}
	if v, err := migrations.SchemaVersion(b.ctx, b.pool); err != nil || v != postgres.LatestVersion() {
		t.Fatalf("SchemaVersion: %d, %v; want %d", v, err, postgres.LatestVersion())
	}

	applied, err = postgres.Migrate(b.ctx, b.pool)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second Migrate: %v, %v; want none applied", applied, err)
	}
	if v, err := migrations.SchemaVersion(b.ctx, b.pool); err != nil || v != postgres.LatestVersion() {
		t.Fatalf("SchemaVersion after the second Migrate: %d, %v; want %d", v, err, postgres.LatestVersion())
	}

	// The migrated schema is one the store works on.
	b.acquire(t, recordID("after-migrate"), "")
}

// TestMigrateConcurrently: replicas starting together apply each migration
// once between them.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Unmigrated())
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied []int
		errs    []error
	)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := postgres.Migrate(b.ctx, b.pool)
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, got...)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent Migrate: %v", errs)
	}
	slices.Sort(applied)
	if want := allVersions(t); !slices.Equal(applied, want) {
		t.Fatalf("the replicas applied %v between them, want each of %v once", applied, want)
	}
}

func TestSchemaVersionOfMigratedSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if v, err := migrations.SchemaVersion(b.ctx, b.pool); err != nil || v != postgres.LatestVersion() {
		t.Fatalf("SchemaVersion: %d, %v; want %d", v, err, postgres.LatestVersion())
	}
}

// TestMigrateOnNewerSchemaLogs: an old replica during a rolling deploy meets
// a schema that a newer idemd applied. Migrate applies nothing, fails
// nothing, and says so in a warning.
func TestMigrateOnNewerSchemaLogs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, "INSERT INTO idem_schema_migrations (version, name) VALUES (999, '999_future.sql')"); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	applied, err := migrations.Migrate(b.ctx, b.pool, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil || len(applied) != 0 {
		t.Fatalf("Migrate on a newer schema: %v, %v; want nothing applied and no error", applied, err)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "999") {
		t.Fatalf("the log does not warn of schema version 999:\n%s", log.String())
	}
	if v, err := migrations.SchemaVersion(b.ctx, b.pool); err != nil || v != 999 {
		t.Fatalf("SchemaVersion: %d, %v; want 999 untouched", v, err)
	}
}

// TestStateCheckBindsNewRows: the state constraint, added NOT VALID so that
// the migration reads no rows under its lock, still refuses a state that is
// not one of idem's, on insert and on update.
func TestStateCheckBindsNewRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var validated bool
	if err := b.pool.QueryRow(b.ctx, `SELECT convalidated FROM pg_constraint
		WHERE conname = 'idem_records_state_check' AND conrelid = 'idem_records'::regclass`).Scan(&validated); err != nil {
		t.Fatalf("read the state constraint: %v", err)
	}
	if validated {
		t.Error("idem_records_state_check is validated: migration 004 must add it NOT VALID, so that it reads no rows under its lock")
	}
	insert := `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, retention, created_at, updated_at)
		VALUES ('acme', 'ns', 'bogus', 'bogus', 1, 1, interval '1 hour', now(), now())`
	if _, err := b.pool.Exec(b.ctx, insert); err == nil || !strings.Contains(err.Error(), "idem_records_state_check") {
		t.Errorf("INSERT: %v; want a violation of idem_records_state_check", err)
	}
	b.acquire(t, recordID("k"), "w") // a row for the UPDATE to reach
	if _, err := b.pool.Exec(b.ctx, `UPDATE idem_records SET state = 'bogus'`); err == nil || !strings.Contains(err.Error(), "idem_records_state_check") {
		t.Errorf("UPDATE of a row: %v; want a violation of idem_records_state_check", err)
	}
}
