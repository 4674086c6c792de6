// Package gateway serves idem's API over HTTP, as docs/http-api.md
// describes: Connect (JSON or binary) and gRPC-Web at
// /idem.v1.<Service>/<Method>, and the REST routes of idem.proto's
// google.api.http rules. vanguard routes each request and decodes it into a
// call that the gRPC server serves in process, through its interceptors;
// the gateway applies the API's rules vanguard does not know and answers
// in the API's error shape.
package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
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
	h.maxResultBytes = cfg.WithDefaults().MaxResultBytes
	var vgServices []*vanguard.Service
	for _, sd := range []protoreflect.ServiceDescriptor{
		idemv1.File_idem_v1_idem_proto.Services().ByName("IdempotencyService"),
		idemv1.File_idem_v1_admin_proto.Services().ByName("AdminService"),
	} {
		vgServices = append(vgServices, vanguard.NewServiceWithSchema(sd, http.HandlerFunc(h.serveCall),
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC), vanguard.WithTargetCodecs(vanguard.CodecProto),
			// vanguard buffers each message whole, the answer too, with one
			// bound for both. As the gRPC API, this one sends every answer
			// whole, a batch or a page of large results among them; a
			// request is bounded by the gateway (body).
			vanguard.WithNoTargetCompression(), vanguard.WithMaxMessageBufferBytes(math.MaxUint32)))
		for i := range sd.Methods().Len() {
			h.addMethod(sd.Methods().Get(i), unary, batch)
		}
	}
	var err error
	h.transcoder, err = vanguard.NewTranscoder(vgServices,
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			c := vanguard.NewJSONCodec(res)
			c.UnmarshalOptions.DiscardUnknown = false
			return c
		}),
		// A gRPC-Web message is inflated no further than the largest valid
		// request; body inflates a Connect or REST body.
		vanguard.WithCompression("gzip", func() connect.Compressor { return gzip.NewWriter(io.Discard) },
			func() connect.Decompressor { return &limitedGzipReader{limit: batch} }),
		vanguard.WithUnknownHandler(http.HandlerFunc(h.noRoute)))
	if err != nil {
		return nil, fmt.Errorf("HTTP/JSON API: %w", err)
	}
	return h, nil
}

type handler struct {
	transcoder     http.Handler
	server         http.Handler
	intercept      grpc.UnaryServerInterceptor
	methods        map[string]*method // by gRPC path: /idem.v1.IdempotencyService/Claim
	routes         []string           // "POST /v1/…:claim", for the answers to unknown routes
	verbs          map[string]bool    // the REST routes' custom verbs: "claim", …
	maxResultBytes int                // --max-result-bytes, for the message of a body too large
}

// method is an RPC as the API serves it.
type method struct {
	path      string
	input     protoreflect.MessageDescriptor
	limit     int64  // of its body
	limitFlag string // what sets limit, for the message of a body over it
	// Its REST route, from its google.api.http rule; "" when it has none.
	httpMethod, template string
	segments             []string // of the template's path, without the custom verb
	body                 bool     // body: "*", the fields the path does not name
	inPath               map[protoreflect.Name]bool
}

func (h *handler) addMethod(md protoreflect.MethodDescriptor, unary, batch int64) {
	m := &method{path: "/" + string(md.Parent().FullName()) + "/" + string(md.Name()), input: md.Input(), limit: unary, inPath: map[protoreflect.Name]bool{}}
	m.limitFlag = fmt.Sprintf("a result of idemd's --max-result-bytes (%d bytes), in JSON", h.maxResultBytes)
	if services.IsBatch(m.path) {
		m.limit, m.limitFlag = batch, "a batch of idemd's --batch-max-bytes, in JSON"
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
}

// The protocols of a call.
type protocol int

const (
	protocolREST    protocol = iota
	protocolConnect          // Connect unary, JSON or binary
	protocolGRPCWeb          // gRPC-Web or gRPC, which vanguard reads by its own rules but the body's size
)

// call is one request on its way through vanguard.
type call struct {
	h        *handler
	w        http.ResponseWriter
	protocol protocol
	http1    bool
	// The request as sent, before ServeHTTP adapts a copy for vanguard.
	header                 http.Header
	method, path, rawQuery string
	length                 int64
	gzipped                bool
	body                   *body
	rpc                    *method // once vanguard has routed the request
	refusal                error   // why the gateway refuses the call
	received               atomic.Int64
	serverErr              error // the error the gRPC server answered with, if any
	answerHeader           http.Header
	// wrote: the answer's status is written; refused: serveCall answers
	// the call itself; silent: what vanguard writes is dropped.
	wrote, refused, silent bool
}

type callKey struct{}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &call{h: h, w: w, http1: r.ProtoMajor == 1, header: r.Header, method: r.Method, path: r.URL.EscapedPath(),
		rawQuery: r.URL.RawQuery, length: r.ContentLength, body: &body{ReadCloser: r.Body}}
	// vanguard gets a copy to adapt: net/http still reads the request it
	// gave, to drain or close what is left of an unread body.
	r = r.Clone(context.WithValue(r.Context(), callKey{}, c))
	r.ContentLength = -1 // body may inflate it past its Content-Length
	switch ct := strings.ToLower(r.Header.Get("Content-Type")); {
	case strings.HasPrefix(ct, "application/grpc"):
		c.protocol = protocolGRPCWeb
	case strings.HasPrefix(r.URL.Path, "/idem.v1."):
		c.protocol = protocolConnect
	}
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	if c.gzipped = enc == "gzip"; enc != "" && enc != "identity" && !c.gzipped {
		c.refusal = unsupported("Content-Encoding", fmt.Sprintf("Content-Encoding %q is not one this API reads; send gzip or an uncompressed body", enc))
	}
	r.Header.Del("Content-Encoding") // body inflates it
	switch c.protocol {
	case protocolConnect:
		codec, err := checkContentType(r.Header.Get("Content-Type"), true)
		if c.refusal == nil {
			c.refusal = err
		}
		// A plain HTTP client does not send the header that tells vanguard
		// a call is Connect, not REST.
		r.Header.Set("Content-Type", "application/"+codec)
		r.Header.Set("Connect-Protocol-Version", "1")
	case protocolREST:
		// vanguard reads a REST body as JSON whatever it is labelled;
		// check compares the label with the route's.
		r.Header.Del("Content-Type")
		r.Header.Del("Connect-Protocol-Version")
		r.URL.Path, r.URL.RawPath = restPath(c.path, h.verbs), ""
	}
	r.Body = c.body
	h.transcoder.ServeHTTP(answer{c}, r)
}

// serveCall is where vanguard sends a call it has routed: to the gRPC
// server, unless the API's rules refuse it or vanguard cannot decode it.
func (h *handler) serveCall(w http.ResponseWriter, r *http.Request) {
	c := r.Context().Value(callKey{}).(*call)
	if c.rpc = h.methods[r.URL.Path]; c.refusal == nil {
		c.refusal = c.check()
	}
	if c.refusal == nil {
		r.Body = &counted{ReadCloser: r.Body, n: &c.received}
		h.server.ServeHTTP(w, r)
		if c.received.Load() > 0 || c.protocol == protocolGRPCWeb {
			c.serverErr = trailerStatus(w.Header())
			return
		}
		// vanguard refused the body before the server got a message.
		var inPath map[protoreflect.Name]bool
		if c.protocol == protocolREST {
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
func (c *call) check() error {
	m, limit := c.rpc, c.rpc.limit
	if c.protocol == protocolGRPCWeb {
		limit += 5 // a gRPC message's envelope: a flag and a length
	}
	if c.length > limit {
		return services.TooLarge("the request body is %d bytes; the limit is %d, %s", c.length, limit, m.limitFlag)
	}
	if err := c.body.load(limit, c.gzipped, m.limitFlag); err != nil || c.protocol == protocolGRPCWeb {
		return err
	}
	// No call takes query parameters: idem's routes have every field in
	// the path or the body.
	switch names, where := queryNames(c.rawQuery), "path"; {
	case len(names) > 0 && c.protocol == protocolConnect:
		return unknownField(names[0], "query parameter", "; a Connect call sends every field in its body")
	case len(names) > 0:
		if m.body {
			where = "JSON body"
		}
		return unknownField(names[0], "query parameter", "; %s %s takes none: send the fields in the %s", m.httpMethod, m.template, where)
	}
	if c.protocol == protocolConnect {
		return nil
	}
	if err := m.checkPath(c.path); err != nil {
		return err
	}
	switch _, err := checkContentType(c.header.Get("Content-Type"), false); {
	case m.body && err != nil:
		return err
	case !m.body && len(c.body.data) > 0:
		return malformed("", "%s %s takes no body; send its fields in the path", m.httpMethod, m.template)
	case m.body && len(m.inPath) > 0 && mentions(c.body.data, m.inPath):
		return explain(c.body.data, m.input, m.inPath) // vanguard would let the path win
	}
	return nil
}

// checkPath checks the text of the path's variables, which vanguard passes
// on unchecked.
func (m *method) checkPath(escaped string) error {
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
// a form (what curl -d sends), or not at all. On error, the codec is JSON.
func checkContentType(contentType string, connectCall bool) (string, error) {
	want := "send the body as UTF-8 JSON with Content-Type: application/json"
	if connectCall {
		want = "send Content-Type: application/json (the request as JSON) or application/proto (binary protobuf)"
	}
	mt, params, err := mime.ParseMediaType(contentType)
	switch {
	case contentType == "" && connectCall:
		err = unsupported("Content-Type", "the request has no Content-Type; "+want)
	case contentType == "":
		err = nil
	case err != nil:
		err = unsupported("Content-Type", fmt.Sprintf("Content-Type %q does not parse (%v); %s", contentType, err, want))
	case params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8"):
		err = unsupported("Content-Type", fmt.Sprintf("Content-Type %q: the body must be UTF-8; send charset=utf-8 or no charset", contentType))
	case mt == "application/proto" && connectCall:
		return vanguard.CodecProto, nil
	case mt != "application/json" && (connectCall || mt != "application/x-www-form-urlencoded"):
		err = unsupported("Content-Type", fmt.Sprintf("Content-Type %q is not one this API reads; %s", contentType, want))
	}
	return vanguard.CodecJSON, err
}

// queryNames are the distinct parameter names of a raw query, sorted.
func queryNames(rawQuery string) []string {
	values, err := url.ParseQuery(rawQuery)
	if err != nil && len(values) == 0 {
		return []string{rawQuery}
	}
	return slices.Sorted(maps.Keys(values))
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

// body is a Connect or REST request's body: check reads it whole, inflated,
// within its call's limit (load), before vanguard decodes it, and explain
// reads it again when vanguard cannot.
type body struct {
	io.ReadCloser // the request's
	data          []byte
	rest          *bytes.Reader
}

func (b *body) load(limit int64, gzipped bool, limitFlag string) error {
	raw, err := io.ReadAll(io.LimitReader(b.ReadCloser, limit+1))
	switch {
	case err != nil: // cut off by the listener's read timeout, or by the client
		return malformed("", "reading the request body failed: %v", err)
	case int64(len(raw)) > limit:
		return services.TooLarge("the request body is over the limit of %d bytes, %s", limit, limitFlag)
	}
	if gzipped {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err == nil {
			raw, err = io.ReadAll(io.LimitReader(zr, limit+1))
		}
		switch {
		case int64(len(raw)) > limit:
			return services.TooLarge("the request inflates to over %d bytes, the limit: %s", limit, limitFlag)
		case err != nil:
			return malformed("", "the body is not gzip, as its Content-Encoding says: %v", err)
		}
	}
	b.data, b.rest = raw, bytes.NewReader(raw)
	return nil
}

func (b *body) Read(p []byte) (int, error) {
	if b.rest == nil {
		return 0, io.ErrUnexpectedEOF // not loaded: the call was refused
	}
	return b.rest.Read(p)
}

// counted counts what the gRPC server has read of a call: nothing means
// vanguard refused the request before it made a message.
type counted struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *counted) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// limitedGzipReader inflates a gRPC-Web message and fails past limit bytes,
// so that a small message cannot make the server buffer a huge one.
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
