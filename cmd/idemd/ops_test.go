package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"

	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/faultproxy"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// opsServer is a real idemd whose database connection runs through a proxy
// the test can cut.
type opsServer struct {
	addr, httpAddr string
	proxy          *faultproxy.Proxy
	db             *testdb.DB
	conn           *grpc.ClientConn
}

func startOpsServer(t *testing.T, args ...string) *opsServer {
	t.Helper()
	db := testdb.New(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(t, u.Host)
	u.Host = proxy.Addr()
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()

	s := &opsServer{proxy: proxy, db: db}
	cmd := exec.Command(idemdBinary, append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--json-listen", "",
		"--sweep-interval", "100ms", "--count-interval", "100ms", "--health-interval", "100ms", "--log-format", "json"}, args...)...)
	cmd.Env = append(environWithout("IDEM_DATABASE_URL"), "IDEM_DATABASE_URL="+u.String())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	logs := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case logs <- sc.Text():
			default: // nobody reads after start-up; drop rather than block idemd
			}
		}
	}()
	addrs := parseServing(t, waitFor(t, logs, servingMsg))
	s.addr, s.httpAddr = addrs.Listen, addrs.HTTPListen
	s.conn, err = grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	return s
}

func (s *opsServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.httpAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric returns the value of one sample line of /metrics, e.g.
// `idem_claims_total{namespace="ops",outcome="acquired"}`, or -1 if absent.
func (s *opsServer) metric(t *testing.T, sample string) float64 {
	t.Helper()
	_, body := s.get(t, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", sample, err)
			}
			return v
		}
	}
	return -1
}

// eventually polls cond every 50ms for up to 15s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMetricsFollowClaimsTakeoversAndSweeps(t *testing.T) {
	t.Parallel()
	s := startOpsServer(t)
	c := idemv1.NewIdempotencyServiceClient(s.conn)
	ctx := context.Background()

	first, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "ops", Key: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "ops", Key: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Pool.Exec(ctx, `UPDATE idem_records SET lease_expires_at = now() - interval '1 second' WHERE key = 'a'`); err != nil {
		t.Fatal(err)
	}
	second, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "ops", Key: "a"})
	if err != nil || second.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || second.GetRecord().GetAttempt() != 2 {
		t.Fatalf("takeover: %v, %v", second, err)
	}
	_, err = c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "ops", Key: "a", Token: first.GetRecord().GetToken()})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("Complete with the old token: %v, want ABORTED", err)
	}

	for sample, want := range map[string]float64{
		`idem_claims_total{namespace="ops",outcome="acquired"}`:    2,
		`idem_claims_total{namespace="ops",outcome="in_progress"}`: 1,
		`idem_takeovers_total`:  1,
		`idem_lease_lost_total`: 1,
		`grpc_server_handled_total{grpc_code="Aborted",grpc_method="Complete",grpc_service="idem.v1.IdempotencyService",grpc_type="unary"}`: 1,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Claim",grpc_service="idem.v1.IdempotencyService",grpc_type="unary"}`:         3,
	} {
		if got := s.metric(t, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	if got := s.metric(t, "idem_db_pool_max_conns"); got < 1 {
		t.Errorf("idem_db_pool_max_conns = %v, want the pool's size", got)
	}

	// A short lease that lapses is expired by the sweeper, which then samples
	// the records per state.
	if _, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "ops", Key: "b", LeaseTtl: durationpb.New(time.Second)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sweeper expired the lapsed lease", func() bool {
		return s.metric(t, "idem_sweeper_expired_total") >= 1 && s.metric(t, `idem_records{state="expired"}`) == 1
	})
	if got := s.metric(t, `idem_records{state="processing"}`); got != 1 {
		t.Errorf(`idem_records{state="processing"} = %v, want 1`, got)
	}
	if got := s.metric(t, "idem_sweep_duration_seconds_count"); got < 1 {
		t.Errorf("idem_sweep_duration_seconds_count = %v, want at least 1", got)
	}
}

// TestCoalescerOnPostgres: idemd on PostgreSQL puts its store behind the
// coalescer, whose batches idem_db_batch_calls counts, unless
// --coalesce-max-in-flight (or its variable) is 0.
func TestCoalescerOnPostgres(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		args      []string
		coalesced bool
	}{
		{"by default", nil, true},
		{"turned off", []string{"--coalesce-max-in-flight", "0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startOpsServer(t, tc.args...)
			c := idemv1.NewIdempotencyServiceClient(s.conn)
			if _, err := c.Claim(context.Background(), &idemv1.ClaimRequest{Namespace: "ops", Key: "coalesced"}); err != nil {
				t.Fatal(err)
			}
			got := s.metric(t, `idem_db_batch_calls_count{kind="claim"}`)
			if tc.coalesced && got != 1 || !tc.coalesced && got != -1 {
				t.Fatalf(`idem_db_batch_calls_count{kind="claim"} = %v; want 1 with the coalescer, absent without`, got)
			}
		})
	}
}

func TestReadinessHealthAndRecoveryWhenTheDatabaseGoesAway(t *testing.T) {
	t.Parallel()
	s := startOpsServer(t)
	c := idemv1.NewIdempotencyServiceClient(s.conn)
	hc := healthpb.NewHealthClient(s.conn)
	ctx := context.Background()

	if code, _ := s.get(t, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200", code)
	}
	if code, body := s.get(t, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %q, want 200", code, body)
	}
	eventually(t, "health is SERVING", func() bool {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})

	// An acknowledged Complete before the outage must survive it.
	claim, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "ops", Key: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: "ops", Key: "before", Token: claim.GetRecord().GetToken(), Result: []byte("kept")}); err != nil {
		t.Fatal(err)
	}

	s.proxy.Cut()
	eventually(t, "/readyz is 503", func() bool { code, _ := s.get(t, "/readyz"); return code == http.StatusServiceUnavailable })
	eventually(t, "health is NOT_SERVING", func() bool {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "idem.v1.IdempotencyService"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if code, _ := s.get(t, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d during the outage, want 200: the process is alive", code)
	}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = c.Claim(callCtx, &idemv1.ClaimRequest{Namespace: "ops", Key: "during"})
	cancel()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Claim during the outage: %v, want UNAVAILABLE", err)
	}

	s.proxy.Restore()
	eventually(t, "/readyz is 200 again", func() bool { code, _ := s.get(t, "/readyz"); return code == http.StatusOK })
	eventually(t, "health is SERVING again", func() bool {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
	after, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: "ops", Key: "during"})
	if err != nil || after.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim after recovery: %v, %v; want ACQUIRED (the refused Claim wrote nothing)", after, err)
	}
	kept, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: "ops", Key: "before"})
	if err != nil || kept.GetRecord().GetState() != idemv1.State_STATE_COMPLETED || string(kept.GetRecord().GetResult()) != "kept" {
		t.Fatalf("Lookup of the record completed before the outage: %v, %v", kept, err)
	}
}

func TestReflectionListsBothServices(t *testing.T) {
	t.Parallel()
	s := startOpsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, svc := range resp.GetListServicesResponse().GetService() {
		got[svc.GetName()] = true
	}
	for _, want := range []string{"idem.v1.IdempotencyService", "idem.v1.AdminService", "grpc.health.v1.Health"} {
		if !got[want] {
			t.Errorf("reflection does not list %s; it lists %v", want, got)
		}
	}
	// And the admin service answers on the real binary.
	stats, err := idemv1.NewAdminServiceClient(s.conn).Stats(ctx, &idemv1.StatsRequest{})
	if err != nil || len(stats.GetRows()) != 0 {
		t.Fatalf("Stats on an empty schema: %v, %v", stats, err)
	}
}
