package store

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Layered is a Backend whose calls go through a decorator of another
// Backend (a coalescer, a read-first layer): the decorator answers the
// Store's methods, and the inner Backend keeps its schema and its end. Its
// metrics are both's.
type Layered struct {
	Store
	inner      Backend
	collectors []prometheus.Collector
}

var _ Backend = (*Layered)(nil)

// Layer returns inner with its Store's calls answered by outer, which wraps
// inner; collectors are outer's own metrics.
func Layer(inner Backend, outer Store, collectors ...prometheus.Collector) *Layered {
	return &Layered{Store: outer, inner: inner, collectors: collectors}
}

// Migrate implements Backend.
func (l *Layered) Migrate(ctx context.Context, logger *slog.Logger) ([]int, error) {
	return l.inner.Migrate(ctx, logger)
}

// SchemaVersion implements Backend.
func (l *Layered) SchemaVersion(ctx context.Context) (int, error) { return l.inner.SchemaVersion(ctx) }

// LatestVersion implements Backend.
func (l *Layered) LatestVersion() int { return l.inner.LatestVersion() }

// Collectors implements Backend.
func (l *Layered) Collectors() []prometheus.Collector {
	return append(l.inner.Collectors(), l.collectors...)
}

// Close implements Backend.
func (l *Layered) Close() error { return l.inner.Close() }
