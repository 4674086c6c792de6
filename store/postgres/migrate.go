package postgres

import (
	"context"
	"embed"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store/migrate"
)

// migrationFS holds the PostgreSQL schema, named NNN_description.sql.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

var migrations = migrate.Dir(migrationFS, "migrations")

// Migration is one numbered schema change.
type Migration = migrate.Migration

// Migrations returns the embedded migrations in order.
func Migrations() ([]migrate.Migration, error) { return migrations.Migrations() }

// LatestVersion is the schema version this binary expects.
func LatestVersion() int { return migrations.Latest() }

// Migrate applies the pending migrations in one transaction, under an
// advisory lock so that replicas starting together apply each migration once.
// It returns the versions it applied; none when the schema is up to date.
//
// A schema newer than this binary's is not an error: during a rolling deploy
// the replicas still on the old binary meet the schema the new ones applied.
// Migrate applies nothing then and logs a warning to slog's default logger
// (see MigrateLogged).
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return MigrateLogged(ctx, pool, slog.Default())
}

// MigrateLogged is Migrate that logs to logger.
func MigrateLogged(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) ([]int, error) {
	ms, err := migrations.Migrations()
	if err != nil {
		return nil, err
	}
	var applied []int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// A migration may rewrite a large table: StatementTimeout is for
		// the request path, not for this.
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			return err
		}
		// The lock key is idem's: "idem" as an int32 (0x6964656d).
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(1768187245)"); err != nil {
			return err
		}
		applied, err = migrate.Up(ctx, migrationTx{tx}, ms, migrate.WarnNewer, logger)
		return err
	})
	if err != nil {
		return nil, interpretError(err)
	}
	return applied, nil
}

// migrationTx is the migrate.Tx of PostgreSQL.
type migrationTx struct{ tx pgx.Tx }

func (m migrationTx) Version(ctx context.Context) (int, error) {
	if _, err := m.tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, err
	}
	var current int
	err := m.tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM idem_schema_migrations").Scan(&current)
	return current, err
}

func (m migrationTx) Apply(ctx context.Context, mig migrate.Migration) error {
	if _, err := m.tx.Exec(ctx, mig.SQL); err != nil {
		return err
	}
	_, err := m.tx.Exec(ctx, "INSERT INTO idem_schema_migrations (version, name) VALUES ($1, $2)", mig.Version, mig.Name)
	return err
}

// SchemaVersion returns the newest applied migration, 0 when none is.
func SchemaVersion(ctx context.Context, db dbtx) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass('idem_schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return 0, interpretError(err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := db.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM idem_schema_migrations").Scan(&v); err != nil {
		return 0, interpretError(err)
	}
	return v, nil
}
