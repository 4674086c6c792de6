package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
)

// jsonItemReason is the ErrorInfo reason of a batch result's error as
// the JSON API sends it (a google.rpc.Status in proto JSON), "" when the
// result is a response.
func jsonItemReason(t *testing.T, result any) (code float64, reason string) {
	t.Helper()
	r, _ := result.(map[string]any)
	e, ok := r["error"].(map[string]any)
	if !ok {
		if _, ok := r["response"]; !ok {
			t.Fatalf("result %v has neither response nor error", result)
		}
		return 0, ""
	}
	code, _ = e["code"].(float64)
	details, _ := e["details"].([]any)
	for _, d := range details {
		if d, _ := d.(map[string]any); d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" {
			reason, _ = d["reason"].(string)
		}
	}
	return code, reason
}

// TestBatchJSON: a batch call over REST (POST /v1/records:batchClaim) and
// Connect, each item answered in its place, and the strict JSON edge
// applied inside the items.
func TestBatchJSON(t *testing.T) {
	t.Parallel()
	ts := startJSONTenancy(t, nil)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			key := "batch-json-" + p.name
			msg := map[string]any{"requests": []any{
				map[string]any{"namespace": "jobs", "key": key, "claimant": "w"},
				map[string]any{"namespace": "jobs", "key": ""},
				map[string]any{"namespace": "jobs", "key": key, "claimant": "w"},
				map[string]any{"namespace": "process_payment", "key": key},
			}}
			body := wantOK(t, "BatchClaim", p.call(t, ts.JSONURL, "BatchClaim", msg, jsonBillToken))
			results, _ := body["results"].([]any)
			if len(results) != 4 {
				t.Fatalf("%d results in %v; want 4", len(results), body)
			}
			first, _ := results[0].(map[string]any)
			if field(first, "response", "outcome") != "OUTCOME_ACQUIRED" {
				t.Fatalf("item 0: %v; want ACQUIRED", first)
			}
			if code, reason := jsonItemReason(t, results[1]); code != float64(codes.InvalidArgument) || reason != "INVALID_KEY" {
				t.Fatalf("item 1: %v / %q; want 3 / INVALID_KEY", code, reason)
			}
			// The same claimant's second Claim of the key, after the first.
			again, _ := results[2].(map[string]any)
			if field(again, "response", "outcome") != "OUTCOME_ACQUIRED" || field(again, "response", "record", "token") != field(first, "response", "record", "token") {
				t.Fatalf("item 2: %v; want ACQUIRED again with item 0's token", again)
			}
			// billing may use every namespace; process_payment too.
			if _, reason := jsonItemReason(t, results[3]); reason != "" {
				t.Fatalf("item 3: %s", reason)
			}

			pay := wantOK(t, "BatchLookup as payments", p.call(t, ts.JSONURL, "BatchLookup", map[string]any{"requests": []any{
				map[string]any{"namespace": "process_payment", "key": key},
				map[string]any{"namespace": "jobs", "key": key},
			}}, jsonPayToken))
			results, _ = pay["results"].([]any)
			if _, reason := jsonItemReason(t, results[0]); reason != "NOT_FOUND" {
				t.Fatalf("payments' Lookup of billing's key: %q; want NOT_FOUND", reason)
			}
			if _, reason := jsonItemReason(t, results[1]); reason != "NAMESPACE_NOT_ALLOWED" {
				t.Fatalf("payments' Lookup outside its namespaces: %q; want NAMESPACE_NOT_ALLOWED", reason)
			}

			a := p.call(t, ts.JSONURL, "BatchClaim", map[string]any{"requests": []any{
				map[string]any{"namespace": "jobs", "key": key + "-x"},
				map[string]any{"namespace": "jobs", "key": key + "-y", "leaseTTL": "30s"},
			}}, jsonBillToken)
			checkJSONError(t, a, p.name == "rest", "invalid_argument", "UNKNOWN_FIELD")
			if msg, _ := a.body["message"].(string); !strings.Contains(msg, "requests[1].leaseTTL") {
				t.Fatalf("message %q does not name requests[1].leaseTTL", msg)
			}
			checkJSONError(t, p.call(t, ts.JSONURL, "BatchClaim", map[string]any{"requests": map[string]any{}}, jsonBillToken),
				p.name == "rest", "invalid_argument", "MALFORMED_REQUEST")
			// A refused request wrote nothing.
			look := wantOK(t, "BatchLookup", p.call(t, ts.JSONURL, "BatchLookup", map[string]any{"requests": []any{
				map[string]any{"namespace": "jobs", "key": key + "-x"},
			}}, jsonBillToken))
			results, _ = look["results"].([]any)
			if _, reason := jsonItemReason(t, results[0]); reason != "NOT_FOUND" {
				t.Fatalf("the refused batch's first key: %q; want NOT_FOUND", reason)
			}
		})
	}
}

// largestBatch is a BatchComplete of exactly size bytes of protobuf, with
// results of at most maxResult bytes, of keys nobody claimed.
func largestBatch(t *testing.T, size, maxResult int) *idemv1.BatchCompleteRequest {
	t.Helper()
	req := &idemv1.BatchCompleteRequest{}
	for i := 0; proto.Size(req) < size; i++ {
		item := &idemv1.CompleteRequest{Namespace: ns, Key: fmt.Sprintf("big-%d", i), Token: 1, Result: make([]byte, maxResult)}
		req.Requests = append(req.Requests, item)
		if over := proto.Size(req) - size; over > 0 {
			// Shrink the last result by what is over; its length prefix
			// may shrink by a byte too, which the loop makes up.
			item.Result = item.Result[:len(item.Result)-over]
			for proto.Size(req) < size {
				item.Result = append(item.Result, 0)
			}
		}
	}
	if proto.Size(req) != size {
		t.Fatalf("built a batch of %d bytes; want %d", proto.Size(req), size)
	}
	return req
}

// TestBatchLargest: with the default bounds, a batch of --batch-max-bytes
// is read and answered over gRPC, REST and Connect, and one byte more is
// REQUEST_TOO_LARGE; more than --batch-max-items items, or none, is
// INVALID_BATCH_SIZE.
func TestBatchLargest(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{JSON: true})
	cfg := server.DefaultConfig()
	ctx := testContext(t)

	largest := largestBatch(t, cfg.BatchMaxBytes, cfg.MaxResultBytes)
	resp, err := ts.Client.BatchComplete(ctx, largest)
	if err != nil {
		t.Fatalf("BatchComplete of %d bytes: %v", proto.Size(largest), err)
	}
	for i, r := range resp.GetResults() {
		wantItem(t, "BatchComplete", i, r, codes.NotFound, "NOT_FOUND")
	}
	body, err := protojson.Marshal(largest)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range protocols {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		got := wantOK(t, p.name+" BatchComplete of the largest batch", p.call(t, ts.JSONURL, "BatchComplete", m, ""))
		if results, _ := got["results"].([]any); len(results) != len(largest.GetRequests()) {
			t.Fatalf("%s: %d results; want %d", p.name, len(results), len(largest.GetRequests()))
		}
	}

	over := largestBatch(t, cfg.BatchMaxBytes+1, cfg.MaxResultBytes)
	_, err = ts.Client.BatchComplete(ctx, over)
	if st := requireStatus(t, err, codes.ResourceExhausted, "REQUEST_TOO_LARGE"); !strings.Contains(st.Message(), "--batch-max-bytes") {
		t.Fatalf("message %q does not name --batch-max-bytes", st.Message())
	}
	// Over HTTP it is 413, as for any body too large, on REST and Connect
	// (JSON and binary).
	overJSON, _ := protojson.Marshal(over)
	overProto, _ := proto.Marshal(over)
	for _, c := range []struct {
		path, contentType string
		body              []byte
	}{
		{"/v1/records:batchComplete", "application/json", overJSON},
		{"/idem.v1.IdempotencyService/BatchComplete", "application/json", overJSON},
		{"/idem.v1.IdempotencyService/BatchComplete", "application/proto", overProto},
	} {
		req, _ := http.NewRequest(http.MethodPost, ts.JSONURL+c.path, bytes.NewReader(c.body))
		req.Header.Set("Content-Type", c.contentType)
		a := doHTTP(t, req, "")
		if a.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s (%s) of %d bytes: HTTP %d; want 413", c.path, c.contentType, len(c.body), a.status)
		}
		if c.contentType == "application/json" {
			if _, reason, _, msg := errorOf(t, a, strings.HasPrefix(c.path, "/v1/")); reason != "REQUEST_TOO_LARGE" || !strings.Contains(msg, "--batch-max-bytes") {
				t.Fatalf("%s: %q %q; want REQUEST_TOO_LARGE naming --batch-max-bytes", c.path, reason, msg)
			}
		}
	}

	tooMany := &idemv1.BatchLookupRequest{}
	for i := range cfg.BatchMaxItems + 1 {
		tooMany.Requests = append(tooMany.Requests, &idemv1.LookupRequest{Namespace: ns, Key: fmt.Sprintf("k%d", i)})
	}
	_, err = ts.Client.BatchLookup(ctx, tooMany)
	if st := requireStatus(t, err, codes.InvalidArgument, "INVALID_BATCH_SIZE"); !strings.Contains(st.Message(), "501") || !strings.Contains(st.Message(), "500") {
		t.Fatalf("message %q does not name the count and the limit", st.Message())
	}
	_, err = ts.Client.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: tooMany.Requests[:cfg.BatchMaxItems]})
	if err != nil {
		t.Fatalf("BatchLookup of %d items: %v", cfg.BatchMaxItems, err)
	}
	for _, call := range []func() error{
		func() error { _, err := ts.Client.BatchClaim(ctx, &idemv1.BatchClaimRequest{}); return err },
		func() error { _, err := ts.Client.BatchComplete(ctx, &idemv1.BatchCompleteRequest{}); return err },
		func() error { _, err := ts.Client.BatchFail(ctx, &idemv1.BatchFailRequest{}); return err },
		func() error { _, err := ts.Client.BatchHeartbeat(ctx, &idemv1.BatchHeartbeatRequest{}); return err },
		func() error { _, err := ts.Client.BatchLookup(ctx, &idemv1.BatchLookupRequest{}); return err },
	} {
		requireStatus(t, call(), codes.InvalidArgument, "INVALID_BATCH_SIZE")
	}
}
