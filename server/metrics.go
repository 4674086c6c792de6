package server

import (
	"errors"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idemhq/idem/store"
)

// Metrics are idem's Prometheus metrics: the gRPC server metrics of
// go-grpc-middleware's provider and idem's own. A nil *Metrics records
// nothing, so tests and tools may leave it out.
type Metrics struct {
	// Registry holds every metric below plus the Go and process collectors;
	// serve it on /metrics.
	Registry *prometheus.Registry
	// GRPC is the gRPC server metrics; its interceptor goes first in the chain.
	GRPC *grpcprom.ServerMetrics

	claims        *prometheus.CounterVec
	namespaces    *namespaceLabels
	takeovers     prometheus.Counter
	leaseLost     prometheus.Counter
	sweptExpired  prometheus.Counter
	sweptPurged   prometheus.Counter
	sweepErrors   prometheus.Counter
	sweepBusy     prometheus.Counter
	sweepDuration prometheus.Histogram
	records       *prometheus.GaugeVec
	waitingClaims prometheus.Gauge
	waitsRefused  prometheus.Counter
}

// NewMetrics creates the metrics in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		GRPC: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets([]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}))),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_claims_total",
			Help: "Claims answered, by namespace and outcome (acquired, in_progress, completed, failed, unresolved). Namespaces beyond the labelled ones count as _other.",
		}, []string{"namespace", "outcome"}),
		namespaces: newNamespaceLabels(),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_takeovers_total",
			Help: "Claims that acquired a record an earlier attempt had held (lapsed lease, EXPIRED or RELEASED).",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_lease_lost_total",
			Help: "Complete, Fail and Heartbeat calls rejected because their token was superseded.",
		}),
		sweptExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_sweeper_expired_total",
			Help: "PROCESSING records whose lapsed lease the sweeper marked EXPIRED (or UNRESOLVED), counted after each batch.",
		}),
		sweptPurged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_sweeper_purged_total",
			Help: "Records the sweeper deleted after their retention, counted after each batch.",
		}),
		sweepBusy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_sweeper_busy_seconds_total",
			Help: "Time the sweeper spent in passes (its batches and the rests between them), counted as it goes: its rate is the share of time spent sweeping, during one long pass too.",
		}),
		sweepErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_sweeper_errors_total",
			Help: "Sweeper passes that ended in an error.",
		}),
		sweepDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_sweep_duration_seconds",
			Help:    "How long one sweeper pass took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		records: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idem_records",
			Help: "Records per state across all tenants, as counted by this replica's sweeper at its last pass.",
		}, []string{"state"}),
		waitingClaims: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_waiting_claims",
			Help: "Claims waiting now for a record's lease to end (ClaimRequest.wait).",
		}),
		waitsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_waits_refused_total",
			Help: "Claims that asked to wait but answered IN_PROGRESS at once: --max-waiters or --max-waiters-per-tenant was reached.",
		}),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.GRPC, m.claims, m.takeovers, m.leaseLost,
		m.sweptExpired, m.sweptPurged, m.sweepErrors, m.sweepBusy, m.sweepDuration, m.records,
		m.waitingClaims, m.waitsRefused,
	)
	return m
}

func (m *Metrics) observeClaim(namespace string, res *store.ClaimResult) {
	if m == nil {
		return
	}
	m.claims.WithLabelValues(m.namespaces.label(namespace), res.Outcome.String()).Inc()
	if res.Takeover {
		m.takeovers.Inc()
	}
}

func (m *Metrics) waiting(delta float64) {
	if m != nil {
		m.waitingClaims.Add(delta)
	}
}

func (m *Metrics) observeWaitRefused() {
	if m != nil {
		m.waitsRefused.Inc()
	}
}

func (m *Metrics) observeTokenCall(err error) {
	if m != nil && errors.Is(err, store.ErrLeaseLost) {
		m.leaseLost.Inc()
	}
}

// ObserveSweep records one sweeper pass: its duration, and whether it
// failed. A maintenance.Sweeper with Metrics set calls it after every pass
// (and counts the records and the time as the pass goes,
// ObserveSweepProgress); a nil Metrics records nothing.
func (m *Metrics) ObserveSweep(took time.Duration, err error) {
	if m == nil {
		return
	}
	m.sweepDuration.Observe(took.Seconds())
	if err != nil {
		m.sweepErrors.Inc()
	}
}

// ObserveSweepProgress counts what a sweeper pass did since it last said:
// records expired and purged, and the time spent. A pass with a large
// backlog lasts long; counted only at its end, it would show nothing until
// then.
func (m *Metrics) ObserveSweepProgress(expired, purged int, busy time.Duration) {
	if m == nil {
		return
	}
	m.sweptExpired.Add(float64(expired))
	m.sweptPurged.Add(float64(purged))
	m.sweepBusy.Add(busy.Seconds())
}

// SetRecordCounts sets the idem_records gauge; every state is set, so a
// state that emptied shows 0 rather than its last count.
func (m *Metrics) SetRecordCounts(counts map[store.State]int64) {
	if m == nil {
		return
	}
	for _, st := range []store.State{store.StateProcessing, store.StateCompleted, store.StateFailed, store.StateReleased, store.StateExpired, store.StateUnresolved} {
		m.records.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
}

// LimitNamespaceLabels sets how many namespaces idem_claims_total labels
// besides those the tenants' allow-lists name literally (which NewService
// adds): the first n that Claims use. Claims in any other namespace count
// as OtherNamespace, so no caller can add series without bound. It
// defaults to DefaultNamespaceLabels; call it before serving.
func (m *Metrics) LimitNamespaceLabels(n int) {
	if m == nil {
		return
	}
	m.namespaces.mu.Lock()
	m.namespaces.max = max(n, 0)
	m.namespaces.mu.Unlock()
}
