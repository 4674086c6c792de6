package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// httpAnswer is one HTTP response of the JSON API, its body decoded.
type httpAnswer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func doHTTP(t *testing.T, req *http.Request, token string) httpAnswer {
	t.Helper()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req.WithContext(testContext(t)))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	a := httpAnswer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &a.body); err != nil {
			t.Fatalf("%s %s: body %q is not a JSON object: %v", req.Method, req.URL, raw, err)
		}
	}
	return a
}

// connectCall is a Connect unary call with a JSON body, as curl makes it
// (no Connect-Protocol-Version header).
func connectCall(t *testing.T, base, service, method string, msg map[string]any, token string) httpAnswer {
	t.Helper()
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, base+"/idem.v1."+service+"/"+method, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return doHTTP(t, req, token)
}

// restPathSegment escapes s as one path segment, ':' included.
func restPathSegment(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ":", "%3A")
}

// restCall calls an IdempotencyService RPC through its REST route: the
// namespace and key of msg go in the path, escaped with escape, the rest in
// the body; a batch call's msg is its body.
func restCall(t *testing.T, base, method string, msg map[string]any, token string, escape func(string) string) httpAnswer {
	t.Helper()
	if rest, ok := strings.CutPrefix(method, "Batch"); ok {
		// POST /v1/records:batchClaim, the whole request as the body.
		body, _ := json.Marshal(msg)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/records:batch"+rest, bytes.NewReader(body))
		return doHTTP(t, req, token)
	}
	rest := map[string]any{}
	for k, v := range msg {
		rest[k] = v
	}
	ns, _ := rest["namespace"].(string)
	key, _ := rest["key"].(string)
	delete(rest, "namespace")
	delete(rest, "key")
	path := base + "/v1/namespaces/" + escape(ns) + "/records/" + escape(key)
	verb := strings.ToLower(method)
	if v, ok := strings.CutSuffix(method, "Step"); ok {
		// POST …/records/{key}/steps/{step}:start, or :complete.
		step, _ := rest["step"].(string)
		delete(rest, "step")
		path += "/steps/" + escape(step)
		verb = strings.ToLower(v)
	}
	var req *http.Request
	if method == "Lookup" {
		req, _ = http.NewRequest(http.MethodGet, path, nil)
	} else {
		body, _ := json.Marshal(rest)
		// No Content-Type, as `curl -d` sends none of use: the REST routes
		// take the body as JSON.
		req, _ = http.NewRequest(http.MethodPost, path+":"+verb, bytes.NewReader(body))
	}
	return doHTTP(t, req, token)
}

// protocols are the two ways the tests call an IdempotencyService RPC.
var protocols = []struct {
	name string
	call func(t *testing.T, base, method string, msg map[string]any, token string) httpAnswer
}{
	{"connect", func(t *testing.T, base, method string, msg map[string]any, token string) httpAnswer {
		return connectCall(t, base, "IdempotencyService", method, msg, token)
	}},
	{"rest", func(t *testing.T, base, method string, msg map[string]any, token string) httpAnswer {
		return restCall(t, base, method, msg, token, restPathSegment)
	}},
}

func wantOK(t *testing.T, what string, a httpAnswer) map[string]any {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s; want 200", what, a.status, a.raw)
	}
	return a.body
}

// field walks a decoded JSON object: field(m, "record", "state").
func field(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = obj[p]
	}
	return v
}

// TestJSONEveryRPC runs a job's whole life over Connect JSON and over the
// REST routes, and every AdminService RPC over Connect JSON.
func TestJSONEveryRPC(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{JSON: true})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			key := "order-" + p.name
			id := map[string]any{"namespace": ns, "key": key}
			with := func(extra map[string]any) map[string]any {
				m := map[string]any{"namespace": ns, "key": key}
				for k, v := range extra {
					m[k] = v
				}
				return m
			}
			claim := wantOK(t, "Claim", p.call(t, ts.JSONURL, "Claim", with(map[string]any{"leaseTtl": "30s", "claimant": "w1"}), ""))
			token, _ := field(claim, "record", "token").(string)
			if field(claim, "outcome") != "OUTCOME_ACQUIRED" || token == "" || field(claim, "record", "claimant") != "w1" {
				t.Fatalf("Claim: %v; want ACQUIRED with a token", claim)
			}
			second := wantOK(t, "second Claim", p.call(t, ts.JSONURL, "Claim", id, ""))
			if field(second, "outcome") != "OUTCOME_IN_PROGRESS" || field(second, "retryAfter") == nil {
				t.Fatalf("second Claim: %v; want IN_PROGRESS with retryAfter", second)
			}
			hb := wantOK(t, "Heartbeat", p.call(t, ts.JSONURL, "Heartbeat", with(map[string]any{"token": token, "leaseTtl": "60s"}), ""))
			if field(hb, "record", "state") != "STATE_PROCESSING" {
				t.Fatalf("Heartbeat: %v", hb)
			}
			look := wantOK(t, "Lookup", p.call(t, ts.JSONURL, "Lookup", id, ""))
			if field(look, "record", "token") != token {
				t.Fatalf("Lookup: %v; want token %s", look, token)
			}
			result := base64.StdEncoding.EncodeToString([]byte(`{"charge":"ch_1"}`))
			done := wantOK(t, "Complete", p.call(t, ts.JSONURL, "Complete", with(map[string]any{"token": token, "result": result}), ""))
			if field(done, "record", "state") != "STATE_COMPLETED" {
				t.Fatalf("Complete: %v", done)
			}
			replay := wantOK(t, "replayed Claim", p.call(t, ts.JSONURL, "Claim", id, ""))
			if field(replay, "outcome") != "OUTCOME_COMPLETED" || field(replay, "record", "result") != result {
				t.Fatalf("replayed Claim: %v; want COMPLETED with result %s", replay, result)
			}
			// The same record through gRPC: one service behind both.
			rec, err := ts.Client.Lookup(testContext(t), &idemv1.LookupRequest{Namespace: ns, Key: key})
			if err != nil || strconv.FormatInt(rec.GetRecord().GetToken(), 10) != token || string(rec.GetRecord().GetResult()) != `{"charge":"ch_1"}` {
				t.Fatalf("gRPC Lookup: %v, %v", rec, err)
			}

			failKey := "refund-" + p.name
			fclaim := wantOK(t, "Claim", p.call(t, ts.JSONURL, "Claim", map[string]any{"namespace": ns, "key": failKey}, ""))
			ftoken := field(fclaim, "record", "token")
			failed := wantOK(t, "Fail", p.call(t, ts.JSONURL, "Fail", map[string]any{"namespace": ns, "key": failKey, "token": ftoken, "error": "card declined", "retryable": false}, ""))
			if field(failed, "record", "state") != "STATE_FAILED" || field(failed, "record", "error") != "card declined" {
				t.Fatalf("Fail: %v", failed)
			}

			// The batch calls: a delivery of two jobs.
			jobs := []string{"batch-a-" + p.name, "batch-b-" + p.name}
			items := func(extra func(i int) map[string]any) map[string]any {
				reqs := make([]any, len(jobs))
				for i, k := range jobs {
					m := map[string]any{"namespace": ns, "key": k}
					for f, v := range extra(i) {
						m[f] = v
					}
					reqs[i] = m
				}
				return map[string]any{"requests": reqs}
			}
			none := func(int) map[string]any { return nil }
			result0 := func(m map[string]any, i int, path ...string) any {
				results, _ := m["results"].([]any)
				if len(results) != len(jobs) {
					t.Fatalf("%d results in %v; want %d", len(results), m, len(jobs))
				}
				r, _ := results[i].(map[string]any)
				return field(r, append([]string{"response"}, path...)...)
			}
			bclaim := wantOK(t, "BatchClaim", p.call(t, ts.JSONURL, "BatchClaim", items(none), ""))
			tokens := make([]any, len(jobs))
			for i := range jobs {
				if result0(bclaim, i, "outcome") != "OUTCOME_ACQUIRED" {
					t.Fatalf("BatchClaim item %d: %v", i, bclaim)
				}
				tokens[i] = result0(bclaim, i, "record", "token")
			}
			withToken := func(i int) map[string]any { return map[string]any{"token": tokens[i]} }
			bhb := wantOK(t, "BatchHeartbeat", p.call(t, ts.JSONURL, "BatchHeartbeat", items(withToken), ""))
			bdone := wantOK(t, "BatchComplete", p.call(t, ts.JSONURL, "BatchComplete", items(withToken), ""))
			bfail := wantOK(t, "BatchFail", p.call(t, ts.JSONURL, "BatchFail", items(withToken), ""))
			blook := wantOK(t, "BatchLookup", p.call(t, ts.JSONURL, "BatchLookup", items(none), ""))
			for i := range jobs {
				if result0(bhb, i, "record", "state") != "STATE_PROCESSING" || result0(bdone, i, "record", "state") != "STATE_COMPLETED" ||
					result0(blook, i, "record", "state") != "STATE_COMPLETED" {
					t.Fatalf("item %d: heartbeat %v, complete %v, lookup %v", i, bhb, bdone, blook)
				}
				// Fail after Complete: ALREADY_TERMINAL, in the item's place.
				results, _ := bfail["results"].([]any)
				if _, reason := jsonItemReason(t, results[i]); reason != "ALREADY_TERMINAL" {
					t.Fatalf("BatchFail item %d: %v; want ALREADY_TERMINAL", i, bfail)
				}
			}
		})
	}

	t.Run("admin", func(t *testing.T) {
		t.Parallel()
		const adminNS = "admin_json"
		for _, key := range []string{"a", "b"} {
			if _, err := ts.Client.Claim(testContext(t), &idemv1.ClaimRequest{Namespace: adminNS, Key: key}); err != nil {
				t.Fatal(err)
			}
		}
		list := wantOK(t, "ListRecords", connectCall(t, ts.JSONURL, "AdminService", "ListRecords", map[string]any{"namespace": adminNS}, ""))
		if rows, _ := list["records"].([]any); len(rows) != 2 {
			t.Fatalf("ListRecords: %v; want 2 records", list)
		}
		stats := wantOK(t, "Stats", connectCall(t, ts.JSONURL, "AdminService", "Stats", map[string]any{}, ""))
		if !strings.Contains(fmt.Sprint(stats), adminNS) {
			t.Fatalf("Stats: %v; want a row for %s", stats, adminNS)
		}
		wantOK(t, "DeleteRecord", connectCall(t, ts.JSONURL, "AdminService", "DeleteRecord", map[string]any{"namespace": adminNS, "key": "a"}, ""))
		if a := connectCall(t, ts.JSONURL, "IdempotencyService", "Lookup", map[string]any{"namespace": adminNS, "key": "a"}, ""); a.status != http.StatusNotFound {
			t.Fatalf("Lookup after DeleteRecord: HTTP %d %s; want 404", a.status, a.raw)
		}
	})

	t.Run("grpc-web", func(t *testing.T) {
		t.Parallel()
		msg, _ := proto.Marshal(&idemv1.ClaimRequest{Namespace: ns, Key: "grpc-web"})
		frame := append([]byte{0, 0, 0, 0, 0}, msg...)
		binary.BigEndian.PutUint32(frame[1:5], uint32(len(msg)))
		req, _ := http.NewRequest(http.MethodPost, ts.JSONURL+"/idem.v1.IdempotencyService/Claim", bytes.NewReader(frame))
		req.Header.Set("Content-Type", "application/grpc-web+proto")
		a := doHTTP(t, req, "")
		raw := []byte(a.raw)
		if a.status != http.StatusOK || len(raw) < 5 || raw[0] != 0 {
			t.Fatalf("gRPC-Web Claim: HTTP %d %q", a.status, a.raw)
		}
		n := binary.BigEndian.Uint32(raw[1:5])
		var resp idemv1.ClaimResponse
		if err := proto.Unmarshal(raw[5:5+n], &resp); err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
			t.Fatalf("gRPC-Web Claim: %v, %v", &resp, err)
		}
		if trailer := strings.ToLower(string(raw[5+n:])); !strings.Contains(trailer, "grpc-status: 0") {
			t.Fatalf("gRPC-Web trailer %q; want grpc-status 0", trailer)
		}
	})
}

// TestJSONKeysInThePath: a key is one path segment of the REST routes, with
// '/', '%', spaces and non-ASCII percent-encoded; a ':' may stay as it is.
// Each key reaches the record that gRPC sees under the same key.
func TestJSONKeysInThePath(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{JSON: true})
	for _, tc := range []struct {
		key     string
		escaped string
	}{
		{"invoice/2024/17", "invoice%2F2024%2F17"},
		{"100% done", "100%25%20done"},
		{"with space", "with%20space"},
		{"ключ-ü-😀", restPathSegment("ключ-ü-😀")},
		{"order:1042", "order:1042"},
		{"x:claim", "x%3Aclaim"},
		{"a+b=c&d", "a+b=c&d"},
		{"?#", "%3F%23"},
	} {
		t.Run(tc.escaped, func(t *testing.T) {
			t.Parallel()
			escape := func(s string) string {
				if s == tc.key {
					return tc.escaped
				}
				return restPathSegment(s)
			}
			claim := wantOK(t, "Claim", restCall(t, ts.JSONURL, "Claim", map[string]any{"namespace": ns, "key": tc.key}, "", escape))
			if field(claim, "record", "key") != tc.key || field(claim, "outcome") != "OUTCOME_ACQUIRED" {
				t.Fatalf("Claim: %v; want key %q ACQUIRED", claim, tc.key)
			}
			look := wantOK(t, "Lookup", restCall(t, ts.JSONURL, "Lookup", map[string]any{"namespace": ns, "key": tc.key}, "", escape))
			rec, err := ts.Client.Lookup(testContext(t), &idemv1.LookupRequest{Namespace: ns, Key: tc.key})
			if err != nil || strconv.FormatInt(rec.GetRecord().GetToken(), 10) != field(look, "record", "token") {
				t.Fatalf("gRPC Lookup of %q: %v, %v; REST Lookup %v", tc.key, rec, err, look)
			}
		})
	}
}

// The tokens of the HTTP tenancy tests' tenants.
const (
	jsonPayToken     = "idem_json-test-payments"
	jsonBillToken    = "idem_json-test-billing"
	jsonOpsToken     = "idem_json-test-ops"
	jsonLimitedToken = "idem_json-test-limited"
)

// jsonTenancyConfig is startJSONTenancy's server's limits, small so that
// the tests of its body limit send little.
var jsonTenancyConfig = server.Config{MaxResultBytes: 1024, BatchMaxBytes: 1024, BatchMaxItems: 10, MaxSteps: 2, MaxStepBytes: 512}

// startJSONTenancy starts a server with tenants and the JSON API, over st
// when it is not nil.
func startJSONTenancy(t *testing.T, hook func(ctx context.Context, method string) error) *testserver.Server {
	t.Helper()
	tenants, err := services.NewTenants(&config.File{Tenants: []config.Tenant{
		{Name: "payments", Tokens: []string{config.HashToken(jsonPayToken)}, Namespaces: []string{"process_payment"}},
		{Name: "billing", Tokens: []string{config.HashToken(jsonBillToken)}},
		{Name: "ops", Tokens: []string{config.HashToken(jsonOpsToken)}, Admin: true,
			Policies: []config.Policy{{Namespaces: []string{"held"}, OnLeaseExpiry: config.OnLeaseExpiryHold}}},
		{Name: "limited", Tokens: []string{config.HashToken(jsonLimitedToken)}, RateLimit: &config.RateLimit{PerSecond: 0.001, Burst: 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := jsonTenancyConfig
	cfg.Tenants = tenants
	opts := testserver.Options{JSON: true, Config: cfg}
	if hook != nil {
		opts.Store = func(pg *postgres.Store) store.Store { return &hookStore{Store: pg, hook: hook} }
	}
	return testserver.StartWith(t, opts)
}

// httpStatusOf is the HTTP status of each gRPC code idem sends, as the
// Connect and REST mappings give them.
var httpStatusOf = map[string]int{
	"invalid_argument": 400, "failed_precondition": 400, "aborted": 409, "not_found": 404,
	"unavailable": 503, "internal": 500, "unauthenticated": 401, "permission_denied": 403,
	"resource_exhausted": 429,
}

// grpcCodeOf is the numeric code of each Connect code name.
var grpcCodeOf = map[string]float64{
	"invalid_argument": 3, "failed_precondition": 9, "aborted": 10, "not_found": 5,
	"unavailable": 14, "internal": 13, "unauthenticated": 16, "permission_denied": 7,
	"resource_exhausted": 8,
}

// checkJSONError checks an error answer: the HTTP status of its code, and a
// body with the code, a message and the ErrorInfo reason, in the Connect
// format (code name, details[].debug) or the REST one (google.rpc.Status
// with numeric code and details[].@type).
func checkJSONError(t *testing.T, a httpAnswer, rest bool, code, reason string) {
	t.Helper()
	if a.status != httpStatusOf[code] {
		t.Fatalf("HTTP %d %s; want %d (%s / %s)", a.status, a.raw, httpStatusOf[code], code, reason)
	}
	if msg, _ := a.body["message"].(string); msg == "" {
		t.Fatalf("no message in %s", a.raw)
	}
	details, _ := a.body["details"].([]any)
	var gotReason, gotDomain any
	for _, d := range details {
		d, _ := d.(map[string]any)
		switch {
		case rest && d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo":
			gotReason, gotDomain = d["reason"], d["domain"]
		case !rest && d["type"] == "google.rpc.ErrorInfo":
			gotReason, gotDomain = field(d, "debug", "reason"), field(d, "debug", "domain")
		}
	}
	if gotReason != reason || gotDomain != services.ErrorDomain {
		t.Fatalf("ErrorInfo reason %v domain %v in %s; want %s", gotReason, gotDomain, a.raw, reason)
	}
	if rest && a.body["code"] != grpcCodeOf[code] {
		t.Fatalf("code %v in %s; want %v", a.body["code"], a.raw, grpcCodeOf[code])
	}
	if !rest && a.body["code"] != code {
		t.Fatalf("code %v in %s; want %s", a.body["code"], a.raw, code)
	}
}

// TestJSONErrorReasons: every ErrorReason, over Connect JSON and (for the
// IdempotencyService) over REST, answers with its HTTP status and a JSON
// body with its code, message and reason; RATE_LIMITED with Retry-After.
func TestJSONErrorReasons(t *testing.T) {
	t.Parallel()
	ts := startJSONTenancy(t, nil)
	grpcAs := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(testContext(t), "authorization", "Bearer "+token)
	}
	const jns = "jobs"
	claimed := func(t *testing.T, key string, fp []byte) int64 {
		t.Helper()
		resp, err := ts.Client.Claim(grpcAs(jsonBillToken), &idemv1.ClaimRequest{Namespace: jns, Key: key, Fingerprint: fp})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetRecord().GetToken()
	}
	// One call of the tenant "limited" empties its bucket for the test's run.
	if _, err := ts.Client.Lookup(grpcAs(jsonLimitedToken), &idemv1.LookupRequest{Namespace: jns, Key: "x"}); err == nil {
		t.Fatal("Lookup of a missing key succeeded")
	}

	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), n)) }
	type reasonCase struct {
		reason, code string
		admin        bool // an AdminService RPC: Connect only
		method       string
		token        string
		// msg builds the request for a key of its own (prepared as needed).
		msg func(t *testing.T, key string) map[string]any
	}
	id := func(extra map[string]any) func(*testing.T, string) map[string]any {
		return func(_ *testing.T, key string) map[string]any {
			m := map[string]any{"namespace": jns, "key": key}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
	}
	cases := []reasonCase{
		{"INVALID_NAMESPACE", "invalid_argument", false, "Claim", jsonBillToken, func(_ *testing.T, key string) map[string]any {
			return map[string]any{"namespace": "Not A Namespace", "key": key}
		}},
		{"INVALID_KEY", "invalid_argument", false, "Claim", jsonBillToken, func(*testing.T, string) map[string]any {
			return map[string]any{"namespace": jns, "key": strings.Repeat("k", 257)}
		}},
		{"INVALID_FINGERPRINT", "invalid_argument", false, "Claim", jsonBillToken, id(map[string]any{"fingerprint": b64(65)})},
		{"INVALID_CLAIMANT", "invalid_argument", false, "Claim", jsonBillToken, id(map[string]any{"claimant": strings.Repeat("c", 129)})},
		{"INVALID_LEASE_TTL", "invalid_argument", false, "Claim", jsonBillToken, id(map[string]any{"leaseTtl": "0.5s"})},
		{"INVALID_RETENTION", "invalid_argument", false, "Claim", jsonBillToken, id(map[string]any{"retention": "1s"})},
		{"INVALID_WAIT", "invalid_argument", false, "Claim", jsonBillToken, id(map[string]any{"wait": "61s"})},
		{"INVALID_RESULT", "invalid_argument", false, "Complete", jsonBillToken, id(map[string]any{"token": "1", "result": b64(1025)})},
		{"INVALID_ERROR", "invalid_argument", false, "Fail", jsonBillToken, id(map[string]any{"token": "1", "error": strings.Repeat("e", 4097)})},
		{"INVALID_TOKEN", "invalid_argument", false, "Complete", jsonBillToken, id(map[string]any{"token": "0"})},
		{"FINGERPRINT_MISMATCH", "failed_precondition", false, "Claim", jsonBillToken, func(t *testing.T, key string) map[string]any {
			claimed(t, key, []byte("first"))
			return map[string]any{"namespace": jns, "key": key, "fingerprint": base64.StdEncoding.EncodeToString([]byte("second"))}
		}},
		{"ALREADY_TERMINAL", "failed_precondition", false, "Heartbeat", jsonBillToken, func(t *testing.T, key string) map[string]any {
			token := claimed(t, key, nil)
			if _, err := ts.Client.Complete(grpcAs(jsonBillToken), &idemv1.CompleteRequest{Namespace: jns, Key: key, Token: token}); err != nil {
				t.Fatal(err)
			}
			return map[string]any{"namespace": jns, "key": key, "token": strconv.FormatInt(token, 10)}
		}},
		{"LEASE_LOST", "aborted", false, "Complete", jsonBillToken, func(t *testing.T, key string) map[string]any {
			token := claimed(t, key, nil)
			return map[string]any{"namespace": jns, "key": key, "token": strconv.FormatInt(token+1000, 10)}
		}},
		{"NOT_FOUND", "not_found", false, "Lookup", jsonBillToken, id(nil)},
		{"INVALID_BATCH_SIZE", "invalid_argument", false, "BatchLookup", jsonBillToken, func(*testing.T, string) map[string]any {
			return map[string]any{"requests": []any{}}
		}},
		{"UNAUTHENTICATED", "unauthenticated", false, "Lookup", "", id(nil)},
		{"UNAUTHENTICATED", "unauthenticated", false, "Lookup", "not-a-token", id(nil)},
		{"NAMESPACE_NOT_ALLOWED", "permission_denied", false, "Lookup", jsonPayToken, id(nil)},
		{"RATE_LIMITED", "resource_exhausted", false, "Lookup", jsonLimitedToken, id(nil)},
		{"NOT_ADMIN", "permission_denied", true, "Stats", jsonBillToken, func(*testing.T, string) map[string]any { return map[string]any{} }},
		{"INVALID_STATE", "invalid_argument", true, "ListRecords", jsonOpsToken, func(*testing.T, string) map[string]any { return map[string]any{"state": 99} }},
		{"INVALID_OLDER_THAN", "invalid_argument", true, "ListRecords", jsonOpsToken, func(*testing.T, string) map[string]any { return map[string]any{"olderThan": "-1s"} }},
		{"INVALID_PAGE_SIZE", "invalid_argument", true, "ListRecords", jsonOpsToken, func(*testing.T, string) map[string]any { return map[string]any{"pageSize": 1000000} }},
		{"INVALID_PAGE_TOKEN", "invalid_argument", true, "ListRecords", jsonOpsToken, func(*testing.T, string) map[string]any { return map[string]any{"pageToken": "not-a-page-token"} }},
		{"NOT_OPERATOR", "permission_denied", true, "Stats", jsonOpsToken, func(*testing.T, string) map[string]any { return map[string]any{"allTenants": true} }},
		{"INVALID_TENANT", "invalid_argument", true, "Stats", jsonOpsToken, func(*testing.T, string) map[string]any {
			return map[string]any{"tenant": "billing", "allTenants": true}
		}},
		{"INVALID_RESOLUTION", "invalid_argument", true, "ResolveRecord", jsonOpsToken, id(nil)},
		{"INVALID_REASON", "invalid_argument", true, "DeleteRecord", jsonOpsToken, id(map[string]any{"reason": strings.Repeat("r", 1025)})},
		// A ResolverService RPC: its service's name leads the method's.
		{"INVALID_RESOLVER", "invalid_argument", false, "ResolverService/Resolve", jsonBillToken, id(map[string]any{"token": "1", "released": map[string]any{}})},
		{"UNKNOWN_FIELD", "invalid_argument", false, "Claim", jsonBillToken, id(map[string]any{"leaseTTL": "30s"})},
		{"MALFORMED_REQUEST", "invalid_argument", false, "Fail", jsonBillToken, id(map[string]any{"token": "1", "retryable": "yes"})},
		{"RESOLVED_BY_OPERATOR", "failed_precondition", false, "Complete", jsonOpsToken, func(t *testing.T, key string) map[string]any {
			// The holder's late Complete of a record an operator resolved.
			resp, err := ts.Client.Claim(grpcAs(jsonOpsToken), &idemv1.ClaimRequest{Namespace: "held", Key: key})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ts.DB.Pool.Exec(testContext(t), `UPDATE idem_records SET lease_expires_at = now() - interval '1 second'
				WHERE namespace = 'held' AND key = $1`, key); err != nil {
				t.Fatal(err)
			}
			if again, err := ts.Client.Claim(grpcAs(jsonOpsToken), &idemv1.ClaimRequest{Namespace: "held", Key: key}); err != nil ||
				again.GetOutcome() != idemv1.Outcome_OUTCOME_UNRESOLVED {
				t.Fatalf("Claim of the lapsed held lease: %v, %v; want UNRESOLVED", again.GetOutcome(), err)
			}
			if _, err := ts.Admin.ResolveRecord(grpcAs(jsonOpsToken), &idemv1.ResolveRecordRequest{Namespace: "held", Key: key,
				Resolution: &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}}); err != nil {
				t.Fatal(err)
			}
			return map[string]any{"namespace": "held", "key": key, "token": strconv.FormatInt(resp.GetRecord().GetToken(), 10)}
		}},
		{"INVALID_STEP_NAME", "invalid_argument", false, "StartStep", jsonBillToken, id(map[string]any{"token": "1", "step": strings.Repeat("s", 129)})},
		{"STEP_ALREADY_FINISHED", "failed_precondition", false, "CompleteStep", jsonBillToken, func(t *testing.T, key string) map[string]any {
			token := claimed(t, key, nil)
			if _, err := ts.Client.CompleteStep(grpcAs(jsonBillToken), &idemv1.CompleteStepRequest{Namespace: jns, Key: key, Token: token, Step: "charge", Result: []byte("ch_1")}); err != nil {
				t.Fatal(err)
			}
			return map[string]any{"namespace": jns, "key": key, "token": strconv.FormatInt(token, 10), "step": "charge", "result": b64(3)}
		}},
		{"TOO_MANY_STEPS", "resource_exhausted", false, "StartStep", jsonBillToken, func(t *testing.T, key string) map[string]any {
			token := claimed(t, key, nil)
			for _, step := range []string{"a", "b"} { // the server's --max-steps
				if _, err := ts.Client.StartStep(grpcAs(jsonBillToken), &idemv1.StartStepRequest{Namespace: jns, Key: key, Token: token, Step: step}); err != nil {
					t.Fatal(err)
				}
			}
			return map[string]any{"namespace": jns, "key": key, "token": strconv.FormatInt(token, 10), "step": "c"}
		}},
		{"STEPS_TOO_LARGE", "resource_exhausted", false, "CompleteStep", jsonBillToken, func(t *testing.T, key string) map[string]any {
			token := claimed(t, key, nil)
			return map[string]any{"namespace": jns, "key": key, "token": strconv.FormatInt(token, 10), "step": "charge", "result": b64(512)}
		}},
		{"NOT_UNRESOLVED", "failed_precondition", true, "ResolveRecord", jsonOpsToken, func(t *testing.T, key string) map[string]any {
			// The ops tenant's own record: PROCESSING, so not UNRESOLVED.
			if _, err := ts.Client.Claim(grpcAs(jsonOpsToken), &idemv1.ClaimRequest{Namespace: jns, Key: key}); err != nil {
				t.Fatal(err)
			}
			return map[string]any{"namespace": jns, "key": key, "released": map[string]any{}}
		}},
	}
	// The store's failures, each on a server whose store fails every call.
	for _, f := range []struct {
		reason, code string
		err          error
	}{
		{"STORE_UNAVAILABLE", "unavailable", store.ErrUnavailable},
		{"CONTENTION", "unavailable", store.ErrContention},
		{"INTERNAL", "internal", errors.New("a bug")},
	} {
		failing := startJSONTenancy(t, func(context.Context, string) error { return f.err })
		for _, p := range protocols {
			a := p.call(t, failing.JSONURL, "Lookup", map[string]any{"namespace": jns, "key": "k"}, jsonBillToken)
			t.Run(f.reason+"/"+p.name, func(t *testing.T) { checkJSONError(t, a, p.name == "rest", f.code, f.reason) })
		}
	}
	// REQUEST_TOO_LARGE, answered with 413, has TestJSONBodyLimit.
	covered := map[string]bool{"STORE_UNAVAILABLE": true, "CONTENTION": true, "INTERNAL": true, "REQUEST_TOO_LARGE": true}

	for i, tc := range cases {
		covered[tc.reason] = true
		for _, p := range protocols {
			if tc.admin && p.name == "rest" {
				continue
			}
			t.Run(tc.reason+"/"+p.name+"/"+strconv.Itoa(i), func(t *testing.T) {
				key := fmt.Sprintf("reason-%d-%s", i, p.name)
				var a httpAnswer
				switch {
				case tc.admin:
					a = connectCall(t, ts.JSONURL, "AdminService", tc.method, tc.msg(t, key), tc.token)
				case strings.Contains(tc.method, "/"):
					service, method, _ := strings.Cut(tc.method, "/")
					if p.name == "connect" {
						a = connectCall(t, ts.JSONURL, service, method, tc.msg(t, key), tc.token)
					} else {
						a = restCall(t, ts.JSONURL, method, tc.msg(t, key), tc.token, restPathSegment)
					}
				default:
					a = p.call(t, ts.JSONURL, tc.method, tc.msg(t, key), tc.token)
				}
				checkJSONError(t, a, p.name == "rest", tc.code, tc.reason)
				if tc.reason == "RATE_LIMITED" {
					if secs, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || secs < 1 {
						t.Fatalf("Retry-After %q; want whole seconds ≥ 1", a.header.Get("Retry-After"))
					}
				}
			})
		}
	}
	for n, name := range idemv1.ErrorReason_name {
		reason := strings.TrimPrefix(name, "ERROR_REASON_")
		if n != 0 && !covered[reason] {
			t.Errorf("reason %s has no case over HTTP", reason)
		}
	}
}

// TestJSONTenants: the bearer token names the tenant over HTTP as over gRPC:
// one tenant's record is invisible to another, and a malformed
// Authorization header is refused.
func TestJSONTenants(t *testing.T) {
	t.Parallel()
	ts := startJSONTenancy(t, nil)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			id := map[string]any{"namespace": "process_payment", "key": "tenant-" + p.name}
			claim := wantOK(t, "Claim as payments", p.call(t, ts.JSONURL, "Claim", id, jsonPayToken))
			if field(claim, "outcome") != "OUTCOME_ACQUIRED" {
				t.Fatalf("Claim: %v", claim)
			}
			wantOK(t, "Lookup as payments", p.call(t, ts.JSONURL, "Lookup", id, jsonPayToken))
			checkJSONError(t, p.call(t, ts.JSONURL, "Lookup", id, jsonBillToken), p.name == "rest", "not_found", "NOT_FOUND")
			other := wantOK(t, "Claim as billing", p.call(t, ts.JSONURL, "Claim", id, jsonBillToken))
			if field(other, "outcome") != "OUTCOME_ACQUIRED" {
				t.Fatalf("billing's Claim of the same key: %v; want a record of its own", other)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodGet, ts.JSONURL+"/v1/namespaces/process_payment/records/k", nil)
	req.Header.Set("Authorization", "Basic cGF5bWVudHM6eA==")
	checkJSONError(t, doHTTP(t, req, ""), true, "unauthenticated", "UNAUTHENTICATED")
}

// blockingBody gives its first n bytes, then blocks until released: a body
// that a server which reads it all never finishes.
type blockingBody struct {
	first   *bytes.Reader
	release chan struct{}
}

func (b *blockingBody) Read(p []byte) (int, error) {
	if b.first.Len() > 0 {
		return b.first.Read(p)
	}
	<-b.release
	return 0, io.EOF
}

// TestJSONBodyLimit: a body over the limit is refused with 413 and
// REQUEST_TOO_LARGE before it is read — announced by Content-Length or sent
// chunked — and so is a gzip body that inflates past the limit.
func TestJSONBodyLimit(t *testing.T) {
	t.Parallel()
	ts := startJSONTenancy(t, nil) // MaxResultBytes 1024
	limit := server.JSONBodyLimit(jsonTenancyConfig)
	restURL := ts.JSONURL + "/v1/namespaces/jobs/records/big:complete"
	connectURL := ts.JSONURL + "/idem.v1.IdempotencyService/Complete"

	t.Run("announced", func(t *testing.T) {
		for _, u := range []string{restURL, connectURL} {
			body := &blockingBody{first: bytes.NewReader(make([]byte, 1024)), release: make(chan struct{})}
			req, _ := http.NewRequest(http.MethodPost, u, body)
			req.ContentLength = 64 << 20
			req.Header.Set("Content-Type", "application/json")
			// The answer arrives while the body still blocks: the server did
			// not wait for it.
			a := doHTTP(t, req, jsonBillToken)
			close(body.release)
			if a.status != http.StatusRequestEntityTooLarge || !strings.Contains(a.raw, strconv.FormatInt(limit, 10)) || !strings.Contains(a.raw, "--max-result-bytes") {
				t.Fatalf("%s: HTTP %d %s; want 413 naming the limit %d and the flag that sets it", u, a.status, a.raw, limit)
			}
			wantCode := any("resource_exhausted")
			if u == restURL {
				wantCode = float64(8)
			}
			if a.body["code"] != wantCode {
				t.Fatalf("%s: code %v; want %v", u, a.body["code"], wantCode)
			}
			if _, reason, _, _ := errorOf(t, a, u == restURL); reason != "REQUEST_TOO_LARGE" {
				t.Fatalf("%s: reason %q in %s; want REQUEST_TOO_LARGE", u, reason, a.raw)
			}
		}
	})
	t.Run("chunked", func(t *testing.T) {
		body := io.MultiReader(strings.NewReader(`{"token":"1","result":"`), strings.NewReader(strings.Repeat("A", int(limit))), strings.NewReader(`"}`))
		req, _ := http.NewRequest(http.MethodPost, restURL, body)
		req.ContentLength = -1
		if a := doHTTP(t, req, jsonBillToken); a.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("HTTP %d %s; want 413", a.status, a.raw)
		}
	})
	t.Run("just under", func(t *testing.T) {
		// A result at the limit fits: the limit is not below what a valid
		// Complete needs.
		token := func() string {
			resp, err := ts.Client.Claim(metadata.AppendToOutgoingContext(testContext(t), "authorization", "Bearer "+jsonBillToken),
				&idemv1.ClaimRequest{Namespace: "jobs", Key: "fits"})
			if err != nil {
				t.Fatal(err)
			}
			return strconv.FormatInt(resp.GetRecord().GetToken(), 10)
		}()
		result := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 1024))
		wantOK(t, "Complete with a result at the limit",
			restCall(t, ts.JSONURL, "Complete", map[string]any{"namespace": "jobs", "key": "fits", "token": token, "result": result}, jsonBillToken, restPathSegment))
	})
	t.Run("gzip", func(t *testing.T) {
		var zipped bytes.Buffer
		zw := gzip.NewWriter(&zipped)
		_, _ = zw.Write([]byte(`{"namespace":"jobs","key":"zip","token":"1","result":"`))
		_, _ = zw.Write(bytes.Repeat([]byte("A"), int(limit)*4))
		_, _ = zw.Write([]byte(`"}`))
		_ = zw.Close()
		if int64(zipped.Len()) >= limit {
			t.Fatalf("the compressed body is %d bytes, not under the limit", zipped.Len())
		}
		req, _ := http.NewRequest(http.MethodPost, connectURL, &zipped)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		a := doHTTP(t, req, jsonBillToken)
		if _, reason, _, _ := errorOf(t, a, false); a.status != http.StatusRequestEntityTooLarge || a.body["code"] != "resource_exhausted" || reason != "REQUEST_TOO_LARGE" {
			t.Fatalf("HTTP %d %s; want 413 resource_exhausted / REQUEST_TOO_LARGE", a.status, a.raw)
		}
	})
}
