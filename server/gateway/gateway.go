// Package gateway serves idem's API over HTTP, as docs/http-api.md
// describes: Connect (JSON or binary) and gRPC-Web at
// /idem.v1.<Service>/<Method>, and the REST routes of idem.proto's
// google.api.http rules. vanguard routes each request and decodes it into a
// call that the gRPC server serves in process, through its interceptors;
// the gateway applies the API's rules vanguard does not know and answers
// its refusals in the API's error shape.
package gateway

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/genproto/googleapis/api/annotations"
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
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server/services"
)

// BodyLimits are the largest bodies the API reads for a server with cfg:
// of a unary call, a Complete with a result of MaxResultBytes in base64;
// of a batch call, every byte of BatchMaxBytes in base64 and 1 KiB per item
// for field names and escapes. Both have room for names and \u escapes.
func BodyLimits(cfg services.Config) (unary, batch int64) {
	const headroom = 32 << 10
	cfg = cfg.WithDefaults()
	unary = int64(4*((cfg.MaxResultBytes+2)/3) + headroom)
	return unary, max(unary, int64(4*((cfg.BatchMaxBytes+2)/3)+cfg.BatchMaxItems<<10+headroom))
}

// New serves the IdempotencyService and AdminService of server, a gRPC
// server with cfg, in process. vanguard decodes requests with protobuf's
// JSON mapping, refusing unknown fields. A request the gateway refuses, or
// that vanguard cannot decode, never reaches server: the gateway runs
// intercept, server's interceptor chain, on the refusal itself, with the
// request's credentials, so that it is authenticated, rate limited,
// counted and logged like every call, and a caller without credentials
// learns nothing about its input.
//
// server must serve this handler only: stopping a grpc.Server cuts the
// calls its ServeHTTP has in flight, so the API drains on its own
// http.Server first.
func New(server http.Handler, intercept grpc.UnaryServerInterceptor, cfg services.Config) (http.Handler, error) {
	h := &handler{server: server, intercept: intercept, methods: map[string]*method{}, verbs: map[string]bool{}}
	unary, batch := BodyLimits(cfg)
	var vgServices []*vanguard.Service
	for _, sd := range []protoreflect.ServiceDescriptor{
		idemv1.File_idem_v1_idem_proto.Services().ByName("IdempotencyService"),
		idemv1.File_idem_v1_admin_proto.Services().ByName("AdminService"),
		idemv1.File_idem_v1_resolver_proto.Services().ByName("ResolverService"),
	} {
		vgServices = append(vgServices, vanguard.NewServiceWithSchema(sd, http.HandlerFunc(h.serveCall)))
		for i := range sd.Methods().Len() {
			h.addMethod(sd.Methods().Get(i), unary, batch, cfg.WithDefaults().MaxResultBytes)
		}
	}
	var err error
	h.transcoder, err = vanguard.NewTranscoder(vgServices,
		// vanguard buffers each message whole, the answer too, with one bound
		// for both: as the gRPC API, this one sends every answer whole, and
		// check bounds a request.
		vanguard.WithDefaultServiceOptions(vanguard.WithTargetProtocols(vanguard.ProtocolGRPC), vanguard.WithTargetCodecs(vanguard.CodecProto),
			vanguard.WithNoTargetCompression(), vanguard.WithMaxMessageBufferBytes(math.MaxUint32)),
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			c := vanguard.NewJSONCodec(res)
			c.UnmarshalOptions.DiscardUnknown = strictJSON.DiscardUnknown
			return c
		}),
		// load inflates a Connect or REST body; vanguard a gRPC-Web message.
		vanguard.WithCompression("gzip", func() connect.Compressor { return gzip.NewWriter(io.Discard) },
			func() connect.Decompressor { return &limitedGzip{limit: batch} }),
		vanguard.WithUnknownHandler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			r.Context().Value(callKey{}).(*call).noRoute(http.StatusNotFound)
		})))
	if err != nil {
		return nil, fmt.Errorf("HTTP/JSON API: %w", err)
	}
	return h, nil
}

type handler struct {
	transcoder http.Handler
	server     http.Handler
	intercept  grpc.UnaryServerInterceptor
	methods    map[string]*method // by gRPC path: /idem.v1.IdempotencyService/Claim
	routes     []string           // "POST /v1/…:claim", for the answers to unknown routes
	verbs      map[string]bool    // the REST routes' custom verbs: "claim", …
}

// method is an RPC as the API serves it.
type method struct {
	path      string
	input     protoreflect.MessageType
	limit     int64  // of its body
	limitFlag string // what sets limit, for the message of a body over it
	// Its REST route, from its google.api.http rule: "POST /v1/…:claim",
	// "" for none.
	route, verb string
	segments    []string // of the route's path, without the verb
	body        bool     // body: "*", the fields the path does not name
	inPath      map[protoreflect.Name]bool
}

func (h *handler) addMethod(md protoreflect.MethodDescriptor, unary, batch int64, maxResultBytes int) {
	m := &method{path: "/" + string(md.Parent().FullName()) + "/" + string(md.Name()), limit: unary, inPath: map[protoreflect.Name]bool{},
		limitFlag: fmt.Sprintf("a result of idemd's --max-result-bytes (%d bytes), in JSON", maxResultBytes)}
	m.input, _ = protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if services.IsBatch(m.path) {
		m.limit, m.limitFlag = batch, "a batch of idemd's --batch-max-bytes, in JSON"
	}
	h.methods[m.path] = m
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule.GetPost() != "" {
		m.route = "POST " + rule.GetPost()
	} else if rule.GetGet() != "" {
		m.route = "GET " + rule.GetGet()
	} else {
		return
	}
	h.routes = append(h.routes, m.route)
	m.body = rule.GetBody() == "*"
	_, path, _ := strings.Cut(m.route, " ")
	path, m.verb, _ = strings.Cut(path, ":")
	h.verbs[m.verb] = m.verb != ""
	m.segments = strings.Split(strings.TrimPrefix(path, "/"), "/")
	for _, seg := range m.segments {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			m.inPath[protoreflect.Name(strings.TrimSuffix(name, "}"))] = true
		}
	}
}

// The protocols of a call.
type protocol int

const (
	protocolREST    protocol = iota
	protocolConnect          // Connect unary, JSON or binary
	protocolGRPC             // gRPC or gRPC-Web, which vanguard reads by its own rules but the body's size
)

// call is one request on its way through vanguard, and the ResponseWriter
// vanguard answers it on.
type call struct {
	h        *handler
	w        http.ResponseWriter
	req      *http.Request // as sent; vanguard gets a copy to adapt
	protocol protocol
	data     []byte       // the body, read whole and inflated by load
	body     bytes.Reader // data, for vanguard
	rpc      *method      // once vanguard has routed the request
	tooLarge bool         // the gRPC server answered REQUEST_TOO_LARGE
	// wrote: the answer's status is written; silent: what vanguard writes
	// is dropped.
	wrote, silent bool
}

type callKey struct{}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &call{h: h, w: w, req: r}
	// vanguard gets a copy to adapt: net/http still reads the request it
	// gave, to drain or close what is left of an unread body.
	r = r.Clone(context.WithValue(r.Context(), callKey{}, c))
	r.Body, r.ContentLength = io.NopCloser(&c.body), -1 // load inflates the body
	r.Header.Del("Content-Encoding")
	switch ct := strings.ToLower(r.Header.Get("Content-Type")); {
	case strings.HasPrefix(ct, "application/grpc"):
		c.protocol = protocolGRPC
	case strings.HasPrefix(r.URL.Path, "/idem.v1."):
		c.protocol = protocolConnect
		// A plain HTTP client does not send the header that tells vanguard
		// a call is Connect, not REST.
		codec, _ := checkContentType(ct, true)
		r.Header.Set("Content-Type", "application/"+codec)
		r.Header.Set("Connect-Protocol-Version", "1")
	default:
		// vanguard reads a REST body as JSON whatever it is labelled;
		// check compares the label with the route's.
		r.Header.Del("Content-Type")
		r.Header.Del("Connect-Protocol-Version")
		r.URL.Path, r.URL.RawPath = restPath(r.URL.EscapedPath(), h.verbs), ""
	}
	h.transcoder.ServeHTTP(c, r)
}

// serveCall is where vanguard sends a call it has routed: to the gRPC
// server, unless the API's rules refuse it or vanguard cannot decode it.
func (h *handler) serveCall(w http.ResponseWriter, r *http.Request) {
	c := r.Context().Value(callKey{}).(*call)
	c.rpc = h.methods[r.URL.Path]
	err := c.check()
	if err == nil && c.protocol != protocolGRPC {
		err = c.decode(r)
	}
	if err != nil {
		c.refuse(err)
		return
	}
	h.server.ServeHTTP(w, r)
	// A REST or Connect answer's status is written after this returns.
	var st spb.Status
	bin, _ := base64.RawStdEncoding.DecodeString(strings.TrimRight(w.Header().Get("Grpc-Status-Details-Bin"), "="))
	c.tooLarge = c.protocol != protocolGRPC && proto.Unmarshal(bin, &st) == nil && errorInfo(status.FromProto(&st)).GetReason() == "REQUEST_TOO_LARGE"
}

// decode has vanguard decode a REST or Connect request, the one parse of
// its body, and explains what is wrong with it when vanguard cannot: what
// vanguard writes meanwhile is its refusal, which the gateway answers once
// the interceptors have seen it.
func (c *call) decode(r *http.Request) error {
	c.silent = true
	msg, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if c.silent = err != nil || len(msg) == 0; !c.silent {
		r.Body = io.NopCloser(bytes.NewReader(msg))
		return nil
	}
	inPath := c.rpc.inPath
	if c.protocol != protocolREST {
		inPath = nil
	}
	if err := explain(c.data, c.rpc.input.Descriptor(), inPath); err != nil {
		return err
	}
	return malformed("", "the body does not decode as a %s", c.rpc.input.Descriptor().Name())
}

// check applies the rules of docs/http-api.md that vanguard does not, to a
// call of c.rpc, and reads its body.
func (c *call) check() error {
	m, limit := c.rpc, c.rpc.limit
	if c.protocol == protocolGRPC {
		limit += 5 // a gRPC message's envelope: a flag and a length
	}
	if err := c.load(limit); err != nil || c.protocol == protocolGRPC {
		return err
	}
	// Query parameters name the fields of a GET route that its path does
	// not (Lookup's include_history, ListHeld's namespaces); every other
	// route has its fields in the path or the body.
	if query := c.req.URL.RawQuery; query != "" {
		values, _ := url.ParseQuery(query)
		names := slices.Sorted(maps.Keys(values))
		name := append(names, query)[0] // the query itself when it names nothing
		switch {
		case c.protocol == protocolConnect:
			return unknownField(name, "query parameter", "; a Connect call sends every field in its body")
		case m.body:
			return unknownField(name, "query parameter", "; %s takes none: send the fields in the JSON body", m.route)
		case len(names) == 0:
			return unknownField(name, "query parameter", "; %s takes its fields in the path%s", m.route, m.queryHelp())
		}
		for _, name := range names {
			if !m.inQuery(name) {
				return unknownField(name, "query parameter", "; %s takes its fields in the path%s", m.route, m.queryHelp())
			}
			if err := m.checkQueryValues(name, values[name]); err != nil {
				return err
			}
		}
	}
	_, err := checkContentType(c.req.Header.Get("Content-Type"), c.protocol == protocolConnect)
	switch {
	case err != nil && (m.body || c.protocol == protocolConnect):
		return err
	case c.protocol == protocolConnect:
		return nil
	case !m.body && len(c.data) > 0:
		return malformed("", "%s takes no body; send its fields in the path", m.route)
	case m.body && len(m.inPath) > 0 && mentions(c.data, m.inPath):
		return explain(c.data, m.input.Descriptor(), m.inPath) // vanguard would let the path win
	}
	return m.checkPath(c.req.URL.EscapedPath())
}

// load reads the body whole, inflated, within limit, before vanguard
// decodes it, and keeps it for explain to read again when vanguard cannot.
func (c *call) load(limit int64) error {
	enc := strings.ToLower(strings.TrimSpace(c.req.Header.Get("Content-Encoding")))
	switch {
	case enc != "" && enc != "identity" && enc != "gzip":
		return unsupported("Content-Encoding", fmt.Sprintf("Content-Encoding %q is not one this API reads; send gzip or an uncompressed body", enc))
	case c.req.ContentLength > limit:
		return services.TooLarge("the request body is %d bytes; the limit is %d, %s", c.req.ContentLength, limit, c.rpc.limitFlag)
	}
	raw, err := io.ReadAll(io.LimitReader(c.req.Body, limit+1))
	switch {
	case err != nil: // cut off by the listener's read timeout, or by the client
		return malformed("", "reading the request body failed: %v", err)
	case int64(len(raw)) > limit:
		return services.TooLarge("the request body is over the limit of %d bytes, %s", limit, c.rpc.limitFlag)
	}
	if enc == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err == nil {
			raw, err = io.ReadAll(io.LimitReader(zr, limit+1))
		}
		switch {
		case int64(len(raw)) > limit:
			return services.TooLarge("the request inflates to over %d bytes, the limit: %s", limit, c.rpc.limitFlag)
		case err != nil:
			return malformed("", "the body is not gzip, as its Content-Encoding says: %v", err)
		}
	}
	c.data = raw
	c.body.Reset(raw)
	return nil
}

// inQuery reports whether name, a query parameter, names a field of m's
// request that its path does not: by its JSON name or its proto name.
func (m *method) inQuery(name string) bool {
	fields := m.input.Descriptor().Fields()
	fd := fields.ByJSONName(name)
	if fd == nil {
		fd = fields.ByName(protoreflect.Name(name))
	}
	return fd != nil && !m.inPath[fd.Name()]
}

// checkQueryValues checks the values of the query parameter name, a field
// of m's request, against the field's type, which vanguard would refuse
// without saying which parameter it could not read.
func (m *method) checkQueryValues(name string, values []string) error {
	fields := m.input.Descriptor().Fields()
	fd := fields.ByJSONName(name)
	if fd == nil {
		fd = fields.ByName(protoreflect.Name(name))
	}
	if len(values) > 1 && !fd.IsList() {
		return malformed(name, "query parameter %s is given %d times; it takes one value", name, len(values))
	}
	for _, v := range values {
		var err error
		switch fd.Kind() {
		case protoreflect.BoolKind:
			_, err = strconv.ParseBool(v)
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			_, err = strconv.ParseInt(v, 10, 32)
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			_, err = strconv.ParseInt(v, 10, 64)
		case protoreflect.StringKind:
			if !utf8.ValidString(v) {
				return invalidUTF8(fd, name, v)
			}
		}
		if err != nil {
			return malformed(name, "query parameter %s is %q, which is not a %s", name, limits.Ellipsis(v, 40), fd.Kind())
		}
	}
	return nil
}

// queryHelp lists the query parameters m takes, for the message of one it
// does not: "" when it takes none.
func (m *method) queryHelp() string {
	var names []string
	fields := m.input.Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !m.inPath[fd.Name()] {
			names = append(names, fd.JSONName())
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " and these query parameters: " + strings.Join(names, ", ")
}

// checkPath checks the text of the path's variables, which vanguard passes
// on unchecked.
func (m *method) checkPath(escaped string) error {
	for i, seg := range strings.Split(strings.TrimPrefix(strings.TrimSuffix(escaped, ":"+m.verb), "/"), "/") {
		if i >= len(m.segments) || !strings.HasPrefix(m.segments[i], "{") {
			continue
		}
		if v, err := url.PathUnescape(seg); err == nil && !utf8.ValidString(v) {
			fd := m.input.Descriptor().Fields().ByName(protoreflect.Name(strings.Trim(m.segments[i], "{}")))
			return invalidUTF8(fd, string(fd.Name()), v)
		}
	}
	return nil
}

// mentions reports whether body may name a field of names: by the name in
// quotes, or in a name escaped with \u, which only explain can read.
func mentions(body []byte, names map[protoreflect.Name]bool) bool {
	for name := range names {
		if bytes.Contains(body, []byte(`"`+name+`"`)) {
			return true
		}
	}
	return bytes.Contains(body, []byte(`\u`))
}

// checkContentType checks a request's Content-Type, in any case and with
// any parameters, and returns its codec: a Connect call sends JSON or
// binary protobuf; a REST route reads its body as JSON, labelled so, or as
// a form (what curl -d sends), or not at all.
func checkContentType(contentType string, connectCall bool) (string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	charsetOK := params["charset"] == "" || strings.EqualFold(params["charset"], "utf-8")
	switch {
	case mt == "application/proto" && connectCall:
		return vanguard.CodecProto, nil
	case err == nil && charsetOK && (mt == "application/json" || !connectCall && mt == "application/x-www-form-urlencoded"), contentType == "" && !connectCall:
		return vanguard.CodecJSON, nil
	case connectCall:
		return vanguard.CodecJSON, unsupported("Content-Type", fmt.Sprintf("Content-Type %q is not one this API reads; "+
			"send application/json (the request as JSON) or application/proto (binary protobuf)", contentType))
	}
	return vanguard.CodecJSON, unsupported("Content-Type", fmt.Sprintf("Content-Type %q is not one this API reads; "+
		"send the body as UTF-8 JSON with Content-Type: application/json", contentType))
}

// restPath prepares an escaped REST path for vanguard's router, which takes
// the custom verb after the first ':' of the last segment. A key may hold
// ':' unescaped, so every ':' of the last segment but the one before a
// known verb is escaped; and the path is matched as sent, so that %2F stays
// inside its segment.
func restPath(escaped string, verbs map[string]bool) string {
	i := strings.LastIndexByte(escaped, '/')
	last, verb := escaped[i+1:], ""
	if j := strings.LastIndexByte(last, ':'); j >= 0 && verbs[last[j+1:]] {
		last, verb = last[:j], last[j:]
	}
	return escaped[:i+1] + strings.ReplaceAll(last, ":", "%3A") + verb
}

// limitedGzip inflates a gRPC-Web message no further than limit, so that a
// small message cannot make the server buffer a huge one.
type limitedGzip struct {
	gzip.Reader
	limit, n int64
}

func (g *limitedGzip) Reset(r io.Reader) error {
	g.n = 0
	return g.Reader.Reset(r)
}

func (g *limitedGzip) Read(p []byte) (int, error) {
	n, err := g.Reader.Read(p)
	if g.n += int64(n); g.n > g.limit {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request inflates to over %d bytes, the limit", g.limit))
	}
	return n, err
}

func (c *call) Header() http.Header { return c.w.Header() }

// WriteHeader passes the gRPC server's answer on, 413 for
// REQUEST_TOO_LARGE, and drops what vanguard writes for a call the gateway
// answers itself.
func (c *call) WriteHeader(code int) {
	switch {
	case c.wrote:
		return
	case c.silent:
	case code == http.StatusMethodNotAllowed && c.rpc == nil:
		c.noRoute(code)
	case c.tooLarge:
		c.w.WriteHeader(http.StatusRequestEntityTooLarge)
	default:
		c.w.WriteHeader(code)
	}
	c.wrote = true
}

func (c *call) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	if c.silent {
		return len(p), nil
	}
	return c.w.Write(p)
}

// Flush is what vanguard needs of a ResponseWriter.
func (c *call) Flush() {
	if f, ok := c.w.(http.Flusher); ok && c.wrote && !c.silent {
		f.Flush()
	}
}

// refuse answers c with refusal once the gRPC server's interceptors
// have run on it, as on any call of its RPC, with the request's headers as
// metadata and its TLS state as the peer: so a caller without credentials
// gets UNAUTHENTICATED, and one over its rate limit RATE_LIMITED.
func (c *call) refuse(refusal error) {
	c.silent = true
	clear(c.w.Header()) // what the server or vanguard set for an answer not sent
	md := metadata.MD{}
	for k, v := range c.req.Header {
		md[strings.ToLower(k)] = v
	}
	addr, _ := netip.ParseAddrPort(c.req.RemoteAddr)
	p := &peer.Peer{Addr: net.TCPAddrFromAddrPort(addr)}
	if c.req.TLS != nil {
		p.AuthInfo = credentials.TLSInfo{State: *c.req.TLS, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	}
	ctx := grpc.NewContextWithServerTransportStream(peer.NewContext(metadata.NewIncomingContext(c.req.Context(), md), p),
		headerStream{c.rpc.path, c.w.Header()})
	_, err := c.h.intercept(ctx, c.rpc.input.New().Interface(), &grpc.UnaryServerInfo{FullMethod: c.rpc.path},
		func(context.Context, any) (any, error) { return nil, refusal })
	c.writeError(status.Convert(err), 0)
}

// headerStream puts the headers the interceptors set on a refused call
// (Retry-After) in its answer, as the call's gRPC stream would.
type headerStream struct {
	method string
	header http.Header
}

func (s headerStream) Method() string { return s.method }
func (s headerStream) SetHeader(md metadata.MD) error {
	for k, v := range md {
		s.header[http.CanonicalHeaderKey(k)] = v
	}
	return nil
}
func (s headerStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s headerStream) SetTrailer(metadata.MD) error    { return nil }

// noRoute answers a request that names no RPC: 404, or 405 with vanguard's
// Allow when its path is a route's with another HTTP method. It is not a
// call (no authentication, no metrics), but it is answered in the API's
// error shape and says what there is.
func (c *call) noRoute(code int) {
	c.silent = true
	msg := fmt.Sprintf("%s %s names no RPC", c.req.Method, limits.Ellipsis(c.req.URL.EscapedPath(), 200))
	if allow := c.w.Header().Get("Allow"); allow != "" {
		msg += "; this path takes " + allow + " only"
	}
	grpcCode := codes.Unimplemented
	if code == http.StatusNotFound && c.protocol == protocolREST {
		grpcCode = codes.NotFound
	}
	c.writeError(status.Newf(grpcCode, "%s; the REST routes are %s; every RPC also takes POST at its Connect and gRPC-Web path, %s, as docs/http-api.md says",
		msg, strings.Join(c.h.routes, ", "), strings.Join(slices.Sorted(maps.Keys(c.h.methods)), ", ")), code)
}

// writeError answers with st in the API's error shape, a google.rpc.Status
// on a REST route and else what connect-go writes for the request's
// protocol, with the HTTP status code, or st's own for 0: 413 for
// REQUEST_TOO_LARGE, 415 for a header the API does not read, else that of
// its code.
func (c *call) writeError(st *status.Status, code int) {
	switch info := errorInfo(st); {
	case code != 0:
	case info.GetReason() == "REQUEST_TOO_LARGE":
		code = http.StatusRequestEntityTooLarge
	case info.GetMetadata()["header"] != "":
		code = http.StatusUnsupportedMediaType
	default:
		code = cmp.Or(httpStatus[st.Code()], http.StatusInternalServerError)
	}
	c.w.Header().Set("X-Content-Type-Options", "nosniff")
	if code == http.StatusRequestEntityTooLarge && c.req.ProtoMajor == 1 {
		// The rest of the body is not worth reading to reuse the
		// connection. (HTTP/2 resets the stream instead.)
		c.w.Header().Set("Connection", "close")
	}
	if c.protocol == protocolREST {
		body, _ := protojson.Marshal(st.Proto())
		c.w.Header().Set("Content-Type", "application/json")
		c.w.WriteHeader(code)
		_, _ = c.w.Write(body)
		return
	}
	cerr := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Proto().GetDetails() {
		detail, _ := connect.NewErrorDetail(d) // never fails for an Any
		cerr.AddDetail(detail)
	}
	req := c.req
	if c.protocol != protocolGRPC {
		req = &http.Request{} // the Connect unary shape, whatever the request says
	}
	_ = connect.NewErrorWriter().Write(statusWriter{c.w, code}, req, cerr)
}

// httpStatus is the HTTP status of the codes a refusal has, as the Connect
// protocol gives them.
var httpStatus = map[codes.Code]int{codes.InvalidArgument: 400, codes.Unauthenticated: 401, codes.PermissionDenied: 403,
	codes.NotFound: 404, codes.ResourceExhausted: 429, codes.Unavailable: 503, codes.Internal: 500}

// statusWriter writes code in place of a Connect error's status; a gRPC or
// gRPC-Web error is 200, its status in the trailers.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w statusWriter) WriteHeader(code int) {
	if code != http.StatusOK {
		code = w.code
	}
	w.ResponseWriter.WriteHeader(code)
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}
