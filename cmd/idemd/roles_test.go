package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store/postgres"
)

// rolesDoc is docs/production.md's "Database roles" section, with the
// example names replaced by a test's own.
type rolesDoc struct {
	// sql are the section's ```sql blocks, in order: the migration role,
	// the run-time role's grants, the default privileges.
	sql []string
	// refusal is the line the section shows for a run-time role that
	// migrates.
	refusal string
}

// roleNames are the names a test uses for the section's examples.
type roleNames struct {
	database, schema, owner, app, password string
}

func (n roleNames) replace(s string) string {
	return strings.NewReplacer(
		"DATABASE idem ", "DATABASE "+n.database+" ",
		"SCHEMA idem ", "SCHEMA "+n.schema+" ",
		"schema idem (", "schema "+n.schema+" (",
		"idem.idem_", n.schema+".idem_",
		"idem_owner", n.owner,
		"idem_app", n.app,
		"'…'", "'"+n.password+"'",
	).Replace(s)
}

func readRolesDoc(t *testing.T, names roleNames) rolesDoc {
	t.Helper()
	data, err := os.ReadFile("../../docs/production.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Database roles\n")
	if !ok {
		t.Fatal(`docs/production.md has no "## Database roles" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var doc rolesDoc
	for _, m := range regexp.MustCompile("(?s)```(\\w*)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		switch {
		case m[1] == "sql":
			doc.sql = append(doc.sql, names.replace(m[2]))
		case strings.HasPrefix(m[2], "idemd: migrate: "):
			doc.refusal = names.replace(strings.TrimSpace(m[2]))
		}
	}
	if len(doc.sql) != 3 || doc.refusal == "" {
		t.Fatalf("docs/production.md's Database roles has %d sql blocks and refusal %q; the test reads three (migration role, run-time grants, default privileges) and the refusal", len(doc.sql), doc.refusal)
	}
	return doc
}

// roleURL is base with another role and search_path, and a small pool for
// idemd.
func roleURL(t *testing.T, base, role, password, schema string) string {
	t.Helper()
	return connURL(t, base, role, password, schema) + "&pool_max_conns=4"
}

// connURL is base with another role and search_path.
func connURL(t *testing.T, base, role, password, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestLeastPrivilegeRole follows docs/production.md's "Database roles" with
// roles and a schema of its own: the migration role migrates; idemd serves
// as the run-time role, with only the documented grants, and Claim,
// Complete, Lookup, waiting Claims (LISTEN), the sweeper, the records count
// and the AdminService all work; and where there is migrating to do, the
// run-time role is refused with the documented line, by `idemd migrate` and
// by `idemd serve` alike.
func TestLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	base := testdb.BaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", base, err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })

	var buf [6]byte
	_, _ = rand.Read(buf[:])
	suffix := hex.EncodeToString(buf[:])
	names := roleNames{schema: "idem_roles_" + suffix, owner: "idem_owner_" + suffix, app: "idem_app_" + suffix, password: "pw" + suffix}
	if err := admin.QueryRow(ctx, "SELECT current_database()").Scan(&names.database); err != nil {
		t.Fatal(err)
	}
	empty := "idem_roles_empty_" + suffix
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		for _, stmt := range []string{
			"DROP SCHEMA IF EXISTS " + names.schema + " CASCADE",
			"DROP SCHEMA IF EXISTS " + empty + " CASCADE",
			"DROP OWNED BY " + names.app + ", " + names.owner,
			"DROP ROLE " + names.app + ", " + names.owner,
		} {
			if _, err := admin.Exec(ctx, stmt); err != nil {
				t.Errorf("clean up: %s: %v", stmt, err)
			}
		}
	})
	doc := readRolesDoc(t, names)

	// The migration role, and the first migration as it.
	if _, err := admin.Exec(ctx, doc.sql[0]); err != nil {
		t.Fatalf("the migration role's SQL: %v\n%s", err, doc.sql[0])
	}
	ownerURL := roleURL(t, base, names.owner, names.password, names.schema)
	if out, code := run(t, nil, "migrate", "--database-url", ownerURL); code != 0 || !strings.Contains(out, "applied migrations [1 ") {
		t.Fatalf("idemd migrate as the migration role: exit %d\n%s", code, out)
	}

	// The run-time role with the documented grants, and nothing else.
	if _, err := admin.Exec(ctx, doc.sql[1]); err != nil {
		t.Fatalf("the run-time role's SQL: %v\n%s", err, doc.sql[1])
	}
	owner, err := pgx.Connect(ctx, connURL(t, base, names.owner, names.password, names.schema))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	if _, err := owner.Exec(ctx, doc.sql[2]); err != nil {
		t.Fatalf("the default privileges' SQL, as the migration role: %v\n%s", err, doc.sql[2])
	}
	appURL := roleURL(t, base, names.app, names.password, names.schema)
	if out, code := run(t, nil, "migrate", "--database-url", appURL); code != 0 || !strings.Contains(out, "up to date") {
		t.Errorf("idemd migrate as the run-time role on a current schema: exit %d, want 0 and up to date\n%s", code, out)
	}

	addrs, logs := startIdemdOn(t, appURL, "--http-listen", "127.0.0.1:0", "--sweep-interval", "100ms", "--count-interval", "100ms")
	conn, err := grpc.NewClient(addrs.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api, adminAPI := idemv1.NewIdempotencyServiceClient(conn), idemv1.NewAdminServiceClient(conn)
	metrics := func() string {
		resp, err := http.Get("http://" + addrs.HTTPListen + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s; idemd's log:\n%s", what, strings.Join(logs(), "\n"))
			}
		}
	}

	// Claim, and a duplicate that waits: its answer comes from the
	// notification of the Complete (LISTEN), as its wait outlasts the test.
	first, err := api.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: "k1"})
	if err != nil || first.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim: %v, %v", first.GetOutcome(), err)
	}
	waited := make(chan *idemv1.ClaimResponse, 1)
	go func() {
		resp, err := api.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: "k1", Wait: durationpb.New(55 * time.Second)})
		if err != nil {
			t.Errorf("waiting Claim: %v", err)
		}
		waited <- resp
	}()
	eventually("idem_waiting_claims 1", func() bool { return strings.Contains(metrics(), "\nidem_waiting_claims 1\n") })
	if _, err := api.Complete(ctx, &idemv1.CompleteRequest{Namespace: "jobs", Key: "k1", Token: first.GetRecord().GetToken(), Result: []byte("ok")}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	select {
	case resp := <-waited:
		if resp.GetOutcome() != idemv1.Outcome_OUTCOME_COMPLETED || string(resp.GetRecord().GetResult()) != "ok" {
			t.Errorf("the waiting Claim answered %v %q; want COMPLETED with the result", resp.GetOutcome(), resp.GetRecord().GetResult())
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("the waiting Claim was not woken by the Complete: LISTEN does not work for the run-time role; idemd's log:\n%s", strings.Join(logs(), "\n"))
	}
	look, err := api.Lookup(ctx, &idemv1.LookupRequest{Namespace: "jobs", Key: "k1"})
	if err != nil || look.GetRecord().GetState() != idemv1.State_STATE_COMPLETED {
		t.Errorf("Lookup: %v, %v; want COMPLETED", look.GetRecord().GetState(), err)
	}

	// The sweeper expires a lapsed lease and purges a record past its
	// retention, and counts the records per state.
	if _, err := api.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: "lapse", LeaseTtl: durationpb.New(time.Second)}); err != nil {
		t.Fatal(err)
	}
	eventually("the sweeper expires the lapsed lease", func() bool {
		r, err := api.Lookup(ctx, &idemv1.LookupRequest{Namespace: "jobs", Key: "lapse"})
		return err == nil && r.GetRecord().GetState() == idemv1.State_STATE_EXPIRED
	})
	if _, err := admin.Exec(ctx, "UPDATE "+names.schema+".idem_records SET expires_at = now() - interval '1 second' WHERE key = 'k1'"); err != nil {
		t.Fatal(err)
	}
	eventually("the sweeper purges the record past its retention", func() bool {
		_, err := api.Lookup(ctx, &idemv1.LookupRequest{Namespace: "jobs", Key: "k1"})
		return status.Code(err) == codes.NotFound
	})
	eventually("the records count", func() bool { return strings.Contains(metrics(), `idem_records{state="expired"} 1`) })

	// The AdminService.
	list, err := adminAPI.ListRecords(ctx, &idemv1.ListRecordsRequest{Namespace: "jobs"})
	if err != nil || len(list.GetRecords()) != 1 {
		t.Errorf("ListRecords: %v, %v; want the one record", list.GetRecords(), err)
	}
	if _, err := adminAPI.Stats(ctx, &idemv1.StatsRequest{Namespace: "jobs"}); err != nil {
		t.Errorf("Stats: %v", err)
	}
	if _, err := adminAPI.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: "jobs", Key: "lapse"}); err != nil {
		t.Errorf("DeleteRecord: %v", err)
	}
	for _, line := range logs() {
		if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, "permission denied") {
			t.Errorf("idemd logged as the run-time role: %s", line)
		}
	}
	if m := metrics(); !strings.Contains(m, "\nidem_sweeper_errors_total 0\n") {
		t.Errorf("the sweeper failed as the run-time role:\n%s", m)
	}

	// Migrating as the run-time role: a schema with no tables yet, which
	// it may use but not create in, and a schema a migration behind.
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE SCHEMA %s; GRANT USAGE ON SCHEMA %[1]s TO %s", empty, names.app)); err != nil {
		t.Fatal(err)
	}
	emptyNames := names
	emptyNames.schema = empty
	out, code := run(t, nil, "migrate", "--database-url", roleURL(t, base, names.app, names.password, empty))
	if want := readRolesDoc(t, emptyNames).refusal; code != 1 || strings.TrimSpace(out) != want {
		t.Errorf("idemd migrate as the run-time role on an empty schema: exit %d\n  %s\nwant exit 1 and the line docs/production.md shows:\n  %s", code, out, want)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("DELETE FROM %s.idem_schema_migrations WHERE version = %d", names.schema, postgres.LatestVersion())); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, nil, "serve", "--database-url", appURL, "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", "")
	if code != 1 || !strings.Contains(out, fmt.Sprintf("idemd: migrate: the role %q lacks the privileges to migrate the schema", names.app)) ||
		!strings.Contains(out, "docs/production.md") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("idemd serve as the run-time role on a schema a migration behind: exit %d, output\n%s\nwant exit 1 and one line that says the role lacks the privileges", code, out)
	}
}
