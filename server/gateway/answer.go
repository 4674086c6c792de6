package gateway

import (
	"context"
	"encoding/base64"
	"errors"
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

// answer is the ResponseWriter vanguard answers a call on. It passes the
// gRPC server's answer on, 413 for REQUEST_TOO_LARGE, and drops what
// vanguard writes for a call the gateway answers itself. A gRPC or gRPC-Web
// answer's headers go straight through, trailers among them.
type answer struct{ c *call }

func (a answer) Header() http.Header {
	switch {
	case a.c.protocol == protocolGRPCWeb:
		return a.c.w.Header()
	case a.c.answerHeader == nil:
		a.c.answerHeader = http.Header{}
	}
	return a.c.answerHeader
}

func (a answer) WriteHeader(code int) {
	switch c := a.c; {
	case c.wrote:
		return
	case c.refused || c.rpc != nil && c.protocol != protocolGRPCWeb && c.received.Load() == 0:
		// Until the server has the request, what vanguard writes is its own
		// refusal of it, which serveCall answers once the interceptors have
		// seen it.
		c.silent = true
	case code == http.StatusMethodNotAllowed && c.rpc == nil:
		c.noRoute(code, a.Header().Get("Allow"))
	default:
		if errorInfo(c.serverErr).GetReason() == "REQUEST_TOO_LARGE" {
			code = http.StatusRequestEntityTooLarge
		}
		if c.protocol != protocolGRPCWeb {
			maps.Copy(c.w.Header(), a.Header())
		}
		c.w.WriteHeader(code)
	}
	a.c.wrote = true
}

func (a answer) Write(p []byte) (int, error) {
	if !a.c.wrote {
		a.WriteHeader(http.StatusOK)
	}
	if a.c.silent {
		return len(p), nil
	}
	return a.c.w.Write(p)
}

// Flush is what vanguard needs of a ResponseWriter.
func (a answer) Flush() {
	if f, ok := a.c.w.(http.Flusher); ok && a.c.wrote && !a.c.silent {
		f.Flush()
	}
}

// refuse answers c with its refusal once the gRPC server's interceptors
// have run on it, as on any call of its RPC, with the request's headers as
// metadata and its TLS state as the peer: so a caller without credentials
// gets UNAUTHENTICATED, and one over its rate limit RATE_LIMITED.
func (c *call) refuse(r *http.Request) {
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
		mt, _ := protoregistry.GlobalTypes.FindMessageByName(c.rpc.input.FullName())
		_, err = c.h.intercept(ctx, mt.New().Interface(), &grpc.UnaryServerInfo{FullMethod: c.rpc.path},
			func(context.Context, any) (any, error) { return nil, c.refusal })
		for k, v := range stream.header { // retry-after, from the rate limit
			c.w.Header()[http.CanonicalHeaderKey(k)] = v
		}
	}
	c.writeError(status.Convert(err), 0, "")
}

// writeError answers with st in the API's error shape, a Connect error on a
// Connect path and a google.rpc.Status on a REST route, with the HTTP
// status code, or st's own for 0: 413 for REQUEST_TOO_LARGE, 415 for a
// header the API does not read, else that of its code.
func (c *call) writeError(st *status.Status, code int, allow string) {
	info := errorInfo(st.Err())
	switch {
	case code != 0:
	case info.GetReason() == "REQUEST_TOO_LARGE":
		code = http.StatusRequestEntityTooLarge
	case info.GetReason() == "MALFORMED_REQUEST" && info.GetMetadata()["header"] != "":
		code = http.StatusUnsupportedMediaType
	case httpStatus[st.Code()] != 0:
		code = httpStatus[st.Code()]
	default:
		code = http.StatusInternalServerError
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
	if c.protocol == protocolREST {
		body, _ := protojson.Marshal(st.Proto())
		c.w.WriteHeader(code)
		_, _ = c.w.Write(body)
		return
	}
	cerr := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Details() {
		if m, ok := d.(proto.Message); ok {
			if detail, err := connect.NewErrorDetail(m); err == nil {
				cerr.AddDetail(detail)
			}
		}
	}
	if c.protocol == protocolGRPCWeb { // in the trailers, as gRPC-Web has them
		_ = connect.NewErrorWriter().Write(c.w, &http.Request{Method: http.MethodPost, Header: c.header}, cerr)
		return
	}
	// A request of no protocol it knows gets the Connect unary shape.
	_ = connect.NewErrorWriter().Write(statusWriter{c.w, code}, &http.Request{}, cerr)
}

// httpStatus is the HTTP status of the codes a refusal has, as the Connect
// protocol gives them.
var httpStatus = map[codes.Code]int{codes.InvalidArgument: 400, codes.Unauthenticated: 401, codes.PermissionDenied: 403,
	codes.NotFound: 404, codes.ResourceExhausted: 429, codes.Unavailable: 503, codes.Internal: 500}

// statusWriter writes code instead of the status it is given.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w statusWriter) WriteHeader(int) { w.ResponseWriter.WriteHeader(w.code) }

func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// trailerStatus is the error a gRPC server answered with, from its
// trailers; nil when it answered without one.
func trailerStatus(h http.Header) error {
	bin, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(h.Get("Grpc-Status-Details-Bin"), "="))
	var st spb.Status
	if err != nil || len(bin) == 0 || proto.Unmarshal(bin, &st) != nil {
		return nil
	}
	return status.ErrorProto(&st)
}

// noRoute answers a request vanguard routed nowhere.
func (h *handler) noRoute(_ http.ResponseWriter, r *http.Request) {
	r.Context().Value(callKey{}).(*call).noRoute(http.StatusNotFound, "")
}

// noRoute answers a request that names no RPC: 404, or 405 with allow when
// its path is a route's with another HTTP method. It is not a call (no
// authentication, no metrics), but it is answered in the API's error shape
// and says what there is.
func (c *call) noRoute(code int, allow string) {
	c.silent = true
	path := c.path
	if len(path) > 200 {
		path = path[:200] + "…"
	}
	routes, grpcCode := strings.Join(c.h.routes, ", "), codes.Unimplemented
	var msg string
	switch {
	case c.protocol != protocolREST && allow != "":
		msg = fmt.Sprintf("%s %s: an RPC's Connect path takes POST only", c.method, path)
	case c.protocol != protocolREST:
		msg = fmt.Sprintf("no RPC at %s; the RPCs are %s", path, strings.Join(slices.Sorted(maps.Keys(c.h.methods)), ", "))
	case allow != "":
		msg = fmt.Sprintf("%s %s: this path takes %s only; the REST routes are %s", c.method, path, allow, routes)
	default:
		grpcCode = codes.NotFound
		msg = fmt.Sprintf("no route matches %s %s; the REST routes are %s; every RPC also takes POST /idem.v1.<Service>/<Method> "+
			"(Connect, gRPC-Web), as docs/http-api.md says", c.method, path, routes)
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
