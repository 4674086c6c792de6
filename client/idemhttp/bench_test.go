package idemhttp_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/client/idemhttp"
	"github.com/idemhq/idem/internal/testsupport/sdkharness/drive"
)

// benchIdemd starts an idemd of its own on SQLite that stores results of up
// to 4 MiB, and returns a client of it. Its allocations are its own
// process's, so a benchmark's count only the middleware's and the client's.
func benchIdemd(b *testing.B) *client.Client {
	b.Helper()
	bins, err := drive.Build()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bins.Idemd, "serve", "--data-dir", b.TempDir(), "--listen", "127.0.0.1:0",
		"--json-listen", "", "--http-listen", "", "--max-result-bytes", strconv.Itoa(4<<20), "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "idemd serving" {
				addr <- line.Listen
			}
		}
	}()
	select {
	case a := <-addr:
		c, err := client.New(a, client.WithInsecure())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	case <-time.After(time.Minute):
		b.Fatal("idemd did not log \"idemd serving\" within a minute")
	}
	return nil
}

// discard is a ResponseWriter that keeps nothing, so that what a benchmark
// allocates is the middleware's.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkCapturedResponse runs one POST with a fresh key per op through the
// middleware, straight into its handler (no HTTP server, no client side),
// against a real idemd: the bytes allocated per op are what the middleware
// and the Go SDK cost a request; x-body is them as a multiple of the
// response body. Of that, about one body is the Complete's answer, which
// carries the record with its result for the SDK to decode. "known"
// handlers set Content-Length, "unknown" ones do not; the body is written
// in 32 KiB pieces, or in one Write ("whole").
func BenchmarkCapturedResponse(b *testing.B) {
	c := benchIdemd(b)
	for _, tc := range []struct {
		name  string
		size  int
		known bool
		piece int
	}{
		{"body=0", 0, true, 1},
		{"body=1MiB/length=known", 1 << 20, true, 32 << 10},
		{"body=1MiB/length=unknown", 1 << 20, false, 32 << 10},
		{"body=1MiB/length=unknown-whole", 1 << 20, false, 1 << 20},
	} {
		b.Run(tc.name, func(b *testing.B) {
			piece := make([]byte, tc.piece)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/octet-stream")
				if tc.known {
					w.Header().Set("Content-Length", strconv.Itoa(tc.size))
				}
				w.WriteHeader(http.StatusCreated)
				for left := tc.size; left > 0; left -= len(piece) {
					_, _ = w.Write(piece[:min(left, len(piece))])
				}
			})
			mw, err := idemhttp.New(c, idemhttp.Config{
				Namespace:    "bench",
				Caller:       func(*http.Request) (string, error) { return "bench", nil },
				MaxBodyBytes: 2 << 20,
			})
			if err != nil {
				b.Fatal(err)
			}
			handler := mw(h)
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			n := 0
			for b.Loop() {
				r := httptest.NewRequest("POST", "/payments", strings.NewReader("{}"))
				r.Header.Set("Idempotency-Key", `"`+run+"-"+strconv.Itoa(n)+`"`)
				handler.ServeHTTP(&discard{h: http.Header{}}, r)
				n++
			}
			runtime.ReadMemStats(&after)
			if tc.size > 0 {
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n)/float64(tc.size), "x-body")
			}
		})
	}
}
