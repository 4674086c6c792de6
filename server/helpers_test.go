package server_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
)

// ns is the namespace the tests use unless they test namespaces.
const ns = "payments"

// testContext is t's context with a deadline, so that a hang fails the test
// instead of the whole run.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// errorInfo returns the ErrorInfo detail of st, nil when it has none.
func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// requireStatus fails t unless err is a gRPC status with code and, when
// reason is not empty, an ErrorInfo with that reason in the domain "idem".
func requireStatus(t testing.TB, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded; want %s / %s", code, reason)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status; want %s / %s", err, code, reason)
	}
	if st.Code() != code {
		t.Fatalf("code %s (%q); want %s / %s", st.Code(), st.Message(), code, reason)
	}
	if reason == "" {
		return st
	}
	info := errorInfo(st)
	if info == nil {
		t.Fatalf("status %s %q has no ErrorInfo; want reason %s", st.Code(), st.Message(), reason)
	}
	if info.GetReason() != reason || info.GetDomain() != services.ErrorDomain {
		t.Fatalf("ErrorInfo reason %q domain %q; want reason %q domain %q (message %q)",
			info.GetReason(), info.GetDomain(), reason, services.ErrorDomain, st.Message())
	}
	return st
}

// checkStatus is requireStatus for goroutines and loops: it reports instead
// of stopping.
func checkStatus(err error, code codes.Code, reason string) (ok bool, why string) {
	st, isStatus := status.FromError(err)
	switch {
	case err == nil:
		return false, "call succeeded"
	case !isStatus:
		return false, "not a gRPC status: " + err.Error()
	case st.Code() != code:
		return false, st.Code().String() + ": " + st.Message()
	}
	if info := errorInfo(st); info == nil || info.GetReason() != reason || info.GetDomain() != services.ErrorDomain {
		return false, "ErrorInfo " + info.String() + " on " + st.Message()
	}
	return true, ""
}

// mustClaim claims and fails t on an error.
func mustClaim(t testing.TB, c idemv1.IdempotencyServiceClient, req *idemv1.ClaimRequest) *idemv1.ClaimResponse {
	t.Helper()
	if req.Namespace == "" {
		req.Namespace = ns
	}
	resp, err := c.Claim(testContext(t), req)
	if err != nil {
		t.Fatalf("Claim %q: %v", req.GetKey(), err)
	}
	return resp
}

// mustAcquire claims and fails t unless the outcome is ACQUIRED.
func mustAcquire(t testing.TB, c idemv1.IdempotencyServiceClient, req *idemv1.ClaimRequest) *idemv1.Record {
	t.Helper()
	resp := mustClaim(t, c, req)
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

// lapse makes the lease of (ns, key) run out by the database clock.
func lapse(t testing.TB, pool *pgxpool.Pool, key string) {
	t.Helper()
	tag, err := pool.Exec(testContext(t),
		`UPDATE idem_records SET lease_expires_at = now() - interval '1 second' WHERE namespace = $1 AND key = $2`, ns, key)
	if err != nil {
		t.Fatalf("lapse %q: %v", key, err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("lapse %q: %d rows updated; want 1", key, tag.RowsAffected())
	}
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

// ---- timestamps ----

func wantUnset(t testing.TB, name string, ts *timestamppb.Timestamp) {
	t.Helper()
	if ts != nil {
		t.Errorf("%s = %s; want unset", name, ts.AsTime().Format(time.RFC3339Nano))
	}
}

// wantNow checks that ts is set and within a few seconds of the test's clock
// (the database runs on the same machine).
func wantNow(t testing.TB, name string, ts *timestamppb.Timestamp) {
	t.Helper()
	wantNear(t, name, ts, time.Now())
}

func wantNear(t testing.TB, name string, ts *timestamppb.Timestamp, want time.Time) {
	t.Helper()
	if ts == nil {
		t.Errorf("%s unset; want ≈ %s", name, want.Format(time.RFC3339Nano))
		return
	}
	if d := ts.AsTime().Sub(want); d < -5*time.Second || d > 5*time.Second {
		t.Errorf("%s = %s; want ≈ %s (off by %s)", name, ts.AsTime().Format(time.RFC3339Nano), want.Format(time.RFC3339Nano), d)
	}
}

// wantSpan checks that later - earlier is exactly d: both come from one
// statement's now(), so the difference is the configured duration to the
// microsecond.
func wantSpan(t testing.TB, name string, later, earlier *timestamppb.Timestamp, d time.Duration) {
	t.Helper()
	if later == nil || earlier == nil {
		t.Errorf("%s: a timestamp is unset (%v, %v); want a span of %s", name, later, earlier, d)
		return
	}
	if got := later.AsTime().Sub(earlier.AsTime()); got != d {
		t.Errorf("%s = %s; want %s", name, got, d)
	}
}

func wantAfter(t testing.TB, name string, later, earlier *timestamppb.Timestamp) {
	t.Helper()
	if later == nil || earlier == nil || !later.AsTime().After(earlier.AsTime()) {
		t.Errorf("%s: %v is not after %v", name, later.AsTime(), earlier.AsTime())
	}
}

// ---- servers over arbitrary stores ----

// serve starts the real gRPC server over st on a loopback port and returns a
// client. It stops in t.Cleanup.
func serve(t testing.TB, st store.Store, cfg server.Config) (idemv1.IdempotencyServiceClient, *grpc.ClientConn) {
	t.Helper()
	srv, err := server.New(server.Options{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return idemv1.NewIdempotencyServiceClient(conn), conn
}

// hookStore runs hook before every call of the store it wraps; an error from
// hook is returned instead of calling the store.
type hookStore struct {
	store.Store
	hook func(ctx context.Context, method string) error
}

func (h *hookStore) before(ctx context.Context, method string) error {
	if h.hook == nil {
		return nil
	}
	return h.hook(ctx, method)
}

func (h *hookStore) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := h.before(ctx, "RecordClaim"); err != nil {
		return nil, err
	}
	return h.Store.RecordClaim(ctx, p)
}

// hookMany runs the hook for each of ps, as method, and sends those it
// lets through together with many.
func hookMany[P, R any](ctx context.Context, h *hookStore, method string, ps []P, many func(context.Context, []P) ([]R, []error)) ([]R, []error) {
	res, errs := make([]R, len(ps)), make([]error, len(ps))
	var through []P
	var at []int
	for i, p := range ps {
		if errs[i] = h.before(ctx, method); errs[i] == nil {
			through, at = append(through, p), append(at, i)
		}
	}
	if len(through) > 0 {
		r, e := many(ctx, through)
		for j, i := range at {
			res[i], errs[i] = r[j], e[j]
		}
	}
	return res, errs
}

func (h *hookStore) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	return hookMany(ctx, h, "RecordClaim", ps, h.Store.RecordClaimMany)
}

func (h *hookStore) RecordCompleteMany(ctx context.Context, ps []*store.CompleteParams) ([]*store.Record, []error) {
	return hookMany(ctx, h, "RecordComplete", ps, h.Store.RecordCompleteMany)
}

func (h *hookStore) RecordFailMany(ctx context.Context, ps []*store.FailParams) ([]*store.Record, []error) {
	return hookMany(ctx, h, "RecordFail", ps, h.Store.RecordFailMany)
}

func (h *hookStore) RecordHeartbeatMany(ctx context.Context, ps []*store.HeartbeatParams) ([]*store.Record, []error) {
	return hookMany(ctx, h, "RecordHeartbeat", ps, h.Store.RecordHeartbeatMany)
}

func (h *hookStore) RecordGetMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, []error) {
	return hookMany(ctx, h, "RecordGet", ids, h.Store.RecordGetMany)
}

func (h *hookStore) RecordStep(ctx context.Context, p *store.StepParams) (*store.Step, error) {
	if err := h.before(ctx, "RecordStep"); err != nil {
		return nil, err
	}
	return h.Store.RecordStep(ctx, p)
}

func (h *hookStore) RecordStepMany(ctx context.Context, ps []*store.StepParams) ([]*store.Step, []error) {
	return hookMany(ctx, h, "RecordStep", ps, h.Store.RecordStepMany)
}

func (h *hookStore) RecordComplete(ctx context.Context, p *store.CompleteParams) (*store.Record, error) {
	if err := h.before(ctx, "RecordComplete"); err != nil {
		return nil, err
	}
	return h.Store.RecordComplete(ctx, p)
}

func (h *hookStore) RecordFail(ctx context.Context, p *store.FailParams) (*store.Record, error) {
	if err := h.before(ctx, "RecordFail"); err != nil {
		return nil, err
	}
	return h.Store.RecordFail(ctx, p)
}

func (h *hookStore) RecordHeartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.Record, error) {
	if err := h.before(ctx, "RecordHeartbeat"); err != nil {
		return nil, err
	}
	return h.Store.RecordHeartbeat(ctx, p)
}

func (h *hookStore) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if err := h.before(ctx, "RecordGet"); err != nil {
		return nil, err
	}
	return h.Store.RecordGet(ctx, id)
}

func (h *hookStore) SweepExpire(ctx context.Context, limit int) (int, error) {
	if err := h.before(ctx, "SweepExpire"); err != nil {
		return 0, err
	}
	return h.Store.SweepExpire(ctx, limit)
}

func (h *hookStore) SweepPurge(ctx context.Context, limit int) (int, error) {
	if err := h.before(ctx, "SweepPurge"); err != nil {
		return 0, err
	}
	return h.Store.SweepPurge(ctx, limit)
}

func (h *hookStore) Ping(ctx context.Context) error {
	if err := h.before(ctx, "Ping"); err != nil {
		return err
	}
	return h.Store.Ping(ctx)
}

// callLog records which store methods were called.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) hook(_ context.Context, method string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, method)
	return nil
}

func (l *callLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.calls, ", ")
}

func (l *callLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

func (h *hookStore) CountByState(ctx context.Context) (map[store.State]int64, error) {
	if err := h.before(ctx, "CountByState"); err != nil {
		return nil, err
	}
	return h.Store.CountByState(ctx)
}

func (h *hookStore) RecordList(ctx context.Context, p *store.ListParams) ([]*store.Record, error) {
	if err := h.before(ctx, "RecordList"); err != nil {
		return nil, err
	}
	return h.Store.RecordList(ctx, p)
}

func (h *hookStore) RecordDelete(ctx context.Context, p *store.DeleteParams) (*store.Record, error) {
	if err := h.before(ctx, "RecordDelete"); err != nil {
		return nil, err
	}
	return h.Store.RecordDelete(ctx, p)
}

func (h *hookStore) RecordStats(ctx context.Context, p *store.StatsParams) ([]store.StatsRow, error) {
	if err := h.before(ctx, "RecordStats"); err != nil {
		return nil, err
	}
	return h.Store.RecordStats(ctx, p)
}
