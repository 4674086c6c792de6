package sqlite

import (
	"context"
	"embed"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store/migrate"
)

// migrationFS holds the SQLite schema, numbered like the PostgreSQL one but
// written for SQLite.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

var migrations = migrate.Dir(migrationFS, "migrations")

// Migrations returns the embedded migrations in order.
func Migrations() ([]migrate.Migration, error) { return migrations.Migrations() }

// LatestVersion is the schema version this binary expects.
func LatestVersion() int { return migrations.Latest() }

// migrate applies the pending migrations in one write transaction, so that
// Stores opening one file together apply each migration once. A file whose
// schema is newer than this binary's is refused: one file has one process,
// so there is no rolling deploy to allow for, and an older binary must not
// write to a schema it does not know.
func (s *Store) migrate(ctx context.Context, logger *slog.Logger) ([]int, error) {
	ms, err := migrations.Migrations()
	if err != nil {
		return nil, err
	}
	// The function runs in the writer, which may still run it after a
	// caller whose ctx ended has returned: it writes only its own err, and
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

// Migrate implements store.Backend. Open has applied every migration
// already, so this finds none pending unless another process changed the
// file since.
func (s *Store) Migrate(ctx context.Context, logger *slog.Logger) ([]int, error) {
	return s.migrate(ctx, logger)
}

// LatestVersion implements store.Backend.
func (s *Store) LatestVersion() int { return LatestVersion() }

// Collectors implements store.Backend: the histogram of calls per write
// transaction, idem_sqlite_batch_calls.
func (s *Store) Collectors() []prometheus.Collector { return []prometheus.Collector{s.w.batchCalls} }

// migrationTx is the migrate.Tx of SQLite.
type migrationTx struct {
	tx  *writeTx
	now time.Time
}

// versionTableSQL creates the table of applied migrations, shared by the
// migration and MigrationScript.
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
