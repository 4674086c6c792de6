package server_test

import (
	"bytes"
	"compress/gzip"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
)

// strictServer is a server with the JSON API, metrics and a log to read.
type strictServer struct {
	*testserver.Server
	metrics *server.Metrics
	log     *syncBuffer
}

func startStrict(t *testing.T) *strictServer {
	t.Helper()
	s := &strictServer{metrics: server.NewMetrics(), log: &syncBuffer{}}
	logger := slog.New(slog.NewJSONHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s.Server = testserver.StartWith(t, testserver.Options{JSON: true, Logger: logger,
		Config: server.Config{Metrics: s.metrics, MaxResultBytes: 1024, BatchMaxBytes: 1024, BatchMaxItems: 10}})
	return s
}

// handled is grpc_server_handled_total of one method and code.
func (s *strictServer) handled(t *testing.T, service, method string, code codes.Code) float64 {
	t.Helper()
	families, err := s.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "grpc_service") == "idem.v1."+service && label(m, "grpc_method") == method && label(m, "grpc_code") == code.String() {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// logged counts the log's "finished call" lines of one method and code.
func (s *strictServer) logged(t *testing.T, method string, code codes.Code) int {
	t.Helper()
	n := 0
	for _, l := range s.log.lines(t) {
		if l["msg"] == "finished call" && l["grpc.method"] == method && l["grpc.code"] == code.String() {
			n++
		}
	}
	return n
}

// rawCall is one HTTP request of a table case: a Connect call (path "" is
// the method's Connect path) or a REST route.
type rawCall struct {
	method, path, contentType, encoding string
	body                                []byte
}

func (c rawCall) do(t *testing.T, base string) httpAnswer {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, bytes.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	if c.encoding != "" {
		req.Header.Set("Content-Encoding", c.encoding)
	}
	return doHTTP(t, req, "")
}

func connectRaw(method string, body string) rawCall {
	return rawCall{method: http.MethodPost, path: "/idem.v1.IdempotencyService/" + method, contentType: "application/json", body: []byte(body)}
}

func adminRaw(method string, body string) rawCall {
	return rawCall{method: http.MethodPost, path: "/idem.v1.AdminService/" + method, contentType: "application/json", body: []byte(body)}
}

// restRaw is a POST of a REST route with key, without a Content-Type.
func restRaw(key, verb, body string) rawCall {
	return rawCall{method: http.MethodPost, path: "/v1/namespaces/strict/records/" + key + ":" + verb, body: []byte(body)}
}

// errorOf reads the code name, the reason, the ErrorInfo metadata and the
// message of an error answer in the Connect or the REST format.
func errorOf(t *testing.T, a httpAnswer, rest bool) (code, reason string, md map[string]any, msg string) {
	t.Helper()
	msg, _ = a.body["message"].(string)
	details, _ := a.body["details"].([]any)
	for _, d := range details {
		d, _ := d.(map[string]any)
		var info map[string]any
		switch {
		case rest && d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo":
			info = d
		case !rest && d["type"] == "google.rpc.ErrorInfo":
			info, _ = d["debug"].(map[string]any)
		}
		if info != nil {
			if info["domain"] != services.ErrorDomain {
				t.Fatalf("ErrorInfo domain %v in %s; want %s", info["domain"], a.raw, services.ErrorDomain)
			}
			reason, _ = info["reason"].(string)
			md, _ = info["metadata"].(map[string]any)
		}
	}
	if rest {
		n, _ := a.body["code"].(float64)
		code = strings.ToLower(codes.Code(n).String())
	} else {
		code, _ = a.body["code"].(string)
		code = strings.ReplaceAll(code, "_", "")
	}
	return code, reason, md, msg
}

// TestJSONMalformedInput: every kind of malformed request, over Connect and
// REST, is refused with 400 and INVALID_ARGUMENT (415 or 413 where its
// header or size is at fault), an ErrorInfo reason of domain idem, and a
// message and metadata naming the field where there is one; it writes
// nothing, and it is counted and logged as a call of its RPC.
func TestJSONMalformedInput(t *testing.T) {
	t.Parallel()
	s := startStrict(t)
	ctx := testContext(t)
	// Records the token calls of the cases name: each must still be
	// PROCESSING afterwards.
	held := map[string]int64{}
	for _, key := range []string{"held-fail", "held-complete", "held-fail-rest", "held-complete-rest"} {
		resp, err := s.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "strict", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		held[key] = resp.GetRecord().GetToken()
	}
	token := func(key string) string { return strconv.FormatInt(held[key], 10) }
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(bytes.Repeat([]byte(" "), 1<<20)) // inflates past the limit
	_, _ = zw.Write([]byte("{}"))
	_ = zw.Close()
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)

	cases := []struct {
		name     string
		call     rawCall
		rpc      string // the RPC the refusal is counted for
		status   int
		code     codes.Code
		reason   string
		field    string // ErrorInfo metadata "field", "" for none
		problem  string // ErrorInfo metadata "problem"
		header   string // ErrorInfo metadata "header"
		contains string // in the message
	}{
		{"unknown field", connectRaw("Claim", `{"namespace":"strict","key":"k1","leaseTTL":"30s"}`), "Claim",
			400, codes.InvalidArgument, "UNKNOWN_FIELD", "leaseTTL", "", "", `did you mean "leaseTtl"`},
		{"unknown field/rest", restRaw("k1", "claim", `{"leaseTTL":"30s"}`), "Claim",
			400, codes.InvalidArgument, "UNKNOWN_FIELD", "leaseTTL", "", "", `unknown field "leaseTTL"`},
		{"unknown field of Fail", connectRaw("Fail", `{"namespace":"strict","key":"held-fail","token":"`+token("held-fail")+`","error":"declined","retriable":true}`), "Fail",
			400, codes.InvalidArgument, "UNKNOWN_FIELD", "retriable", "", "", `did you mean "retryable"`},
		{"unknown field of Fail/rest", restRaw("held-fail-rest", "fail", `{"token":"`+token("held-fail-rest")+`","error":"declined","retriable":true}`), "Fail",
			400, codes.InvalidArgument, "UNKNOWN_FIELD", "retriable", "", "", `did you mean "retryable"`},
		{"unknown nested field", adminRaw("ResolveRecord", `{"namespace":"strict","key":"k","completed":{"reslt":""}}`), "ResolveRecord",
			400, codes.InvalidArgument, "UNKNOWN_FIELD", "completed.reslt", "", "", "ResolveCompleted has the fields result"},
		{"unknown query parameter", rawCall{method: http.MethodPost, path: "/idem.v1.IdempotencyService/Claim?leaseTtl=30s", contentType: "application/json",
			body: []byte(`{"namespace":"strict","key":"k2"}`)}, "Claim",
			400, codes.InvalidArgument, "UNKNOWN_FIELD", "leaseTtl", "", "", "query parameter"},
		{"unknown query parameter/rest", restRaw("k2", "claim?lease_ttl=30s", `{}`), "Claim",
			400, codes.InvalidArgument, "UNKNOWN_FIELD", "lease_ttl", "", "", "send the fields in the JSON body"},
		{"unknown query parameter/lookup", rawCall{method: http.MethodGet, path: "/v1/namespaces/strict/records/k2?tenant=x&namespace=y"}, "Lookup",
			400, codes.InvalidArgument, "UNKNOWN_FIELD", "namespace", "", "", "query parameter"},
		{"truncated", connectRaw("Claim", `{"namespace":"strict","key":"k3"`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "cut short"},
		{"truncated/rest", restRaw("k3", "claim", `{"leaseTtl":"30`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "cut short"},
		{"not JSON", connectRaw("Claim", `namespace=strict&key=k3`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "not JSON"},
		{"an array", connectRaw("Claim", `[{"namespace":"strict","key":"k4"}]`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "the body is an array"},
		{"a string/rest", restRaw("k4", "claim", `"30s"`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "the body is a string"},
		{"null", connectRaw("Claim", `null`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "one JSON object"},
		{"data after the object", connectRaw("Claim", `{"namespace":"strict","key":"k4"} {}`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "after the end"},
		{"duplicate field", connectRaw("Claim", `{"namespace":"strict","key":"k5","key":"k6"}`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "key", "", "", "given twice"},
		{"duplicate field by both names/rest", restRaw("k5", "claim", `{"lease_ttl":"30s","leaseTtl":"60s"}`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "leaseTtl", "", "", "as lease_ttl and as leaseTtl"},
		{"path field in the body/rest", restRaw("k5", "claim", `{"key":"other"}`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "key", "", "", "path"},
		{"wrong type of a string", connectRaw("Claim", `{"namespace":"strict","key":7}`), "Claim",
			400, codes.InvalidArgument, "INVALID_KEY", "key", "", "", "key is 7; it must be a string"},
		{"wrong type of a string/rest", restRaw("k6", "claim", `{"claimant":{"id":1}}`), "Claim",
			400, codes.InvalidArgument, "INVALID_CLAIMANT", "claimant", "", "", "it must be a string"},
		{"wrong type of a bool", connectRaw("Fail", `{"namespace":"strict","key":"held-fail","token":"`+token("held-fail")+`","retryable":"yes"}`), "Fail",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "retryable", "", "", "true or false"},
		{"wrong type of a duration/rest", restRaw("k6", "claim", `{"leaseTtl":30}`), "Claim",
			400, codes.InvalidArgument, "INVALID_LEASE_TTL", "leaseTtl", "", "", `such as "30s"`},
		{"duration out of range", connectRaw("Claim", `{"namespace":"strict","key":"k7","leaseTtl":"999999999999s"}`), "Claim",
			400, codes.InvalidArgument, "INVALID_LEASE_TTL", "leaseTtl", "", "", "315576000000s"},
		{"duration out of range/rest", restRaw("k7", "claim", `{"wait":"1e3s"}`), "Claim",
			400, codes.InvalidArgument, "INVALID_WAIT", "wait", "", "", "wait is"},
		{"token over int64", connectRaw("Complete", `{"namespace":"strict","key":"held-complete","token":"99999999999999999999"}`), "Complete",
			400, codes.InvalidArgument, "INVALID_TOKEN", "token", "", "", "9223372036854775807"},
		{"token over int64/rest", restRaw("held-complete-rest", "complete", `{"token":99999999999999999999}`), "Complete",
			400, codes.InvalidArgument, "INVALID_TOKEN", "token", "", "", "9223372036854775807"},
		{"bad base64", connectRaw("Complete", `{"namespace":"strict","key":"held-complete","token":"`+token("held-complete")+`","result":"not base64!"}`), "Complete",
			400, codes.InvalidArgument, "INVALID_RESULT", "result", "", "", "base64"},
		{"bad base64/rest", restRaw("k8", "claim", `{"fingerprint":"%%%"}`), "Claim",
			400, codes.InvalidArgument, "INVALID_FINGERPRINT", "fingerprint", "", "", "base64"},
		{"bad enum", adminRaw("ListRecords", `{"namespace":"strict","state":"STATE_DONE"}`), "ListRecords",
			400, codes.InvalidArgument, "INVALID_STATE", "state", "", "", "STATE_COMPLETED"},
		{"invalid UTF-8", connectRaw("Claim", "{\"namespace\":\"strict\",\"key\":\"caf\xc3\"}"), "Claim",
			400, codes.InvalidArgument, "INVALID_KEY", "key", "INVALID_UTF8", "", "not valid UTF-8"},
		{"invalid UTF-8/rest", restRaw("k9", "claim", "{\"claimant\":\"w\xff\"}"), "Claim",
			400, codes.InvalidArgument, "INVALID_CLAIMANT", "claimant", "INVALID_UTF8", "", "not valid UTF-8"},
		{"lone surrogate", connectRaw("Claim", `{"namespace":"strict","key":"\ud800"}`), "Claim",
			400, codes.InvalidArgument, "INVALID_KEY", "key", "INVALID_UTF8", "", "not valid UTF-8"},
		{"lone surrogate/rest", restRaw("k9", "fail", `{"token":"1","error":"x\udfff"}`), "Fail",
			400, codes.InvalidArgument, "INVALID_ERROR", "error", "INVALID_UTF8", "", "not valid UTF-8"},
		{"invalid UTF-8 in the path/rest", rawCall{method: http.MethodGet, path: "/v1/namespaces/strict/records/caf%C3"}, "Lookup",
			400, codes.InvalidArgument, "INVALID_KEY", "key", "INVALID_UTF8", "", "not valid UTF-8"},
		{"%FF in the path/rest", restRaw("%FF", "claim", `{}`), "Claim",
			400, codes.InvalidArgument, "INVALID_KEY", "key", "INVALID_UTF8", "", "not valid UTF-8"},
		{"empty Connect body", connectRaw("Claim", ``), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "the body is empty"},
		{"deep nesting", connectRaw("Claim", deep), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "more than 16 deep"},
		{"deep nesting in a field/rest", restRaw("k10", "claim", `{"claimant":`+deep+`}`), "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "more than 16 deep"},
		{"both of a oneof", adminRaw("ResolveRecord", `{"namespace":"strict","key":"k","released":{},"completed":{}}`), "ResolveRecord",
			400, codes.InvalidArgument, "INVALID_RESOLUTION", "completed", "", "", "both set"},
		{"a body on a GET/rest", rawCall{method: http.MethodGet, path: "/v1/namespaces/strict/records/k10", contentType: "application/json", body: []byte(`{}`)}, "Lookup",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "takes no body"},
		{"not gzip", rawCall{method: http.MethodPost, path: "/idem.v1.IdempotencyService/Claim", contentType: "application/json", encoding: "gzip",
			body: []byte(`{"namespace":"strict","key":"k11"}`)}, "Claim",
			400, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "", "not gzip"},
		{"unsupported encoding/rest", rawCall{method: http.MethodPost, path: "/v1/namespaces/strict/records/k11:claim", encoding: "br", body: []byte(`{}`)}, "Claim",
			415, codes.InvalidArgument, "MALFORMED_REQUEST", "", "", "Content-Encoding", "send gzip"},
		{"gzip bomb", rawCall{method: http.MethodPost, path: "/idem.v1.IdempotencyService/Claim", contentType: "application/json", encoding: "gzip",
			body: zipped.Bytes()}, "Claim",
			413, codes.ResourceExhausted, "REQUEST_TOO_LARGE", "", "", "", "inflates to over"},
		{"gzip bomb/rest", rawCall{method: http.MethodPost, path: "/v1/namespaces/strict/records/k12:claim", encoding: "gzip", body: zipped.Bytes()}, "Claim",
			413, codes.ResourceExhausted, "REQUEST_TOO_LARGE", "", "", "", "inflates to over"},
	}
	for _, tc := range cases {
		// One case at a time: each checks that it was counted and logged once.
		t.Run(tc.name, func(t *testing.T) {
			rest := !strings.HasPrefix(tc.call.path, "/idem.v1.")
			service := "IdempotencyService"
			if strings.HasPrefix(tc.call.path, "/idem.v1.AdminService/") {
				service = "AdminService"
			}
			countedBefore := s.handled(t, service, tc.rpc, tc.code)
			loggedBefore := s.logged(t, tc.rpc, tc.code)

			a := tc.call.do(t, s.JSONURL)
			if a.status != tc.status {
				t.Fatalf("HTTP %d %s; want %d", a.status, a.raw, tc.status)
			}
			code, reason, md, msg := errorOf(t, a, rest)
			if code != strings.ToLower(tc.code.String()) || reason != tc.reason {
				t.Fatalf("code %q reason %q in %s; want %s / %s", code, reason, a.raw, tc.code, tc.reason)
			}
			if md["field"] != nil && tc.field == "" || tc.field != "" && md["field"] != tc.field {
				t.Fatalf("metadata field %v in %s; want %q", md["field"], a.raw, tc.field)
			}
			if tc.problem != "" && md["problem"] != tc.problem {
				t.Fatalf("metadata problem %v in %s; want %s", md["problem"], a.raw, tc.problem)
			}
			if tc.header != "" && md["header"] != tc.header {
				t.Fatalf("metadata header %v in %s; want %s", md["header"], a.raw, tc.header)
			}
			if !strings.Contains(msg, tc.contains) || tc.field != "" && !strings.Contains(msg, tc.field) {
				t.Fatalf("message %q; want it to contain %q and name the field %q", msg, tc.contains, tc.field)
			}
			if got := s.handled(t, service, tc.rpc, tc.code); got != countedBefore+1 {
				t.Fatalf("grpc_server_handled_total{%s/%s, %s} went from %v to %v; want one more", service, tc.rpc, tc.code, countedBefore, got)
			}
			if got := s.logged(t, tc.rpc, tc.code); got != loggedBefore+1 {
				t.Fatalf("%d log lines for %s %s, %d before; want one more:\n%s", got, tc.rpc, tc.code, loggedBefore, s.log.String())
			}
		})
	}

	// Nothing was written: no record but the held ones, which are all still
	// PROCESSING.
	list, err := s.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{Namespace: "strict"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRecords()) != len(held) {
		t.Fatalf("%d records in the namespace; want the %d held ones only: %v", len(list.GetRecords()), len(held), list.GetRecords())
	}
	for _, rec := range list.GetRecords() {
		if rec.GetState() != idemv1.State_STATE_PROCESSING || rec.GetToken() != held[rec.GetKey()] {
			t.Errorf("record %s: %v token %d; want PROCESSING with token %d", rec.GetKey(), rec.GetState(), rec.GetToken(), held[rec.GetKey()])
		}
	}
}

// TestJSONContentTypes: Connect calls take application/json and
// application/proto in any case and with parameters; REST routes take a
// JSON body with a JSON type, a form type (curl -d) or none. Anything else,
// and a Connect call without a Content-Type, is 415 with a message that
// says what to send, never a bare 404.
func TestJSONContentTypes(t *testing.T) {
	t.Parallel()
	s := startStrict(t)
	for i, tc := range []struct {
		rest        bool
		contentType string
		status      int
	}{
		{false, "application/json", 200},
		{false, "application/json; charset=utf-8", 200},
		{false, "application/json;charset=UTF-8", 200},
		{false, "Application/JSON", 200},
		{false, "APPLICATION/JSON; Charset=\"utf-8\"", 200},
		{false, "", 415},
		{false, "application/x-www-form-urlencoded", 415},
		{false, "text/plain;charset=UTF-8", 415},
		{false, "application/json; charset=iso-8859-1", 415},
		{false, "application/connect+json", 415},
		{false, "application/json; x", 415},
		{true, "application/json", 200},
		{true, "application/json; charset=utf-8", 200},
		{true, "Application/Json", 200},
		{true, "", 200},
		{true, "application/x-www-form-urlencoded", 200},
		{true, "text/plain", 415},
		{true, "application/xml", 415},
		{true, "application/json; charset=latin1", 415},
	} {
		key := "ct-" + strconv.Itoa(i)
		var call rawCall
		if tc.rest {
			call = restRaw(key, "claim", `{"leaseTtl":"30s"}`)
		} else {
			call = connectRaw("Claim", `{"namespace":"strict","key":"`+key+`"}`)
		}
		call.contentType = tc.contentType
		a := call.do(t, s.JSONURL)
		if a.status != tc.status {
			t.Errorf("%s (rest %v): HTTP %d %s; want %d", tc.contentType, tc.rest, a.status, a.raw, tc.status)
			continue
		}
		if tc.status == 200 {
			if a.body["outcome"] != "OUTCOME_ACQUIRED" {
				t.Errorf("%s (rest %v): %s; want ACQUIRED", tc.contentType, tc.rest, a.raw)
			}
			continue
		}
		code, reason, md, msg := errorOf(t, a, tc.rest)
		if code != "invalidargument" || reason != "MALFORMED_REQUEST" || md["header"] != "Content-Type" || !strings.Contains(msg, "application/json") {
			t.Errorf("%s (rest %v): %s; want INVALID_ARGUMENT / MALFORMED_REQUEST naming Content-Type, saying to send application/json", tc.contentType, tc.rest, a.raw)
		}
		if _, err := s.Client.Lookup(testContext(t), &idemv1.LookupRequest{Namespace: "strict", Key: key}); status.Code(err) != codes.NotFound {
			t.Errorf("%s (rest %v): Lookup after the refusal: %v; want NOT_FOUND", tc.contentType, tc.rest, err)
		}
	}
}

// TestJSONRefusalAfterAuthentication: a refused request is authenticated
// first, as every call is: without credentials it gets UNAUTHENTICATED and
// learns nothing of what is wrong with its body; with the tenant's token it
// gets the refusal.
func TestJSONRefusalAfterAuthentication(t *testing.T) {
	t.Parallel()
	ts := startJSONTenancy(t, nil)
	for _, p := range []struct {
		name string
		call rawCall
	}{
		{"connect", connectRaw("Claim", `{"namespace":"jobs","key":"k","leaseTTL":"30s"}`)},
		{"rest", rawCall{method: http.MethodPost, path: "/v1/namespaces/jobs/records/k:claim", body: []byte(`{"leaseTTL":"30s"}`)}},
		{"too large", rawCall{method: http.MethodPost, path: "/v1/namespaces/jobs/records/k:complete",
			body: []byte(`{"token":"1","result":"` + strings.Repeat("A", int(server.JSONBodyLimit(jsonTenancyConfig))) + `"}`)}},
	} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			rest := !strings.HasPrefix(p.call.path, "/idem.v1.")
			send := func(token string) httpAnswer {
				req, _ := http.NewRequest(p.call.method, ts.JSONURL+p.call.path, bytes.NewReader(p.call.body))
				if p.call.contentType != "" {
					req.Header.Set("Content-Type", p.call.contentType)
				}
				return doHTTP(t, req, token)
			}
			checkJSONError(t, send(""), rest, "unauthenticated", "UNAUTHENTICATED")
			a := send(jsonBillToken)
			_, reason, _, _ := errorOf(t, a, rest)
			switch {
			case p.name == "too large" && (a.status != http.StatusRequestEntityTooLarge || reason != "REQUEST_TOO_LARGE"):
				t.Fatalf("HTTP %d %s; want 413 REQUEST_TOO_LARGE", a.status, a.raw)
			case p.name != "too large" && (a.status != http.StatusBadRequest || reason != "UNKNOWN_FIELD"):
				t.Fatalf("HTTP %d %s; want 400 UNKNOWN_FIELD", a.status, a.raw)
			}
		})
	}
}

// TestJSONRefusalRateLimited: a refused request takes a token of its
// tenant's rate limit, as every call does: a tenant over its limit gets
// RATE_LIMITED with Retry-After, whatever is wrong with its body.
func TestJSONRefusalRateLimited(t *testing.T) {
	t.Parallel()
	ts := startJSONTenancy(t, nil)
	send := func(call rawCall) httpAnswer {
		req, _ := http.NewRequest(call.method, ts.JSONURL+call.path, bytes.NewReader(call.body))
		if call.contentType != "" {
			req.Header.Set("Content-Type", call.contentType)
		}
		return doHTTP(t, req, jsonLimitedToken)
	}
	// The tenant's one token goes to its first refusal.
	a := send(connectRaw("Claim", `{"namespace":"jobs","key":"k","leaseTTL":"30s"}`))
	if _, reason, _, _ := errorOf(t, a, false); reason != "UNKNOWN_FIELD" {
		t.Fatalf("HTTP %d %s; want UNKNOWN_FIELD", a.status, a.raw)
	}
	for _, call := range []rawCall{
		connectRaw("Claim", `{"namespace":"jobs","key":"k","leaseTTL":"30s"}`),
		{method: http.MethodPost, path: "/v1/namespaces/jobs/records/k:claim", body: []byte(`{"leaseTtl":30}`)},
		{method: http.MethodPost, path: "/v1/namespaces/jobs/records/k:claim", contentType: "text/plain", body: []byte(`{}`)},
	} {
		a := send(call)
		checkJSONError(t, a, !strings.HasPrefix(call.path, "/idem.v1."), "resource_exhausted", "RATE_LIMITED")
		if secs, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || secs < 1 {
			t.Fatalf("%s %s: Retry-After %q; want whole seconds ≥ 1", call.method, call.path, a.header.Get("Retry-After"))
		}
	}
}

// TestJSONGzipBody: a gzip body is read as the JSON it holds, over Connect
// and REST, though it inflates past its Content-Length.
func TestJSONGzipBody(t *testing.T) {
	t.Parallel()
	s := startStrict(t)
	claimant := strings.Repeat("w", 100)
	for _, call := range []rawCall{
		connectRaw("Claim", `{"namespace":"strict","key":"gz-connect","claimant":"`+claimant+`"}`),
		restRaw("gz-rest", "claim", `{"claimant":"`+claimant+`"}`),
	} {
		var zipped bytes.Buffer
		zw := gzip.NewWriter(&zipped)
		_, _ = zw.Write(call.body)
		_ = zw.Close()
		call.body, call.encoding = zipped.Bytes(), "gzip"
		a := call.do(t, s.JSONURL)
		if a.status != http.StatusOK || a.body["outcome"] != "OUTCOME_ACQUIRED" || field(a.body, "record", "claimant") != claimant {
			t.Errorf("%s with a gzip body: HTTP %d %s; want ACQUIRED with the claimant", call.path, a.status, a.raw)
		}
	}
}
