package server_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
)

// startTLJSON is startTL with the HTTP/JSON API, on Postgres.
func startTLJSON(t *testing.T) (*testserver.Server, *tlServer) {
	t.Helper()
	tenants, err := services.NewTenants(timelineFile())
	if err != nil {
		t.Fatal(err)
	}
	ts := testserver.StartWith(t, testserver.Options{JSON: true, Config: server.Config{Tenants: tenants}})
	lapse := func(t *testing.T, id store.RecordID) {
		t.Helper()
		if _, err := ts.DB.Pool.Exec(testContext(t), `UPDATE idem_records SET lease_expires_at = now() - interval '1 second'
			WHERE tenant = $1 AND namespace = $2 AND key = $3`, id.Tenant, id.Namespace, id.Key); err != nil {
			t.Fatal(err)
		}
	}
	return ts, &tlServer{st: &tlStore{Store: ts.Store, lapse: lapse}, srv: ts.Server, c: ts.Client, admin: ts.Admin,
		res: idemv1.NewResolverServiceClient(ts.Conn)}
}

// TestTimelineAndResolversOverHTTP: a Lookup with its history, ListHeld
// and Resolve by their REST routes and by Connect; the query parameters of
// a GET route name its fields, and no other.
func TestTimelineAndResolversOverHTTP(t *testing.T) {
	t.Parallel()
	ts, s := startTLJSON(t)
	held := s.hold(t, acmeToken, "acme", "pay.card", "k")
	s.hold(t, acmeToken, "acme", "mail", "m")

	get := func(path string) httpAnswer {
		req, _ := http.NewRequest(http.MethodGet, ts.JSONURL+path, nil)
		return doHTTP(t, req, acmeToken)
	}
	a := wantOK(t, "REST Lookup with its history", get("/v1/namespaces/pay.card/records/k?includeHistory=true"))
	if h, _ := a["history"].([]any); len(h) != 1 || h[0].(map[string]any)["kind"] != "TIMELINE_ENTRY_KIND_HELD" {
		t.Fatalf("history %v; want the hold", a["history"])
	}
	a = wantOK(t, "REST Lookup with include_history", get("/v1/namespaces/pay.card/records/k?include_history=true"))
	if h, _ := a["history"].([]any); len(h) != 1 {
		t.Fatalf("history %v; want the hold", a["history"])
	}
	a = wantOK(t, "REST Lookup", get("/v1/namespaces/pay.card/records/k"))
	if _, ok := a["history"]; ok {
		if h, _ := a["history"].([]any); len(h) != 0 {
			t.Fatalf("history %v without include_history", a["history"])
		}
	}
	checkJSONError(t, get("/v1/namespaces/pay.card/records/k?history=true"), true, "invalid_argument", "UNKNOWN_FIELD")
	bad := get("/v1/namespaces/pay.card/records/k?includeHistory=maybe")
	checkJSONError(t, bad, true, "invalid_argument", "MALFORMED_REQUEST")
	if msg, _ := bad.body["message"].(string); !strings.Contains(msg, "includeHistory") {
		t.Errorf("the refusal of includeHistory=maybe says %q; want it to name the parameter", msg)
	}
	checkJSONError(t, get("/v1/held?pageSize=1&pageSize=2"), true, "invalid_argument", "MALFORMED_REQUEST")

	a = wantOK(t, "REST ListHeld", get("/v1/held?namespaces=mail&namespaces=pay.card&pageSize=1"))
	if recs, _ := a["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["key"] != "m" || a["nextPageToken"] == "" {
		t.Fatalf("ListHeld page of 1 = %v", a)
	}
	checkJSONError(t, get("/v1/held?namespaces=jobs"), true, "permission_denied", "NAMESPACE_NOT_ALLOWED")
	a = wantOK(t, "Connect ListHeld", connectCall(t, ts.JSONURL, "ResolverService", "ListHeld", map[string]any{"namespaces": []string{"pay.card"}}, acmeToken))
	if recs, _ := a["records"].([]any); len(recs) != 1 {
		t.Fatalf("Connect ListHeld = %v", a)
	}

	a = wantOK(t, "REST Resolve", restCall(t, ts.JSONURL, "Resolve", map[string]any{"namespace": "pay.card", "key": "k",
		"token": held.GetToken(), "resolver": "http-resolver", "reason": "checked", "released": map[string]any{}}, acmeToken, restPathSegment))
	if rec, _ := a["record"].(map[string]any); rec["state"] != "STATE_RELEASED" {
		t.Fatalf("Resolve = %v", a)
	}
	entries := s.lookupHistory(t, "pay.card", "k")
	if last := entries[len(entries)-1]; last.GetActor().GetResolver() != "http-resolver" || last.GetReason() != "checked" {
		t.Fatalf("the resolution's entry %v", last)
	}
}

// TestWatchHeldOverGRPCWeb: a browser streams the held records over the
// HTTP/JSON API's gRPC-Web, one event at a time, as they come.
func TestWatchHeldOverGRPCWeb(t *testing.T) {
	t.Parallel()
	ts, s := startTLJSON(t)
	first := s.hold(t, acmeToken, "acme", "pay.card", "a")
	msg, err := proto.Marshal(&idemv1.WatchHeldRequest{})
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodPost, ts.JSONURL+"/idem.v1.ResolverService/WatchHeld", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/grpc-web+proto")
	req.Header.Set("Authorization", "Bearer "+acmeToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	next := func() *idemv1.WatchHeldResponse {
		t.Helper()
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		data := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(r, data); err != nil || head[0] != 0 {
			t.Fatalf("frame %d %q: %v", head[0], data, err)
		}
		var ev idemv1.WatchHeldResponse
		if err := proto.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		return &ev
	}
	if ev := next(); ev.GetHeld().GetKey() != "a" || ev.GetHeld().GetToken() != first.GetToken() {
		t.Fatalf("first event %v; want a held", ev)
	}
	if ev := next(); !ev.GetSynced() {
		t.Fatalf("second event %v; want synced", ev)
	}
	second := s.hold(t, acmeToken, "acme", "pay.card", "b")
	if ev := next(); ev.GetHeld().GetKey() != "b" || ev.GetHeld().GetToken() != second.GetToken() {
		t.Fatalf("event %v; want b held", ev)
	}
}
