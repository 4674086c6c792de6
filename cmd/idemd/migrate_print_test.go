package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/postgres/migrations"
	"github.com/idemhq/idem/store/sqlite"
)

// runSplit runs idemd with args and returns its stdout, its stderr and its
// exit code.
func runSplit(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemdBinary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = environWithout(append([]string{"IDEM_DATABASE_URL", "IDEM_DATA_DIR"}, securityEnv...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if exitErr, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("run idemd %v: %v", args, err)
	}
	return out.String(), errOut.String(), 0
}

// pgSchema describes the idem objects of the schema a pool's search_path
// names: columns, indexes, constraints, sequences and the versions recorded,
// without the schema's name, so that two schemas compare.
func pgSchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, q := range []string{
		`SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '') FROM information_schema.columns
			WHERE table_schema = current_schema() ORDER BY table_name, column_name`,
		`SELECT indexname, replace(indexdef, current_schema() || '.', '') FROM pg_indexes WHERE schemaname = current_schema() ORDER BY indexname`,
		`SELECT conname, pg_get_constraintdef(c.oid), c.convalidated::text FROM pg_constraint c
			JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = current_schema() ORDER BY conname`,
		`SELECT sequence_name, data_type FROM information_schema.sequences WHERE sequence_schema = current_schema() ORDER BY sequence_name`,
		`SELECT version::text, name FROM idem_schema_migrations ORDER BY version`,
	} {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestMigratePrintPostgres: `idemd migrate --print` prints the SQL migrating
// would run and runs none of it; that SQL, run by hand, leaves the schema as
// `idemd migrate` does, from an empty schema and from one a migration
// behind; on a current schema it prints nothing.
func TestMigratePrintPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	want := pgSchema(t, testdb.New(t).Pool) // migrated by idemd's own code

	db := testdb.New(t, testdb.Unmigrated())
	script, stderr, code := runSplit(t, "migrate", "--print", "--database-url", db.URL)
	latest := postgres.LatestVersion()
	if code != 0 || !strings.Contains(stderr, fmt.Sprintf("from version 0 to %d", latest)) || !strings.Contains(stderr, "none of it was run") {
		t.Fatalf("migrate --print: exit %d\nstderr: %s", code, stderr)
	}
	ms, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !strings.Contains(script, "\n-- "+m.Name+"\n") || !strings.Contains(script, strings.TrimSpace(m.SQL)) {
			t.Errorf("the script lacks migration %s", m.Name)
		}
	}
	var exists bool
	if err := db.Pool.QueryRow(ctx, "SELECT to_regclass('idem_schema_migrations') IS NOT NULL OR to_regclass('idem_records') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("migrate --print changed the schema (tables: %v, %v)", exists, err)
	}
	// Run by hand, as a DBA would: the script in one simple-protocol call.
	if _, err := db.Pool.Exec(ctx, script); err != nil {
		t.Fatalf("the printed script does not run: %v\n%s", err, script)
	}
	if got := pgSchema(t, db.Pool); got != want {
		t.Errorf("the printed script made the schema\n%s\nidemd migrate makes\n%s", got, want)
	}
	if out, code := run(t, nil, "migrate", "--database-url", db.URL); code != 0 || !strings.Contains(out, fmt.Sprintf("up to date at version %d", latest)) {
		t.Errorf("idemd migrate after the script: exit %d, %s", code, out)
	}
	out, stderr, code := runSplit(t, "migrate", "--print", "--database-url", db.URL)
	if code != 0 || out != "" || !strings.Contains(stderr, "up to date") {
		t.Errorf("migrate --print on a current schema: exit %d, stdout %q, stderr %q; want nothing on stdout", code, out, stderr)
	}

	// A migration behind: only the last one is printed.
	behind := testdb.New(t)
	last := ms[len(ms)-1]
	if _, err := behind.Pool.Exec(ctx, "DROP SCHEMA "+behind.Schema+" CASCADE; CREATE SCHEMA "+behind.Schema); err != nil {
		t.Fatal(err)
	}
	setup := "CREATE TABLE idem_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());\n"
	for _, m := range ms[:len(ms)-1] {
		setup += m.SQL + fmt.Sprintf(";\nINSERT INTO idem_schema_migrations (version, name) VALUES (%d, '%s');\n", m.Version, m.Name)
	}
	if _, err := behind.Pool.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	script, stderr, code = runSplit(t, "migrate", "--print", "--database-url", behind.URL)
	if code != 0 || !strings.Contains(stderr, fmt.Sprintf("from version %d to %d", last.Version-1, latest)) {
		t.Fatalf("migrate --print a migration behind: exit %d\nstderr: %s", code, stderr)
	}
	for _, m := range ms {
		if printed := strings.Contains(script, "\n-- "+m.Name+"\n"); printed != (m.Version == last.Version) {
			t.Errorf("migration %s printed: %v; want only the pending %s", m.Name, printed, last.Name)
		}
	}
	if _, err := behind.Pool.Exec(ctx, script); err != nil {
		t.Fatalf("the printed script does not run: %v\n%s", err, script)
	}
	if got := pgSchema(t, behind.Pool); got != want {
		t.Errorf("the printed script made the schema\n%s\nidemd migrate makes\n%s", got, want)
	}
}

// TestMigratePrintPostgresUnreadableVersion: when the schema's version
// cannot be read, migrate --print says so and fails, instead of calling the
// schema up to date.
func TestMigratePrintPostgresUnreadableVersion(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	if _, err := db.Pool.Exec(context.Background(), "CREATE TABLE idem_schema_migrations (version text)"); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runSplit(t, "migrate", "--print", "--database-url", db.URL)
	if code == 0 || out != "" || strings.Contains(stderr, "up to date") || !strings.Contains(stderr, "migrate --print") {
		t.Fatalf("migrate --print with an unreadable version table: exit %d, stdout %q, stderr %q; want a failure that says why", code, out, stderr)
	}
}

// sqliteSchema describes an SQLite file's schema and the versions recorded.
func sqliteSchema(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b strings.Builder
	for _, q := range []string{
		"SELECT type, name, coalesce(sql, '') FROM sqlite_master ORDER BY name",
		"SELECT version, name FROM idem_schema_migrations ORDER BY version",
		"SELECT id, value FROM idem_token",
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
	}
	return b.String()
}

// TestMigratePrintSQLite: `idemd migrate --print` on a data directory that
// does not exist prints every migration and creates nothing; the script, run
// by hand, makes the file `idemd migrate` makes; on a current file it
// prints nothing.
func TestMigratePrintSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref")
	if out, code := run(t, nil, "migrate", "--data-dir", ref); code != 0 {
		t.Fatalf("idemd migrate: exit %d, %s", code, out)
	}
	want := sqliteSchema(t, filepath.Join(ref, "idem.db"))

	data := filepath.Join(dir, "data")
	script, stderr, code := runSplit(t, "migrate", "--print", "--data-dir", data)
	latest := sqlite.LatestVersion()
	if code != 0 || !strings.Contains(stderr, fmt.Sprintf("from version 0 to %d", latest)) {
		t.Fatalf("migrate --print: exit %d\nstderr: %s", code, stderr)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("migrate --print made %s (%v); it must create nothing", data, err)
	}
	ms, err := sqlite.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !strings.Contains(script, "\n-- "+m.Name+"\n") {
			t.Errorf("the script lacks migration %s", m.Name)
		}
	}

	// Run by hand into the file idemd would open.
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(data, "idem.db")
	db, err := sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(script); err != nil {
		t.Fatalf("the printed script does not run: %v\n%s", err, script)
	}
	var appliedAt int64
	if err := db.QueryRow("SELECT min(applied_at) FROM idem_schema_migrations").Scan(&appliedAt); err != nil {
		t.Fatal(err)
	}
	if at := time.UnixMicro(appliedAt); time.Since(at).Abs() > time.Hour {
		t.Errorf("the script records the migrations as applied at %s; want about now, in microseconds", at)
	}
	db.Close()
	if got := sqliteSchema(t, file); got != want {
		t.Errorf("the printed script made the file\n%s\nidemd migrate makes\n%s", got, want)
	}
	if out, code := run(t, nil, "migrate", "--data-dir", data); code != 0 || !strings.Contains(out, fmt.Sprintf("up to date at version %d", latest)) {
		t.Errorf("idemd migrate after the script: exit %d, %s", code, out)
	}
	out, stderr, code := runSplit(t, "migrate", "--print", "--data-dir", data)
	if code != 0 || out != "" || !strings.Contains(stderr, "up to date") {
		t.Errorf("migrate --print on a current file: exit %d, stdout %q, stderr %q; want nothing on stdout", code, out, stderr)
	}
}
