package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/maintenance"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
)

// The server's metrics are what idemd gives its sweeper.
var _ maintenance.Metrics = (*server.Metrics)(nil)

// ns is the namespace of the records the tests claim through the server.
const ns = "payments"

// testContext is t's context with a deadline, so that a hang fails the test
// instead of the whole run.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustAcquire claims (in ns unless req names a namespace) and fails t unless
// the outcome is ACQUIRED.
func mustAcquire(t testing.TB, c idemv1.IdempotencyServiceClient, req *idemv1.ClaimRequest) *idemv1.Record {
	t.Helper()
	if req.Namespace == "" {
		req.Namespace = ns
	}
	resp, err := c.Claim(testContext(t), req)
	if err != nil {
		t.Fatalf("Claim %q: %v", req.GetKey(), err)
	}
	if resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim %q: outcome %s; want ACQUIRED", req.GetKey(), resp.GetOutcome())
	}
	return resp.GetRecord()
}

func mustLookup(t testing.TB, c idemv1.IdempotencyServiceClient, key string) *idemv1.Record {
	t.Helper()
	resp, err := c.Lookup(testContext(t), &idemv1.LookupRequest{Namespace: ns, Key: key})
	if err != nil {
		t.Fatalf("Lookup %q: %v", key, err)
	}
	return resp.GetRecord()
}

// countRows counts the records, all of them when state is empty.
func countRows(t testing.TB, pool *pgxpool.Pool, state string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(testContext(t),
		`SELECT count(*) FROM idem_records WHERE $1 = '' OR state = $1`, state).Scan(&n)
	if err != nil {
		t.Fatalf("count records: %v", err)
	}
	return n
}

// insertLapsed inserts n PROCESSING records of namespace "bulk" whose lease
// ran out, with a retention of one hour, directly in SQL.
func insertLapsed(t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	_, err := pool.Exec(testContext(t), `
		INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, lease_expires_at, retention, created_at, updated_at)
		SELECT 'default', 'bulk', 'k' || g, 'processing', nextval('idem_token_seq'), 1,
			now() - interval '1 second' - g * interval '1 millisecond', interval '1 hour', now(), now()
		FROM generate_series(1, $1::int) AS g`, n)
	if err != nil {
		t.Fatalf("insert %d lapsed records: %v", n, err)
	}
}

// hookStore runs hook before every call of the store it wraps; an error from
// hook is returned instead of calling the store.
type hookStore struct {
	maintenance.Store
	hook func(ctx context.Context, method string) error
}

func (h *hookStore) SweepExpire(ctx context.Context, limit int) (int, error) {
	if err := h.hook(ctx, "SweepExpire"); err != nil {
		return 0, err
	}
	return h.Store.SweepExpire(ctx, limit)
}

func (h *hookStore) SweepPurge(ctx context.Context, limit int) (int, error) {
	if err := h.hook(ctx, "SweepPurge"); err != nil {
		return 0, err
	}
	return h.Store.SweepPurge(ctx, limit)
}

func (h *hookStore) CountByState(ctx context.Context) (map[store.State]int64, error) {
	if err := h.hook(ctx, "CountByState"); err != nil {
		return nil, err
	}
	return h.Store.CountByState(ctx)
}
