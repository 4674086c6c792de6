package postgres

import (
	"context"
	"embed"
	"fmt"
	"log/slog"
	"strings"

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
		if err := createSchema(ctx, tx, logger); err != nil {
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

// createSchema creates the schema the URL's search_path names first when no
// schema on the search_path exists, so that ?search_path=idem works on a
// database that has no schema idem yet: Postgres would otherwise refuse the
// first CREATE TABLE with "no schema has been selected to create in". A
// search_path naming only schemas that exist, or none at all, is left alone.
func createSchema(ctx context.Context, tx pgx.Tx, logger *slog.Logger) error {
	var current *string
	var searchPath string
	if err := tx.QueryRow(ctx, "SELECT current_schema(), current_setting('search_path')").Scan(&current, &searchPath); err != nil {
		return err
	}
	if current != nil {
		return nil
	}
	name := firstSchema(searchPath)
	if name == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create the schema %q that search_path names: %w", name, err)
	}
	logger.InfoContext(ctx, "created the schema that search_path names", "schema", name)
	return nil
}

// firstSchema is the first schema a search_path setting names, unquoted;
// "" when there is none. "$user" is skipped: it stands for the role's name,
// which is no schema to create on the user's behalf.
func firstSchema(searchPath string) string {
	for _, item := range splitSearchPath(searchPath) {
		if item != "$user" && item != "" {
			return item
		}
	}
	return ""
}

// splitSearchPath splits a search_path setting on the commas outside double
// quotes, unquoting each item ("My ""x""" is My "x"). An unquoted name is
// folded to lower case, as Postgres folds it.
func splitSearchPath(s string) []string {
	var items []string
	var b strings.Builder
	quoted, wasQuoted := false, false
	flush := func() {
		item := b.String()
		if !wasQuoted {
			item = strings.ToLower(item)
		}
		items = append(items, item)
		b.Reset()
		wasQuoted = false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '"' && i+1 < len(s) && s[i+1] == '"':
			b.WriteByte('"')
			i++
		case c == '"':
			quoted = !quoted
			wasQuoted = true
		case !quoted && c == ',':
			flush()
		case !quoted && (c == ' ' || c == '\t'):
			// around an item: an unquoted name holds no spaces
		default:
			b.WriteByte(c)
		}
	}
	flush()
	return items
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
