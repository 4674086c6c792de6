package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newHTTPHandler serves the operator endpoints: /metrics in Prometheus
// format, /healthz (the process is alive) and /readyz (ready returns nil: the
// database answers and its schema is the one this binary expects), and with
// withPprof Go's profiler under /debug/pprof/.
func newHTTPHandler(reg *prometheus.Registry, ready func(context.Context) error, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	if withPprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// poolCollectors exposes the pgx pool's statistics, read at scrape time.
func poolCollectors(pool *pgxpool.Pool) []prometheus.Collector {
	gauge := func(name, help string, f func(*pgxpool.Stat) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(pool.Stat()) })
	}
	counter := func(name, help string, f func(*pgxpool.Stat) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(pool.Stat()) })
	}
	return []prometheus.Collector{
		gauge("idem_db_pool_max_conns", "Largest number of connections the pool opens.",
			func(s *pgxpool.Stat) float64 { return float64(s.MaxConns()) }),
		gauge("idem_db_pool_total_conns", "Connections open now.",
			func(s *pgxpool.Stat) float64 { return float64(s.TotalConns()) }),
		gauge("idem_db_pool_acquired_conns", "Connections in use now.",
			func(s *pgxpool.Stat) float64 { return float64(s.AcquiredConns()) }),
		gauge("idem_db_pool_idle_conns", "Connections idle now.",
			func(s *pgxpool.Stat) float64 { return float64(s.IdleConns()) }),
		counter("idem_db_pool_acquires_total", "Connections acquired from the pool.",
			func(s *pgxpool.Stat) float64 { return float64(s.AcquireCount()) }),
		counter("idem_db_pool_empty_acquires_total", "Acquires that had to wait because no connection was idle: a sign the pool is too small.",
			func(s *pgxpool.Stat) float64 { return float64(s.EmptyAcquireCount()) }),
		counter("idem_db_pool_acquire_wait_seconds_total", "Time spent waiting for a connection.",
			func(s *pgxpool.Stat) float64 { return s.AcquireDuration().Seconds() }),
	}
}
