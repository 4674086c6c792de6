package server

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/server/middleware"
	"github.com/idemhq/idem/server/services"
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
	service       atomic.Pointer[services.Service] // whose waits the gauges read
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
	}
	waits := func(refused bool) float64 {
		s := m.service.Load()
		if s == nil {
			return 0
		}
		waiting, n := s.Waiting()
		if refused {
			return float64(n)
		}
		return float64(waiting)
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.GRPC, m.claims, m.takeovers, m.leaseLost,
		m.sweptExpired, m.sweptPurged, m.sweepErrors, m.sweepBusy, m.sweepDuration, m.records,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idem_waiting_claims",
			Help: "Claims waiting now for a record's lease to end (ClaimRequest.wait).",
		}, func() float64 { return waits(false) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idem_waits_refused_total",
			Help: "Claims that asked to wait but answered IN_PROGRESS at once: --max-waiters or --max-waiters-per-tenant was reached.",
		}, func() float64 { return waits(true) }),
	)
	return m
}

// watch makes m count the waits of svc, and label the namespaces that
// tenants' allow-lists name literally, whatever else is claimed first.
func (m *Metrics) watch(svc *services.Service, tenants *services.Tenants) {
	if m == nil {
		return
	}
	m.service.Store(svc)
	if tenants != nil {
		m.namespaces.addLiteral(tenants.Namespaces())
	}
}

// countAnswers counts what the services answered, from each call's request
// and response or error, batch items included: Claims by namespace and
// outcome, takeovers, and token calls whose lease was lost.
func (m *Metrics) countAnswers(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	errs := []error{err}
	switch resp := resp.(type) {
	case *idemv1.ClaimResponse:
		m.countClaim(req.(*idemv1.ClaimRequest).GetNamespace(), resp)
	case *idemv1.BatchClaimResponse:
		items := req.(*idemv1.BatchClaimRequest).GetRequests()
		for i, r := range resp.GetResults() {
			if r.GetResponse() != nil && i < len(items) {
				m.countClaim(items[i].GetNamespace(), r.GetResponse())
			}
		}
	}
	if services.IsBatch(info.FullMethod) {
		errs = middleware.BatchErrors(resp)
	}
	for _, e := range errs {
		if errorReason(e) == "LEASE_LOST" {
			m.leaseLost.Inc()
		}
	}
	return resp, err
}

func (m *Metrics) countClaim(namespace string, resp *idemv1.ClaimResponse) {
	outcome := strings.ToLower(strings.TrimPrefix(resp.GetOutcome().String(), "OUTCOME_"))
	m.claims.WithLabelValues(m.namespaces.label(namespace), outcome).Inc()
	if resp.GetOutcome() == idemv1.Outcome_OUTCOME_ACQUIRED && resp.GetRecord().GetAttempt() > 1 {
		m.takeovers.Inc()
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
// besides those the tenants' allow-lists name literally (which New adds): the first n that Claims use. Claims in any other namespace count
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
