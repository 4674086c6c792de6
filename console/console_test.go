package console_test

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/idemhq/idem/console"
)

func serve(t *testing.T, h http.Handler, method, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func requireSecurityHeaders(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	for k, v := range console.SecurityHeaders {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %s is %q; want %q", what, k, got, v)
		}
	}
}

// TestSecurityHeaders: every answer under /console/, a 404 and a 405
// included, carries the policy: own origin only, no inline script, no
// framing, nosniff, no referrer.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	csp := console.SecurityHeaders["Content-Security-Policy"]
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "*") {
		t.Errorf("Content-Security-Policy %q admits inline or evaluated script, or any origin", csp)
	}
	if console.SecurityHeaders["X-Content-Type-Options"] != "nosniff" || console.SecurityHeaders["Referrer-Policy"] != "no-referrer" {
		t.Errorf("SecurityHeaders %v; want nosniff and no-referrer", console.SecurityHeaders)
	}
	h := console.Handler(console.Options{Authenticated: true})
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/console/", http.StatusOK},
		{http.MethodGet, "/console/app.js", http.StatusOK},
		{http.MethodGet, "/console/app.css", http.StatusOK},
		{http.MethodGet, "/console/server.json", http.StatusOK},
		{http.MethodHead, "/console/", http.StatusOK},
		{http.MethodGet, "/console/nope", http.StatusNotFound},
		{http.MethodGet, "/console/../console/app.js", http.StatusNotFound},
		{http.MethodPost, "/console/", http.StatusMethodNotAllowed},
		{http.MethodGet, "/console", http.StatusMovedPermanently},
	} {
		rec := serve(t, h, tc.method, tc.path)
		what := tc.method + " " + tc.path
		if rec.Code != tc.code {
			t.Errorf("%s: %d; want %d", what, rec.Code, tc.code)
		}
		requireSecurityHeaders(t, what, rec)
	}
}

// TestEmbeddedApp: the embedded dist/ is the app: index.html loads its
// script and style from files that are there, has no inline script, style
// or event handler (which the policy would refuse), and every file is
// served with its type.
func TestEmbeddedApp(t *testing.T) {
	t.Parallel()
	dist := os.DirFS("dist")
	index, err := fs.ReadFile(dist, "index.html")
	if err != nil {
		t.Fatalf("dist/index.html: %v; build the console (make console)", err)
	}
	html := string(index)
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(html, -1)
	if len(refs) < 3 {
		t.Fatalf("index.html refers to %v; want the script, the style and the icon", refs)
	}
	h := console.Handler(console.Options{})
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
	for _, m := range refs {
		ref := m[1]
		if strings.Contains(ref, ":") || strings.HasPrefix(ref, "/") {
			t.Errorf("index.html refers to %q; want a file beside it, never another origin", ref)
			continue
		}
		want, err := fs.ReadFile(dist, ref)
		if err != nil {
			t.Errorf("index.html refers to %q, which dist/ lacks", ref)
			continue
		}
		rec := serve(t, h, http.MethodGet, "/console/"+ref)
		ext := ref[strings.LastIndexByte(ref, '.'):]
		if rec.Code != http.StatusOK || rec.Body.String() != string(want) || rec.Header().Get("Content-Type") != types[ext] {
			t.Errorf("GET /console/%s: %d, %s, %d bytes; want 200, %s, the %d bytes of dist/%s", ref, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len(), types[ext], len(want), ref)
		}
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>[^<]*`).FindAllString(html, -1) {
		if !strings.Contains(tag, ` src="`) || !strings.HasSuffix(tag, ">") {
			t.Errorf("index.html has an inline script: %s", tag)
		}
	}
	if regexp.MustCompile(`(?i)\son[a-z]+=|\sstyle=|<style`).MatchString(html) {
		t.Errorf("index.html has an inline style or event handler:\n%s", html)
	}
	rec := serve(t, h, http.MethodGet, "/console/")
	if rec.Body.String() != html || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Errorf("GET /console/ is not dist/index.html as text/html")
	}
}

// TestRevalidation: files are revalidated on every load (a new idemd
// serves a new app under the same names) and an unchanged one costs a 304.
func TestRevalidation(t *testing.T) {
	t.Parallel()
	h := console.Handler(console.Options{})
	rec := serve(t, h, http.MethodGet, "/console/app.js")
	etag := rec.Header().Get("ETag")
	if etag == "" || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("app.js: ETag %q, Cache-Control %q; want an ETag and no-cache", etag, rec.Header().Get("Cache-Control"))
	}
	if again := serve(t, h, http.MethodGet, "/console/app.js", "If-None-Match", etag); again.Code != http.StatusNotModified {
		t.Errorf("app.js with If-None-Match %s: %d; want 304", etag, again.Code)
	}
}

// TestServerJSON: server.json tells the app whether idemd authenticates.
func TestServerJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts console.Options
		want string
	}{
		{console.Options{}, `{"authentication":"none","client_certificates":false}`},
		{console.Options{Authenticated: true}, `{"authentication":"required","client_certificates":false}`},
		{console.Options{Authenticated: true, ClientCertificates: true}, `{"authentication":"required","client_certificates":true}`},
	} {
		rec := serve(t, console.Handler(tc.opts), http.MethodGet, "/console/server.json")
		if rec.Body.String() != tc.want || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("server.json for %+v: %s (%s); want %s", tc.opts, rec.Body.String(), rec.Header().Get("Content-Type"), tc.want)
		}
	}
}
