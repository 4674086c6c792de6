package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// otlpReceiver is a trace collector for one test: it accepts OTLP/HTTP
// protobuf exports and keeps their spans.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if req.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		var export collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				r.spans = append(r.spans, ss.GetSpans()...)
			}
		}
		r.mu.Unlock()
		resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) received() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// environWithoutTelemetry is the environment less every IDEM_ and OTEL_
// variable, so that a developer's own settings cannot turn tracing on or off.
func environWithoutTelemetry() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// claimTraced runs idemd serve with env, makes one Claim whose metadata
// carries the caller's trace context, and one through the JSON API whose
// headers carry jsonTraceparent, stops idemd with SIGTERM and returns its
// log lines.
func claimTraced(t *testing.T, env []string, traceparent, jsonTraceparent string) []string {
	t.Helper()
	db := testdb.New(t)
	cmd := exec.Command(idemdBinary, "serve", "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", "127.0.0.1:0",
		"--sweep-interval", "50ms", "--health-interval", "50ms", "--log-format", "json",
		"--log-level", "debug") // an answered Claim's line is at debug
	cmd.Env = append(environWithoutTelemetry(), append(env, "IDEM_DATABASE_URL="+db.URL)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var (
		mu    sync.Mutex
		lines []string
	)
	logs := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			select {
			case logs <- sc.Text():
			default:
			}
		}
		close(logs)
	}()
	addrs := parseServing(t, waitFor(t, logs, servingMsg))
	addr, jsonAddr := addrs.Listen, addrs.JSONListen

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", traceparent)
	claim, err := idemv1.NewIdempotencyServiceClient(conn).Claim(ctx, &idemv1.ClaimRequest{Namespace: "jobs", Key: "traced"})
	if err != nil || claim.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim: %v, %v", claim, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+jsonAddr+"/v1/namespaces/jobs/records/json-traced:claim", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", jsonTraceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("JSON Claim: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "OUTCOME_ACQUIRED") {
		t.Fatalf("JSON Claim: %s %s", resp.Status, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("idemd exited with %v after SIGTERM, want 0", err)
	}
	for range logs { // the reader has seen every line
	}
	mu.Lock()
	defer mu.Unlock()
	return lines
}

// claimLogLine is the "finished call" line of the Claim.
func claimLogLine(t *testing.T, lines []string) map[string]any {
	t.Helper()
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "finished call" && m["grpc.method"] == "Claim" {
			return m
		}
	}
	t.Fatalf("no finished-call line for the Claim in:\n%s", strings.Join(lines, "\n"))
	return nil
}

const (
	callerTraceID   = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID    = "00f067aa0ba902b7"
	traceparent     = "00-" + callerTraceID + "-" + callerSpanID + "-01"
	jsonTraceID     = "0af7651916cd43dd8448eb211c80319c"
	jsonSpanID      = "b7ad6b7169203331"
	jsonTraceparent = "00-" + jsonTraceID + "-" + jsonSpanID + "-01"
)

// TestTracingClaimSpans: with an OTLP endpoint in the environment, a Claim
// whose metadata carries a traceparent makes a server span that continues
// the caller's trace, a store span under it and a statement span under
// that; the spans reach the collector by the time idemd has stopped (the
// shutdown flushes them), and the Claim's log line carries the trace id.
// A Claim through the JSON API continues the trace of its traceparent
// header the same way.
func TestTracingClaimSpans(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	lines := claimTraced(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL}, traceparent, jsonTraceparent)

	spans := rcv.received()
	find := func(name string) *tracepb.Span {
		t.Helper()
		for _, s := range spans {
			if s.GetName() == name {
				return s
			}
		}
		var names []string
		for _, s := range spans {
			names = append(names, s.GetName())
		}
		t.Fatalf("no span %q among %q", name, names)
		return nil
	}
	var rpc, jsonRPC *tracepb.Span
	for _, s := range spans {
		if s.GetName() != "idem.v1.IdempotencyService/Claim" {
			continue
		}
		switch hex.EncodeToString(s.GetTraceId()) {
		case callerTraceID:
			rpc = s
		case jsonTraceID:
			jsonRPC = s
		}
	}
	if rpc == nil || jsonRPC == nil {
		find("idem.v1.IdempotencyService/Claim") // lists the spans if there is none at all
		t.Fatalf("want a Claim server span in the gRPC caller's trace and one in the JSON caller's")
	}
	if got := hex.EncodeToString(jsonRPC.GetParentSpanId()); got != jsonSpanID {
		t.Errorf("JSON Claim's server span's parent is %s, want the caller's span %s", got, jsonSpanID)
	}
	if got := hex.EncodeToString(rpc.GetTraceId()); got != callerTraceID {
		t.Errorf("server span's trace id is %s, want the caller's %s", got, callerTraceID)
	}
	if got := hex.EncodeToString(rpc.GetParentSpanId()); got != callerSpanID {
		t.Errorf("server span's parent is %s, want the caller's span %s", got, callerSpanID)
	}
	if rpc.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span's kind is %v", rpc.GetKind())
	}
	var call *tracepb.Span
	for _, s := range spans {
		if s.GetName() == "store claim" && string(s.GetTraceId()) == string(rpc.GetTraceId()) {
			call = s
		}
	}
	if call == nil {
		find("store claim")
		t.Fatalf("no store span in the caller's trace")
	}
	if string(call.GetParentSpanId()) != string(rpc.GetSpanId()) || string(call.GetTraceId()) != string(rpc.GetTraceId()) {
		t.Errorf("store span's parent is %x in trace %x, want the server span %x", call.GetParentSpanId(), call.GetTraceId(), rpc.GetSpanId())
	}
	if got := intAttr(call, "idem.batch.calls"); got != 1 {
		t.Errorf("store span's idem.batch.calls is %d, want 1 (one Claim alone)", got)
	}
	stmt := find("postgres claim")
	for _, s := range spans {
		if s.GetName() == "postgres claim" && string(s.GetParentSpanId()) == string(call.GetSpanId()) {
			stmt = s
		}
	}
	if string(stmt.GetParentSpanId()) != string(call.GetSpanId()) {
		t.Errorf("statement span's parent is %x, want the store span %x", stmt.GetParentSpanId(), call.GetSpanId())
	}

	line := claimLogLine(t, lines)
	if line["trace_id"] != callerTraceID || line["span_id"] != hex.EncodeToString(rpc.GetSpanId()) {
		t.Errorf("log line has trace_id %v and span_id %v, want %s and the server span's %x", line["trace_id"], line["span_id"], callerTraceID, rpc.GetSpanId())
	}
}

// TestNoTracingWithoutOTELVariables: an OTEL_ variable that does not ask for
// traces (here the service name) turns nothing on: idemd says so, and the
// Claim's log line has no trace id even though the caller sent one.
func TestNoTracingWithoutOTELVariables(t *testing.T) {
	t.Parallel()
	lines := claimTraced(t, []string{"OTEL_SERVICE_NAME=idemd-test"}, traceparent, jsonTraceparent)
	for _, l := range lines {
		if strings.Contains(l, `"msg":"idemd serving"`) && !strings.Contains(l, `"tracing":false`) {
			t.Errorf("serving line does not say tracing is off: %s", l)
		}
	}
	line := claimLogLine(t, lines)
	if _, ok := line["trace_id"]; ok {
		t.Errorf("log line has a trace id with tracing off: %v", line)
	}
}

func intAttr(s *tracepb.Span, key string) int64 {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue()
		}
	}
	return -1
}

// TestServeHelpSaysOTLPOverHTTP: serve --help, where an operator looks for
// tracing, says the exporter speaks OTLP/HTTP and not gRPC, and idemd
// refuses the gRPC protocol at start with a line that says what to set.
func TestServeHelpSaysOTLPOverHTTP(t *testing.T) {
	t.Parallel()
	help, code := run(t, nil, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help: exit %d\n%s", code, help)
	}
	for _, want := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTLP/HTTP only", "4318", "grpc is refused"} {
		if !strings.Contains(strings.Join(strings.Fields(help), " "), want) {
			t.Errorf("serve --help does not say %q:\n%s", want, help)
		}
	}
	out, code := run(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
		"serve", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=1")
	if code == 0 || !strings.Contains(out, "set it to http/protobuf") {
		t.Errorf("serve with the grpc protocol: exit %d, output %q; want a refusal that says to use http/protobuf", code, out)
	}
}
