package server_test

import (
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
)

const opsToken = "idem_admin-tenancy-test-ops-token"

// startOps starts a server whose admin tenant "ops" may use refund.* only,
// and gives ops records in namespaces outside that list too, as a tenant
// whose allow-list was narrowed keeps its older records.
func startOps(t *testing.T, opts testserver.Options) (*testserver.Server, *callLog) {
	t.Helper()
	f := &config.File{Tenants: []config.Tenant{
		{Name: "ops", Tokens: []string{config.HashToken(opsToken)}, Namespaces: []string{"refund.*"}, Admin: true},
	}}
	ts, calls := startTenancy(t, f, opts)
	ctx := testContext(t)
	for _, id := range []string{"a-hidden/k1", "refund.a/k1", "refund.a/k2", "refund.b/k1", "secret/k1", "secret/k2", "zz-hidden/k1"} {
		ns, key, _ := strings.Cut(id, "/")
		if _, err := ts.Store.RecordClaim(ctx, &store.ClaimParams{
			RecordID: store.RecordID{Tenant: "ops", Namespace: ns, Key: key},
			LeaseTTL: time.Minute, Retention: time.Hour,
		}); err != nil {
			t.Fatalf("claim %s: %v", id, err)
		}
	}
	return ts, calls
}

// TestAdminServiceHonoursTheNamespaceAllowList: an admin tenant with an
// allow-list manages the namespaces it admits and no others. Naming another
// namespace is PERMISSION_DENIED / NAMESPACE_NOT_ALLOWED before the store is
// asked; a listing or count of every namespace shows only admitted ones.
func TestAdminServiceHonoursTheNamespaceAllowList(t *testing.T) {
	t.Parallel()
	ts, calls := startOps(t, testserver.Options{})
	ctx := asTenant(testContext(t), opsToken)
	before := calls.len()

	_, err := ts.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: "secret", Key: "k1"})
	requireStatus(t, err, codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")
	_, err = ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{Namespace: "secret"})
	requireStatus(t, err, codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")
	_, err = ts.Admin.Stats(ctx, &idemv1.StatsRequest{Namespace: "secret"})
	requireStatus(t, err, codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")
	if n := calls.len(); n != before {
		t.Fatalf("refused calls reached the store: %s", calls)
	}
	if _, err := ts.Store.RecordGet(testContext(t), store.RecordID{Tenant: "ops", Namespace: "secret", Key: "k1"}); err != nil {
		t.Fatalf("secret/k1 after the refused DeleteRecord: %v; want it still there", err)
	}

	// Every namespace: only the admitted ones, page by page, hidden records
	// before, between and after them.
	var listed []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("more than 10 pages: %v", listed)
		}
		page, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.GetRecords() {
			listed = append(listed, r.GetNamespace()+"/"+r.GetKey())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if got, want := fmt.Sprint(listed), "[refund.a/k1 refund.a/k2 refund.b/k1]"; got != want {
		t.Errorf("ListRecords of every namespace = %s; want %s", got, want)
	}
	stats, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, r := range stats.GetRows() {
		rows = append(rows, fmt.Sprintf("%s=%d", r.GetNamespace(), r.GetCount()))
	}
	if got, want := fmt.Sprint(rows), "[refund.a=2 refund.b=1]"; got != want {
		t.Errorf("Stats of every namespace = %s; want %s", got, want)
	}

	// An admitted namespace works as before.
	if _, err := ts.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: "refund.a", Key: "k1"}); err != nil {
		t.Fatalf("DeleteRecord in refund.a: %v", err)
	}
}

// TestAdminListRecordsBoundsItsScanBehindHiddenRecords: when more records
// than one call reads are hidden by the allow-list, a page comes back short
// (here empty) with a next page, and the listing still ends with every
// admitted record once.
func TestAdminListRecordsBoundsItsScanBehindHiddenRecords(t *testing.T) {
	t.Parallel()
	ts, _ := startOps(t, testserver.Options{})
	if _, err := ts.DB.Pool.Exec(testContext(t), `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, claimant,
		fingerprint, lease_expires_at, retention, created_at, updated_at)
		SELECT 'ops', 'b-hidden', 'k' || i, 'processing', nextval('idem_token_seq'), 1, '', '', now() + interval '1 minute',
			interval '1 hour', now(), now()
		FROM generate_series(1, 12000) i`); err != nil {
		t.Fatal(err)
	}
	ctx := asTenant(testContext(t), opsToken)
	var listed []string
	var sizes []int
	token := ""
	for {
		if len(sizes) > 10 {
			t.Fatalf("more than 10 pages: %v", listed)
		}
		page, err := ts.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(page.GetRecords()))
		for _, r := range page.GetRecords() {
			listed = append(listed, r.GetNamespace()+"/"+r.GetKey())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if got, want := fmt.Sprint(listed), "[refund.a/k1 refund.a/k2 refund.b/k1]"; got != want {
		t.Errorf("ListRecords = %s; want %s", got, want)
	}
	if len(sizes) < 2 || sizes[0] != 0 {
		t.Errorf("pages of %v records; want an empty first page, cut short by the scan bound of %d records", sizes, 10*services.MaxPageSize)
	}
}

// TestDeleteRecordLogsNeitherKeyNorToken: the operator's DeleteRecord logs
// the tenant, namespace and state; never the key or the token.
func TestDeleteRecordLogsNeitherKeyNorToken(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := testserver.StartWith(t, testserver.Options{Logger: logger})
	ctx := testContext(t)
	const key = "KEY-SECRET-0d1e"
	claim := mustAcquire(t, srv.Client, &idemv1.ClaimRequest{Namespace: "evict", Key: key})
	if _, err := srv.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: "evict", Key: key}); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range logs.lines(t) {
		if l["msg"] != "record deleted by an operator" {
			continue
		}
		found = true
		if l["namespace"] != "evict" || l["tenant"] != services.DefaultTenant {
			t.Errorf("the deletion's line does not name tenant and namespace: %v", l)
		}
		for k, v := range l {
			if strings.Contains(strings.ToLower(k), "key") || strings.Contains(strings.ToLower(k), "token") {
				t.Errorf("the deletion's line has %s=%v: %v", k, v, l)
			}
		}
	}
	if !found {
		t.Fatalf("no deletion line in the logs:\n%s", logs.String())
	}
	if out := logs.String(); strings.Contains(out, "KEY-SECRET") {
		t.Errorf("the logs contain the key:\n%s", out)
	}
	if tok := fmt.Sprintf(`"token":%d`, claim.GetToken()); strings.Contains(logs.String(), tok) {
		t.Errorf("the logs contain %s:\n%s", tok, logs.String())
	}
}

// TestListRecordsOlderThanBound: older_than out of range names the bound,
// also when it is too long for a time.Duration.
func TestListRecordsOlderThanBound(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	ctx := testContext(t)
	for _, d := range []*durationpb.Duration{
		{Seconds: 1 << 40},
		{Seconds: math.MaxInt64},
		durationpb.New(services.MaxOlderThan + time.Second),
		durationpb.New(-time.Second),
	} {
		_, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{OlderThan: d})
		st := requireStatus(t, err, codes.InvalidArgument, "INVALID_OLDER_THAN")
		if !strings.Contains(st.Message(), "between 0s and 87600h0m0s") {
			t.Errorf("older_than %v: %q; want the bound named", d, st.Message())
		}
	}
	if _, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{OlderThan: durationpb.New(services.MaxOlderThan)}); err != nil {
		t.Errorf("older_than at the bound: %v", err)
	}
}

// TestProtoListsEveryReason: every ErrorInfo reason the server can send is
// in the list at the top of idem.proto, which is where workers in other
// languages look for them.
func TestProtoListsEveryReason(t *testing.T) {
	t.Parallel()
	proto, err := os.ReadFile("../proto/idem/v1/idem.proto")
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(proto), "syntax =")
	listed := map[string]bool{}
	for _, w := range regexp.MustCompile(`[A-Z][A-Z_]+[A-Z]`).FindAllString(header, -1) {
		listed[w] = true
	}
	reasonLiteral := regexp.MustCompile(`ErrorReason_ERROR_REASON_([A-Z][A-Z_]+[A-Z])`)
	sent := map[string]bool{}
	err = filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range reasonLiteral.FindAllStringSubmatch(string(src), -1) {
			sent[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) < 10 {
		t.Fatalf("found only %d reasons in the server's sources: %v", len(sent), sent)
	}
	for r := range sent {
		if !listed[r] {
			t.Errorf("reason %s is sent by the server but not listed at the top of idem.proto", r)
		}
	}
}
