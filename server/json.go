package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// jsonHeadroom is what a JSON request carries besides its base64 result:
// field names, a key or an error string escaped as \uXXXX (six bytes for
// each of 4 KiB), with room to spare.
const jsonHeadroom = 32 << 10

// JSONBodyLimit is the largest body of a unary call that the HTTP/JSON API
// of a server with cfg reads (zero fields take their defaults): a Complete
// with a result of MaxResultBytes, in base64. A batch call's body may be
// larger (batchJSONBodyLimit), so that a listener full of unary calls holds
// no more memory than they can need.
func JSONBodyLimit(cfg Config) int64 {
	cfg = cfg.withDefaults()
	return int64(4*((cfg.MaxResultBytes+2)/3) + jsonHeadroom)
}

// NewJSONHandler serves the IdempotencyService and AdminService of srv over
// HTTP, as docs/http-api.md describes: Connect (JSON or binary) and gRPC-Web
// at /idem.v1.<Service>/<Method>, and the REST routes of idem.proto's
// google.api.http rules. vanguard routes each request and decodes it, with
// protobuf's JSON mapping and no unknown field allowed, into a call that
// srv serves in process, through its interceptors.
//
// The handler adds the API's own rules, which vanguard does not know:
// Content-Type and Content-Encoding, body limits, query parameters, the
// text of a key in the path. A request it refuses, or that vanguard cannot
// decode, never reaches srv: the handler runs srv's interceptors itself
// (intercept) on the refusal, with the request's credentials, so that it is
// authenticated, rate limited, counted and logged like every call, and a
// caller without credentials learns nothing about its input.
//
// srv must serve this handler only: stopping a grpc.Server cuts the calls
// its ServeHTTP has in flight, so the JSON API drains on its own server.
func NewJSONHandler(svc *Service, srv *grpc.Server, logger *slog.Logger) (http.Handler, error) {
	h := &jsonHandler{server: srv, intercept: chainUnary(unaryInterceptors(svc, logger)), methods: map[string]*jsonMethod{}, verbs: map[string]bool{},
		unaryLimit: JSONBodyLimit(svc.cfg)}
	h.batchLimit = max(h.unaryLimit, batchJSONBodyLimit(svc.cfg.BatchMaxBytes, svc.cfg.BatchMaxItems))
	var services []*vanguard.Service
	for _, sd := range []protoreflect.ServiceDescriptor{
		idemv1.File_idem_v1_idem_proto.Services().ByName("IdempotencyService"),
		idemv1.File_idem_v1_admin_proto.Services().ByName("AdminService"),
	} {
		services = append(services, vanguard.NewServiceWithSchema(sd, http.HandlerFunc(h.serveCall),
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC), vanguard.WithTargetCodecs(vanguard.CodecProto),
			vanguard.WithNoTargetCompression(), vanguard.WithMaxMessageBufferBytes(uint32(h.batchLimit))))
		for i := range sd.Methods().Len() {
			h.addMethod(sd.Methods().Get(i))
		}
	}
	transcoder, err := vanguard.NewTranscoder(services,
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			c := vanguard.NewJSONCodec(res)
			c.UnmarshalOptions.DiscardUnknown = false
			return c
		}),
		// gRPC-Web's compressed messages; Connect and REST bodies are
		// inflated by jsonBody, with the limit of their call.
		vanguard.WithCompression("gzip", func() connect.Compressor { return gzip.NewWriter(io.Discard) },
			func() connect.Decompressor { return &limitedGzipReader{limit: h.batchLimit} }),
		vanguard.WithUnknownHandler(http.HandlerFunc(h.noRoute)))
	if err != nil {
		return nil, fmt.Errorf("HTTP/JSON API: %w", err)
	}
	h.transcoder = transcoder
	return h, nil
}

type jsonHandler struct {
	transcoder http.Handler
	server     http.Handler // the gRPC server, in process
	// intercept is the server's interceptor chain, for the calls the
	// handler refuses before they reach it.
	intercept              grpc.UnaryServerInterceptor
	methods                map[string]*jsonMethod // by gRPC path: /idem.v1.IdempotencyService/Claim
	routes                 []string               // "POST /v1/…:claim", for the answers to unknown routes
	verbs                  map[string]bool        // the REST routes' custom verbs: "claim", …
	unaryLimit, batchLimit int64
}

// jsonMethod is an RPC as the HTTP/JSON API serves it.
type jsonMethod struct {
	path  string
	input protoreflect.MessageDescriptor
	limit int64 // of its body
	// The REST route, from its google.api.http rule; "" when it has none.
	httpMethod, template string
	segments             []string // of the template's path, without the custom verb
	body                 bool     // body: "*", the fields the path does not name
	inPath               map[protoreflect.Name]bool
	query                []string // the fields a query may set, by both names; none with a body
}

func (h *jsonHandler) addMethod(md protoreflect.MethodDescriptor) {
	m := &jsonMethod{path: "/" + string(md.Parent().FullName()) + "/" + string(md.Name()), input: md.Input(),
		limit: h.unaryLimit, inPath: map[protoreflect.Name]bool{}}
	if batchMethods[m.path] {
		m.limit = h.batchLimit
	}
	h.methods[m.path] = m
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if m.template = rule.GetPost(); m.template != "" {
		m.httpMethod = http.MethodPost
	} else if m.template = rule.GetGet(); m.template != "" {
		m.httpMethod = http.MethodGet
	} else {
		return
	}
	h.routes = append(h.routes, m.httpMethod+" "+m.template)
	m.body = rule.GetBody() == "*"
	path, verb, _ := strings.Cut(m.template, ":")
	h.verbs[verb] = verb != ""
	m.segments = strings.Split(strings.TrimPrefix(path, "/"), "/")
	for _, seg := range m.segments {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			m.inPath[protoreflect.Name(strings.TrimSuffix(name, "}"))] = true
		}
	}
	for i := range m.input.Fields().Len() {
		if fd := m.input.Fields().Get(i); !m.body && !m.inPath[fd.Name()] {
			m.query = append(m.query, fd.JSONName(), string(fd.Name()))
		}
	}
	slices.Sort(m.query)
}

// jsonCall is one Connect or REST request on its way through vanguard.
type jsonCall struct {
	h       *jsonHandler
	w       http.ResponseWriter
	connect bool // a Connect call, not a REST route
	http1   bool
	// The request as sent, before ServeHTTP adapts it for vanguard.
	header                 http.Header
	method, path, rawQuery string
	length                 int64
	gzipped                bool
	body                   *jsonBody
	rpc                    *jsonMethod // once vanguard has routed the request
	refusal                error       // why the handler refuses the call
	received               atomic.Int64
	answer                 error // the gRPC server's error answer, if any
	answerHeader           http.Header
	// wrote: the answer's status is written; refused: serveCall answers
	// the call itself; silent: what vanguard writes is dropped.
	wrote, refused, silent bool
}

type jsonCallKey struct{}

func (h *jsonHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ct := strings.ToLower(r.Header.Get("Content-Type")); strings.HasPrefix(ct, "application/grpc") {
		h.transcoder.ServeHTTP(w, r) // gRPC and gRPC-Web, as vanguard serves them
		return
	}
	c := &jsonCall{h: h, w: w, connect: strings.HasPrefix(r.URL.Path, "/idem.v1."), http1: r.ProtoMajor == 1,
		header: r.Header.Clone(), method: r.Method, path: r.URL.EscapedPath(), rawQuery: r.URL.RawQuery, length: r.ContentLength}
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	c.gzipped = enc == "gzip"
	if enc != "" && enc != "identity" && !c.gzipped {
		c.refusal = unsupportedMedia("Content-Encoding", fmt.Sprintf("Content-Encoding %q is not one this API reads; send gzip or an uncompressed body", enc))
	}
	r.Header.Del("Content-Encoding") // jsonBody inflates it
	if c.connect {
		codec, err := connectCodec(r.Header.Get("Content-Type"))
		if c.refusal == nil {
			c.refusal = err
		}
		// A plain HTTP client does not send the header that tells vanguard a
		// call is Connect, not REST.
		r.Header.Set("Content-Type", "application/"+codec)
		r.Header.Set("Connect-Protocol-Version", "1")
	} else {
		// vanguard reads a REST body as JSON whatever it is labelled;
		// serveCall checks the label against the route.
		r.Header.Del("Content-Type")
		r.Header.Del("Connect-Protocol-Version")
		r.URL.Path, r.URL.RawPath = restPath(c.path, h.verbs), ""
	}
	c.body = &jsonBody{ReadCloser: r.Body}
	r.Body = c.body
	h.transcoder.ServeHTTP(jsonAnswer{c}, r.WithContext(context.WithValue(r.Context(), jsonCallKey{}, c)))
}

// serveCall is where vanguard sends a call it has routed: to the gRPC
// server, unless the API's rules refuse it or vanguard cannot decode it.
func (h *jsonHandler) serveCall(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(jsonCallKey{}).(*jsonCall)
	if c == nil { // gRPC, gRPC-Web
		h.server.ServeHTTP(w, r)
		return
	}
	c.rpc = h.methods[r.URL.Path]
	if c.refusal == nil {
		c.refusal = c.check()
	}
	if c.refusal == nil {
		r.Body = &countingBody{ReadCloser: r.Body, n: &c.received}
		h.server.ServeHTTP(w, r)
		if c.received.Load() > 0 {
			c.answer = trailerStatus(w.Header())
			return
		}
		// vanguard refused the body before the server got a message.
		var inPath map[protoreflect.Name]bool
		if !c.connect {
			inPath = c.rpc.inPath
		}
		if c.refusal = explain(c.body.data, c.rpc.input, inPath); c.refusal == nil {
			c.refusal = malformed("", "the body does not decode as a %s", c.rpc.input.Name())
		}
	}
	c.refuse(r)
}

// check applies the rules of docs/http-api.md that vanguard does not, to a
// call of c.rpc, and reads its body.
func (c *jsonCall) check() error {
	m := c.rpc
	if c.length > m.limit {
		return tooLarge("the request body is %d bytes; the limit is %d", c.length, m.limit)
	}
	names := queryNames(c.rawQuery)
	if c.connect && len(names) > 0 {
		return unknownField(names[0], "query parameter", "; a Connect call sends every field in its body")
	}
	if !c.connect {
		if err := m.checkPath(c.path); err != nil {
			return err
		}
		for _, name := range names {
			if _, ok := slices.BinarySearch(m.query, name); !ok {
				return unknownField(name, "query parameter", "; %s", m.queryRule())
			}
		}
		if m.body {
			if err := restContentType(c.header.Get("Content-Type")); err != nil {
				return err
			}
		}
	}
	if err := c.body.load(m.limit, c.gzipped); err != nil {
		return err
	}
	switch data := c.body.data; {
	case c.connect:
	case !m.body && len(data) > 0:
		return malformed("", "%s %s takes no body; send its fields in the path", m.httpMethod, m.template)
	case len(m.inPath) > 0 && m.body && mentions(data, m.inPath):
		// vanguard would let the path's value win silently.
		return explain(data, m.input, m.inPath)
	}
	return nil
}

// checkPath checks the text of the path's variables, escaped as sent,
// which vanguard passes on as it is.
func (m *jsonMethod) checkPath(escaped string) error {
	if _, verb, ok := strings.Cut(m.template, ":"); ok {
		escaped = strings.TrimSuffix(escaped, ":"+verb)
	}
	for i, seg := range strings.Split(strings.TrimPrefix(escaped, "/"), "/") {
		if i >= len(m.segments) || !strings.HasPrefix(m.segments[i], "{") {
			continue
		}
		if v, err := url.PathUnescape(seg); err == nil && !utf8.ValidString(v) {
			fd := m.input.Fields().ByName(protoreflect.Name(strings.Trim(m.segments[i], "{}")))
			return invalidUTF8(fd, string(fd.Name()), v)
		}
	}
	return nil
}

// queryRule says what query parameters the route takes.
func (m *jsonMethod) queryRule() string {
	switch {
	case m.body:
		return fmt.Sprintf("%s %s takes none: send the fields in the JSON body", m.httpMethod, m.template)
	case len(m.query) == 0:
		return fmt.Sprintf("%s %s takes none", m.httpMethod, m.template)
	}
	return fmt.Sprintf("%s %s takes %s", m.httpMethod, m.template, strings.Join(m.query, ", "))
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

// connectCodec is the codec of a Connect unary call's Content-Type, in any
// case and with any parameters: "json" or "proto"; "json" with the error of
// a type the API does not read.
func connectCodec(contentType string) (string, error) {
	const want = "send Content-Type: application/json (the request as JSON) or application/proto (binary protobuf)"
	mt, params, err := mime.ParseMediaType(contentType)
	switch {
	case contentType == "":
		err = unsupportedMedia("Content-Type", "the request has no Content-Type; "+want)
	case err != nil:
		err = unsupportedMedia("Content-Type", fmt.Sprintf("Content-Type %q does not parse (%v); %s", contentType, err, want))
	case mt == "application/json" && params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8"):
		err = unsupportedMedia("Content-Type", fmt.Sprintf("Content-Type %q: the body must be UTF-8; send charset=utf-8 or no charset", contentType))
	case mt == "application/json":
	case mt == "application/proto":
		return vanguard.CodecProto, nil
	default:
		err = unsupportedMedia("Content-Type", fmt.Sprintf("Content-Type %q is not one this API reads; %s", contentType, want))
	}
	return vanguard.CodecJSON, err
}

// restContentType checks the Content-Type of a REST request with a body:
// JSON, or none or a form's (what curl -d sends), which the body is read
// as JSON regardless of.
func restContentType(contentType string) error {
	if contentType == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err == nil && (mt == "application/json" || mt == "application/x-www-form-urlencoded") &&
		(params["charset"] == "" || strings.EqualFold(params["charset"], "utf-8")) {
		return nil
	}
	return unsupportedMedia("Content-Type", fmt.Sprintf("Content-Type %q is not one this route reads; send the body as UTF-8 JSON with Content-Type: application/json", contentType))
}

// queryNames are the distinct parameter names of a raw query, sorted.
func queryNames(rawQuery string) []string {
	values, err := url.ParseQuery(rawQuery)
	if err != nil && len(values) == 0 {
		return []string{rawQuery}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for name := range values {
			if !yield(name) {
				return
			}
		}
	})
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

// jsonBody is a Connect or REST request's body: serveCall reads it whole,
// inflated, within its call's limit (load), before vanguard decodes it, and
// explain reads it again when vanguard cannot.
type jsonBody struct {
	io.ReadCloser // the request's
	data          []byte
	rest          *bytes.Reader
}

func (b *jsonBody) load(limit int64, gzipped bool) error {
	raw, err := io.ReadAll(io.LimitReader(b.ReadCloser, limit+1))
	switch {
	case err != nil: // cut off by the listener's read timeout, or by the client
		return malformed("", "reading the request body failed: %v", err)
	case int64(len(raw)) > limit:
		return tooLarge("the request body is over the limit of %d bytes", limit)
	}
	if gzipped {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err == nil {
			raw, err = io.ReadAll(io.LimitReader(zr, limit+1))
		}
		switch {
		case int64(len(raw)) > limit:
			return tooLarge("the request inflates to over %d bytes, the limit", limit)
		case err != nil:
			return malformed("", "the body is not gzip, as its Content-Encoding says: %v", err)
		}
	}
	b.data, b.rest = raw, bytes.NewReader(raw)
	return nil
}

func (b *jsonBody) Read(p []byte) (int, error) {
	if b.rest == nil {
		return 0, io.ErrUnexpectedEOF // not loaded: the call was refused
	}
	return b.rest.Read(p)
}

// countingBody counts what the gRPC server has read of a call: nothing
// means vanguard refused the request before it made a message.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// limitedGzipReader inflates a gRPC-Web message compressed with gzip and
// fails past limit bytes, so that a small message cannot make the server
// buffer a huge one.
type limitedGzipReader struct {
	limit int64
	zr    gzip.Reader
	n     int64
}

func (g *limitedGzipReader) Reset(r io.Reader) error {
	g.n = 0
	return g.zr.Reset(r)
}

func (g *limitedGzipReader) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if g.n += int64(n); g.n > g.limit {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request inflates to over %d bytes, the limit", g.limit))
	}
	return n, err
}

func (g *limitedGzipReader) Close() error { return g.zr.Close() }
