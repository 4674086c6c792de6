package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/idemhq/idem/store/migrate"
)

// MigrationScript returns the SQL that opening the file at path would run to
// migrate it, without running any of it and without creating the file or
// its directory: the statements of the migration's write transaction in
// order, each pending migration's SQL followed by the row that records it.
// Run by hand in one go (sqlite3 FILE < script), it leaves the file as Open
// would. A file that does not exist gets every migration; nothing pending
// is an empty SQL. A schema newer than this binary's is an error, as Open
// refuses it.
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
	db, err := sql.Open("sqlite", dsn(path, url.Values{
		"_pragma": {fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()), "query_only(1)"},
	}))
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
