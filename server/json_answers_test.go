package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"testing"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
)

// TestJSONAnswersOfAnySize: the HTTP/JSON API sends every answer the gRPC
// API sends, however large: on a server on its defaults, a ListRecords
// page of 100 records and a BatchLookup of 100 keys, each record with a
// result of the default 64 KiB limit, are more than the largest request
// the API reads, and are answered whole, over Connect and REST. A gRPC-Web
// request is still read no further than the largest valid one, and refused
// past it with RESOURCE_EXHAUSTED naming the limit.
func TestJSONAnswersOfAnySize(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{JSON: true})
	ctx := testContext(t)
	const ns, n = "answers", 100
	result := bytes.Repeat([]byte{'r'}, server.DefaultConfig().MaxResultBytes)
	lookups := make([]any, n)
	for i := range n {
		key := fmt.Sprintf("k%03d", i)
		resp, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: resp.GetRecord().GetToken(), Result: result}); err != nil {
			t.Fatal(err)
		}
		lookups[i] = map[string]any{"namespace": ns, "key": key}
	}
	page := wantOK(t, "ListRecords", connectCall(t, ts.JSONURL, "AdminService", "ListRecords", map[string]any{"namespace": ns, "pageSize": n}, ""))
	if rows, _ := page["records"].([]any); len(rows) != n {
		t.Fatalf("ListRecords: %d records; want %d", len(rows), n)
	}
	for _, p := range protocols {
		got := wantOK(t, p.name+" BatchLookup", p.call(t, ts.JSONURL, "BatchLookup", map[string]any{"requests": lookups}, ""))
		if rows, _ := got["results"].([]any); len(rows) != n {
			t.Fatalf("%s BatchLookup: %d results; want %d", p.name, len(rows), n)
		}
	}

	// A gRPC-Web Complete as JSON, larger than any request the API takes.
	msg := []byte(`{"namespace":"answers","key":"web","token":"1","result":"` + strings.Repeat("A", 8<<20) + `"}`)
	frame := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(msg)))
	req, _ := http.NewRequest(http.MethodPost, ts.JSONURL+"/idem.v1.IdempotencyService/Complete", bytes.NewReader(frame))
	req.Header.Set("Content-Type", "application/grpc-web+json")
	a := doHTTP(t, req, "")
	if a.header.Get("Grpc-Status") != "8" || !strings.Contains(a.header.Get("Grpc-Message"), "the limit is") {
		t.Fatalf("gRPC-Web Complete of %d bytes: HTTP %d %v %.300q; want RESOURCE_EXHAUSTED naming the limit", len(frame), a.status, a.header, a.raw)
	}
}

// TestJSONGRPCWebInflateLimit: a gRPC-Web message compressed with gzip is
// inflated no further than the largest valid request, and refused past it
// with RESOURCE_EXHAUSTED, so that a small message cannot make the server
// buffer a huge one.
func TestJSONGRPCWebInflateLimit(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{JSON: true})
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write([]byte(`{"namespace":"answers","key":"bomb","token":"1","result":"` + strings.Repeat("A", 8<<20) + `"}`))
	_ = zw.Close()
	frame := append([]byte{1, 0, 0, 0, 0}, zipped.Bytes()...)
	binary.BigEndian.PutUint32(frame[1:5], uint32(zipped.Len()))
	req, _ := http.NewRequest(http.MethodPost, ts.JSONURL+"/idem.v1.IdempotencyService/Complete", bytes.NewReader(frame))
	req.Header.Set("Content-Type", "application/grpc-web+json")
	req.Header.Set("Grpc-Encoding", "gzip")
	a := doHTTP(t, req, "")
	if a.header.Get("Grpc-Status") != "8" || !strings.Contains(a.header.Get("Grpc-Message"), "inflates to over") {
		t.Fatalf("gRPC-Web Complete of %d bytes inflating to 8 MiB: HTTP %d %v %.300q; want RESOURCE_EXHAUSTED saying it inflates past the limit",
			len(frame), a.status, a.header, a.raw)
	}
}
