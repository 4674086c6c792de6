package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// The statements of the migration transaction besides the migrations' own,
// shared by MigrateLogged and MigrationScript.
const (
	// A migration may rewrite a large table: StatementTimeout is for the
	// request path, not for this.
	noStatementTimeoutSQL = "SET LOCAL statement_timeout = 0"
	// The lock key is idem's: "idem" as an int32 (0x6964656d).
	migrationLockSQL = "SELECT pg_advisory_xact_lock(1768187245)"
	versionTableSQL  = `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`
	recordMigrationSQL = "INSERT INTO idem_schema_migrations (version, name) VALUES ($1, $2)"
)

// MigrateLogged is Migrate that logs to logger.
//
// A schema that is current (or newer) is only read: no statement that needs
// more than the run-time privileges runs, so idemd serves with a role that
// may not change the schema (docs/production.md, "Database roles"). A role
// without the privileges that migrating needs gets a *PrivilegeError.
func MigrateLogged(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) ([]int, error) {
	ms, err := migrations.Migrations()
	if err != nil {
		return nil, err
	}
	if v, err := SchemaVersion(ctx, pool); err == nil && v >= migrate.Latest(ms) {
		return migrate.Up(ctx, readOnlyTx(v), ms, migrate.WarnNewer, logger)
	}
	var applied []int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, noStatementTimeoutSQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, migrationLockSQL); err != nil {
			return err
		}
		if err := createSchema(ctx, tx, logger); err != nil {
			return err
		}
		applied, err = migrate.Up(ctx, migrationTx{tx}, ms, migrate.WarnNewer, logger)
		return err
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
			return nil, &PrivilegeError{Role: pool.Config().ConnConfig.User, Err: err}
		}
		return nil, interpretError(err)
	}
	return applied, nil
}

// PrivilegeError is a migration the database refused because the role
// idemd connects as may not change the schema.
type PrivilegeError struct {
	// Role is the role of the connection.
	Role string
	// Err is the database's refusal.
	Err error
}

func (e *PrivilegeError) Error() string {
	return fmt.Sprintf("the role %q lacks the privileges to migrate the schema (%s): run `idemd migrate` as the role that owns idem's schema, "+
		"or grant this one CREATE on the schema and ownership of its idem_ tables and sequence (docs/production.md, \"Database roles\")", e.Role, oneLineError(e.Err))
}

func (e *PrivilegeError) Unwrap() error { return e.Err }

// oneLineError is err's message on one line.
func oneLineError(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// readOnlyTx is the migrate.Tx of a schema already at version v, which
// migrate.Up only reads: it has nothing to apply to it.
type readOnlyTx int

func (v readOnlyTx) Version(context.Context) (int, error) { return int(v), nil }

func (v readOnlyTx) Apply(_ context.Context, m migrate.Migration) error {
	return fmt.Errorf("migration %s on a schema at version %d, which is current", m.Name, int(v))
}

// MigrationScript returns the SQL that MigrateLogged would run on the
// database of pool, without running any of it: the statements of its
// transaction in order, each pending migration's SQL followed by the row
// that records it. Run by hand in one go (psql -v ON_ERROR_STOP=1 -f),
// it leaves the schema as MigrateLogged would. Nothing pending (or a newer
// schema) is an empty SQL.
func MigrationScript(ctx context.Context, pool *pgxpool.Pool) (migrate.Script, error) {
	ms, err := migrations.Migrations()
	if err != nil {
		return migrate.Script{}, err
	}
	from, err := SchemaVersion(ctx, pool)
	if err != nil {
		return migrate.Script{}, err
	}
	pending := migrate.Pending(ms, from)
	if len(pending) == 0 {
		return migrate.Script{From: from, To: from}, nil
	}
	var current *string
	var searchPath string
	if err := pool.QueryRow(ctx, "SELECT current_schema(), current_setting('search_path')").Scan(&current, &searchPath); err != nil {
		return migrate.Script{}, interpretError(err)
	}
	to := migrate.Latest(ms)
	var b strings.Builder
	fmt.Fprintf(&b, "-- idemd migrate: the PostgreSQL schema from version %d to %d, in one transaction.\n", from, to)
	b.WriteString("BEGIN;\n")
	b.WriteString("-- The search_path of idemd's connection, where the tables go.\n")
	fmt.Fprintf(&b, "SELECT pg_catalog.set_config('search_path', %s, true);\n", migrate.QuoteLiteral(searchPath))
	b.WriteString(noStatementTimeoutSQL + ";\n")
	b.WriteString(migrationLockSQL + ";\n")
	if name := firstSchema(searchPath); current == nil && name != "" {
		b.WriteString("CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{name}.Sanitize() + ";\n")
	}
	b.WriteString(strings.ReplaceAll(versionTableSQL, "\n\t\t", "\n    ") + ";\n")
	for _, m := range pending {
		fmt.Fprintf(&b, "\n-- %s\n%s\n", m.Name, strings.TrimSpace(m.SQL))
		fmt.Fprintf(&b, "INSERT INTO idem_schema_migrations (version, name) VALUES (%d, %s);\n", m.Version, migrate.QuoteLiteral(m.Name))
	}
	b.WriteString("\nCOMMIT;\n")
	return migrate.Script{From: from, To: to, SQL: b.String()}, nil
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
	if _, err := m.tx.Exec(ctx, versionTableSQL); err != nil {
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
	_, err := m.tx.Exec(ctx, recordMigrationSQL, mig.Version, mig.Name)
	return err
}

// SchemaVersion returns the newest applied migration, 0 when none is.
func SchemaVersion(ctx context.Context, db *pgxpool.Pool) (int, error) {
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
