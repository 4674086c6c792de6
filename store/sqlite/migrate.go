package sqlite

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store/migrate"
)

// migrationFS holds the SQLite schema, numbered like the PostgreSQL one.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

var migrations = migrate.Dir(migrationFS, "migrations")

// Migrations returns the embedded migrations in order.
func Migrations() ([]migrate.Migration, error) { return migrations.Migrations() }

// LatestVersion is the schema version this binary expects.
func LatestVersion() int { return migrations.Latest() }

// migrate applies the pending migrations in one write transaction. A newer
// schema is refused: one file has one process, and no rolling deploy.
func (s *Store) migrate(ctx context.Context, logger *slog.Logger) ([]int, error) {
	ms, err := migrations.Migrations()
	if err != nil {
		return nil, err
	}
	// applied is read only once the batch has answered with success.
	var applied []int
	err = s.inWriteTx(ctx, func(tx *writeTx, now time.Time) error {
		var err error
		applied, err = migrate.Up(ctx, migrationTx{tx: tx, now: now}, ms, migrate.RefuseNewer, logger)
		return err
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// Migrate implements store.Backend; Open has applied every migration.
func (s *Store) Migrate(ctx context.Context, logger *slog.Logger) ([]int, error) {
	return s.migrate(ctx, logger)
}

// LatestVersion implements store.Backend.
func (s *Store) LatestVersion() int { return LatestVersion() }

// Collectors implements store.Backend: idem_sqlite_batch_calls.
func (s *Store) Collectors() []prometheus.Collector { return []prometheus.Collector{s.w.batchCalls} }

// migrationTx is the migrate.Tx of SQLite.
type migrationTx struct {
	tx  *writeTx
	now time.Time
}

// versionTableSQL creates the table of applied migrations.
const versionTableSQL = `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL) STRICT`

func (m migrationTx) Version(ctx context.Context) (int, error) {
	if _, err := m.tx.ExecScript(versionTableSQL); err != nil {
		return 0, err
	}
	var current int
	err := m.tx.QueryRow("SELECT coalesce(max(version), 0) FROM idem_schema_migrations").Scan(&current)
	return current, err
}

func (m migrationTx) Apply(ctx context.Context, mig migrate.Migration) error {
	if _, err := m.tx.ExecScript(mig.SQL); err != nil {
		return err
	}
	_, err := m.tx.Exec("INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
		mig.Version, mig.Name, m.now.UnixMicro())
	return err
}

// SchemaVersion returns the newest migration applied to the database, 0 when
// none is.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, errClosed
	}
	var v int
	err := s.read.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM idem_schema_migrations").Scan(&v)
	return v, interpretError(ctx, err)
}

// MigrationScript returns the SQL that opening the file at path would run to
// migrate it, without running any of it or creating the file: run by hand
// (sqlite3 FILE < script), it leaves the file as Open would. Nothing
// pending is an empty SQL; a newer schema is an error, as Open refuses it.
func MigrationScript(ctx context.Context, path string) (migrate.Script, error) {
	ms, err := migrations.Migrations()
	if err != nil {
		return migrate.Script{}, err
	}
	from, err := fileSchemaVersion(ctx, path)
	if err != nil {
		return migrate.Script{}, err
	}
	if latest := migrate.Latest(ms); from > latest {
		return migrate.Script{}, &migrate.NewerSchemaError{Schema: from, Binary: latest}
	}
	pending := migrate.Pending(ms, from)
	if len(pending) == 0 {
		return migrate.Script{From: from, To: from}, nil
	}
	to := migrate.Latest(ms)
	var b strings.Builder
	fmt.Fprintf(&b, "-- idemd migrate: the SQLite file %s from schema version %d to %d, in one transaction.\n", path, from, to)
	b.WriteString("BEGIN IMMEDIATE;\n")
	b.WriteString(versionTableSQL + ";\n")
	for _, m := range pending {
		fmt.Fprintf(&b, "\n-- %s\n%s\n", m.Name, strings.TrimSpace(m.SQL))
		// applied_at is microseconds since the Unix epoch, as the store
		// keeps every time; julianday works on every SQLite version.
		fmt.Fprintf(&b, "INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES (%d, %s, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));\n",
			m.Version, migrate.QuoteLiteral(m.Name))
	}
	b.WriteString("\nCOMMIT;\n")
	return migrate.Script{From: from, To: to, SQL: b.String()}, nil
}

// fileSchemaVersion reads the schema version of the file at path without
// changing it: 0 when the file does not exist or has no version table.
func fileSchemaVersion(ctx context.Context, path string) (int, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("sqlite: %w", err)
	}
	db, err := connections(path, 1, fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()), "query_only(1)")
	if err != nil {
		return 0, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'idem_schema_migrations'").Scan(&tables); err != nil {
		return 0, fmt.Errorf("sqlite: read %s: %w", path, interpretError(ctx, err))
	}
	if tables == 0 {
		return 0, nil
	}
	var v int
	if err := db.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM idem_schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("sqlite: read %s: %w", path, interpretError(ctx, err))
	}
	return v, nil
}
