package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// TestJSONUnknownRouteSaysWhatThereIs: a request that names no RPC — a path
// no route matches, a method its path does not take — is answered in the
// API's error shape (a google.rpc.Status, or a Connect error on a Connect
// path), 404 or 405 with Allow, and the message says what there is.
func TestJSONUnknownRouteSaysWhatThereIs(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{JSON: true})
	for _, tc := range []struct {
		name         string
		method, path string
		contentType  string
		status       int
		allow        string
		code         any // the body's code: a number (google.rpc.Status) or a Connect code
		contains     []string
	}{
		{"no route", http.MethodGet, "/v1/nothing/here", "", http.StatusNotFound, "", float64(5),
			[]string{"GET /v1/nothing/here", "POST /v1/namespaces/{namespace}/records/{key}:claim", "GET /v1/namespaces/{namespace}/records/{key}", "POST /v1/records:batchLookup", "/idem.v1."}},
		{"the root", http.MethodGet, "/", "", http.StatusNotFound, "", float64(5),
			[]string{"POST /v1/namespaces/{namespace}/records/{key}:claim"}},
		// A ':' the routes do not know as a verb is part of the key: the
		// path is Lookup's.
		{"an unknown verb", http.MethodPost, "/v1/namespaces/jobs/records/k:claimm", "application/json", http.StatusMethodNotAllowed, "GET", float64(12),
			[]string{"POST /v1/namespaces/jobs/records/k:claimm", "takes GET", "POST /v1/namespaces/{namespace}/records/{key}:claim"}},
		{"a route's path with another method", http.MethodPost, "/v1/namespaces/jobs/records/k", "application/json", http.StatusMethodNotAllowed, "GET", float64(12),
			[]string{"GET /v1/namespaces/{namespace}/records/{key}", "takes GET"}},
		{"a route's path with a method no route takes", http.MethodDelete, "/v1/namespaces/jobs/records/k:claim", "", http.StatusMethodNotAllowed, "POST", float64(12),
			[]string{"POST /v1/namespaces/{namespace}/records/{key}:claim", "takes POST"}},
		{"an unknown RPC", http.MethodPost, "/idem.v1.IdempotencyService/Claimm", "application/json", http.StatusNotFound, "", "unimplemented",
			[]string{"/idem.v1.IdempotencyService/Claimm", "/idem.v1.IdempotencyService/Claim,", "/idem.v1.AdminService/ListRecords"}},
		{"an RPC with GET", http.MethodGet, "/idem.v1.IdempotencyService/Claim", "", http.StatusMethodNotAllowed, "POST", "unimplemented",
			[]string{"takes POST only"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.JSONURL+tc.path, strings.NewReader(""))
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			a := doHTTP(t, req, "")
			if a.status != tc.status || a.header.Get("Allow") != tc.allow {
				t.Fatalf("%d, Allow %q: %s; want %d, Allow %q", a.status, a.header.Get("Allow"), a.raw, tc.status, tc.allow)
			}
			msg, _ := a.body["message"].(string)
			if a.body["code"] != tc.code || msg == "" {
				t.Fatalf("body %s (Content-Type %q); want the API's error shape with code %v and a message", a.raw, a.header.Get("Content-Type"), tc.code)
			}
			for _, want := range tc.contains {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q; want it to contain %q", msg, want)
				}
			}
		})
	}
}
