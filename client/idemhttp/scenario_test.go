package idemhttp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/client/idemhttp"
	"github.com/idemhq/idem/internal/testsupport/sdkharness/drive"
)

const specFile = "../../clients/scenarios/http.json"

// httpScenarios are the Go middleware's implementations of the file's
// scenarios, by id. TestHTTPScenarioFileMatches fails when they disagree.
var httpScenarios = map[string]func(t *testing.T, e *env){
	"first-runs-repeat-replays":      scenarioFirstRunsRepeatReplays,
	"concurrent-duplicates-conflict": scenarioConcurrentConflict,
	"concurrent-duplicates-wait":     scenarioConcurrentWait,
	"other-request-rejected":         scenarioOtherRequestRejected,
	"missing-key":                    scenarioMissingKey,
	"malformed-key":                  scenarioMalformedKey,
	"server-error-releases":          scenarioServerErrorReleases,
	"handler-crash-releases":         scenarioHandlerCrashReleases,
	"client-error-stored":            scenarioClientErrorStored,
	"callers-separate":               scenarioCallersSeparate,
	"unguarded-method":               scenarioUnguardedMethod,
	"large-body-unstored":            scenarioLargeBodyUnstored,
	"stored-response-refused":        scenarioStoredResponseRefused,
	"streamed-response":              scenarioStreamedResponse,
	"request-too-large":              scenarioRequestTooLarge,
	"long-key-hashed":                scenarioLongKeyHashed,
	"stored-envelope-replayed":       scenarioStoredEnvelopeReplayed,
	"unreadable-or-failed-record":    scenarioUnreadableOrFailed,
	"idem-unreachable":               scenarioIdemUnreachable,
	"restart-before-stored":          scenarioRestartBeforeStored,
}

type scenarioSpec struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Steps     string `json:"steps"`
	Expect    string `json:"expect"`
	Exclusive bool   `json:"exclusive"`
}

type specFileContents struct {
	Version   int            `json:"version"`
	Scenarios []scenarioSpec `json:"scenarios"`
	Problems  []struct {
		Slug   string `json:"slug"`
		Status int    `json:"status"`
	} `json:"problems"`
	Vectors struct {
		Keys []struct {
			Value string  `json:"value"`
			Key   *string `json:"key"`
		} `json:"keys"`
		Envelopes []struct {
			Status         int         `json:"status"`
			Headers        [][2]string `json:"headers"`
			Body           *string     `json:"body"`
			BodyBase64     string      `json:"body_base64"`
			Omitted        bool        `json:"omitted"`
			Envelope       *string     `json:"envelope"`
			EnvelopeBase64 string      `json:"envelope_base64"`
		} `json:"envelopes"`
	} `json:"vectors"`
}

func loadSpecFile(t *testing.T) specFileContents {
	t.Helper()
	data, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	var f specFileContents
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", specFile, err)
	}
	if f.Version != 1 {
		t.Fatalf("%s is version %d; this suite reads version 1", specFile, f.Version)
	}
	return f
}

// TestHTTPScenarioFileMatches fails when the file has a scenario the Go
// middleware does not implement, or this file implements one the file no
// longer has.
func TestHTTPScenarioFileMatches(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range loadSpecFile(t).Scenarios {
		if seen[s.ID] {
			t.Errorf("%s has scenario %q twice", specFile, s.ID)
		}
		seen[s.ID] = true
		if s.Title == "" || s.Steps == "" || s.Expect == "" {
			t.Errorf("%s: scenario %q needs a title, steps and expect", specFile, s.ID)
		}
		if httpScenarios[s.ID] == nil {
			t.Errorf("scenario %q of %s has no Go implementation: add it to httpScenarios in client/idemhttp/scenario_test.go", s.ID, specFile)
		}
	}
	for id := range httpScenarios {
		if !seen[id] {
			t.Errorf("client/idemhttp/scenario_test.go implements scenario %q, which %s no longer has: remove it", id, specFile)
		}
	}
}

// TestHTTPScenarios runs every scenario against a real idemd on each store:
// those that leave idemd alone in parallel, then the exclusive ones alone.
func TestHTTPScenarios(t *testing.T) {
	f := loadSpecFile(t)
	bins, err := drive.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			e := &env{h: drive.Start(t, bins, store), spec: f}
			e.c = e.newClient(t, e.h.Info.GRPCAddr, client.RetryPolicy{})
			t.Run("shared", func(t *testing.T) {
				for _, s := range f.Scenarios {
					if !s.Exclusive {
						t.Run(s.ID, func(t *testing.T) {
							t.Parallel()
							httpScenarios[s.ID](t, e)
						})
					}
				}
			})
			for _, s := range f.Scenarios {
				if s.Exclusive {
					t.Run(s.ID, func(t *testing.T) {
						t.Cleanup(func() {
							if err := e.h.Control("/ready"); err != nil {
								t.Errorf("idemd after the scenario: %v", err)
							}
						})
						httpScenarios[s.ID](t, e)
					})
				}
			}
		})
	}
}

// env is one harness and the client the middlewares use.
type env struct {
	h    *drive.Harness
	c    *client.Client
	spec specFileContents
}

func (e *env) newClient(t *testing.T, addr string, p client.RetryPolicy) *client.Client {
	t.Helper()
	c, err := client.New(addr, client.WithInsecure(), client.WithToken(e.h.Info.Tokens["worker"]), client.WithRetry(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// key is a key of the scenario's own, fresh for each run.
func key(t *testing.T, part string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]
	return fmt.Sprintf("%s-%s-%s", name, part, hex.EncodeToString(b[:]))
}

// callerHeader is how the scenarios' caller option tells callers apart.
func callerHeader(r *http.Request) (string, error) {
	if c := r.Header.Get("X-Caller"); c != "" {
		return c, nil
	}
	return "", fmt.Errorf("no X-Caller header")
}

// serveOpts change what serve starts.
type serveOpts struct {
	c     *client.Client // the middleware's client instead of the harness's
	quiet bool           // no server log (of a panic the scenario makes)
}

// serve starts a server with the middleware of cfg in front of h.
func (e *env) serve(t *testing.T, cfg idemhttp.Config, h http.HandlerFunc, opts ...serveOpts) *httptest.Server {
	t.Helper()
	var o serveOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if cfg.Caller == nil {
		cfg.Caller = callerHeader
	}
	if cfg.Namespace == "" {
		cfg.Namespace = e.h.Info.Namespaces.Plain
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testLog{t}, nil))
	}
	c := e.c
	if o.c != nil {
		c = o.c
	}
	mw, err := idemhttp.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mw(h))
	if o.quiet {
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// testLog writes the middleware's log into the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// counter counts a handler's runs.
type counter struct{ n atomic.Int64 }

func (c *counter) run() int64 { return c.n.Add(1) }
func (c *counter) get() int64 { return c.n.Load() }

// answer writes what the scenarios' handlers answer: status, a JSON body,
// Location /payments/<run> and X-Unstored <run>.
func answer(w http.ResponseWriter, run int64, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+strconv.FormatInt(run, 10))
	w.Header().Set("X-Unstored", strconv.FormatInt(run, 10))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

type response struct {
	status int
	header http.Header
	body   []byte
	err    error // of a request that got no response
}

// req is one request: method, path, body, and headers as name, value
// pairs. X-Caller is alice unless given; "Idempotency-Key" with value ""
// leaves the key out.
type req struct {
	method, path, body string
	key                string // quoted into the header; none when empty
	headers            [][2]string
	noCaller           bool
}

func send(t *testing.T, srv *httptest.Server, r req) response {
	t.Helper()
	hr, err := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.method == http.MethodGet {
		hr.Body, hr.ContentLength = nil, 0
	}
	if !r.noCaller {
		hr.Header.Set("X-Caller", "alice")
	}
	if r.key != "" {
		hr.Header.Set("Idempotency-Key", strconv.Quote(r.key))
	}
	for _, h := range r.headers {
		hr.Header.Add(h[0], h[1])
	}
	resp, err := srv.Client().Do(hr)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{err: err}
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func post(key, body string) req { return req{method: "POST", path: "/payments", body: body, key: key} }

func (r response) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// wantFirst checks a response that the handler made.
func wantFirst(t *testing.T, what string, r response, status int, body string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	if r.status != status || string(r.body) != body || r.replayed() {
		t.Fatalf("%s: %d %q (replayed %v); want %d %q, not replayed", what, r.status, r.body, r.replayed(), status, body)
	}
}

// wantReplay checks that r replays first: its status, stored headers and
// body, with Idempotent-Replayed and without X-Unstored.
func wantReplay(t *testing.T, what string, r, first response) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	if !r.replayed() || r.status != first.status || !bytes.Equal(r.body, first.body) {
		t.Fatalf("%s: %d %q (replayed %v); want a replay of %d %q", what, r.status, r.body, r.replayed(), first.status, first.body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if got, want := r.header.Values(h), first.header.Values(h); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: %s %q; the first response had %q", what, h, got, want)
		}
	}
	if v := r.header.Get("X-Unstored"); v != "" {
		t.Errorf("%s: X-Unstored %q was replayed; it is not a stored header", what, v)
	}
}

// wantProblem checks that r is the problem slug with its status.
func wantProblem(t *testing.T, what string, r response, slug string, status int) map[string]any {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	var doc map[string]any
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(r.body, &doc) != nil ||
		doc["type"] != idemhttp.ProblemTypePrefix+slug || doc["status"] != float64(status) {
		t.Fatalf("%s: %d %s %q; want the problem %s (%d)", what, r.status, r.header.Get("Content-Type"), r.body, slug, status)
	}
	return doc
}

func (e *env) lookup(t *testing.T, recordKey string) client.Record {
	t.Helper()
	rec, err := e.c.Lookup(context.Background(), client.LookupRequest{Namespace: e.h.Info.Namespaces.Plain, Key: recordKey})
	if err != nil {
		t.Fatalf("Lookup(%s): %v", recordKey, err)
	}
	return rec
}

func scenarioFirstRunsRepeatReplays(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		run := runs.run()
		var in struct{ Amount int }
		_ = json.NewDecoder(r.Body).Decode(&in)
		answer(w, run, http.StatusCreated, fmt.Sprintf(`{"id":"pay_%d","amount":%d}`, run, in.Amount))
	})
	k := key(t, "k")
	first := send(t, srv, post(k, `{"amount":1250}`))
	wantFirst(t, "the first request", first, 201, `{"id":"pay_1","amount":1250}`)
	if first.header.Get("Location") != "/payments/1" || first.header.Get("X-Unstored") != "1" {
		t.Fatalf("the first request's headers: %v", first.header)
	}
	wantReplay(t, "the repeat", send(t, srv, post(k, `{"amount":1250}`)), first)
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
	rec := e.lookup(t, idemhttp.RecordKey("alice", k))
	want := idemhttp.Stored{Status: 201, Headers: [][2]string{{"content-type", "application/json"}, {"location", "/payments/1"}}, Body: first.body}.Encode()
	if rec.State != client.StateCompleted || rec.Attempt != 1 || !bytes.Equal(rec.Result, want) {
		t.Fatalf("the record: %v attempt %d result %q; want COMPLETED, attempt 1, %q", rec.State, rec.Attempt, rec.Result, want)
	}
}

func scenarioConcurrentConflict(t *testing.T, e *env) {
	var runs counter
	started, release := make(chan struct{}), make(chan struct{})
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		runs.run()
		close(started)
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	k := key(t, "k")
	firstc := make(chan response, 1)
	go func() { firstc <- send(t, srv, post(k, `{}`)) }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start")
	}
	dup := send(t, srv, post(k, `{}`))
	wantProblem(t, "the duplicate", dup, "key-in-flight", 409)
	if n, err := strconv.Atoi(dup.header.Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("the duplicate's Retry-After %q; want whole seconds, at least 1", dup.header.Get("Retry-After"))
	}
	close(release)
	first := <-firstc
	wantFirst(t, "the first request", first, 201, `{"ok":true}`)
	wantReplay(t, "a repeat", send(t, srv, post(k, `{}`)), first)
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
}

func scenarioConcurrentWait(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{Wait: 10 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		run := runs.run()
		time.Sleep(200 * time.Millisecond)
		answer(w, run, 201, `{"ok":true}`)
	})
	k := key(t, "k")
	var wg sync.WaitGroup
	out := make([]response, 3)
	for i := range out {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = send(t, srv, post(k, `{}`)) }()
	}
	wg.Wait()
	firsts := 0
	for i, r := range out {
		if r.err != nil || r.status != 201 || string(r.body) != `{"ok":true}` || r.header.Get("Location") != "/payments/1" {
			t.Fatalf("response %d: %d %q %v (%v); want 201 {\"ok\":true} at /payments/1", i, r.status, r.body, r.header, r.err)
		}
		if !r.replayed() {
			firsts++
		}
	}
	if firsts != 1 || runs.get() != 1 {
		t.Fatalf("%d responses not replayed and %d runs; want 1 and 1", firsts, runs.get())
	}
}

func scenarioOtherRequestRejected(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{FingerprintHeaders: []string{"X-Account"}}, func(w http.ResponseWriter, r *http.Request) {
		answer(w, runs.run(), 201, `{}`)
	})
	k := key(t, "k")
	base := req{method: "POST", path: "/payments", body: `{"amount":1}`, key: k, headers: [][2]string{{"X-Account", "a1"}}}
	first := send(t, srv, base)
	wantFirst(t, "the first request", first, 201, `{}`)
	others := map[string]req{}
	r := base
	r.body = `{"amount":2}`
	others["another body"] = r
	r = base
	r.path = "/refunds"
	others["another path"] = r
	r = base
	r.method = "PATCH"
	others["another method"] = r
	r = base
	r.headers = [][2]string{{"X-Account", "a2"}}
	others["another X-Account"] = r
	r = base
	r.path = "/payments?x=1"
	others["a query"] = r
	for what, r := range others {
		wantProblem(t, what, send(t, srv, r), "key-reused", 422)
	}
	wantReplay(t, "the same request", send(t, srv, base), first)
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
}

func scenarioMissingKey(t *testing.T, e *env) {
	var runs counter
	h := func(w http.ResponseWriter, r *http.Request) { answer(w, runs.run(), 201, `{}`) }
	required := e.serve(t, idemhttp.Config{RequireKey: true}, h)
	wantProblem(t, "no key, required", send(t, required, post("", `{}`)), "key-missing", 400)
	if runs.get() != 0 {
		t.Fatalf("the handler ran")
	}
	optional := e.serve(t, idemhttp.Config{}, h)
	for i := range 2 {
		wantFirst(t, fmt.Sprintf("no key, optional (%d)", i+1), send(t, optional, post("", `{}`)), 201, `{}`)
	}
	if runs.get() != 2 {
		t.Fatalf("the handler ran %d times; want 2", runs.get())
	}
}

func scenarioMalformedKey(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) { answer(w, runs.run(), 201, `{}`) })
	check := func(what string, values ...string) {
		t.Helper()
		r := req{method: "POST", path: "/payments", body: `{}`}
		for _, v := range values {
			r.headers = append(r.headers, [2]string{"Idempotency-Key", v})
		}
		doc := wantProblem(t, what, send(t, srv, r), "key-malformed", 400)
		if d, _ := doc["detail"].(string); !strings.Contains(d, "Idempotency-Key") {
			t.Errorf("%s: the detail %q does not name Idempotency-Key", what, d)
		}
	}
	for _, v := range e.spec.Vectors.Keys {
		if v.Key == nil {
			check(fmt.Sprintf("Idempotency-Key: %s", v.Value), v.Value)
		}
	}
	check("two Idempotency-Key lines", `"a"`, `"b"`)
	if runs.get() != 0 {
		t.Fatalf("the handler ran %d times; want 0", runs.get())
	}
}

func scenarioServerErrorReleases(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if run := runs.run(); run == 1 {
			answer(w, run, 503, `{"error":"busy"}`)
		} else {
			answer(w, run, 201, `{"ok":true}`)
		}
	})
	k := key(t, "k")
	wantFirst(t, "the first request", send(t, srv, post(k, `{}`)), 503, `{"error":"busy"}`)
	second := send(t, srv, post(k, `{}`))
	wantFirst(t, "the retry", second, 201, `{"ok":true}`)
	wantReplay(t, "a repeat", send(t, srv, post(k, `{}`)), second)
	if rec := e.lookup(t, idemhttp.RecordKey("alice", k)); rec.State != client.StateCompleted || rec.Attempt != 2 {
		t.Fatalf("the record: %v attempt %d; want COMPLETED, attempt 2", rec.State, rec.Attempt)
	}
}

func scenarioHandlerCrashReleases(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if run := runs.run(); run == 1 {
			panic("the handler crashed")
		} else {
			answer(w, run, 201, `{"ok":true}`)
		}
	}, serveOpts{quiet: true})
	k := key(t, "k")
	if r := send(t, srv, post(k, `{}`)); r.err == nil && r.status < 500 {
		t.Fatalf("the first request: %d %q; want a 5xx or a closed connection", r.status, r.body)
	}
	wantFirst(t, "the retry", send(t, srv, post(k, `{}`)), 201, `{"ok":true}`)
	if runs.get() != 2 {
		t.Fatalf("the handler ran %d times; want 2", runs.get())
	}
}

func scenarioClientErrorStored(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		answer(w, runs.run(), 402, `{"error":"card_declined"}`)
	})
	k := key(t, "k")
	first := send(t, srv, post(k, `{}`))
	wantFirst(t, "the first request", first, 402, `{"error":"card_declined"}`)
	wantReplay(t, "the repeat", send(t, srv, post(k, `{}`)), first)
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
}

func scenarioCallersSeparate(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		answer(w, runs.run(), 201, fmt.Sprintf(`{"caller":%q}`, r.Header.Get("X-Caller")))
	})
	k := key(t, "k")
	alice := send(t, srv, post(k, `{}`))
	wantFirst(t, "alice", alice, 201, `{"caller":"alice"}`)
	asBob := post(k, `{}`)
	asBob.headers = [][2]string{{"X-Caller", "bob"}}
	asBob.noCaller = true
	wantFirst(t, "bob", send(t, srv, asBob), 201, `{"caller":"bob"}`)
	wantReplay(t, "alice again", send(t, srv, post(k, `{}`)), alice)
	nobody := post(k, `{}`)
	nobody.noCaller = true
	wantProblem(t, "no caller", send(t, srv, nobody), "caller-unidentified", 401)
	if runs.get() != 2 {
		t.Fatalf("the handler ran %d times; want 2", runs.get())
	}
}

func scenarioUnguardedMethod(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) { answer(w, runs.run(), 200, `{}`) })
	k := key(t, "k")
	for _, m := range []string{"GET", "GET", "PUT", "PUT"} {
		wantFirst(t, m, send(t, srv, req{method: m, path: "/payments", body: `{}`, key: k}), 200, `{}`)
	}
	if runs.get() != 4 {
		t.Fatalf("the handler ran %d times; want 4", runs.get())
	}
	if _, err := e.c.Lookup(context.Background(), client.LookupRequest{Namespace: e.h.Info.Namespaces.Plain, Key: idemhttp.RecordKey("alice", k)}); err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("Lookup: %v; want NOT_FOUND", err)
	}
}

func scenarioLargeBodyUnstored(t *testing.T, e *env) {
	var runs counter
	big := strings.Repeat("x", 3000)
	srv := e.serve(t, idemhttp.Config{MaxBodyBytes: 1024}, func(w http.ResponseWriter, r *http.Request) {
		answer(w, runs.run(), 201, big)
	})
	k := key(t, "k")
	wantFirst(t, "the first request", send(t, srv, post(k, `{}`)), 201, big)
	r := send(t, srv, post(k, `{}`))
	if r.err != nil || r.status != 201 || len(r.body) != 0 || !r.replayed() || r.header.Get("Idempotent-Body-Omitted") != "true" ||
		r.header.Get("Location") != "/payments/1" || r.header.Get("Content-Type") != "" {
		t.Fatalf("the repeat: %d %q %v (%v); want 201, empty, replayed, body omitted, Location /payments/1, no Content-Type", r.status, r.body, r.header, r.err)
	}
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
	rec := e.lookup(t, idemhttp.RecordKey("alice", k))
	want := idemhttp.Stored{Status: 201, Headers: [][2]string{{"content-type", "application/json"}, {"location", "/payments/1"}}, Omitted: true}.Encode()
	if rec.State != client.StateCompleted || !bytes.Equal(rec.Result, want) {
		t.Fatalf("the record: %v %q; want COMPLETED %q", rec.State, rec.Result, want)
	}
}

func scenarioStoredResponseRefused(t *testing.T, e *env) {
	var runs counter
	big := strings.Repeat("x", 100000)
	srv := e.serve(t, idemhttp.Config{MaxBodyBytes: 200000}, func(w http.ResponseWriter, r *http.Request) {
		answer(w, runs.run(), 201, big)
	})
	k := key(t, "k")
	wantFirst(t, "the first request", send(t, srv, post(k, `{}`)), 201, big)
	r := send(t, srv, post(k, `{}`))
	if r.err != nil || r.status != 201 || len(r.body) != 0 || !r.replayed() || r.header.Get("Idempotent-Body-Omitted") != "true" {
		t.Fatalf("the repeat: %d %d bytes %v (%v); want 201, empty, replayed, body omitted", r.status, len(r.body), r.header, r.err)
	}
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
	rec := e.lookup(t, idemhttp.RecordKey("alice", k))
	want := idemhttp.Stored{Status: 201, Headers: [][2]string{{"content-type", "application/json"}, {"location", "/payments/1"}}, Omitted: true}.Encode()
	if rec.State != client.StateCompleted || !bytes.Equal(rec.Result, want) {
		t.Fatalf("the record: %v %q; want COMPLETED %q", rec.State, rec.Result, want)
	}
}

func scenarioStreamedResponse(t *testing.T, e *env) {
	var runs counter
	read := make(chan struct{})
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		runs.run()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-read:
		case <-time.After(10 * time.Second):
			return // the client never saw the first event: the scenario fails on the body
		}
		_, _ = io.WriteString(w, "data: 2\n\n")
	})
	k := key(t, "k")
	hr, _ := http.NewRequest("POST", srv.URL+"/events", strings.NewReader(`{}`))
	hr.Header.Set("X-Caller", "alice")
	hr.Header.Set("Idempotency-Key", strconv.Quote(k))
	resp, err := srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, len("data: 1\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: 1\n\n" {
		t.Fatalf("the first event: %q, %v", first, err)
	}
	close(read)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(first)+string(rest) != "data: 1\n\ndata: 2\n\n" {
		t.Fatalf("the stream: %q%q, %v", first, rest, err)
	}
	r := send(t, srv, req{method: "POST", path: "/events", body: `{}`, key: k})
	if r.err != nil || !r.replayed() || r.status != 200 || string(r.body) != "data: 1\n\ndata: 2\n\n" || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("the repeat: %d %q %v (%v); want a replay of the whole stream", r.status, r.body, r.header, r.err)
	}
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
}

func scenarioRequestTooLarge(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{MaxRequestBytes: 1024}, func(w http.ResponseWriter, r *http.Request) { answer(w, runs.run(), 201, `{}`) })
	wantProblem(t, "a 2048-byte body", send(t, srv, post(key(t, "k"), strings.Repeat("x", 2048))), "request-too-large", 413)
	if runs.get() != 0 {
		t.Fatalf("the handler ran")
	}
}

func scenarioLongKeyHashed(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) { answer(w, runs.run(), 201, `{}`) })
	k := key(t, "k")
	k2 := k + strings.Repeat("x", 300-len(k))
	k3 := k2[:len(k2)-1] + "y"
	first := send(t, srv, post(k2, `{}`))
	wantFirst(t, "K2", first, 201, `{}`)
	wantReplay(t, "K2 again", send(t, srv, post(k2, `{}`)), first)
	wantFirst(t, "K3", send(t, srv, post(k3, `{}`)), 201, `{}`)
	sum := sha256.Sum256([]byte("alice/" + k2))
	if rec := e.lookup(t, "#"+hex.EncodeToString(sum[:])); rec.State != client.StateCompleted {
		t.Fatalf("the record of K2: %v", rec.State)
	}
	if runs.get() != 2 {
		t.Fatalf("the handler ran %d times; want 2", runs.get())
	}
}

// claimFor claims the record of (alice, k) as POST /payments {} would.
func (e *env) claimFor(t *testing.T, k string) client.Record {
	t.Helper()
	r := httptest.NewRequest("POST", "/payments", strings.NewReader("{}"))
	res, err := e.c.Claim(context.Background(), client.ClaimRequest{
		Namespace: e.h.Info.Namespaces.Plain, Key: idemhttp.RecordKey("alice", k),
		Fingerprint: idemhttp.Fingerprint(r, []byte("{}"), nil), Claimant: "another-language",
	})
	if err != nil || res.Outcome != client.OutcomeAcquired {
		t.Fatalf("the raw Claim: %v %v", res.Outcome, err)
	}
	return res.Record
}

func scenarioStoredEnvelopeReplayed(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) { answer(w, runs.run(), 201, `{}`) })
	for i, v := range e.spec.Vectors.Envelopes {
		envelope := []byte(nil)
		if v.Envelope != nil {
			envelope = []byte(*v.Envelope)
		} else {
			envelope, _ = base64.StdEncoding.DecodeString(v.EnvelopeBase64)
		}
		body := []byte(nil)
		if v.Body != nil {
			body = []byte(*v.Body)
		} else {
			body, _ = base64.StdEncoding.DecodeString(v.BodyBase64)
		}
		k := key(t, strconv.Itoa(i))
		rec := e.claimFor(t, k)
		if _, err := e.c.Complete(context.Background(), client.CompleteRequest{Namespace: rec.Namespace, Key: rec.Key, Token: rec.Token, Result: envelope}); err != nil {
			t.Fatal(err)
		}
		r := send(t, srv, post(k, `{}`))
		if r.err != nil || !r.replayed() || r.status != v.Status || !bytes.Equal(r.body, body) {
			t.Fatalf("envelope %d: %d %q (replayed %v, %v); want a replay of %d %q", i, r.status, r.body, r.replayed(), r.err, v.Status, body)
		}
		if v.Omitted != (r.header.Get("Idempotent-Body-Omitted") == "true") {
			t.Errorf("envelope %d: Idempotent-Body-Omitted %q; omitted is %v", i, r.header.Get("Idempotent-Body-Omitted"), v.Omitted)
		}
		want := map[string][]string{}
		for _, h := range v.Headers {
			if !v.Omitted || !strings.HasPrefix(h[0], "content-") {
				want[http.CanonicalHeaderKey(h[0])] = append(want[http.CanonicalHeaderKey(h[0])], latin1(h[1]))
			}
		}
		for name, values := range want {
			if got := r.header.Values(name); strings.Join(got, "\n") != strings.Join(values, "\n") {
				t.Errorf("envelope %d: %s %q; want %q", i, name, got, values)
			}
		}
		if _, ok := want["Content-Type"]; !ok && r.header.Get("Content-Type") != "" {
			t.Errorf("envelope %d: Content-Type %q; the envelope has none", i, r.header.Get("Content-Type"))
		}
	}
	if runs.get() != 0 {
		t.Fatalf("the handler ran %d times; want 0", runs.get())
	}
}

// latin1 is the header bytes of text whose characters are below U+0100.
func latin1(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = append(b, byte(r))
	}
	return string(b)
}

func scenarioUnreadableOrFailed(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) { answer(w, runs.run(), 201, `{}`) })
	k1, k2 := key(t, "1"), key(t, "2")
	rec := e.claimFor(t, k1)
	if _, err := e.c.Complete(context.Background(), client.CompleteRequest{Namespace: rec.Namespace, Key: rec.Key, Token: rec.Token, Result: []byte("not an envelope")}); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, "a record without an envelope", send(t, srv, post(k1, `{}`)), "record-unreadable", 500)
	rec = e.claimFor(t, k2)
	if _, err := e.c.Fail(context.Background(), client.FailRequest{Namespace: rec.Namespace, Key: rec.Key, Token: rec.Token, Error: "declined by an operator"}); err != nil {
		t.Fatal(err)
	}
	doc := wantProblem(t, "a FAILED record", send(t, srv, post(k2, `{}`)), "request-failed", 500)
	if doc["detail"] != "declined by an operator" {
		t.Errorf("the detail %q; want the stored error", doc["detail"])
	}
	if runs.get() != 0 {
		t.Fatalf("the handler ran %d times; want 0", runs.get())
	}
}

// syncBuffer is a log that the middleware writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func scenarioIdemUnreachable(t *testing.T, e *env) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	c := e.newClient(t, dead, client.RetryPolicy{MaxAttempts: 3, BaseDelay: 20 * time.Millisecond})
	var runs counter
	h := func(w http.ResponseWriter, r *http.Request) { answer(w, runs.run(), 201, `{}`) }
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	k := key(t, "k")
	closed := e.serve(t, idemhttp.Config{Logger: logger}, h, serveOpts{c: c})
	if r := wantProblem(t, "fail closed", send(t, closed, post(k, `{}`)), "idem-unavailable", 503); r == nil {
		t.Fatal("no problem document")
	}
	if runs.get() != 0 {
		t.Fatalf("the handler ran with idemd unreachable")
	}
	open := e.serve(t, idemhttp.Config{Logger: logger, FailOpen: true}, h, serveOpts{c: c})
	wantFirst(t, "fail open", send(t, open, post(k, `{}`)), 201, `{}`)
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
	if s := log.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, idemhttp.RecordKey("alice", k)) {
		t.Fatalf("no warning naming the key in the log:\n%s", s)
	}
}

func scenarioRestartBeforeStored(t *testing.T, e *env) {
	var runs counter
	srv := e.serve(t, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		run := runs.run()
		if err := e.h.Control("/restart?down_ms=1500"); err != nil {
			t.Error(err)
		}
		answer(w, run, 201, `{"ok":true}`)
	})
	k := key(t, "k")
	first := send(t, srv, post(k, `{}`))
	wantFirst(t, "the first request", first, 201, `{"ok":true}`)
	wantReplay(t, "the repeat", send(t, srv, post(k, `{}`)), first)
	if rec := e.lookup(t, idemhttp.RecordKey("alice", k)); rec.State != client.StateCompleted {
		t.Fatalf("the record: %v", rec.State)
	}
	if runs.get() != 1 {
		t.Fatalf("the handler ran %d times; want 1", runs.get())
	}
}
