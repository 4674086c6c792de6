package idemhttp

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/client"
)

// TestCaptureSniffsLikeNetHTTP: a handler that sets no Content-Type gets
// the one net/http would have sniffed, in the response sent and the one
// stored alike.
func TestCaptureSniffsLikeNetHTTP(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	c := newCapture(rec, 1024)
	_, _ = c.Write([]byte("<html><body>hi</body></html>"))
	c.done()
	env := c.envelope([]string{"content-type"})
	s, err := Decode(env)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Headers) != 1 || s.Headers[0] != [2]string{"content-type", "text/html; charset=utf-8"} || string(s.Body) != "<html><body>hi</body></html>" {
		t.Fatalf("stored %+v", s)
	}
	c.send()
	if got := rec.Header().Get("Content-Type"); got != "text/html; charset=utf-8" {
		t.Fatalf("sent Content-Type %q", got)
	}
}

// TestCaptureNoBodyStatuses: 204 and 304 take no body, as net/http's
// writer refuses one, and are sent without Content-Length.
func TestCaptureNoBodyStatuses(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusNoContent, http.StatusNotModified} {
		rec := httptest.NewRecorder()
		c := newCapture(rec, 1024)
		c.WriteHeader(status)
		if _, err := c.Write([]byte("x")); err != http.ErrBodyNotAllowed {
			t.Errorf("%d: Write: %v; want http.ErrBodyNotAllowed", status, err)
		}
		c.done()
		if s, err := Decode(c.envelope(nil)); err != nil || s.Status != status || len(s.Body) != 0 {
			t.Errorf("%d: stored %+v, %v", status, s, err)
		}
		c.send()
		if rec.Code != status || rec.Header().Get("Content-Length") != "" {
			t.Errorf("%d: sent %d with Content-Length %q", status, rec.Code, rec.Header().Get("Content-Length"))
		}
	}
}

// TestCaptureEnvelopeInPlace: the envelope is the capture buffer itself,
// the body not copied, when the handler says its length; a head too long
// for the room in front still makes a correct envelope.
func TestCaptureEnvelopeInPlace(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("b"), 5000)
	rec := httptest.NewRecorder()
	c := newCapture(rec, 10000)
	rec.Header().Set("Content-Length", "5000")
	c.WriteHeader(201)
	for i := 0; i < len(body); i += 1000 {
		_, _ = c.Write(body[i : i+1000])
	}
	c.done()
	env := c.envelope([]string{"content-length"})
	if &env[len(env)-1] != &c.body()[len(body)-1] {
		t.Errorf("the envelope is a copy of the captured body")
	}
	if s, err := Decode(env); err != nil || !bytes.Equal(s.Body, body) {
		t.Fatalf("Decode: %v", err)
	}

	rec = httptest.NewRecorder()
	c = newCapture(rec, 10000)
	rec.Header().Set("Link", strings.Repeat("<https://example.com/x>; rel=next, ", 40))
	_, _ = c.Write(body)
	c.done()
	if s, err := Decode(c.envelope([]string{"link"})); err != nil || !bytes.Equal(s.Body, body) || len(s.Headers) != 1 {
		t.Fatalf("a long head: %+v, %v", s, err)
	}
}

// TestCaptureChunks: a body of unknown length written in pieces is kept
// whole across chunk boundaries.
func TestCaptureChunks(t *testing.T) {
	t.Parallel()
	var want bytes.Buffer
	c := newCapture(httptest.NewRecorder(), 1<<20)
	for i := range 700 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*3)
		want.Write(p)
		_, _ = c.Write(p)
	}
	c.done()
	s, err := Decode(c.envelope(nil))
	if err != nil || !bytes.Equal(s.Body, want.Bytes()) {
		t.Fatalf("the body of %d bytes came back as %d bytes (%v)", want.Len(), len(s.Body), err)
	}
}

// TestCaptureFlushPassesThrough: after Flush what the handler writes goes
// out at once, and the body is still stored while it fits.
func TestCaptureFlushPassesThrough(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	c := newCapture(rec, 1024)
	_, _ = c.Write([]byte("one "))
	c.Flush()
	if rec.Body.String() != "one " || !rec.Flushed {
		t.Fatalf("after Flush the client has %q (flushed %v)", rec.Body.String(), rec.Flushed)
	}
	_, _ = c.Write([]byte("two"))
	if rec.Body.String() != "one two" {
		t.Fatalf("after Flush a write did not go out: %q", rec.Body.String())
	}
	c.done()
	if s, err := Decode(c.envelope(nil)); err != nil || string(s.Body) != "one two" || s.Omitted {
		t.Fatalf("stored %+v, %v", s, err)
	}
	c.send() // nothing more: it went out
	if rec.Body.String() != "one two" {
		t.Fatalf("send wrote again: %q", rec.Body.String())
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	c, err := client.New("127.0.0.1:1", client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	caller := func(*http.Request) (string, error) { return "", nil }
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.Caller is required"},
		{Config{Caller: caller, Namespace: "Payments"}, `Config.Namespace "Payments"`},
		{Config{Caller: caller, Wait: -time.Second}, "Config.Wait"},
		{Config{Caller: caller, MaxRequestBytes: -1}, "Config.MaxRequestBytes"},
		{Config{Caller: caller, MaxBodyBytes: 32 << 20}, "Config.MaxBodyBytes is 33554432"},
		{Config{Caller: caller, LeaseTTL: time.Millisecond}, "Config.LeaseTTL"},
		{Config{Caller: caller, Retention: time.Second}, "Config.Retention"},
		{Config{Caller: caller, Methods: []string{"PO ST"}}, `Config.Methods has "PO ST"`},
		{Config{Caller: caller, StoredHeaders: []string{"Bad:Name"}}, `Config.StoredHeaders has "Bad:Name"`},
		{Config{Caller: caller, FingerprintHeaders: []string{""}}, `Config.FingerprintHeaders has ""`},
	} {
		if _, err := New(c, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v; want an error with %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(c, Config{Caller: caller}); err != nil {
		t.Errorf("New with a Caller alone: %v", err)
	}
}
