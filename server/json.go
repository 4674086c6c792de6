package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// jsonHeadroom is what a JSON request carries besides its base64 result:
// field names, a key or an error string escaped as \uXXXX (six bytes for
// each of 4 KiB), with room to spare.
const jsonHeadroom = 32 << 10

// JSONBodyLimit is the largest request body the HTTP/JSON API reads, for a
// server whose results are at most maxResultBytes: a result travels in JSON
// as base64.
func JSONBodyLimit(maxResultBytes int) int64 {
	return int64(4*((maxResultBytes+2)/3) + jsonHeadroom)
}

// NewJSONHandler serves the IdempotencyService and AdminService registered
// on srv (by NewGRPCServer, with svc) over HTTP: the Connect protocol (JSON
// or binary) and gRPC-Web for every RPC at /idem.v1.<Service>/<Method>, and
// the REST routes of the google.api.http annotations in idem.proto. vanguard
// transcodes each request into a gRPC call that srv handles in process
// (grpc.Server.ServeHTTP), so it runs the same service and the same
// interceptor chain — authentication from the Authorization header or the
// client certificate, tenants, rate limits, metrics, logging, recovery —
// and its errors carry the same codes, messages and ErrorInfo. Nothing is
// added to srv's own listener.
//
// A body over JSONBodyLimit is refused with 413 before it is read; a
// compressed one is refused once it inflates past the limit.
func NewJSONHandler(svc *Service, srv *grpc.Server) (http.Handler, error) {
	limit := JSONBodyLimit(svc.cfg.MaxResultBytes)
	opts := []vanguard.ServiceOption{
		vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
		vanguard.WithTargetCodecs(vanguard.CodecProto),
		vanguard.WithNoTargetCompression(),
		vanguard.WithMaxMessageBufferBytes(uint32(limit)),
	}
	services := []protoreflect.ServiceDescriptor{
		idemv1.File_idem_v1_idem_proto.Services().ByName("IdempotencyService"),
		idemv1.File_idem_v1_admin_proto.Services().ByName("AdminService"),
	}
	vgServices := make([]*vanguard.Service, len(services))
	for i, sd := range services {
		vgServices[i] = vanguard.NewServiceWithSchema(sd, srv, opts...)
	}
	transcoder, err := vanguard.NewTranscoder(vgServices,
		vanguard.WithCompression("gzip",
			func() connect.Compressor { return gzip.NewWriter(io.Discard) },
			func() connect.Decompressor { return &limitedGzipReader{limit: limit} }))
	if err != nil {
		return nil, fmt.Errorf("HTTP/JSON API: %w", err)
	}
	return &jsonHandler{transcoder: transcoder, limit: limit, verbs: restVerbs(services)}, nil
}

type jsonHandler struct {
	transcoder http.Handler
	limit      int64
	verbs      map[string]bool // the custom verbs of the REST routes: "claim", …
}

func (h *jsonHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := !strings.HasPrefix(r.URL.Path, "/idem.v1.")
	switch {
	case r.ContentLength > h.limit:
		h.tooLarge(w, rest, fmt.Sprintf("the request body is %d bytes; the limit is %d", r.ContentLength, h.limit))
		return
	case r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody:
		// No length announced (chunked): read at most the limit and one byte
		// more, so that vanguard sees a body of known length.
		body, err := io.ReadAll(io.LimitReader(r.Body, h.limit+1))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if int64(len(body)) > h.limit {
			h.tooLarge(w, rest, fmt.Sprintf("the request body is over the limit of %d bytes", h.limit))
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}
	ct := r.Header.Get("Content-Type")
	switch {
	case rest:
		r.URL.Path, r.URL.RawPath = restPath(r.URL.EscapedPath(), h.verbs), ""
		// curl -d sends a form type; the REST routes take JSON only.
		if r.ContentLength != 0 && (ct == "" || ct == "application/x-www-form-urlencoded") {
			r.Header.Set("Content-Type", "application/json")
		}
	case r.Method == http.MethodPost && (ct == "application/json" || ct == "application/proto") &&
		r.Header.Get("Connect-Protocol-Version") == "":
		// A Connect unary call from a plain HTTP client, which does not send
		// the header that tells vanguard it is not REST.
		r.Header.Set("Connect-Protocol-Version", "1")
	}
	h.transcoder.ServeHTTP(w, r)
}

// tooLarge answers 413 with an error body in the format of the request's
// protocol: a google.rpc.Status for REST, a Connect error otherwise (with
// the gRPC-Web status in headers, which gRPC-Web clients read).
func (h *jsonHandler) tooLarge(w http.ResponseWriter, rest bool, msg string) {
	body, err := errorJSON(rest, msg)
	if err != nil {
		http.Error(w, msg, http.StatusRequestEntityTooLarge)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Grpc-Status", "8")
	w.Header().Set("Grpc-Message", msg)
	w.Header().Set("Connection", "close") // the unread body is not worth reading to reuse the connection
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = w.Write(body)
}

func errorJSON(rest bool, msg string) ([]byte, error) {
	if rest {
		return json.Marshal(map[string]any{"code": 8, "message": msg, "details": []any{}})
	}
	return json.Marshal(map[string]any{"code": "resource_exhausted", "message": msg})
}

// restPath prepares an escaped REST path for vanguard's router, which
// splits on "/" and takes the custom verb after the first ":" of the last
// segment. A key is one path segment, so "/" and "%" in it are written
// %2F and %25; escaped is matched as written, not decoded first, so that
// %2F stays inside its segment. A ":" in the key may be written as is: every
// ":" of the last segment but the one before a known verb is escaped here.
func restPath(escaped string, verbs map[string]bool) string {
	i := strings.LastIndexByte(escaped, '/')
	last := escaped[i+1:]
	if !strings.Contains(last, ":") {
		return escaped
	}
	body, verb := last, ""
	if j := strings.LastIndexByte(last, ':'); verbs[last[j+1:]] {
		body, verb = last[:j], last[j:]
	}
	return escaped[:i+1] + strings.ReplaceAll(body, ":", "%3A") + verb
}

// restVerbs collects the custom verbs (":claim") of the services' REST
// routes.
func restVerbs(services []protoreflect.ServiceDescriptor) map[string]bool {
	verbs := map[string]bool{}
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			rule, _ := proto.GetExtension(sd.Methods().Get(i).Options(), annotations.E_Http).(*annotations.HttpRule)
			for _, path := range []string{rule.GetGet(), rule.GetPost(), rule.GetPut(), rule.GetPatch(), rule.GetDelete()} {
				if j := strings.LastIndexByte(path, ':'); j > strings.LastIndexByte(path, '}') {
					verbs[path[j+1:]] = true
				}
			}
		}
	}
	return verbs
}

// limitedGzipReader inflates a gzip request body and fails once it has
// produced more than limit bytes, so that a small compressed body cannot
// make the server buffer a huge one.
type limitedGzipReader struct {
	limit int64
	zr    *gzip.Reader
	n     int64
}

func (g *limitedGzipReader) Reset(r io.Reader) error {
	g.n = 0
	if g.zr == nil {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		g.zr = zr
		return nil
	}
	return g.zr.Reset(r)
}

func (g *limitedGzipReader) Read(p []byte) (int, error) {
	if g.zr == nil {
		return 0, errors.New("gzip reader used before Reset")
	}
	n, err := g.zr.Read(p)
	g.n += int64(n)
	if g.n > g.limit {
		return 0, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("the request inflates to over %d bytes, the limit", g.limit))
	}
	return n, err
}

func (g *limitedGzipReader) Close() error {
	if g.zr == nil {
		return nil
	}
	return g.zr.Close()
}
