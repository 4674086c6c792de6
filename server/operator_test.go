package server_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
)

// The tokens of the operator tests' tenants.
const (
	rootToken    = "idem_operator-test-root-token"
	teamAToken   = "idem_operator-test-team-a-token"
	teamBToken   = "idem_operator-test-team-b-token"
	workersToken = "idem_operator-test-workers-token"
)

// startOperator starts a server with four tenants: root, the operator;
// team-a, an admin tenant; team-b, an admin tenant limited to jobs.*; and
// workers, a plain one. Each tenant but root has records, claimed through
// the API with its own token.
func startOperator(t *testing.T, logger *slog.Logger) (*testserver.Server, *callLog) {
	t.Helper()
	f := &config.File{Tenants: []config.Tenant{
		{Name: "workers", Tokens: []string{config.HashToken(workersToken)}},
		{Name: "team-b", Tokens: []string{config.HashToken(teamBToken)}, Namespaces: []string{"jobs.*"}, Admin: true},
		{Name: "team-a", Tokens: []string{config.HashToken(teamAToken)}, Admin: true},
		{Name: "root", Tokens: []string{config.HashToken(rootToken)}, Operator: true},
	}}
	ts, calls := startTenancy(t, f, testserver.Options{Logger: logger})
	ctx := testContext(t)
	for _, c := range []struct{ token, ids string }{
		{teamAToken, "jobs.a/k1 jobs.a/k2 mail/k1"},
		{teamBToken, "jobs.b/k1"},
		{workersToken, "jobs.a/k1 mail/k9"},
	} {
		for _, id := range strings.Fields(c.ids) {
			ns, key, _ := strings.Cut(id, "/")
			if _, err := ts.Client.Claim(asTenant(ctx, c.token), &idemv1.ClaimRequest{Namespace: ns, Key: key}); err != nil {
				t.Fatalf("claim %s: %v", id, err)
			}
		}
	}
	return ts, calls
}

func recordNames(recs []*idemv1.Record) string {
	var out []string
	for _, r := range recs {
		out = append(out, r.GetTenant()+":"+r.GetNamespace()+"/"+r.GetKey())
	}
	return fmt.Sprint(out)
}

func statsNames(rows []*idemv1.StatsRow) string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s:%s=%d", r.GetTenant(), r.GetNamespace(), r.GetCount()))
	}
	return fmt.Sprint(out)
}

// TestOperatorListsCountsAndDeletesAcrossTenants: an operator names any
// tenant, or all of them, in ListRecords, Stats and DeleteRecord, and every
// record and row says whose it is.
func TestOperatorListsCountsAndDeletesAcrossTenants(t *testing.T) {
	t.Parallel()
	ts, _ := startOperator(t, nil)
	ctx := asTenant(testContext(t), rootToken)

	list, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{Tenant: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := recordNames(list.GetRecords()), "[team-a:jobs.a/k1 team-a:jobs.a/k2 team-a:mail/k1]"; got != want {
		t.Errorf("ListRecords of team-a = %s; want %s", got, want)
	}
	own, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{})
	if err != nil || len(own.GetRecords()) != 0 {
		t.Errorf("ListRecords of root's own records = %s, %v; want none", recordNames(own.GetRecords()), err)
	}

	// Every tenant, page by page, in pages that end inside a tenant and at
	// a tenant's end.
	for _, size := range []int32{1, 2, 3, 100} {
		var recs []*idemv1.Record
		token := ""
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("page size %d: more than 10 pages: %s", size, recordNames(recs))
			}
			page, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{AllTenants: true, PageSize: size, PageToken: token})
			if err != nil {
				t.Fatalf("page size %d: %v", size, err)
			}
			recs = append(recs, page.GetRecords()...)
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		want := "[team-a:jobs.a/k1 team-a:jobs.a/k2 team-a:mail/k1 team-b:jobs.b/k1 workers:jobs.a/k1 workers:mail/k9]"
		if got := recordNames(recs); got != want {
			t.Errorf("ListRecords of all tenants, page size %d = %s; want %s", size, got, want)
		}
	}
	// A namespace filter holds across tenants.
	list, err = ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{AllTenants: true, Namespace: "jobs.a"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := recordNames(list.GetRecords()), "[team-a:jobs.a/k1 team-a:jobs.a/k2 workers:jobs.a/k1]"; got != want {
		t.Errorf("ListRecords of jobs.a in all tenants = %s; want %s", got, want)
	}

	stats, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{AllTenants: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := statsNames(stats.GetRows()), "[team-a:jobs.a=2 team-a:mail=1 team-b:jobs.b=1 workers:jobs.a=1 workers:mail=1]"; got != want {
		t.Errorf("Stats of all tenants = %s; want %s", got, want)
	}
	stats, err = ts.Admin.Stats(ctx, &idemv1.StatsRequest{Tenant: "workers"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := statsNames(stats.GetRows()), "[workers:jobs.a=1 workers:mail=1]"; got != want {
		t.Errorf("Stats of workers = %s; want %s", got, want)
	}

	del, err := ts.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Tenant: "workers", Namespace: "jobs.a", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := del.GetRecord().GetTenant(); got != "workers" {
		t.Errorf("deleted record's tenant = %q; want workers", got)
	}
	bg := testContext(t)
	if _, err := ts.Store.RecordGet(bg, store.RecordID{Tenant: "workers", Namespace: "jobs.a", Key: "k1"}); err == nil {
		t.Error("workers' jobs.a/k1 is still there after the operator deleted it")
	}
	if _, err := ts.Store.RecordGet(bg, store.RecordID{Tenant: "team-a", Namespace: "jobs.a", Key: "k1"}); err != nil {
		t.Errorf("team-a's jobs.a/k1 after deleting workers' record of the same key: %v", err)
	}

	// Mistakes an operator can make.
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"unknown tenant", func() error {
			_, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{Tenant: "nobody"})
			return err
		}},
		{"malformed tenant", func() error {
			_, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{Tenant: "Team A"})
			return err
		}},
		{"tenant and all_tenants", func() error {
			_, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{Tenant: "team-a", AllTenants: true})
			return err
		}},
		{"tenant with a NUL byte", func() error {
			_, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{Tenant: "team-\x00"})
			return err
		}},
		{"unknown tenant to delete from", func() error {
			_, err := ts.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Tenant: "nobody", Namespace: "jobs.a", Key: "k2"})
			return err
		}},
	} {
		st := requireStatus(t, c.call(), codes.InvalidArgument, "INVALID_TENANT")
		if !strings.Contains(st.Message(), "tenant") {
			t.Errorf("%s: %q does not name the field", c.name, st.Message())
		}
	}
	// A page token of a listing of one tenant is not one of all tenants.
	page, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{Tenant: "team-a", PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{AllTenants: true, PageSize: 1, PageToken: page.GetNextPageToken()})
	requireStatus(t, err, codes.InvalidArgument, "INVALID_PAGE_TOKEN")
}

// TestOnlyAnOperatorReachesOtherTenants: an admin tenant that names another
// tenant, or all of them, gets PERMISSION_DENIED / NOT_OPERATOR naming the
// field before the store is asked; naming itself is its own records; a
// plain tenant stays NOT_ADMIN.
func TestOnlyAnOperatorReachesOtherTenants(t *testing.T) {
	t.Parallel()
	ts, calls := startOperator(t, nil)
	ctx := testContext(t)
	admin := asTenant(ctx, teamAToken)
	before := calls.len()

	for _, c := range []struct {
		field string
		call  func() error
	}{
		{"tenant", func() error {
			_, err := ts.Admin.ListRecords(admin, &idemv1.ListRecordsRequest{Tenant: "workers"})
			return err
		}},
		{"all_tenants", func() error {
			_, err := ts.Admin.ListRecords(admin, &idemv1.ListRecordsRequest{AllTenants: true})
			return err
		}},
		{"tenant", func() error {
			_, err := ts.Admin.Stats(admin, &idemv1.StatsRequest{Tenant: "root"})
			return err
		}},
		{"all_tenants", func() error {
			_, err := ts.Admin.Stats(admin, &idemv1.StatsRequest{AllTenants: true})
			return err
		}},
		{"tenant", func() error {
			_, err := ts.Admin.DeleteRecord(admin, &idemv1.DeleteRecordRequest{Tenant: "workers", Namespace: "jobs.a", Key: "k1"})
			return err
		}},
		{"tenant", func() error { // a tenant that does not exist tells nothing either
			_, err := ts.Admin.Stats(admin, &idemv1.StatsRequest{Tenant: "nobody"})
			return err
		}},
	} {
		st := requireStatus(t, c.call(), codes.PermissionDenied, "NOT_OPERATOR")
		if got := errorInfo(st).GetMetadata()["field"]; got != c.field {
			t.Errorf("%q: metadata field %q; want %q", st.Message(), got, c.field)
		}
		if !strings.HasPrefix(st.Message(), c.field+": ") || !strings.Contains(st.Message(), "operator: true") {
			t.Errorf("message %q; want it to start with the field and name operator: true", st.Message())
		}
	}
	if n := calls.len(); n != before {
		t.Fatalf("refused calls reached the store: %s", calls)
	}
	if _, err := ts.Store.RecordGet(ctx, store.RecordID{Tenant: "workers", Namespace: "jobs.a", Key: "k1"}); err != nil {
		t.Fatalf("workers' jobs.a/k1 after a refused DeleteRecord: %v", err)
	}

	// Naming itself is allowed, and still bound by its allow-list.
	list, err := ts.Admin.ListRecords(admin, &idemv1.ListRecordsRequest{Tenant: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := recordNames(list.GetRecords()), "[team-a:jobs.a/k1 team-a:jobs.a/k2 team-a:mail/k1]"; got != want {
		t.Errorf("team-a's ListRecords of itself = %s; want %s", got, want)
	}
	_, err = ts.Admin.Stats(asTenant(ctx, teamBToken), &idemv1.StatsRequest{Tenant: "team-b", Namespace: "mail"})
	requireStatus(t, err, codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")

	// A plain tenant is refused as before, whatever it names.
	plain := asTenant(ctx, workersToken)
	_, err = ts.Admin.ListRecords(plain, &idemv1.ListRecordsRequest{AllTenants: true})
	requireStatus(t, err, codes.PermissionDenied, "NOT_ADMIN")
	_, err = ts.Admin.DeleteRecord(plain, &idemv1.DeleteRecordRequest{Tenant: "team-a", Namespace: "jobs.a", Key: "k1"})
	requireStatus(t, err, codes.PermissionDenied, "NOT_ADMIN")
}

// TestOperatorCallsAcrossTenantsAreLogged: every cross-tenant call leaves one
// info line with the operator, the tenant (or all_tenants) and the method,
// and neither the key nor a token; a call on the operator's own records
// leaves none.
func TestOperatorCallsAcrossTenantsAreLogged(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ts, _ := startOperator(t, logger)
	ctx := asTenant(testContext(t), rootToken)

	if _, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{AllTenants: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{Tenant: "team-b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Tenant: "team-a", Namespace: "mail", Key: "k1"}); err != nil {
		t.Fatal(err)
	}

	var got []string
	for _, l := range logs.lines(t) {
		if l["msg"] != "operator call across tenants" {
			continue
		}
		if l["level"] != "INFO" || l["operator"] != "root" {
			t.Errorf("cross-tenant line at %v by %v; want INFO by root: %v", l["level"], l["operator"], l)
		}
		for k := range l {
			if strings.Contains(strings.ToLower(k), "key") || strings.Contains(strings.ToLower(k), "token") {
				t.Errorf("cross-tenant line has %s: %v", k, l)
			}
		}
		who := fmt.Sprint(l["tenant"])
		if l["all_tenants"] == true {
			who = "*"
		}
		got = append(got, fmt.Sprintf("%v %s", l["method"], who))
	}
	if want := "[ListRecords * Stats team-b DeleteRecord team-a]"; fmt.Sprint(got) != want {
		t.Errorf("cross-tenant lines %v; want %s\n%s", got, want, logs.String())
	}
}

// TestTenantFieldWithoutAConfigFile: without a config file the one tenant,
// default, may name itself or all tenants, which is itself; any other name
// is INVALID_TENANT.
func TestTenantFieldWithoutAConfigFile(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	ctx := testContext(t)
	mustAcquire(t, srv.Client, &idemv1.ClaimRequest{Namespace: "solo", Key: "k1"})
	for _, req := range []*idemv1.ListRecordsRequest{{Tenant: services.DefaultTenant}, {AllTenants: true}} {
		list, err := srv.Admin.ListRecords(ctx, req)
		if err != nil {
			t.Fatalf("ListRecords(%v): %v", req, err)
		}
		if got, want := recordNames(list.GetRecords()), "[default:solo/k1]"; got != want {
			t.Errorf("ListRecords(%v) = %s; want %s", req, got, want)
		}
	}
	_, err := srv.Admin.Stats(ctx, &idemv1.StatsRequest{Tenant: "payments"})
	st := requireStatus(t, err, codes.InvalidArgument, "INVALID_TENANT")
	if !strings.Contains(st.Message(), "without a config file") {
		t.Errorf("message %q; want it to say why there is no such tenant", st.Message())
	}
}

// TestOperatorResolveKeepsTheTenantsResultLimit: a result an operator
// resolves a record with is one the record's tenant's Claims will replay,
// so it is held to that tenant's max_result_bytes, not only the server's.
func TestOperatorResolveKeepsTheTenantsResultLimit(t *testing.T) {
	t.Parallel()
	f := &config.File{Tenants: []config.Tenant{
		{Name: "small", Tokens: []string{config.HashToken(workersToken)}, MaxResultBytes: 8},
		{Name: "root", Tokens: []string{config.HashToken(rootToken)}, Operator: true},
	}}
	ts, _ := startTenancy(t, f, testserver.Options{})
	ctx := asTenant(testContext(t), rootToken)
	_, err := ts.Admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Tenant: "small", Namespace: "jobs", Key: "k",
		Resolution: &idemv1.ResolveRecordRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("123456789")}}})
	st := requireStatus(t, err, codes.InvalidArgument, "INVALID_RESULT")
	if !strings.Contains(st.Message(), "result") || !strings.Contains(st.Message(), "8") {
		t.Errorf("message %q; want it to name the result and small's limit", st.Message())
	}
	// Within the limit the call reaches the store: there is no such record.
	_, err = ts.Admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Tenant: "small", Namespace: "jobs", Key: "k",
		Resolution: &idemv1.ResolveRecordRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("12345678")}}})
	requireStatus(t, err, codes.NotFound, "NOT_FOUND")
}
