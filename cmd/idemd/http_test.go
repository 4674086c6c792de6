package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPprofOnlyWhenAsked: /debug/pprof/ is served with --pprof and not
// without it.
func TestPprofOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	ready := func(context.Context) error { return nil }
	for _, on := range []bool{false, true} {
		h := newHTTPHandler(prometheus.NewRegistry(), ready, on)
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/allocs?debug=1"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if rec.Code != want {
				t.Errorf("pprof %v: GET %s answered %d, want %d", on, path, rec.Code, want)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("pprof %v: /healthz answered %d", on, rec.Code)
		}
	}
}
