package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testcerts"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/middleware"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// The tokens of the tenancy tests' tenants. The config holds their hashes.
const (
	paymentsToken = "idem_tenancy-test-payments-token"
	billingToken  = "idem_tenancy-test-billing-token"
)

// tenancyFile is two tenants: payments, limited to process_payment and
// refund.*, and billing, unrestricted.
func tenancyFile() *config.File {
	return &config.File{Tenants: []config.Tenant{
		{Name: "payments", Tokens: []string{config.HashToken(paymentsToken)}, Namespaces: []string{"process_payment", "refund.*"}},
		{Name: "billing", Tokens: []string{config.HashToken(billingToken)}},
	}}
}

// startTenancy starts a test server with the tenants of f over a store that
// logs its calls.
func startTenancy(t *testing.T, f *config.File, opts testserver.Options) (*testserver.Server, *callLog) {
	t.Helper()
	tenants, err := services.NewTenants(f)
	if err != nil {
		t.Fatalf("NewTenants: %v", err)
	}
	opts.Config.Tenants = tenants
	calls := &callLog{}
	opts.Store = func(pg *postgres.Store) store.Store { return &hookStore{Store: pg, hook: calls.hook} }
	return testserver.StartWith(t, opts), calls
}

// asTenant is ctx with the token as bearer credentials.
func asTenant(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// TestTenantsCannotSeeEachOthersRecords: the tenant is part of the record's
// key, so another tenant's Lookup, Complete, Fail and Heartbeat of the same
// namespace and key find nothing, and its Claim gets a record of its own.
func TestTenantsCannotSeeEachOthersRecords(t *testing.T) {
	t.Parallel()
	ts, _ := startTenancy(t, tenancyFile(), testserver.Options{})
	c := ts.Client
	ctx := testContext(t)
	pay, bill := asTenant(ctx, paymentsToken), asTenant(ctx, billingToken)
	const key = "order-1"

	claim, err := c.Claim(pay, &idemv1.ClaimRequest{Namespace: "process_payment", Key: key})
	if err != nil || claim.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("payments Claim: %v, %v", claim, err)
	}
	token := claim.GetRecord().GetToken()

	_, err = c.Lookup(bill, &idemv1.LookupRequest{Namespace: "process_payment", Key: key})
	requireStatus(t, err, codes.NotFound, "NOT_FOUND")
	_, err = c.Complete(bill, &idemv1.CompleteRequest{Namespace: "process_payment", Key: key, Token: token, Result: []byte("stolen")})
	requireStatus(t, err, codes.NotFound, "NOT_FOUND")
	_, err = c.Fail(bill, &idemv1.FailRequest{Namespace: "process_payment", Key: key, Token: token, Error: "x"})
	requireStatus(t, err, codes.NotFound, "NOT_FOUND")
	_, err = c.Heartbeat(bill, &idemv1.HeartbeatRequest{Namespace: "process_payment", Key: key, Token: token})
	requireStatus(t, err, codes.NotFound, "NOT_FOUND")

	// billing's Claim of the same namespace and key is a record of its own.
	other, err := c.Claim(bill, &idemv1.ClaimRequest{Namespace: "process_payment", Key: key})
	if err != nil || other.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("billing Claim of the same key: %v, %v; want ACQUIRED", other, err)
	}

	rec, err := c.Lookup(pay, &idemv1.LookupRequest{Namespace: "process_payment", Key: key})
	if err != nil {
		t.Fatalf("payments Lookup: %v", err)
	}
	if rec.GetRecord().GetState() != idemv1.State_STATE_PROCESSING || rec.GetRecord().GetToken() != token {
		t.Errorf("payments' record is %s with token %d; want PROCESSING with %d, untouched by billing",
			rec.GetRecord().GetState(), rec.GetRecord().GetToken(), token)
	}
	var tenants []string
	rows, err := ts.DB.Pool.Query(ctx, `SELECT tenant FROM idem_records WHERE key = $1 ORDER BY tenant`, key)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		tenants = append(tenants, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(tenants, ",") != "billing,payments" {
		t.Errorf("rows for %q belong to %v; want billing and payments", key, tenants)
	}
}

// TestUnauthenticatedCallsNeverReachTheStore: every RPC without valid
// credentials is UNAUTHENTICATED, says what to send, never echoes the token,
// and the store sees no call at all.
func TestUnauthenticatedCallsNeverReachTheStore(t *testing.T) {
	t.Parallel()
	ts, calls := startTenancy(t, tenancyFile(), testserver.Options{})
	c := ts.Client
	const badToken = "idem_not-a-configured-token"
	creds := []struct {
		name string
		md   []string // authorization values; none when empty
		msg  string
	}{
		{"no credentials", nil, "no credentials"},
		{"unknown token", []string{"Bearer " + badToken}, "not valid"},
		{"token of another idem with the right prefix", []string{"Bearer " + paymentsToken + "x"}, "not valid"},
		{"wrong scheme", []string{"Basic " + paymentsToken}, "Bearer <token>"},
		{"no scheme", []string{paymentsToken}, "Bearer <token>"},
		{"empty token", []string{"Bearer "}, "Bearer <token>"},
		{"two headers", []string{"Bearer " + paymentsToken, "Bearer " + billingToken}, "one authorization header"},
	}
	rpcs := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Claim", func(ctx context.Context) error {
			_, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "process_payment", Key: "k"})
			return err
		}},
		{"Complete", func(ctx context.Context) error {
			_, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "process_payment", Key: "k", Token: 1})
			return err
		}},
		{"Fail", func(ctx context.Context) error {
			_, err := c.Fail(ctx, &idemv1.FailRequest{Namespace: "process_payment", Key: "k", Token: 1})
			return err
		}},
		{"Heartbeat", func(ctx context.Context) error {
			_, err := c.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: "process_payment", Key: "k", Token: 1})
			return err
		}},
		{"Lookup", func(ctx context.Context) error {
			_, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: "process_payment", Key: "k"})
			return err
		}},
		{"BatchClaim", func(ctx context.Context) error {
			_, err := c.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: []*idemv1.ClaimRequest{{Namespace: "process_payment", Key: "k"}}})
			return err
		}},
		{"BatchComplete", func(ctx context.Context) error {
			_, err := c.BatchComplete(ctx, &idemv1.BatchCompleteRequest{Requests: []*idemv1.CompleteRequest{{Namespace: "process_payment", Key: "k", Token: 1}}})
			return err
		}},
		{"BatchFail", func(ctx context.Context) error {
			_, err := c.BatchFail(ctx, &idemv1.BatchFailRequest{Requests: []*idemv1.FailRequest{{Namespace: "process_payment", Key: "k", Token: 1}}})
			return err
		}},
		{"BatchHeartbeat", func(ctx context.Context) error {
			_, err := c.BatchHeartbeat(ctx, &idemv1.BatchHeartbeatRequest{Requests: []*idemv1.HeartbeatRequest{{Namespace: "process_payment", Key: "k", Token: 1}}})
			return err
		}},
		{"BatchLookup", func(ctx context.Context) error {
			_, err := c.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: []*idemv1.LookupRequest{{Namespace: "process_payment", Key: "k"}}})
			return err
		}},
		{"BatchLookup with no items", func(ctx context.Context) error {
			// Authentication comes before the batch's own checks too.
			_, err := c.BatchLookup(ctx, &idemv1.BatchLookupRequest{})
			return err
		}},
		{"Claim with a bad request", func(ctx context.Context) error {
			// Authentication comes before validation: a stranger learns
			// nothing, not even what a valid request looks like.
			_, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "BAD NAMESPACE"})
			return err
		}},
	}
	for _, cr := range creds {
		for _, rpc := range rpcs {
			ctx := testContext(t)
			for _, v := range cr.md {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
			}
			err := rpc.call(ctx)
			st := requireStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
			if !strings.Contains(st.Message(), cr.msg) {
				t.Errorf("%s / %s: message %q; want it to mention %q", cr.name, rpc.name, st.Message(), cr.msg)
			}
			if strings.Contains(st.Message(), paymentsToken) || strings.Contains(st.Message(), badToken) {
				t.Errorf("%s / %s: message %q echoes the token", cr.name, rpc.name, st.Message())
			}
		}
	}
	if n := calls.len(); n != 0 {
		t.Fatalf("the store saw %d calls (%s); want none", n, calls)
	}

	// The same server answers a tenant with a valid token.
	if _, err := c.Claim(asTenant(testContext(t), paymentsToken), &idemv1.ClaimRequest{Namespace: "process_payment", Key: "k"}); err != nil {
		t.Fatalf("Claim with a valid token: %v", err)
	}
}

// TestHealthAndReflectionNeedNoCredentials: load balancers probe health, and
// tools read the schema through reflection, without a token.
func TestHealthAndReflectionNeedNoCredentials(t *testing.T) {
	t.Parallel()
	ts, _ := startTenancy(t, tenancyFile(), testserver.Options{})
	ctx := testContext(t)

	resp, err := healthpb.NewHealthClient(ts.Conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Check without credentials: %v, %v; want SERVING", resp, err)
	}

	stream, err := reflectionpb.NewServerReflectionClient(ts.Conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	reply, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection without credentials: %v", err)
	}
	if len(reply.GetListServicesResponse().GetService()) == 0 {
		t.Errorf("reflection listed no services")
	}
	_ = stream.CloseSend()
}

// TestNamespaceAllowList: a tenant with namespaces may use the ones its
// globs match and gets PERMISSION_DENIED / NAMESPACE_NOT_ALLOWED for the
// others, on every RPC and before the store; a malformed namespace is still
// INVALID_ARGUMENT.
func TestNamespaceAllowList(t *testing.T) {
	t.Parallel()
	ts, calls := startTenancy(t, tenancyFile(), testserver.Options{})
	c := ts.Client
	ctx := asTenant(testContext(t), paymentsToken)

	for _, allowed := range []string{"process_payment", "refund.card", "refund.wire"} {
		if _, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: allowed, Key: "k"}); err != nil {
			t.Errorf("Claim in %q: %v; want it allowed", allowed, err)
		}
	}
	before := calls.len()
	for _, denied := range []string{"send_email", "refund", "refunds.card", "process_payment2"} {
		calls := []func() error{
			func() error {
				_, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: denied, Key: "k"})
				return err
			},
			func() error {
				_, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: denied, Key: "k", Token: 1})
				return err
			},
			func() error {
				_, err := c.Fail(ctx, &idemv1.FailRequest{Namespace: denied, Key: "k", Token: 1})
				return err
			},
			func() error {
				_, err := c.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: denied, Key: "k", Token: 1})
				return err
			},
			func() error {
				_, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: denied, Key: "k"})
				return err
			},
		}
		for i, call := range calls {
			st := requireStatus(t, call(), codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")
			if !strings.Contains(st.Message(), denied) || !strings.Contains(st.Message(), `"payments"`) {
				t.Errorf("call %d in %q: message %q; want it to name the namespace and the tenant", i, denied, st.Message())
			}
			if md := errorInfo(st).GetMetadata(); md["namespace"] != denied || md["tenant"] != "payments" {
				t.Errorf("call %d: ErrorInfo metadata %v; want namespace and tenant", i, md)
			}
		}
	}
	if n := calls.len() - before; n != 0 {
		t.Errorf("denied calls reached the store %d times (%s)", n, calls)
	}
	_, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "Not Valid", Key: "k"})
	requireStatus(t, err, codes.InvalidArgument, "INVALID_NAMESPACE")

	// billing has no allow-list: every namespace.
	if _, err := c.Claim(asTenant(testContext(t), billingToken), &idemv1.ClaimRequest{Namespace: "send_email", Key: "k"}); err != nil {
		t.Errorf("billing Claim in send_email: %v; want it allowed", err)
	}
}

// TestRateLimitIsPerTenant: a tenant flooding at ten times its bucket gets
// exactly its burst through and RESOURCE_EXHAUSTED / RATE_LIMITED with a
// RetryInfo for the rest, while another tenant, calling at the same time,
// gets every call through. The refill is one token per 100 s, so the counts
// do not depend on how fast the machine is.
func TestRateLimitIsPerTenant(t *testing.T) {
	t.Parallel()
	const burst = 5
	f := &config.File{Tenants: []config.Tenant{
		{Name: "flood", Tokens: []string{config.HashToken("idem_flood")}, RateLimit: &config.RateLimit{PerSecond: 0.01, Burst: burst}},
		{Name: "calm", Tokens: []string{config.HashToken("idem_calm")}, RateLimit: &config.RateLimit{PerSecond: 0.01, Burst: burst}},
	}}
	ts, calls := startTenancy(t, f, testserver.Options{})
	c := ts.Client

	type tally struct {
		mu               sync.Mutex
		ok, exhausted    int
		other            []string
		minWait, maxWait time.Duration
	}
	run := func(token string, n int, tl *tally, wg *sync.WaitGroup) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := asTenant(testContext(t), token)
				_, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: fmt.Sprintf("%s-%d", token, i)})
				tl.mu.Lock()
				defer tl.mu.Unlock()
				switch st, _ := status.FromError(err); {
				case err == nil:
					tl.ok++
				case st.Code() == codes.ResourceExhausted:
					tl.exhausted++
					if ok, why := checkStatus(err, codes.ResourceExhausted, "RATE_LIMITED"); !ok {
						tl.other = append(tl.other, why)
					}
					var wait time.Duration
					for _, d := range st.Details() {
						if ri, ok := d.(*errdetails.RetryInfo); ok {
							wait = ri.GetRetryDelay().AsDuration()
						}
					}
					if tl.minWait == 0 || wait < tl.minWait {
						tl.minWait = wait
					}
					tl.maxWait = max(tl.maxWait, wait)
				default:
					tl.other = append(tl.other, err.Error())
				}
			}()
		}
	}
	var flood, calm tally
	var wg sync.WaitGroup
	run("idem_flood", 10*burst, &flood, &wg)
	run("idem_calm", burst, &calm, &wg)
	wg.Wait()

	if flood.ok != burst || flood.exhausted != 9*burst || len(flood.other) > 0 {
		t.Errorf("flood: %d OK, %d RESOURCE_EXHAUSTED, others %v; want %d and %d", flood.ok, flood.exhausted, flood.other, burst, 9*burst)
	}
	if calm.ok != burst || calm.exhausted != 0 || len(calm.other) > 0 {
		t.Errorf("calm: %d OK, %d RESOURCE_EXHAUSTED, others %v; want all %d OK: one tenant's flood must not starve another", calm.ok, calm.exhausted, calm.other, burst)
	}
	// An empty bucket refills one token in 100 s.
	if flood.minWait < 50*time.Second || flood.maxWait > 101*time.Second {
		t.Errorf("RetryInfo delays between %s and %s; want about 100s", flood.minWait, flood.maxWait)
	}
	if n := calls.len(); n != 2*burst {
		t.Errorf("the store saw %d calls; want %d, the rate-limited calls none", n, 2*burst)
	}
}

// TestMessageOverTheLimitWritesNothing: a request larger than the server's
// receive limit (the larger of --max-result-bytes and --batch-max-bytes,
// plus headroom; not grpc-go's 4 MiB) is refused by gRPC with
// RESOURCE_EXHAUSTED before any handler runs.
func TestMessageOverTheLimitWritesNothing(t *testing.T) {
	t.Parallel()
	ts, calls := startTenancy(t, tenancyFile(), testserver.Options{Config: server.Config{MaxResultBytes: 1024, BatchMaxBytes: 64 << 10}})
	c := ts.Client
	ctx := asTenant(testContext(t), billingToken)
	claim, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: "big"})
	if err != nil {
		t.Fatal(err)
	}
	rec := claim.GetRecord()
	before := calls.len()

	_, err = c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "jobs", Key: "big", Token: rec.GetToken(), Result: bytes.Repeat([]byte("x"), 1<<20)})
	requireStatus(t, err, codes.ResourceExhausted, "")
	if n := calls.len() - before; n != 0 {
		t.Errorf("the store saw %d calls (%s); want none", n, calls)
	}
	got, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: "jobs", Key: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetRecord().GetState() != idemv1.State_STATE_PROCESSING || got.GetRecord().GetResult() != nil {
		t.Errorf("record is %s with a %d-byte result; want PROCESSING with none", got.GetRecord().GetState(), len(got.GetRecord().GetResult()))
	}
}

// TestTenantResultLimit: a tenant's max_result_bytes below the server's is
// enforced by the handler as INVALID_ARGUMENT naming the tenant's limit; the
// result at the limit is accepted; other tenants keep the server's limit.
func TestTenantResultLimit(t *testing.T) {
	t.Parallel()
	f := tenancyFile()
	f.Tenants[0].MaxResultBytes = 100
	ts, _ := startTenancy(t, f, testserver.Options{Config: server.Config{MaxResultBytes: 1000}})
	c := ts.Client
	pay := asTenant(testContext(t), paymentsToken)

	claim, err := c.Claim(pay, &idemv1.ClaimRequest{Namespace: "process_payment", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	token := claim.GetRecord().GetToken()
	_, err = c.Complete(pay, &idemv1.CompleteRequest{Namespace: "process_payment", Key: "k", Token: token, Result: make([]byte, 101)})
	st := requireStatus(t, err, codes.InvalidArgument, "INVALID_RESULT")
	for _, want := range []string{"101 bytes", `"payments"`, "limit is 100"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q; want it to mention %q", st.Message(), want)
		}
	}
	if md := errorInfo(st).GetMetadata(); md["field"] != "result" {
		t.Errorf("ErrorInfo metadata %v; want field=result", md)
	}
	got, err := c.Complete(pay, &idemv1.CompleteRequest{Namespace: "process_payment", Key: "k", Token: token, Result: make([]byte, 100)})
	if err != nil || got.GetRecord().GetState() != idemv1.State_STATE_COMPLETED {
		t.Fatalf("Complete with 100 bytes: %v, %v; want COMPLETED", got, err)
	}

	bill := asTenant(testContext(t), billingToken)
	claim, err = c.Claim(bill, &idemv1.ClaimRequest{Namespace: "jobs", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(bill, &idemv1.CompleteRequest{Namespace: "jobs", Key: "k", Token: claim.GetRecord().GetToken(), Result: make([]byte, 1000)}); err != nil {
		t.Errorf("billing Complete with 1000 bytes (the server's limit): %v", err)
	}
}

// syncBuffer is a bytes.Buffer that the server's goroutines may write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLogsHoldNoSecrets: at debug level, the logs of Claim, Complete, Fail,
// Heartbeat, Lookup, a fingerprint mismatch and refused credentials hold no
// result, no token, no fingerprint and no full key; they do name the tenant.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const (
		secretToken = "idem_SECRET-BEARER-TOKEN-7f3a9c"
		fingerprint = "FINGERPRINT-SECRET-52ab"
		result      = "RESULT-SECRET-payload-c0ffee"
		failure     = "ERROR-TEXT-with-card-4242"
	)
	longKey := "KEY-" + strings.Repeat("k", 200) + "-TAIL"
	f := &config.File{Tenants: []config.Tenant{{Name: "payments", Tokens: []string{config.HashToken(secretToken)}}}}
	ts, _ := startTenancy(t, f, testserver.Options{Logger: logger})
	c := ts.Client
	ctx := asTenant(testContext(t), secretToken)

	claim, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: longKey, Fingerprint: []byte(fingerprint), Claimant: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	token := claim.GetRecord().GetToken()
	if _, err := c.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: "jobs", Key: longKey, Token: token}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "jobs", Key: longKey, Token: token, Result: []byte(result)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: "jobs", Key: longKey}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: longKey, Fingerprint: []byte(fingerprint + "-other")})
	requireStatus(t, err, codes.FailedPrecondition, "FINGERPRINT_MISMATCH")

	claim2, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: longKey + "2", Fingerprint: []byte(fingerprint)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fail(ctx, &idemv1.FailRequest{Namespace: "jobs", Key: longKey + "2", Token: claim2.GetRecord().GetToken(), Error: failure}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "jobs", Key: longKey + "2", Token: claim2.GetRecord().GetToken(), Result: []byte(result)})
	requireStatus(t, err, codes.FailedPrecondition, "ALREADY_TERMINAL")
	_, err = c.Lookup(asTenant(testContext(t), secretToken+"-WRONG"), &idemv1.LookupRequest{Namespace: "jobs", Key: longKey})
	requireStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")

	out := logs.String()
	if strings.Count(out, `"msg":"finished call"`) < 9 || !strings.Contains(out, `"tenant":"payments"`) {
		t.Fatalf("the logs do not hold one line per call with the tenant; got:\n%s", out)
	}
	for _, secret := range []string{secretToken, "SECRET-BEARER", fingerprint, "FINGERPRINT-SECRET", result, "RESULT-SECRET", longKey, "-TAIL", failure} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs contain %q:\n%s", secret, out)
		}
	}
	// Results, fingerprints and tokens are bytes on the wire: check their
	// base64 too, the form a JSON encoder would give them.
	for _, secret := range []string{"UkVTVUxULVNFQ1JFVC", "RklOR0VSUFJJTlQtU0VDUkVU"} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs contain base64 %q:\n%s", secret, out)
		}
	}
}

// TestTLSWithBearerTokens: over TLS, a token names the tenant; without one
// the call is UNAUTHENTICATED.
func TestTLSWithBearerTokens(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "idem test CA")
	serverCert := ca.Server(t)
	ts, _ := startTenancy(t, tenancyFile(), testserver.Options{
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}))},
		ClientCreds:   credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}),
	})
	ctx := testContext(t)
	if _, err := ts.Client.Claim(asTenant(ctx, paymentsToken), &idemv1.ClaimRequest{Namespace: "process_payment", Key: "tls"}); err != nil {
		t.Fatalf("Claim over TLS with a token: %v", err)
	}
	_, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "process_payment", Key: "tls"})
	requireStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
}

// TestMutualTLS: with a client CA, a verified certificate whose subject a
// tenant lists names that tenant without a token; an unlisted subject needs
// a token; a token and a certificate of different tenants are refused; a
// client without a certificate, or with one from another CA, cannot connect.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "idem client CA")
	dir := t.TempDir()
	certFile, keyFile := testcerts.WritePEM(t, dir, "server", ca.Server(t))
	caFile := dir + "/client-ca.pem"
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := middleware.LoadTLSConfig(certFile, keyFile, caFile)
	if err != nil {
		t.Fatalf("LoadTLSConfig: %v", err)
	}
	f := tenancyFile()
	f.Tenants[0].ClientCertSubjects = []string{"CN=payments-worker"}
	f.Tenants[1].ClientCertSubjects = []string{"CN=billing-worker,O=Acme"}
	ts, calls := startTenancy(t, f, testserver.Options{
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(serverTLS))},
		ClientCreds:   credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client(t, pkix.Name{CommonName: "payments-worker"})}, MinVersion: tls.VersionTLS12}),
	})
	ctx := testContext(t)

	// The certificate alone names payments; a token of payments agrees.
	if _, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "process_payment", Key: "m1"}); err != nil {
		t.Fatalf("Claim with the payments-worker certificate: %v", err)
	}
	if _, err := ts.Client.Lookup(asTenant(ctx, paymentsToken), &idemv1.LookupRequest{Namespace: "process_payment", Key: "m1"}); err != nil {
		t.Fatalf("Lookup with certificate and payments' token: %v; want the record the certificate claimed", err)
	}
	// A certificate of payments with billing's token: refused.
	_, err = ts.Client.Lookup(asTenant(ctx, billingToken), &idemv1.LookupRequest{Namespace: "process_payment", Key: "m1"})
	st := requireStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	if !strings.Contains(st.Message(), "different tenants") {
		t.Errorf("message %q; want it to say the credentials disagree", st.Message())
	}

	dial := func(tlsCfg *tls.Config) idemv1.IdempotencyServiceClient {
		conn, err := grpc.NewClient(ts.Addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return idemv1.NewIdempotencyServiceClient(conn)
	}

	// A multi-attribute subject, compared as RFC 2253 prints it.
	billing := dial(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Client(t, pkix.Name{CommonName: "billing-worker", Organization: []string{"Acme"}})}})
	if _, err := billing.Claim(ctx, &idemv1.ClaimRequest{Namespace: "process_payment", Key: "m1"}); err != nil {
		t.Fatalf("Claim with the billing-worker certificate: %v", err)
	}
	got, err := billing.Lookup(ctx, &idemv1.LookupRequest{Namespace: "process_payment", Key: "m1"})
	if err != nil || got.GetRecord().GetToken() == 0 {
		t.Fatalf("billing Lookup: %v, %v", got, err)
	}

	// A verified certificate that no tenant lists needs a token.
	stranger := dial(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Client(t, pkix.Name{CommonName: "stranger"})}})
	before := calls.len()
	_, err = stranger.Lookup(ctx, &idemv1.LookupRequest{Namespace: "process_payment", Key: "m1"})
	requireStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	if n := calls.len() - before; n != 0 {
		t.Errorf("an unlisted certificate reached the store %d times", n)
	}
	if _, err := stranger.Lookup(asTenant(ctx, paymentsToken), &idemv1.LookupRequest{Namespace: "process_payment", Key: "m1"}); err != nil {
		t.Errorf("unlisted certificate with payments' token: %v; want payments' record", err)
	}

	// No certificate, or one from another CA: the handshake fails.
	other := testcerts.NewCA(t, "another CA")
	for name, cfg := range map[string]*tls.Config{
		"no certificate":           {RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
		"another CA's certificate": {RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{other.Client(t, pkix.Name{CommonName: "payments-worker"})}},
	} {
		_, err := dial(cfg).Lookup(asTenant(ctx, paymentsToken), &idemv1.LookupRequest{Namespace: "process_payment", Key: "m1"})
		if code := status.Code(err); code != codes.Unavailable {
			t.Errorf("%s: %v; want UNAVAILABLE (the TLS handshake fails)", name, err)
		}
	}
}

// TestAdminOnly: only a tenant with admin: true passes AdminOnly; without
// tenants everyone does.
func TestAdminOnly(t *testing.T) {
	t.Parallel()
	f := tenancyFile()
	f.Tenants[1].Admin = true
	tenants, err := services.NewTenants(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := tenants.AdminOnly(services.ContextWithTenant(ctx, "billing")); err != nil {
		t.Errorf("admin tenant: %v", err)
	}
	err = tenants.AdminOnly(services.ContextWithTenant(ctx, "payments"))
	requireStatus(t, err, codes.PermissionDenied, "NOT_ADMIN")
	err = tenants.AdminOnly(ctx)
	requireStatus(t, err, codes.PermissionDenied, "NOT_ADMIN")
	var none *services.Tenants
	if err := none.AdminOnly(ctx); err != nil {
		t.Errorf("without tenants: %v; want every caller admitted", err)
	}
}

// TestNewTenantsRejectsAnInvalidFile: a File built in code gets the file's
// checks.
func TestNewTenantsRejectsAnInvalidFile(t *testing.T) {
	t.Parallel()
	_, err := services.NewTenants(&config.File{Tenants: []config.Tenant{{Name: "x", Tokens: []string{"plaintext-token"}}}})
	if err == nil || !strings.Contains(err.Error(), "tenants[0].tokens[0]") {
		t.Fatalf("NewTenants: %v; want an error naming tenants[0].tokens[0]", err)
	}
	if _, err := services.NewTenants(nil); err == nil {
		t.Fatal("NewTenants(nil) succeeded")
	}
}

// TestAdminServiceNeedsAnAdminTenant: over gRPC, the operator RPCs need
// credentials like every other, and then a tenant with admin: true; they
// see the caller's own tenant only.
func TestAdminServiceNeedsAnAdminTenant(t *testing.T) {
	t.Parallel()
	f := tenancyFile()
	f.Tenants[1].Admin = true // billing
	ts, _ := startTenancy(t, f, testserver.Options{})
	ctx := testContext(t)

	_, err := ts.Admin.Stats(ctx, &idemv1.StatsRequest{})
	requireStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	_, err = ts.Admin.Stats(asTenant(ctx, paymentsToken), &idemv1.StatsRequest{})
	requireStatus(t, err, codes.PermissionDenied, "NOT_ADMIN")

	if _, err := ts.Client.Claim(asTenant(ctx, paymentsToken), &idemv1.ClaimRequest{Namespace: "process_payment", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	resp, err := ts.Admin.Stats(asTenant(ctx, billingToken), &idemv1.StatsRequest{})
	if err != nil {
		t.Fatalf("admin tenant Stats: %v", err)
	}
	if len(resp.GetRows()) != 0 {
		t.Errorf("billing's Stats show %v; want none of payments' records", resp.GetRows())
	}
}
