package idemhttp

import (
	"crypto/sha256"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// fingerprintVersion starts what a fingerprint hashes, so that another way
// of fingerprinting never collides with this one.
const fingerprintVersion = "idem-http-1"

// Fingerprint returns the SHA-256 that idem's middlewares, in every
// language, store as the fingerprint of a request: of the netstrings
// ("<length>:<bytes>,") of "idem-http-1", the method, the path of the
// request target percent-decoded, its query as sent, then for each name of
// headers that the request has (lowercased, sorted, each once) the name and
// its values joined with ", ", and last the body.
func Fingerprint(r *http.Request, body []byte, headers []string) []byte {
	return fingerprint(r, body, fingerprintHeaders(headers))
}

// fingerprint is Fingerprint with headers lowercased, sorted and without
// repeats already, as the middleware keeps them.
func fingerprint(r *http.Request, body []byte, headers []string) []byte {
	path, query := requestTarget(r)
	h := sha256.New()
	var scratch [24]byte
	netstring := func(b []byte) {
		h.Write(strconv.AppendInt(scratch[:0], int64(len(b)), 10))
		h.Write([]byte{':'})
		h.Write(b)
		h.Write([]byte{','})
	}
	netstring([]byte(fingerprintVersion))
	netstring([]byte(r.Method))
	netstring(percentDecode(path))
	netstring([]byte(query))
	for _, name := range headers {
		values := r.Header.Values(name)
		if len(values) == 0 {
			continue
		}
		netstring([]byte(name))
		netstring([]byte(strings.Join(values, ", ")))
	}
	netstring(body)
	return h.Sum(nil)
}

// fingerprintHeaders is names lowercased, sorted and without repeats, as
// Fingerprint takes them.
func fingerprintHeaders(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, strings.ToLower(n))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// requestTarget is the path and query of the request line as the client
// sent them, before any handler (http.StripPrefix) changed r.URL.
func requestTarget(r *http.Request) (path, query string) {
	target := r.RequestURI
	if target == "" || target[0] != '/' {
		// A request made in a test, not read from a connection, or an
		// absolute-form target: r.URL holds the same.
		if u, err := url.ParseRequestURI(target); err == nil && u.Path != "" {
			return u.EscapedPath(), u.RawQuery
		}
		return r.URL.EscapedPath(), r.URL.RawQuery
	}
	path, query, _ = strings.Cut(target, "?")
	return path, query
}

// percentDecode decodes every %XX of s, and leaves a % that two hex digits
// do not follow as it is (as WSGI servers and ASGI's path do).
func percentDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			out = append(out, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		out = append(out, s[i])
	}
	return out
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
