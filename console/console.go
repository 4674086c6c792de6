// Package console serves idem's operator console: a web app that lists
// records, shows the queue held for resolution and resolves or deletes
// records through the AdminService, in the browser of the person on call.
//
// The app is built from the TypeScript in this directory (npm run build)
// into dist/, which is committed and embedded here, so that building idemd
// takes Go alone. idemd serves it at /console/ on its HTTP/JSON listener,
// the origin of the API it calls: no CORS, and nothing from elsewhere.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// Path is where the console is served.
const Path = "/console/"

//go:embed dist
var dist embed.FS

// Options say what the console tells the person who opens it about the
// server it runs on.
type Options struct {
	// Authenticated is whether idemd asks callers who they are (a config
	// file with tenants, or client certificates). Without, the console says
	// that anyone who reaches the port can act, and asks for no token.
	Authenticated bool
	// ClientCertificates is whether a client certificate may identify the
	// caller, so that the console may be used without a token.
	ClientCertificates bool
}

// SecurityHeaders are set on every response under Path. The policy admits
// the console's own script, style and API calls and nothing else: no inline
// script, no other origin, no framing.
var SecurityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options":       "nosniff",
	"Referrer-Policy":              "no-referrer",
	"X-Frame-Options":              "DENY",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

// asset is one file of dist, read once.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

type handler struct {
	assets map[string]*asset // by path under Path; "" is index.html
}

// Handler serves the console under Path: the app's files, and server.json,
// which tells the app what Options say. It answers GET and HEAD only, sets
// SecurityHeaders on every answer, and knows no other paths: the app routes
// in the URL's fragment, which never reaches the server.
func Handler(opts Options) http.Handler {
	h := &handler{assets: map[string]*asset{}}
	root, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: not reached
	}
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		h.add(name, body)
		return nil
	})
	if err != nil {
		panic(err) // dist is embedded: not reached
	}
	if a := h.assets["index.html"]; a != nil {
		h.assets[""] = a
	}
	server, _ := json.Marshal(struct {
		Authentication     string `json:"authentication"`
		ClientCertificates bool   `json:"client_certificates"`
	}{authentication(opts), opts.ClientCertificates})
	h.add("server.json", server)
	return h
}

func authentication(opts Options) string {
	if opts.Authenticated {
		return "required"
	}
	return "none"
}

func (h *handler) add(name string, body []byte) {
	ct := mime.TypeByExtension(path.Ext(name))
	switch path.Ext(name) { // the system's MIME table may lack or differ on these
	case ".js":
		ct = "text/javascript; charset=utf-8"
	case ".css":
		ct = "text/css; charset=utf-8"
	case ".html":
		ct = "text/html; charset=utf-8"
	case ".json":
		ct = "application/json"
	case ".png":
		ct = "image/png"
	case ".svg":
		ct = "image/svg+xml"
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	sum := sha256.Sum256(body)
	h.assets[name] = &asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range SecurityHeaders {
		w.Header().Set(k, v)
	}
	if r.URL.Path == strings.TrimSuffix(Path, "/") {
		http.Redirect(w, r, Path, http.StatusMovedPermanently)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Path)
	a := h.assets[name]
	if !ok || a == nil {
		http.Error(w, "not found: the console's pages are under "+Path+"#/…", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, r.Method+" is not allowed here: the console's files are read with GET", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("ETag", a.etag)
	// Revalidate every time: a new idemd serves a new app under the same
	// names, and the ETag makes an unchanged one cost a 304.
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
