package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/idemhq/idem/migrations"
)

// migrationFS holds the SQLite schema, numbered like the PostgreSQL one but
// written for SQLite.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations returns the embedded SQLite migrations in order.
func Migrations() ([]migrations.Migration, error) {
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	return migrations.Parse(sub)
}

// LatestVersion is the schema version this binary expects.
func LatestVersion() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// migrate applies the pending migrations in one write transaction, so that
// Stores opening one file together apply each migration once. A file whose
// schema is newer than this binary's is refused: an older binary must not
// write to it.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	return s.inWriteTx(ctx, func(tx *sql.Tx, now time.Time) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
			version    INTEGER PRIMARY KEY,
			name       TEXT    NOT NULL,
			applied_at INTEGER NOT NULL) STRICT`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM idem_schema_migrations").Scan(&current); err != nil {
			return err
		}
		if latest := ms[len(ms)-1].Version; current > latest {
			return fmt.Errorf("the database's schema is at version %d, newer than this binary's %d: run a newer idemd", current, latest)
		}
		for _, m := range ms {
			if m.Version <= current {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO idem_schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
				m.Version, m.Name, now.UnixMicro()); err != nil {
				return err
			}
		}
		return nil
	})
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
