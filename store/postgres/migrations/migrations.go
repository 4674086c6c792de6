// Package migrations is idem's PostgreSQL schema: the numbered SQL files
// beside this one, applied in order by Migrate (store/migrate's runner) or
// printed by Script for an operator to run.
package migrations

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

// files holds the schema, named NNN_description.sql.
//
//go:embed *.sql
var files embed.FS

var source = migrate.Dir(files, ".")

// All returns the migrations in order.
func All() ([]migrate.Migration, error) { return source.Migrations() }

// Latest is the schema version this binary expects.
func Latest() int { return source.Latest() }

// The migration transaction's own statements, for Migrate and Script.
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

// Migrate applies the pending migrations in one transaction, under an
// advisory lock so that replicas starting together apply each once. A
// newer schema is logged, not refused, for rolling deploys; a current one
// is only read, so idemd may serve with a role that cannot change it.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) ([]int, error) {
	ms, err := source.Migrations()
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
		return nil, err
	}
	return applied, nil
}

// PrivilegeError is a migration the database refused because the role
// idemd connects as (Role) may not change the schema (Err).
type PrivilegeError struct {
	Role string
	Err  error
}

func (e *PrivilegeError) Error() string {
	return fmt.Sprintf("the role %q lacks the privileges to migrate the schema (%s): run `idemd migrate` as the role that owns idem's schema, "+
		"or grant this one CREATE on the schema and ownership of its idem_ tables and sequence (docs/production.md, \"Database roles\")", e.Role, oneLineError(e.Err))
}

func (e *PrivilegeError) Unwrap() error { return e.Err }

// oneLineError is err's message on one line.
func oneLineError(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// readOnlyTx is the migrate.Tx of a schema already at version v.
type readOnlyTx int

func (v readOnlyTx) Version(context.Context) (int, error) { return int(v), nil }

func (v readOnlyTx) Apply(_ context.Context, m migrate.Migration) error {
	return fmt.Errorf("migration %s on a schema at version %d, which is current", m.Name, int(v))
}

// Script returns the SQL that Migrate would run on the database of pool,
// without running it: run by hand in one go (psql -v ON_ERROR_STOP=1 -f),
// it leaves the schema as Migrate would. Nothing pending is an empty SQL.
func Script(ctx context.Context, pool *pgxpool.Pool) (migrate.Script, error) {
	ms, err := source.Migrations()
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
	searchPath, create, err := schemaToCreate(ctx, pool)
	if err != nil {
		return migrate.Script{}, err
	}
	to := migrate.Latest(ms)
	var b strings.Builder
	fmt.Fprintf(&b, "-- idemd migrate: the PostgreSQL schema from version %d to %d, in one transaction.\n", from, to)
	b.WriteString("BEGIN;\n")
	b.WriteString("-- The search_path of idemd's connection, where the tables go.\n")
	fmt.Fprintf(&b, "SELECT pg_catalog.set_config('search_path', %s, true);\n", migrate.QuoteLiteral(searchPath))
	b.WriteString(noStatementTimeoutSQL + ";\n")
	b.WriteString(migrationLockSQL + ";\n")
	if create != "" {
		b.WriteString("CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{create}.Sanitize() + ";\n")
	}
	b.WriteString(strings.ReplaceAll(versionTableSQL, "\n\t\t", "\n    ") + ";\n")
	for _, m := range pending {
		fmt.Fprintf(&b, "\n-- %s\n%s\n", m.Name, strings.TrimSpace(m.SQL))
		fmt.Fprintf(&b, "INSERT INTO idem_schema_migrations (version, name) VALUES (%d, %s);\n", m.Version, migrate.QuoteLiteral(m.Name))
	}
	b.WriteString("\nCOMMIT;\n")
	return migrate.Script{From: from, To: to, SQL: b.String()}, nil
}

// createSchema creates the schema schemaToCreate names, so that
// ?search_path=idem works on a new database.
func createSchema(ctx context.Context, tx pgx.Tx, logger *slog.Logger) error {
	_, name, err := schemaToCreate(ctx, tx)
	if err != nil || name == "" {
		return err
	}
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create the schema %q that search_path names: %w", name, err)
	}
	logger.InfoContext(ctx, "created the schema that search_path names", "schema", name)
	return nil
}

// schemaToCreate returns the connection's search_path and the schema to
// create in it: its first, when none of its schemas exists, else "".
func schemaToCreate(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (searchPath, name string, err error) {
	var current *string
	if err := q.QueryRow(ctx, "SELECT current_schema(), current_setting('search_path')").Scan(&current, &searchPath); err != nil {
		return "", "", err
	}
	if current != nil {
		return searchPath, "", nil
	}
	return searchPath, firstSchema(searchPath), nil
}

// firstSchema is the first schema a search_path setting names, unquoted,
// but not "$user": "" when there is none.
func firstSchema(searchPath string) string {
	for _, item := range splitSearchPath(searchPath) {
		if item != "$user" && item != "" {
			return item
		}
	}
	return ""
}

// splitSearchPath splits a search_path setting on the commas outside double
// quotes, unquoting each item and folding unquoted ones to lower case.
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
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := db.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM idem_schema_migrations").Scan(&v); err != nil {
		return 0, err
	}
	return v, nil
}
