// Package idemhttp is Idempotency-Key middleware for net/http servers, on
// idem: a POST that a client retries after a timeout runs its handler once,
// and the retry gets the response the first one got.
//
// It follows the IETF draft "The Idempotency-Key HTTP Header Field"
// (draft-ietf-httpapi-idempotency-key-header): for the methods it guards
// (POST and PATCH by default) it reads the Idempotency-Key header, an RFC
// 8941 string, and claims the record (Namespace, caller/key) in idem with a
// fingerprint of the request. The first request runs the handler with its
// response held back, stores the status, the headers named in
// StoredHeaders and the body in the record, and then sends it; a repeat
// gets the stored response with Idempotent-Replayed: true, without running
// the handler. A repeat while the first is in flight gets 409 (or waits,
// with Wait), the same key with another request 422, a missing key 400
// when RequireKey is set. A handler that answers 5xx or panics gives the
// key back, so that a retry runs it again; other statuses are stored. The
// errors are RFC 9457 problem documents (application/problem+json).
//
// Every language's middleware (this package, @idemhq/idem/express, Python's
// idem.web) fingerprints, names records and stores responses alike, so a
// response one of them stored is replayed by the others:
// clients/scenarios/http.json in the repository holds the rules, and
// docs/idempotent-http.md describes them.
//
// The middleware holds a record the way client.Do holds a job: a lease
// kept with heartbeats while the handler runs, and a Complete retried
// across an idemd restart until the lease runs out, so that a handler
// whose effect happened is not run again. When idemd cannot be reached
// before the handler runs, the request is refused with 503 and the handler
// does not run, unless FailOpen is set.
package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/limits"
)

// The defaults of Config.
const (
	// DefaultNamespace is the namespace of the records.
	DefaultNamespace = "http"
	// DefaultLeaseTTL is how long a record is held without a heartbeat
	// while its handler runs.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultMaxRequestBytes bounds the request body that is read to
	// fingerprint it.
	DefaultMaxRequestBytes = 1 << 20
	// DefaultMaxBodyBytes bounds the response body that is stored: with
	// its status and headers it fits the 64 KiB of result that idemd
	// accepts unless configured otherwise (--max-result-bytes).
	DefaultMaxBodyBytes = 60 << 10
)

// DefaultMethods are the methods the middleware guards by default: those
// that are not idempotent by HTTP's own definition.
var DefaultMethods = []string{http.MethodPost, http.MethodPatch}

// DefaultStoredHeaders are the response headers stored and replayed by
// default: those that say what the body is and where the resource went.
var DefaultStoredHeaders = []string{"Content-Type", "Content-Encoding", "Content-Language", "Location", "ETag", "Link"}

// Config configures the middleware. Caller is required; every other field
// has a default.
type Config struct {
	// Caller returns the identity of the request's caller (the API key's
	// account, the authenticated subject): each caller's keys name records
	// of its own, so that no caller ever gets another's response. An error
	// answers 401 (caller-unidentified) with its text as the detail; put
	// the authentication middleware in front so that it never does. A
	// service whose callers are all one may return a constant.
	Caller func(r *http.Request) (string, error)
	// Namespace is the namespace of the records. It defaults to "http";
	// give each API a namespace of its own, and set how long its responses
	// are replayed with a policy for it in idemd's config.
	Namespace string
	// Methods are the methods guarded; others pass through. They default
	// to DefaultMethods (POST and PATCH).
	Methods []string
	// RequireKey answers 400 (key-missing) to a guarded request without an
	// Idempotency-Key. By default such a request passes through unguarded.
	RequireKey bool
	// FingerprintHeaders name request headers whose values the fingerprint
	// covers, besides the method, path, query and body. None by default.
	FingerprintHeaders []string
	// Fingerprint replaces the fingerprint of a request (body is its whole
	// body); what it returns is hashed with SHA-256 when it is longer than
	// 64 bytes. By default the fingerprint is Fingerprint(r, body,
	// FingerprintHeaders), the same in every language.
	Fingerprint func(r *http.Request, body []byte) []byte
	// StoredHeaders are the response headers stored and replayed. They
	// default to DefaultStoredHeaders.
	StoredHeaders []string
	// Release reports whether a response status gives the key back (the
	// record is RELEASED and a retry runs the handler again) instead of
	// being stored. It defaults to status >= 500. A panic always releases.
	Release func(status int) bool
	// Wait is how long a request that finds its key in flight waits for
	// the first to finish, and then gets its response (or runs, when the
	// first gave the key back). Zero, the default, answers 409 at once.
	Wait time.Duration
	// MaxRequestBytes bounds the request body, read whole to fingerprint
	// it; a larger one is answered 413 (request-too-large). It defaults to
	// DefaultMaxRequestBytes (1 MiB).
	MaxRequestBytes int64
	// MaxBodyBytes bounds the response body that is stored. A larger body
	// goes out as the handler writes it, and the record keeps the status
	// and headers with the body omitted: a repeat gets them, an empty body
	// and Idempotent-Body-Omitted: true, and the handler does not run
	// again. It defaults to DefaultMaxBodyBytes (60 KiB); raise it
	// together with idemd's --max-result-bytes.
	MaxBodyBytes int
	// LeaseTTL is how long a record is held without a heartbeat while the
	// handler runs (heartbeats go every third of it), and so how long a
	// server that died mid-request keeps the key from being retried. It
	// defaults to DefaultLeaseTTL (30 s).
	LeaseTTL time.Duration
	// Retention is how long a stored response is replayed. Zero means the
	// namespace's retention in idemd (24 hours unless configured).
	Retention time.Duration
	// FailOpen runs the handler unguarded, with a warning logged, when
	// idemd cannot be reached before it runs. By default the request is
	// answered 503 (idem-unavailable) and the handler does not run.
	FailOpen bool
	// Logger logs what the client is not told: a response that could not
	// be stored, a request that ran unguarded. It defaults to
	// slog.Default().
	Logger *slog.Logger
}

// middleware is a checked Config.
type middleware struct {
	c                  *client.Client
	caller             func(*http.Request) (string, error)
	namespace          string
	methods            []string
	requireKey         bool
	fingerprintHeaders []string
	fingerprint        func(*http.Request, []byte) []byte
	storedHeaders      []string
	release            func(int) bool
	wait               time.Duration
	maxRequestBytes    int64
	maxBodyBytes       int
	leaseTTL           time.Duration
	retention          time.Duration
	failOpen           bool
	log                *slog.Logger
}

// New returns the middleware for c and cfg, or an error naming the field of
// cfg that is wrong.
func New(c *client.Client, cfg Config) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(c, cfg)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler { return &handler{m: m, next: next} }, nil
}

func newMiddleware(c *client.Client, cfg Config) (*middleware, error) {
	m := &middleware{
		c:               c,
		caller:          cfg.Caller,
		namespace:       orDefault(cfg.Namespace, DefaultNamespace),
		requireKey:      cfg.RequireKey,
		fingerprint:     cfg.Fingerprint,
		release:         cfg.Release,
		wait:            cfg.Wait,
		maxRequestBytes: cfg.MaxRequestBytes,
		maxBodyBytes:    cfg.MaxBodyBytes,
		leaseTTL:        cfg.LeaseTTL,
		retention:       cfg.Retention,
		failOpen:        cfg.FailOpen,
		log:             cfg.Logger,
	}
	switch {
	case c == nil:
		return nil, errors.New("idemhttp: the client is nil")
	case cfg.Caller == nil:
		return nil, errors.New("idemhttp: Config.Caller is required: the identity of a request's caller, so that no caller gets another's response (return a constant for an API with one caller)")
	case !limits.ValidNamespace(m.namespace):
		return nil, fmt.Errorf("idemhttp: Config.Namespace %q is not a namespace: %s", m.namespace, limits.NamespaceRule)
	case cfg.Wait < 0:
		return nil, fmt.Errorf("idemhttp: Config.Wait is %v; it must be 0 (no wait) or more", cfg.Wait)
	case cfg.MaxRequestBytes < 0:
		return nil, fmt.Errorf("idemhttp: Config.MaxRequestBytes is %d; it must be 0 (the default, %d) or more", cfg.MaxRequestBytes, DefaultMaxRequestBytes)
	case cfg.MaxBodyBytes < 0 || cfg.MaxBodyBytes > limits.ResultBytesCeiling:
		return nil, fmt.Errorf("idemhttp: Config.MaxBodyBytes is %d; it must be 0 (the default, %d) to %d, the most idemd stores", cfg.MaxBodyBytes, DefaultMaxBodyBytes, limits.ResultBytesCeiling)
	case cfg.LeaseTTL != 0 && (cfg.LeaseTTL < limits.MinLeaseTTL || cfg.LeaseTTL > limits.MaxLeaseTTL):
		return nil, fmt.Errorf("idemhttp: Config.LeaseTTL is %v; it must be 0 (the default, %v) or %v to %v", cfg.LeaseTTL, DefaultLeaseTTL, limits.MinLeaseTTL, limits.MaxLeaseTTL)
	case cfg.Retention != 0 && (cfg.Retention < limits.MinRetention || cfg.Retention > limits.MaxRetention):
		return nil, fmt.Errorf("idemhttp: Config.Retention is %v; it must be 0 (the namespace's) or %v to %v", cfg.Retention, limits.MinRetention, limits.MaxRetention)
	}
	methods := cfg.Methods
	if methods == nil {
		methods = DefaultMethods
	}
	for _, meth := range methods {
		if !isToken(meth) {
			return nil, fmt.Errorf("idemhttp: Config.Methods has %q, which is not a method", meth)
		}
		m.methods = append(m.methods, meth)
	}
	for _, name := range cfg.FingerprintHeaders {
		if !isToken(name) {
			return nil, fmt.Errorf("idemhttp: Config.FingerprintHeaders has %q, which is not a header name", name)
		}
	}
	m.fingerprintHeaders = fingerprintHeaders(cfg.FingerprintHeaders)
	stored := cfg.StoredHeaders
	if stored == nil {
		stored = DefaultStoredHeaders
	}
	for _, name := range stored {
		if !isToken(name) {
			return nil, fmt.Errorf("idemhttp: Config.StoredHeaders has %q, which is not a header name", name)
		}
		m.storedHeaders = append(m.storedHeaders, strings.ToLower(name))
	}
	if m.release == nil {
		m.release = func(status int) bool { return status >= 500 }
	}
	if m.maxRequestBytes == 0 {
		m.maxRequestBytes = DefaultMaxRequestBytes
	}
	if m.maxBodyBytes == 0 {
		m.maxBodyBytes = DefaultMaxBodyBytes
	}
	if m.leaseTTL == 0 {
		m.leaseTTL = DefaultLeaseTTL
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	return m, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// isToken reports whether s is an RFC 9110 token: a method or a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

type handler struct {
	m    *middleware
	next http.Handler
}

// errRelease is what the job returns for a response whose status gives the
// key back, so that client.Do records a retryable failure.
type errRelease struct{ status int }

func (e errRelease) Error() string {
	return fmt.Sprintf("the handler answered %d: released for a retry", e.status)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if !m.guards(r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 {
		if m.requireKey {
			problemKeyMissing.write(w, `this request needs an Idempotency-Key header with a key unique to it, like Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	key, err := ParseKey(strings.Join(values, ", "))
	if err != nil {
		problemKeyMalformed.write(w, "Idempotency-Key: "+err.Error())
		return
	}
	caller, err := m.caller(r)
	if err != nil {
		problemCallerUnidentified.write(w, err.Error())
		return
	}
	body, err := readBody(r, m.maxRequestBytes)
	switch {
	case errors.Is(err, errTooLarge):
		problemRequestTooLarge.write(w, fmt.Sprintf("the body is over %d bytes, the most this API reads to fingerprint a request with an Idempotency-Key", m.maxRequestBytes))
		return
	case err != nil:
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	job := client.Job{
		Namespace:   m.namespace,
		Key:         RecordKey(caller, key),
		Fingerprint: m.fingerprintOf(r, body),
		LeaseTTL:    m.leaseTTL,
		Retention:   m.retention,
	}
	var cw *capture // set once the handler runs
	var opts []client.DoOption
	if m.wait > 0 {
		opts = append(opts, client.WithWait(m.wait))
	}
	res, err := m.c.Do(r.Context(), job, func(ctx context.Context, _ client.Attempt) ([]byte, error) {
		cw = newCapture(w, m.maxBodyBytes)
		h.next.ServeHTTP(cw, r.WithContext(ctx))
		cw.done()
		if m.release(cw.status) {
			return nil, errRelease{cw.status}
		}
		return cw.envelope(m.storedHeaders), nil
	}, opts...)
	if cw != nil {
		m.ran(r.Context(), job, cw, err)
		cw.send()
		return
	}
	h.answer(w, r, job, res, err)
}

// answer answers a request whose handler did not run: with the stored
// response, or with the problem that says why it may not run now.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, job client.Job, res client.Result, err error) {
	m := h.m
	var (
		busy       *client.InProgressError
		failed     *client.JobFailedError
		unresolved *client.UnresolvedError
	)
	switch {
	case err == nil:
		m.replay(w, job, res.Value)
	case errors.As(err, &busy):
		problemKeyInFlight.write(w, "another request with this key has not finished; retry after a moment")
	case errors.Is(err, client.ErrFingerprintMismatch):
		problemKeyReused.write(w, "this key was used for a request with another method, path, query, body or fingerprinted header; use a new key for a new request")
	case errors.As(err, &failed):
		problemRequestFailed.write(w, failed.Message)
	case errors.As(err, &unresolved):
		problemKeyUnresolved.write(w, "the outcome of the first request with this key is not known; an operator resolves it")
	case m.failOpen:
		m.log.Warn("idemhttp: idem is unreachable; running the handler without an idempotency check (FailOpen)",
			"namespace", job.Namespace, "key", job.Key, "error", err)
		h.next.ServeHTTP(w, r)
	default:
		m.log.Error("idemhttp: idem is unreachable; the request is refused (503) and its handler not run",
			"namespace", job.Namespace, "key", job.Key, "error", err)
		problemIdemUnavailable.write(w, "the API cannot check this Idempotency-Key now; retry in a moment")
	}
}

func (m *middleware) guards(method string) bool {
	for _, g := range m.methods {
		if g == method {
			return true
		}
	}
	return false
}

func (m *middleware) fingerprintOf(r *http.Request, body []byte) []byte {
	if m.fingerprint == nil {
		return fingerprint(r, body, m.fingerprintHeaders)
	}
	fp := m.fingerprint(r, body)
	if len(fp) > limits.MaxFingerprintBytes {
		sum := sha256.Sum256(fp)
		fp = sum[:]
	}
	return fp
}

// ran logs what went wrong after the handler ran, whose response goes out
// whatever happened to its record: the effect happened. A Complete that was
// not confirmed (idemd refused the stored response for its size, or could
// not be reached until the lease ran out) is made once more with the body
// omitted, so that a repeat gets the status instead of running the handler
// again.
func (m *middleware) ran(ctx context.Context, job client.Job, cw *capture, err error) {
	var (
		release errRelease
		unknown *client.CompletionUnknownError
	)
	switch {
	case err == nil:
	case errors.As(err, &release):
		if _, only := err.(errRelease); !only {
			m.log.Error("idemhttp: the key could not be given back after a response that releases it; a retry waits for its lease to run out",
				"namespace", job.Namespace, "key", job.Key, "error", err)
		}
	case errors.As(err, &unknown):
		cw.omitted = true
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		marker := cw.envelope(m.storedHeaders)
		_, cerr := m.c.Complete(ctx, client.CompleteRequest{Namespace: job.Namespace, Key: job.Key, Token: unknown.Record.Token, Result: marker})
		switch {
		case cerr == nil:
			m.log.Warn("idemhttp: idem did not store the response; its record keeps the status with the body omitted (for a response too large, raise idemd's --max-result-bytes or lower MaxBodyBytes)",
				"namespace", job.Namespace, "key", job.Key, "error", err)
		case errors.Is(cerr, client.ErrAlreadyTerminal):
			// The first Complete was stored after all; its answer was lost.
		default:
			m.log.Error("idemhttp: the response was sent but not stored; a repeat of the request may run the handler again once its lease runs out",
				"namespace", job.Namespace, "key", job.Key, "error", errors.Join(err, cerr))
		}
	default:
		m.log.Error("idemhttp: the response was sent but its record was not completed; a repeat of the request may run the handler again",
			"namespace", job.Namespace, "key", job.Key, "error", err)
	}
}

// replay writes the stored response of a completed record.
func (m *middleware) replay(w http.ResponseWriter, job client.Job, envelope []byte) {
	s, err := Decode(envelope)
	if err != nil {
		m.log.Error("idemhttp: a completed record holds no stored response this version reads",
			"namespace", job.Namespace, "key", job.Key, "error", err)
		problemRecordUnreadable.write(w, err.Error())
		return
	}
	h := w.Header()
	for _, kv := range s.Headers {
		h.Del(kv[0])
	}
	for _, kv := range s.Headers {
		if !s.Omitted || !strings.HasPrefix(kv[0], "content-") {
			h.Add(kv[0], kv[1])
		}
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // no sniffing: the replay says what the first response said
	}
	h.Set("Idempotent-Replayed", "true")
	if s.Omitted {
		h.Set("Idempotent-Body-Omitted", "true")
	}
	if bodyAllowed(s.Status) {
		h.Set("Content-Length", strconv.Itoa(len(s.Body)))
	}
	w.WriteHeader(s.Status)
	if len(s.Body) > 0 {
		_, _ = w.Write(s.Body)
	}
}

var errTooLarge = errors.New("request body too large")

// readBody reads r's body whole, or fails with errTooLarge past max bytes.
func readBody(r *http.Request, max int64) ([]byte, error) {
	switch {
	case r.Body == nil || r.Body == http.NoBody:
		return nil, nil
	case r.ContentLength > max:
		return nil, errTooLarge
	case r.ContentLength >= 0:
		// The server reads no more than Content-Length: a buffer of that
		// size is all it takes, never grown.
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > max {
		return nil, errTooLarge
	}
	return body, nil
}
