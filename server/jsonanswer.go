package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// jsonAnswer is the ResponseWriter vanguard answers a Connect or REST call
// on. It passes the gRPC server's answer on, 413 for REQUEST_TOO_LARGE,
// and drops what vanguard writes for a call the handler answers itself.
type jsonAnswer struct{ c *jsonCall }

func (a jsonAnswer) Header() http.Header {
	if a.c.answerHeader == nil {
		a.c.answerHeader = http.Header{}
	}
	return a.c.answerHeader
}

func (a jsonAnswer) WriteHeader(code int) {
	c := a.c
	switch {
	case c.wrote:
		return
	case c.refused || c.rpc != nil && c.received.Load() == 0:
		// Until the server has the request, what vanguard writes is its own
		// refusal of it, which serveCall answers once the interceptors have
		// seen it.
		c.silent = true
	case code == http.StatusMethodNotAllowed && c.rpc == nil:
		c.silent = true
		c.noRoute(code, a.Header().Get("Allow"))
	default:
		if reasonOf(c.answer) == "REQUEST_TOO_LARGE" {
			code = http.StatusRequestEntityTooLarge
		}
		maps.Copy(c.w.Header(), a.Header())
		c.w.WriteHeader(code)
	}
	c.wrote = true
}

func (a jsonAnswer) Write(p []byte) (int, error) {
	if !a.c.wrote {
		a.WriteHeader(http.StatusOK)
	}
	if a.c.silent {
		return len(p), nil
	}
	return a.c.w.Write(p)
}

// Flush is what vanguard needs of a ResponseWriter.
func (a jsonAnswer) Flush() {
	if f, ok := a.c.w.(http.Flusher); ok && a.c.wrote && !a.c.silent {
		f.Flush()
	}
}

// refuse answers c with its refusal, after the gRPC server's interceptors
// have run on it as on any call of its RPC: with the request's credentials
// and peer, so that a caller without credentials gets UNAUTHENTICATED.
func (c *jsonCall) refuse(r *http.Request) {
	c.refused = true
	err := c.refusal
	if c.h.intercept != nil {
		md := metadata.MD{}
		for k, v := range c.header {
			md[strings.ToLower(k)] = v
		}
		p := &peer.Peer{Addr: remoteAddr(r.RemoteAddr)}
		if r.TLS != nil {
			p.AuthInfo = credentials.TLSInfo{State: *r.TLS, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
		}
		stream := &headerStream{method: c.rpc.path}
		ctx := grpc.NewContextWithServerTransportStream(peer.NewContext(metadata.NewIncomingContext(r.Context(), md), p), stream)
		var req proto.Message
		if mt, e := protoregistry.GlobalTypes.FindMessageByName(c.rpc.input.FullName()); e == nil {
			req = mt.New().Interface()
		}
		_, err = c.h.intercept(ctx, req, &grpc.UnaryServerInfo{FullMethod: c.rpc.path},
			func(context.Context, any) (any, error) { return nil, c.refusal })
		for k, v := range stream.header { // Retry-After, from the rate limit
			c.w.Header()[http.CanonicalHeaderKey(k)] = v
		}
	}
	c.writeError(status.Convert(err), 0, "")
}

// writeError answers with st in the API's error shape: a Connect error on a
// Connect path, a google.rpc.Status on a REST route; code is the HTTP
// status, 0 for st's own (httpStatus).
func (c *jsonCall) writeError(st *status.Status, code int, allow string) {
	if code == 0 {
		code = httpStatus(st)
	}
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if allow != "" {
		h.Set("Allow", allow)
	}
	if code == http.StatusRequestEntityTooLarge && c.http1 {
		// The rest of the body is not worth reading to reuse the
		// connection. (HTTP/2 resets the stream instead.)
		h.Set("Connection", "close")
	}
	c.w.WriteHeader(code)
	_, _ = c.w.Write(errorBody(st, c.connect))
}

func errorBody(st *status.Status, connectShape bool) []byte {
	if !connectShape {
		body, _ := protojson.Marshal(st.Proto())
		return body
	}
	type detail struct {
		Type  string          `json:"type"`
		Value string          `json:"value"`
		Debug json.RawMessage `json:"debug,omitempty"`
	}
	var details []detail
	for _, d := range st.Proto().GetDetails() {
		dt := detail{Type: strings.TrimPrefix(d.GetTypeUrl(), "type.googleapis.com/"), Value: base64.RawStdEncoding.EncodeToString(d.GetValue())}
		if m, err := d.UnmarshalNew(); err == nil {
			dt.Debug, _ = protojson.Marshal(m)
		}
		details = append(details, dt)
	}
	body, _ := json.Marshal(struct {
		Code    string   `json:"code"`
		Message string   `json:"message,omitempty"`
		Details []detail `json:"details,omitempty"`
	}{connect.Code(st.Code()).String(), st.Message(), details})
	return body
}

// httpStatus is the HTTP status of a refusal: 413 for a body too large and
// 415 for a header the API does not read, as HTTP has them; otherwise
// that of its code.
func httpStatus(st *status.Status) int {
	info := errorInfo(st)
	switch {
	case info.GetReason() == "REQUEST_TOO_LARGE":
		return http.StatusRequestEntityTooLarge
	case info.GetReason() == "MALFORMED_REQUEST" && info.GetMetadata()["header"] != "":
		return http.StatusUnsupportedMediaType
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

func reasonOf(err error) string {
	if err == nil {
		return ""
	}
	return errorInfo(status.Convert(err)).GetReason()
}

// trailerStatus is the error a gRPC server answered with, from its
// trailers, nil when it answered without one.
func trailerStatus(h http.Header) error {
	bin, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(h.Get("Grpc-Status-Details-Bin"), "="))
	var st spb.Status
	if err != nil || len(bin) == 0 || proto.Unmarshal(bin, &st) != nil {
		return nil
	}
	return status.ErrorProto(&st)
}

// noRoute answers a request vanguard routed nowhere.
func (h *jsonHandler) noRoute(w http.ResponseWriter, r *http.Request) {
	if c, ok := r.Context().Value(jsonCallKey{}).(*jsonCall); ok {
		c.noRoute(http.StatusNotFound, "")
		return
	}
	http.NotFound(w, r) // gRPC, gRPC-Web
}

// noRoute answers a request that names no RPC: 404, or 405 with allow when
// its path is a route's with another HTTP method. It is not a call (no
// authentication, no metrics), but it is answered in the API's error shape
// and says what there is.
func (c *jsonCall) noRoute(code int, allow string) {
	c.silent, c.wrote = true, true
	path := c.path
	if len(path) > 200 {
		path = path[:200] + "…"
	}
	rpcs, routes := slices.Sorted(maps.Keys(c.h.methods)), strings.Join(c.h.routes, ", ")
	var msg string
	switch {
	case c.connect && allow != "":
		msg = fmt.Sprintf("%s %s: an RPC's Connect path takes POST only", c.method, path)
	case c.connect:
		msg = fmt.Sprintf("no RPC at %s; the RPCs are %s", path, strings.Join(rpcs, ", "))
	case allow != "":
		msg = fmt.Sprintf("%s %s: this path takes %s only; the REST routes are %s", c.method, path, allow, routes)
	default:
		msg = fmt.Sprintf("no route matches %s %s; the REST routes are %s; every RPC also takes POST /idem.v1.<Service>/<Method> "+
			"(Connect, gRPC-Web), as docs/http-api.md says", c.method, path, routes)
	}
	grpcCode := codes.NotFound
	if c.connect || allow != "" {
		grpcCode = codes.Unimplemented
	}
	c.writeError(status.New(grpcCode, msg), code, allow)
}

// headerStream takes the headers the interceptors set on a refused call,
// as the call's gRPC stream would.
type headerStream struct {
	method string
	header metadata.MD
}

func (s *headerStream) Method() string { return s.method }
func (s *headerStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *headerStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *headerStream) SetTrailer(metadata.MD) error    { return nil }

// remoteAddr is a client's address as net/http gives it.
type remoteAddr string

func (a remoteAddr) Network() string { return "tcp" }
func (a remoteAddr) String() string  { return string(a) }
