package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// jsonHeadroom is what a JSON request carries besides its base64 result:
// field names, a key or an error string escaped as \uXXXX (six bytes for
// each of 4 KiB), with room to spare.
const jsonHeadroom = 32 << 10

// JSONBodyLimit is the largest body of a unary call that the HTTP/JSON API
// of a server with cfg reads (zero fields take their defaults): the largest
// valid one, a Complete with a result of MaxResultBytes (a result travels in
// JSON as base64). A batch call's body may be larger (batchJSONBodyLimit);
// a unary call's is not read that far, so that a listener full of unary
// calls holds no more memory than they can need.
func JSONBodyLimit(cfg Config) int64 {
	cfg = cfg.withDefaults()
	return int64(4*((cfg.MaxResultBytes+2)/3) + jsonHeadroom)
}

// NewJSONHandler serves the IdempotencyService and AdminService registered
// on srv (by NewGRPCServer, with svc) over HTTP: the Connect protocol (JSON
// or binary) and gRPC-Web for every RPC at /idem.v1.<Service>/<Method>, and
// the REST routes of the google.api.http annotations in idem.proto. vanguard
// transcodes each request into a gRPC call that srv handles in process
// (grpc.Server.ServeHTTP), so it runs the same service and the same
// interceptor chain — authentication from the Authorization header or the
// client certificate, tenants, rate limits, metrics, logging, recovery —
// and its errors carry the same codes, messages and ErrorInfo.
//
// srv must serve this handler only, not a listener of its own: stopping a
// grpc.Server cuts the calls ServeHTTP has in flight, so the JSON API
// drains on its own server (http.Server.Shutdown) and stops srv after.
//
// The handler reads a Connect or REST request before vanguard does, by the
// rules of docs/http-api.md: its Content-Type, its size (a body over
// JSONBodyLimit, sent or inflated, is refused with 413), and its JSON,
// strictly (decodeJSONRequest). A request it refuses still reaches srv, as
// a call of its method that answers the refusal once it is authenticated
// (answerJSONRefusal): so the refusal is counted, logged and rate limited
// like every call, and a caller without credentials learns nothing about
// its input.
func NewJSONHandler(svc *Service, srv *grpc.Server) (http.Handler, error) {
	unaryLimit := JSONBodyLimit(svc.cfg)
	batchLimit := max(unaryLimit, batchJSONBodyLimit(svc.cfg.BatchMaxBytes, svc.cfg.BatchMaxItems))
	// vanguard reads what the handler does not (gRPC-Web) with one bound
	// for every method: the largest.
	limit := batchLimit
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
		// What the handler has not read itself (gRPC-Web with JSON) is
		// decoded as strictly: a field the message lacks is an error.
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			c := vanguard.NewJSONCodec(res)
			c.UnmarshalOptions.DiscardUnknown = false
			return c
		}),
		vanguard.WithCompression("gzip",
			func() connect.Compressor { return gzip.NewWriter(io.Discard) },
			func() connect.Decompressor { return &limitedGzipReader{limit: limit} }))
	if err != nil {
		return nil, fmt.Errorf("HTTP/JSON API: %w", err)
	}
	h := &jsonHandler{transcoder: transcoder, unaryLimit: unaryLimit, batchLimit: batchLimit, batchMaxBytes: svc.cfg.BatchMaxBytes, methods: map[string]protoreflect.MethodDescriptor{}}
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			h.methods["/"+string(sd.FullName())+"/"+string(md.Name())] = md
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			if rule == nil {
				continue
			}
			route, err := newRESTRoute(md, rule)
			if err != nil {
				return nil, fmt.Errorf("HTTP/JSON API: %s: %w", md.FullName(), err)
			}
			h.routes = append(h.routes, route)
		}
	}
	h.verbs = map[string]bool{}
	for _, r := range h.routes {
		if r.verb != "" {
			h.verbs[r.verb] = true
		}
	}
	return h, nil
}

type jsonHandler struct {
	transcoder http.Handler
	// unaryLimit and batchLimit bound the body of a unary call and of a
	// batch call (limitFor).
	unaryLimit, batchLimit int64
	// batchMaxBytes bounds a batch call's request as protobuf: one over it
	// is refused with 413, as a body over limit is.
	batchMaxBytes int
	methods       map[string]protoreflect.MethodDescriptor // by Connect path: /idem.v1.IdempotencyService/Claim
	routes        []*restRoute
	verbs         map[string]bool // the custom verbs of the REST routes: "claim", …
}

func (h *jsonHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/idem.v1.") {
		h.serveConnect(w, r)
		return
	}
	h.serveREST(w, r)
}

// serveConnect serves a request for an RPC by its Connect path. gRPC and
// gRPC-Web go to vanguard as they are; what is not a POST of a known RPC
// is answered by noRoute.
func (h *jsonHandler) serveConnect(w http.ResponseWriter, r *http.Request) {
	md := h.methods[r.URL.Path]
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(strings.ToLower(ct), "application/grpc") {
		h.transcoder.ServeHTTP(w, r)
		return
	}
	if md == nil || r.Method != http.MethodPost {
		h.noRoute(w, r)
		return
	}
	call := &jsonCall{method: md}
	codec, err := connectCodec(ct)
	if err != nil {
		h.refuse(w, r, call, err, http.StatusUnsupportedMediaType)
		return
	}
	if q := queryNames(r.URL.RawQuery); len(q) > 0 {
		h.refuse(w, r, call, unknownField(q[0], "query parameter", "; a Connect call sends every field in its body"), 0)
		return
	}
	body, status, err := h.readBody(r, h.limitFor(md))
	if err != nil {
		h.refuse(w, r, call, err, status)
		return
	}
	size := len(body)
	if codec == vanguard.CodecJSON {
		msg, err := decodeJSONRequest(body, md.Input(), nil)
		if err != nil {
			h.refuse(w, r, call, err, 0)
			return
		}
		size = proto.Size(msg)
	}
	if err := h.checkBatch(md, size); err != nil {
		h.refuse(w, r, call, err, http.StatusRequestEntityTooLarge)
		return
	}
	r.Header.Set("Content-Type", "application/"+codec)
	// A plain HTTP client does not send the header that tells vanguard a
	// call is Connect, not REST.
	r.Header.Set("Connect-Protocol-Version", "1")
	r.Header.Del("Content-Encoding") // readBody inflated it
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	h.transcoder.ServeHTTP(w, r)
}

// serveREST serves a request on a REST route; noRoute answers one that
// matches none.
func (h *jsonHandler) serveREST(w http.ResponseWriter, r *http.Request) {
	route, vars := h.match(r.URL.EscapedPath(), r.Method)
	if route == nil {
		h.noRoute(w, r)
		return
	}
	call := &jsonCall{method: route.method, route: route}
	for _, v := range vars {
		if !utf8.ValidString(v.value) {
			h.refuse(w, r, call, invalidUTF8(v.field, string(v.field.Name()), v.value), 0)
			return
		}
	}
	for _, name := range queryNames(r.URL.RawQuery) {
		if !route.query[name] {
			h.refuse(w, r, call, unknownField(name, "query parameter", "; %s", route.queryRule()), 0)
			return
		}
	}
	if route.body {
		if err := restContentType(r.Header.Get("Content-Type")); err != nil {
			h.refuse(w, r, call, err, http.StatusUnsupportedMediaType)
			return
		}
	}
	body, status, err := h.readBody(r, h.limitFor(route.method))
	if err != nil {
		h.refuse(w, r, call, err, status)
		return
	}
	switch {
	case !route.body && len(body) > 0:
		h.refuse(w, r, call, malformed("", "%s %s takes no body; send its fields in the path", route.httpMethod, route.template), 0)
		return
	case !route.body:
		r.Header.Del("Content-Type")
	default:
		if len(body) == 0 {
			body = []byte("{}") // a POST without a body sets no field
		}
		msg, err := decodeJSONRequest(body, route.method.Input(), route.inPath)
		if err != nil {
			h.refuse(w, r, call, err, 0)
			return
		}
		if err := h.checkBatch(route.method, proto.Size(msg)); err != nil {
			h.refuse(w, r, call, err, http.StatusRequestEntityTooLarge)
			return
		}
		r.Header.Set("Content-Type", "application/json")
	}
	r.Header.Del("Connect-Protocol-Version") // REST, whatever a client sent
	r.Header.Del("Content-Encoding")
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	r.URL.Path, r.URL.RawPath = restPath(r.URL.EscapedPath(), h.verbs), ""
	h.transcoder.ServeHTTP(w, r)
}

// isBatch reports whether md is one of the batch calls.
func isBatch(md protoreflect.MethodDescriptor) bool {
	return batchMethods["/"+string(md.Parent().FullName())+"/"+string(md.Name())]
}

// limitFor is the largest body the handler reads for a call of md.
func (h *jsonHandler) limitFor(md protoreflect.MethodDescriptor) int64 {
	if isBatch(md) {
		return h.batchLimit
	}
	return h.unaryLimit
}

// checkBatch refuses a request of md, size bytes as protobuf, when md is a
// batch call and size is over --batch-max-bytes: the server would refuse it
// REQUEST_TOO_LARGE too, and over HTTP that is 413, whichever bound it broke.
func (h *jsonHandler) checkBatch(md protoreflect.MethodDescriptor, size int) error {
	if !isBatch(md) {
		return nil
	}
	return checkBatchBytes(size, h.batchMaxBytes)
}

// connectCodec is the codec of a Connect unary call's Content-Type, in any
// case and with any parameters: "json" or "proto".
func connectCodec(contentType string) (string, error) {
	const want = "send Content-Type: application/json (the request as JSON) or application/proto (binary protobuf)"
	if contentType == "" {
		return "", unsupportedMedia("Content-Type", "the request has no Content-Type; "+want)
	}
	mt, params, err := mime.ParseMediaType(contentType)
	switch {
	case err != nil:
		return "", unsupportedMedia("Content-Type", fmt.Sprintf("Content-Type %q does not parse (%v); %s", contentType, err, want))
	case mt == "application/json":
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return "", unsupportedMedia("Content-Type", fmt.Sprintf("Content-Type %q: the body must be UTF-8; send charset=utf-8 or no charset", contentType))
		}
		return vanguard.CodecJSON, nil
	case mt == "application/proto":
		return vanguard.CodecProto, nil
	}
	return "", unsupportedMedia("Content-Type", fmt.Sprintf("Content-Type %q is not one this API reads; %s", contentType, want))
}

// restContentType checks the Content-Type of a REST request with a body:
// JSON, or none or a form's (what curl -d sends), which the body is read
// as JSON regardless of.
func restContentType(contentType string) error {
	if contentType == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err == nil && (mt == "application/json" || mt == "application/x-www-form-urlencoded") {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return unsupportedMedia("Content-Type", fmt.Sprintf("Content-Type %q is not one this route reads; send the body as UTF-8 JSON with Content-Type: application/json", contentType))
}

// unsupportedMedia is MALFORMED_REQUEST naming the header, for the 415 of a
// Content-Type or Content-Encoding the API does not read.
func unsupportedMedia(header, msg string) error {
	return newError(codes.InvalidArgument, idemv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST, msg, map[string]string{"header": header})
}

// tooLarge is RESOURCE_EXHAUSTED / REQUEST_TOO_LARGE, answered with 413.
func tooLarge(format string, args ...any) error {
	return newError(codes.ResourceExhausted, idemv1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE, fmt.Sprintf(format, args...), nil)
}

// readBody reads r's body, inflated when its Content-Encoding is gzip, up
// to limit. On error, status is the HTTP status of the refusal (0: the
// status of its code).
func (h *jsonHandler) readBody(r *http.Request, limit int64) ([]byte, int, error) {
	if r.ContentLength > limit {
		return nil, http.StatusRequestEntityTooLarge, tooLarge("the request body is %d bytes; the limit is %d", r.ContentLength, limit)
	}
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	if enc != "" && enc != "identity" && enc != "gzip" {
		return nil, http.StatusUnsupportedMediaType, unsupportedMedia("Content-Encoding",
			fmt.Sprintf("Content-Encoding %q is not one this API reads; send gzip or an uncompressed body", enc))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		// Cut off by the listener's read timeout, or by the client.
		return nil, 0, malformed("", "reading the request body failed: %v", err)
	}
	if int64(len(body)) > limit {
		return nil, http.StatusRequestEntityTooLarge, tooLarge("the request body is over the limit of %d bytes", limit)
	}
	if enc != "gzip" {
		return body, 0, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, 0, malformed("", "the body is not gzip, as its Content-Encoding says: %v", err)
	}
	inflated, err := io.ReadAll(io.LimitReader(zr, limit+1))
	switch {
	case int64(len(inflated)) > limit:
		return nil, http.StatusRequestEntityTooLarge, tooLarge("the request inflates to over %d bytes, the limit", limit)
	case err != nil:
		return nil, 0, malformed("", "the body is not gzip, as its Content-Encoding says: %v", err)
	}
	return inflated, 0, nil
}

// queryNames are the distinct parameter names of a raw query, sorted.
func queryNames(rawQuery string) []string {
	if rawQuery == "" {
		return nil
	}
	values, err := url.ParseQuery(rawQuery)
	if err != nil && len(values) == 0 {
		return []string{rawQuery}
	}
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// jsonCall is the RPC a Connect or REST request calls.
type jsonCall struct {
	method protoreflect.MethodDescriptor
	route  *restRoute // nil for Connect
}

// jsonRefusal is a request the HTTP/JSON API refused, in the context of
// the call that carries it to the gRPC server.
type jsonRefusal struct {
	err      error
	answered atomic.Bool // answerJSONRefusal returned err
}

type jsonRefusalKey struct{}

// answerJSONRefusal answers a call that carries the HTTP/JSON API's
// refusal of its request with that refusal. It runs after authentication
// and the rate limit, so a caller without credentials gets
// UNAUTHENTICATED, and before the service, which never sees the call.
func answerJSONRefusal(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if ref, ok := ctx.Value(jsonRefusalKey{}).(*jsonRefusal); ok {
		ref.answered.Store(true)
		return nil, ref.err
	}
	return handler(ctx, req)
}

// refuse answers r with err: it sends the gRPC server a call of r's method
// with an empty request and err in its context, whose answer vanguard
// writes in r's protocol (a Connect error, or a google.rpc.Status for
// REST). status, when not 0, is the HTTP status of that answer when it is
// err (413, 415) rather than an earlier refusal such as UNAUTHENTICATED.
func (h *jsonHandler) refuse(w http.ResponseWriter, r *http.Request, call *jsonCall, err error, status int) {
	ref := &jsonRefusal{err: err}
	req := r.Clone(context.WithValue(r.Context(), jsonRefusalKey{}, ref))
	req.Header.Del("Content-Encoding")
	req.Header.Del("Content-Length")
	req.URL.RawPath, req.URL.RawQuery = "", ""
	body := "{}"
	if call.route == nil {
		req.Method = http.MethodPost
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
	} else {
		req.Method, req.URL.Path = call.route.httpMethod, call.route.placeholder
		req.Header.Del("Connect-Protocol-Version")
		if call.route.body {
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Del("Content-Type")
			body = ""
		}
	}
	req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
	h.transcoder.ServeHTTP(&refusalWriter{ResponseWriter: w, ref: ref, status: status, http1: r.ProtoMajor == 1}, req)
}

// refusalWriter gives the answer of a refused request its HTTP status.
type refusalWriter struct {
	http.ResponseWriter
	ref         *jsonRefusal
	status      int
	http1       bool
	wroteHeader bool
}

func (w *refusalWriter) WriteHeader(code int) {
	if !w.wroteHeader && w.status != 0 && w.ref.answered.Load() {
		code = w.status
		if code == http.StatusRequestEntityTooLarge && w.http1 {
			// The rest of the body is not worth reading to reuse the
			// connection. (HTTP/2 resets the stream instead.)
			w.Header().Set("Connection", "close")
		}
	}
	w.wroteHeader = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *refusalWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush is what vanguard needs of a ResponseWriter.
func (w *refusalWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// noRoute answers a request that names no RPC: 404, or 405 with Allow
// when its path is an RPC's with another HTTP method. It is not a call (no
// authentication, no metrics), but it is answered in the API's error shape
// — a Connect error on a Connect path, a google.rpc.Status elsewhere — and
// says what there is.
func (h *jsonHandler) noRoute(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	if len(path) > 200 {
		path = path[:200] + "…"
	}
	connectPath := strings.HasPrefix(r.URL.Path, "/idem.v1.")
	var allow []string
	switch {
	case connectPath && h.methods[r.URL.Path] != nil:
		allow = []string{http.MethodPost}
	case !connectPath:
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if route, _ := h.match(r.URL.EscapedPath(), m); route != nil && m != r.Method {
				allow = append(allow, m)
			}
		}
	}
	httpStatus, code := http.StatusNotFound, codes.NotFound
	routes := make([]string, len(h.routes))
	for i, route := range h.routes {
		routes[i] = route.httpMethod + " " + route.template
	}
	restRoutes := "the REST routes are " + strings.Join(routes, ", ")
	var msg string
	switch {
	case len(allow) > 0 && connectPath:
		httpStatus, code = http.StatusMethodNotAllowed, codes.Unimplemented
		msg = fmt.Sprintf("%s %s: an RPC's Connect path takes POST only", r.Method, path)
	case len(allow) > 0:
		httpStatus, code = http.StatusMethodNotAllowed, codes.Unimplemented
		route, _ := h.match(r.URL.EscapedPath(), allow[0])
		msg = fmt.Sprintf("%s %s: this path takes %s only (%s %s, %s); %s", r.Method, path, strings.Join(allow, " or "),
			route.httpMethod, route.template, route.method.Name(), restRoutes)
	case connectPath:
		code = codes.Unimplemented
		msg = fmt.Sprintf("no RPC at %s; the RPCs are %s", path, strings.Join(slices.Sorted(maps.Keys(h.methods)), ", "))
	default:
		msg = fmt.Sprintf("no route matches %s %s; %s; every RPC also takes POST /idem.v1.<Service>/<Method> "+
			"(Connect, gRPC-Web), as docs/http-api.md says", r.Method, path, restRoutes)
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	var body []byte
	if connectPath {
		body, _ = json.Marshal(map[string]string{"code": connect.Code(code).String(), "message": msg})
	} else {
		body, _ = protojson.Marshal(status.New(code, msg).Proto())
	}
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}

// restRoute is the REST route of one RPC, from its google.api.http rule.
type restRoute struct {
	method     protoreflect.MethodDescriptor
	httpMethod string
	template   string // as the rule writes it: /v1/namespaces/{namespace}/records/{key}:claim
	segments   []string
	vars       map[int]protoreflect.FieldDescriptor // the variable segments, by index
	verb       string                               // the custom verb, "" for none
	body       bool                                 // body: "*", the request's fields not in the path
	inPath     map[protoreflect.Name]bool
	query      map[string]bool // the fields a query parameter may set (JSON and proto names)
	// placeholder is the route's path with every variable "_", for the
	// request of a refusal, which no handler reads.
	placeholder string
}

// newRESTRoute reads md's rule. idem's routes are simple, and so is the
// reading: literal segments and single-segment {field} variables of
// top-level fields, a custom verb, and a body of "*" or none.
func newRESTRoute(md protoreflect.MethodDescriptor, rule *annotations.HttpRule) (*restRoute, error) {
	r := &restRoute{method: md, vars: map[int]protoreflect.FieldDescriptor{}, inPath: map[protoreflect.Name]bool{}, query: map[string]bool{}}
	switch {
	case rule.GetPost() != "":
		r.httpMethod, r.template = http.MethodPost, rule.GetPost()
	case rule.GetGet() != "":
		r.httpMethod, r.template = http.MethodGet, rule.GetGet()
	default:
		return nil, errors.New("only GET and POST routes are supported")
	}
	if len(rule.GetAdditionalBindings()) > 0 {
		return nil, errors.New("additional_bindings are not supported")
	}
	switch rule.GetBody() {
	case "*":
		r.body = true
	case "":
	default:
		return nil, fmt.Errorf("body %q is not supported: only \"*\" or none", rule.GetBody())
	}
	path := r.template
	if j := strings.LastIndexByte(path, ':'); j > strings.LastIndexByte(path, '}') {
		path, r.verb = path[:j], path[j+1:]
	}
	r.segments = strings.Split(strings.TrimPrefix(path, "/"), "/")
	placeholder := make([]string, len(r.segments))
	for i, seg := range r.segments {
		placeholder[i] = seg
		if !strings.HasPrefix(seg, "{") {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(seg, "{"), "}")
		fd := md.Input().Fields().ByName(protoreflect.Name(name))
		if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || !strings.HasSuffix(seg, "}") {
			return nil, fmt.Errorf("path variable %s: only {field} of a string field of the request is supported", seg)
		}
		r.vars[i], r.inPath[fd.Name()] = fd, true
		placeholder[i] = "_"
	}
	r.placeholder = "/" + strings.Join(placeholder, "/")
	if r.verb != "" {
		r.placeholder += ":" + r.verb
	}
	if !r.body {
		for i := range md.Input().Fields().Len() {
			if fd := md.Input().Fields().Get(i); !r.inPath[fd.Name()] {
				r.query[fd.JSONName()], r.query[string(fd.Name())] = true, true
			}
		}
	}
	return r, nil
}

// queryRule says what query parameters the route takes.
func (r *restRoute) queryRule() string {
	if len(r.query) == 0 {
		if r.body {
			return fmt.Sprintf("%s %s takes none: send the fields in the JSON body", r.httpMethod, r.template)
		}
		return fmt.Sprintf("%s %s takes none", r.httpMethod, r.template)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range r.query {
			if !yield(n) {
				return
			}
		}
	})
	return fmt.Sprintf("%s %s takes %s", r.httpMethod, r.template, strings.Join(names, ", "))
}

// pathVar is the value of a path variable.
type pathVar struct {
	field protoreflect.FieldDescriptor
	value string
}

// match finds the route of a request with the escaped path and the HTTP
// method, and the values of the path's variables. The path is matched as
// sent, escaped: %2F inside a key stays in its segment. A custom verb is
// the text after the last ':' of the last segment when it is one of the
// routes' verbs (restPath).
func (h *jsonHandler) match(escaped, method string) (*restRoute, []pathVar) {
	verb := ""
	if i := strings.LastIndexByte(escaped, '/'); i >= 0 {
		last := escaped[i+1:]
		if j := strings.LastIndexByte(last, ':'); j >= 0 && h.verbs[last[j+1:]] {
			verb, escaped = last[j+1:], escaped[:i+1]+last[:j]
		}
	}
	segments := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	for _, route := range h.routes {
		if route.httpMethod != method || route.verb != verb || len(route.segments) != len(segments) {
			continue
		}
		vars, ok := route.bind(segments)
		if ok {
			return route, vars
		}
	}
	return nil, nil
}

func (r *restRoute) bind(segments []string) ([]pathVar, bool) {
	var vars []pathVar
	for i, seg := range segments {
		fd, isVar := r.vars[i]
		if !isVar {
			if seg != r.segments[i] {
				return nil, false
			}
			continue
		}
		value, err := url.PathUnescape(seg)
		if err != nil || value == "" {
			return nil, false
		}
		vars = append(vars, pathVar{field: fd, value: value})
	}
	return vars, true
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

// limitedGzipReader inflates a gRPC-Web message compressed with gzip and
// fails once it has produced more than limit bytes, so that a small
// compressed message cannot make the server buffer a huge one. (Connect and
// REST bodies are inflated by readBody.)
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
