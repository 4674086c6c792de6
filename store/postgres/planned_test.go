package postgres_test

import (
	"net/url"
	"testing"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// TestArgumentDependentStatementsAreNotPrepared: the statements whose best
// plan depends on their values (the sweeper's LIMIT, the admin listing's and
// stats' optional filters) go with their arguments inline, so the generic
// plans Connect asks for never apply to them: a generic plan for the purge
// left its partial index and made a purge of a million records 20 times
// slower. A Claim, as a control, is prepared.
func TestArgumentDependentStatementsAreNotPrepared(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1") // one connection: its prepared statements are all there are
	u.RawQuery = q.Encode()
	pool, err := postgres.Connect(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := postgres.New(pool)
	ctx := t.Context()

	if _, err := st.SweepExpire(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SweepPurge(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordList(ctx, &store.ListParams{Tenant: "acme", Namespace: "ns", Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordStats(ctx, &store.StatsParams{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	prepared := func(like string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1", like).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for what, like := range map[string]string{
		"the sweeper's expiry":  "%state = 'processing' AND lease_expires_at <= now()%LIMIT%",
		"the sweeper's purge":   "%state <> 'processing' AND expires_at <= now()%LIMIT%",
		"the admin listing":     "%ORDER BY namespace, key%LIMIT%",
		"the admin stats count": "%GROUP BY namespace, state%",
	} {
		if n := prepared(like); n != 0 {
			t.Errorf("%s is a prepared statement (%d), so it runs on a generic plan; want it sent with its arguments inline", what, n)
		}
	}
	if _, err := st.RecordClaim(ctx, &store.ClaimParams{RecordID: store.RecordID{Tenant: "acme", Namespace: "ns", Key: "k"},
		LeaseTTL: testLease, Retention: testRetention}); err != nil {
		t.Fatal(err)
	}
	if n := prepared("%INSERT INTO idem_records%"); n == 0 {
		t.Errorf("a Claim left no prepared statement: the check above cannot see one")
	}
}
