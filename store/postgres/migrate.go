package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/migrations"
)

// Migration is one numbered schema change.
type Migration = migrations.Migration

// Migrations returns the embedded migrations in order.
func Migrations() ([]Migration, error) {
	return migrations.Parse(migrations.FS)
}

// LatestVersion is the schema version this binary expects.
func LatestVersion() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Migrate applies the pending migrations in one transaction, under an
// advisory lock so that replicas starting together apply each migration once.
// It returns the versions it applied; none when the schema is up to date.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	var applied []int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The lock key is idem's: "idem" as an int32 (0x6964656d).
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(1768187245)"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM idem_schema_migrations").Scan(&current); err != nil {
			return err
		}
		for _, m := range ms {
			if m.Version <= current {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO idem_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return err
			}
			applied = append(applied, m.Version)
		}
		return nil
	})
	if err != nil {
		return nil, interpretError(err)
	}
	return applied, nil
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
