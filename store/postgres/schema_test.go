package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/postgres/migrations"
)

// TestMigrateCreatesTheSchemaOfSearchPath: a URL whose search_path names a
// schema that does not exist yet migrates into that schema, created on the
// way, instead of failing with "no schema has been selected to create in".
func TestMigrateCreatesTheSchemaOfSearchPath(t *testing.T) {
	t.Parallel()
	suffix := uuid.NewString()[:8]
	for _, tc := range []struct{ searchPath, schema string }{
		{"idem_new_" + suffix, "idem_new_" + suffix},
		{`"$user", "Idem New ` + suffix + `"`, "Idem New " + suffix},
	} {
		t.Run(tc.schema, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			base := testdb.BaseURL(t)
			u, err := url.Parse(base)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("search_path", tc.searchPath)
			u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads + as itself
			t.Cleanup(func() { dropSchema(t, base, tc.schema) })

			pool, err := postgres.Connect(ctx, u.String())
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			applied, err := postgres.Migrate(ctx, pool)
			if err != nil || len(applied) == 0 {
				t.Fatalf("Migrate with search_path=%s: applied %v, %v; want every migration", tc.searchPath, applied, err)
			}
			var table *string
			if err := pool.QueryRow(ctx, "SELECT to_regclass($1)::text", pgx.Identifier{tc.schema, "idem_records"}.Sanitize()).Scan(&table); err != nil || table == nil {
				t.Fatalf("idem_records in schema %q: %v, %v; want it there", tc.schema, table, err)
			}
			if v, err := migrations.SchemaVersion(ctx, pool); err != nil || v != postgres.LatestVersion() {
				t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, postgres.LatestVersion())
			}
		})
	}
}

func dropSchema(t *testing.T, base, schema string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE", pgx.Identifier{schema}.Sanitize())); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}
