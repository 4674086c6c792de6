package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

func claimN(t *testing.T, c idemv1.IdempotencyServiceClient, ns string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := c.Claim(context.Background(), &idemv1.ClaimRequest{Namespace: ns, Key: k}); err != nil {
			t.Fatalf("Claim %s/%s: %v", ns, k, err)
		}
	}
}

func TestAdminListRecordsFiltersAndOrder(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	ctx := context.Background()
	claimN(t, srv.Client, "b-ns", "k2", "k1")
	claimN(t, srv.Client, "a-ns", "k3")
	res, err := srv.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "a-ns", Key: "done"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: "a-ns", Key: "done", Token: res.GetRecord().GetToken()}); err != nil {
		t.Fatal(err)
	}

	all, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range all.GetRecords() {
		got = append(got, r.GetNamespace()+"/"+r.GetKey())
	}
	want := "[a-ns/done a-ns/k3 b-ns/k1 b-ns/k2]"
	if fmt.Sprint(got) != want || all.GetNextPageToken() != "" {
		t.Fatalf("ListRecords = %v (next %q), want %s and no next page", got, all.GetNextPageToken(), want)
	}

	byNS, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{Namespace: "b-ns"})
	if err != nil || len(byNS.GetRecords()) != 2 {
		t.Fatalf("namespace filter: %d records, err %v; want 2", len(byNS.GetRecords()), err)
	}
	byState, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{State: idemv1.State_STATE_COMPLETED})
	if err != nil || len(byState.GetRecords()) != 1 || byState.GetRecords()[0].GetKey() != "done" {
		t.Fatalf("state filter: %v, err %v; want only a-ns/done", byState.GetRecords(), err)
	}

	// older_than: nothing has been untouched for an hour; make one record old.
	none, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{OlderThan: durationpb.New(time.Hour)})
	if err != nil || len(none.GetRecords()) != 0 {
		t.Fatalf("older_than 1h: %d records, err %v; want 0", len(none.GetRecords()), err)
	}
	if _, err := srv.DB.Pool.Exec(ctx, `UPDATE idem_records SET updated_at = now() - interval '2 hours' WHERE key = 'k1'`); err != nil {
		t.Fatal(err)
	}
	stuck, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{State: idemv1.State_STATE_PROCESSING, OlderThan: durationpb.New(time.Hour)})
	if err != nil || len(stuck.GetRecords()) != 1 || stuck.GetRecords()[0].GetKey() != "k1" {
		t.Fatalf("stuck claims: %v, err %v; want only b-ns/k1", stuck.GetRecords(), err)
	}

	byPrefix, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{KeyPrefix: "k"})
	got = nil
	for _, r := range byPrefix.GetRecords() {
		got = append(got, r.GetNamespace()+"/"+r.GetKey())
	}
	if want := "[a-ns/k3 b-ns/k1 b-ns/k2]"; err != nil || fmt.Sprint(got) != want {
		t.Fatalf("key_prefix k: %v, err %v; want %s", got, err, want)
	}
}

func TestAdminListRecordsPaginatesEachRecordOnceWhileRecordsAreAdded(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	ctx := context.Background()
	const initial = 95
	for i := range initial {
		claimN(t, srv.Client, "pages", fmt.Sprintf("key-%03d", i*2)) // even keys exist from the start
	}

	// While the listing runs, another goroutine adds odd keys, which land
	// between and after the pages already read.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && i < initial; i++ {
			_, _ = srv.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "pages", Key: fmt.Sprintf("key-%03d", i*2+1)})
		}
	}()

	seen := map[string]int{}
	token := ""
	pages := 0
	for {
		page, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{PageSize: 7, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(page.GetRecords()) > 7 {
			t.Fatalf("page of %d records, want at most 7", len(page.GetRecords()))
		}
		for _, r := range page.GetRecords() {
			seen[r.GetKey()]++
		}
		token = page.GetNextPageToken()
		if token == "" {
			break
		}
	}
	stop.Store(true)
	wg.Wait()

	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times, want once", k, n)
		}
	}
	for i := range initial {
		if k := fmt.Sprintf("key-%03d", i*2); seen[k] != 1 {
			t.Errorf("%s existed for the whole listing but was listed %d times", k, seen[k])
		}
	}
	if pages < initial/7 {
		t.Fatalf("%d pages, want at least %d", pages, initial/7)
	}
}

func TestAdminListRecordsRejectsBadInput(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	cases := []struct {
		name  string
		req   *idemv1.ListRecordsRequest
		field string
	}{
		{"page size too big", &idemv1.ListRecordsRequest{PageSize: 1001}, "page_size is 1001; it must be between 1 and 1000"},
		{"negative page size", &idemv1.ListRecordsRequest{PageSize: -1}, "page_size"},
		{"forged page token", &idemv1.ListRecordsRequest{PageToken: "not-a-token!"}, "page_token"},
		{"bad namespace", &idemv1.ListRecordsRequest{Namespace: "UPPER"}, "namespace"},
		{"unknown state", &idemv1.ListRecordsRequest{State: idemv1.State(42)}, "state"},
		{"negative older_than", &idemv1.ListRecordsRequest{OlderThan: durationpb.New(-time.Second)}, "older_than"},
		{"key_prefix too long", &idemv1.ListRecordsRequest{KeyPrefix: strings.Repeat("k", 257)}, "key_prefix is 257 bytes; the limit is 256"},
		{"key_prefix with a control character", &idemv1.ListRecordsRequest{KeyPrefix: "a\tb"}, "key_prefix has a control character"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := srv.Admin.ListRecords(context.Background(), tc.req)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.field) {
				t.Fatalf("got %v %q, want INVALID_ARGUMENT naming %q", st.Code(), st.Message(), tc.field)
			}
		})
	}
}

func TestAdminDeleteRecordEvictsAndTheKeyStartsAfresh(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	ctx := context.Background()
	first, err := srv.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "evict", Key: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	del, err := srv.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: "evict", Key: "stuck"})
	if err != nil || del.GetRecord().GetState() != idemv1.State_STATE_PROCESSING {
		t.Fatalf("DeleteRecord: %v, err %v; want the PROCESSING record back", del, err)
	}
	if _, err := srv.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: "evict", Key: "stuck"}); status.Code(err) != codes.NotFound {
		t.Fatalf("second DeleteRecord: %v, want NOT_FOUND", err)
	}
	// The old holder cannot complete a record that is gone.
	_, err = srv.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: "evict", Key: "stuck", Token: first.GetRecord().GetToken()})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Complete after eviction: %v, want NOT_FOUND", err)
	}
	again, err := srv.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "evict", Key: "stuck"})
	if err != nil || again.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || again.GetRecord().GetAttempt() != 1 ||
		again.GetRecord().GetToken() <= first.GetRecord().GetToken() {
		t.Fatalf("Claim after eviction: %v, err %v; want ACQUIRED, attempt 1, token > %d", again, err, first.GetRecord().GetToken())
	}
	if _, err := srv.Admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: "evict", Key: ""}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("DeleteRecord with no key: %v, want INVALID_ARGUMENT", err)
	}
}

func TestAdminStatsCountsPerNamespaceAndState(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t)
	ctx := context.Background()
	claimN(t, srv.Client, "alpha", "1", "2", "3")
	claimN(t, srv.Client, "beta", "1")
	res, err := srv.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "beta", Key: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.Fail(ctx, &idemv1.FailRequest{Namespace: "beta", Key: "2", Token: res.GetRecord().GetToken(), Error: "no"}); err != nil {
		t.Fatal(err)
	}
	stats, err := srv.Admin.Stats(ctx, &idemv1.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range stats.GetRows() {
		got = append(got, fmt.Sprintf("%s/%s=%d", r.GetNamespace(), r.GetState(), r.GetCount()))
	}
	want := "[alpha/STATE_PROCESSING=3 beta/STATE_FAILED=1 beta/STATE_PROCESSING=1]"
	if fmt.Sprint(got) != want {
		t.Fatalf("Stats = %v, want %s", got, want)
	}
	beta, err := srv.Admin.Stats(ctx, &idemv1.StatsRequest{Namespace: "beta"})
	if err != nil || len(beta.GetRows()) != 2 {
		t.Fatalf("Stats(beta) = %v, err %v; want 2 rows", beta.GetRows(), err)
	}

	// oldest_updated_at: the claim that has gone longest without renewing.
	if _, err := srv.DB.Pool.Exec(ctx, `UPDATE idem_records SET updated_at = now() - interval '2 hours' WHERE namespace = 'alpha' AND key = '2'`); err != nil {
		t.Fatal(err)
	}
	alpha, err := srv.Admin.Stats(ctx, &idemv1.StatsRequest{Namespace: "alpha"})
	if err != nil || len(alpha.GetRows()) != 1 {
		t.Fatalf("Stats(alpha) = %v, err %v; want 1 row", alpha.GetRows(), err)
	}
	rec, err := srv.Client.Lookup(ctx, &idemv1.LookupRequest{Namespace: "alpha", Key: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := alpha.GetRows()[0].GetOldestUpdatedAt().AsTime(), rec.GetRecord().GetUpdatedAt().AsTime(); !got.Equal(want) {
		t.Fatalf("Stats(alpha) oldest_updated_at %s, want %s, the updated_at of alpha/2", got, want)
	}
}
