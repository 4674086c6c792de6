package postgres

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
)

// NewBatching returns a Store on pool that sends every Claim, Complete, Fail
// and Heartbeat as the many-row statement, even a batch of one, with at
// most maxInFlight statements of a kind at once.
func NewBatching(pool *pgxpool.Pool, maxInFlight int) *Store {
	s := newStore(pool, coalesce.Config{MaxInFlight: maxInFlight})
	s.manyOnly = true
	return s
}

// ClaimBatch sends calls, whose keys must be distinct, as one claimManySQL
// and returns each call's answer in the order of calls. A call the
// statement could not settle (a concurrent insert its snapshot missed, a
// row that changed under it) gets a nil result and no error.
func (s *Store) ClaimBatch(calls []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	sorted, order := sortedByID(calls, func(p *store.ClaimParams) store.RecordID { return p.RecordID })
	res, errs := make([]*store.ClaimResult, len(calls)), make([]error, len(calls))
	rows, err := driver{q: s.pool}.claimMany(context.Background(), sorted)
	for i, p := range sorted {
		j := order[i]
		switch {
		case err != nil:
			errs[j] = err
		case rows[i].acquired:
			res[j] = store.Acquired(rows[i].rec, rows[i].now)
		case rows[i].rec != nil:
			if d := store.DecideClaim(rows[i].rec, p, rows[i].now); d.Action == store.ClaimAnswer {
				res[j], errs[j] = d.Answer, d.Err
			}
		}
	}
	return res, errs
}

// CompleteBatch sends calls, whose keys must be distinct, as one
// completeManySQL and returns each call's answer in the order of calls.
func (s *Store) CompleteBatch(ctx context.Context, calls []*store.CompleteParams) ([]*store.Record, []error) {
	tokenCalls := make([]*store.TokenCall, len(calls))
	for i, p := range calls {
		tokenCalls[i] = p.Call()
	}
	sorted, order := sortedByID(tokenCalls, func(c *store.TokenCall) store.RecordID { return c.RecordID })
	recs, errs := make([]*store.Record, len(calls)), make([]error, len(calls))
	rows, err := driver{q: s.pool}.tokenCallMany(ctx, store.CallComplete, sorted)
	for i, c := range sorted {
		j := order[i]
		switch {
		case err != nil:
			errs[j] = err
		case rows[i].rec == nil:
			errs[j] = store.ErrNotFound
		case rows[i].changed:
			recs[j] = rows[i].rec
		default:
			if d := c.Decide(rows[i].rec); d.Action == store.ChangeRepeat {
				recs[j] = rows[i].rec
			} else {
				errs[j] = d.Err
			}
		}
	}
	return recs, errs
}

// sortedByID is calls in primary-key order, as a coalescer hands them to
// the driver, and the index in calls of each.
func sortedByID[T any](calls []T, idOf func(T) store.RecordID) ([]T, []int) {
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return coalesce.CompareIDs(idOf(calls[a]), idOf(calls[b])) })
	sorted := make([]T, len(calls))
	for i, j := range order {
		sorted[i] = calls[j]
	}
	return sorted, order
}

// Queued is how many Claims wait in the store's coalescer for a statement.
func (s *Store) Queued() int { return s.claims.Queued() }

// Sweeper runs the sweeper's statements in a transaction, so that a test
// can hold the locks they take for as long as it likes.
type Sweeper struct{ d driver }

// SweeperOn returns the Sweeper of tx.
func SweeperOn(tx pgx.Tx) Sweeper { return Sweeper{driver{q: tx}} }

// SweepExpire runs the sweeper's expiry in the transaction.
func (s Sweeper) SweepExpire(ctx context.Context, limit int) (int, error) {
	return s.d.sweepExpire(ctx, limit)
}

// SweepPurge runs the sweeper's purge in the transaction.
func (s Sweeper) SweepPurge(ctx context.Context, limit int) (int, error) {
	return s.d.sweepPurge(ctx, limit)
}

// BatchCalls is what idem_db_batch_calls holds for kind: the statements
// observed and the calls they carried.
func (s *Store) BatchCalls(kind string) (statements uint64, calls float64) {
	m := &dto.Metric{}
	if err := s.batchRows.WithLabelValues(kind).(prometheus.Metric).Write(m); err != nil {
		panic(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// Traced reports whether the backend's pool has a pgx tracer and whether
// its coalescers make call spans.
func (b *Backend) Traced() (pool, calls bool) {
	return b.pool.Config().ConnConfig.Tracer != nil, b.claims.Traced()
}

// Listens is how many times the store's listener started listening: once
// per connection it made.
func (s *Store) Listens() int64 { return s.listen.listens.Load() }

// Polls is how many times a polling store looked at its watched records.
func (s *Store) Polls() int64 { return s.listen.polls.Load() }

// HotStatement is a statement of the calls workers make (Claim, Complete,
// Fail, Heartbeat, Lookup, a waiting Claim) and of the admin calls on one
// record, with arguments written as SQL for EXECUTE. A held record's lapse
// is planned per execution instead (holdSQL).
type HotStatement struct{ Name, SQL, Args string }

// HotStatements is every prepared statement on one record or a batch of
// records, for the plan test.
func HotStatements() []HotStatement {
	one := `'acme', 'ns', 'k'`
	two := `'{acme,acme}', '{ns,ns}', '{k1,k2}'`
	return []HotStatement{
		{"claim", claimOneSQL, one + `, 'c', '', 60000000, 3600000000, '', false`},
		{"claim if absent", claimIfAbsentSQL, one + `, 'c', '', 60000000, 3600000000, '', false`},
		{"claim's read", claimSeenSQL, one},
		{"claim batch", claimManySQL, two + `, '{c,c}', '{"",""}', '{60000000,60000000}', '{3600000000,3600000000}', '{"",""}', '{f,f}'`},
		{"complete", completeOneSQL, one + `, 1, 'result'`},
		{"complete held", completeHeldSQL, one + `, 1, 'result'`},
		{"fail held", failHeldSQL, one + `, 1, 'error', true`},
		{"heartbeat held", heartbeatHeldSQL, one + `, 1, 60000000`},
		{"complete batch", completeManySQL, two + `, '{1,2}', '{r1,r2}'`},
		{"fail", failOneSQL, one + `, 1, 'error', true`},
		{"fail batch", failManySQL, two + `, '{1,2}', '{e1,e2}', '{t,f}'`},
		{"heartbeat", heartbeatOneSQL, one + `, 1, 60000000`},
		{"heartbeat batch", heartbeatManySQL, two + `, '{1,2}', '{60000000,60000000}'`},
		{"lookup", getSQL, one},
		{"lookup batch", getManySQL, two},
		{"a waiting claim's mark", markWaitedSQL, one + `, 1`},
		{"resolve", resolveSQL, one + `, 'completed', 'result', ''`},
		{"delete", deleteSQL, one},
	}
}
