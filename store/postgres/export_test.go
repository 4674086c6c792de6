package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemhq/idem/store"
)

// NewBatching returns a Store on pool that sends every Claim, Complete, Fail
// and Heartbeat as the multi-row batch statement, even a batch of one, with
// at most maxInFlight statements of a kind at once.
func NewBatching(db dbtx, maxInFlight int) *Store {
	s := newStore(db, maxInFlight, defaultMaxRows)
	s.alwaysBatchSQL = true
	return s
}

// ClaimBatch sends calls, whose keys must be distinct, as one Claim batch
// statement and returns each call's answer in the order of calls. A call the
// statement could not settle (a concurrent insert its snapshot missed) gets
// a nil result and no error.
func (s *Store) ClaimBatch(calls []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	batch := make([]*claimCall, len(calls))
	for i, p := range calls {
		batch[i] = &pending[*store.ClaimParams, claimRow]{id: p.RecordID, params: p}
	}
	sorted := sortedCopy(batch)
	s.runClaims(context.Background(), sorted)
	res, errs := make([]*store.ClaimResult, len(calls)), make([]error, len(calls))
	for i, c := range batch {
		switch row := c.res; {
		case c.err != nil:
			errs[i] = c.err
		case row.acquired:
			res[i] = store.Acquired(row.rec)
		case row.rec != nil:
			if d := store.DecideClaim(row.rec, c.params, row.now); d.Action == store.ClaimAnswer {
				res[i], errs[i] = d.Answer, d.Err
			}
		}
	}
	return res, errs
}

// CompleteBatch sends calls, whose keys must be distinct, as one Complete
// batch statement and returns each call's answer in the order of calls.
func (s *Store) CompleteBatch(ctx context.Context, calls []*store.CompleteParams) ([]*store.Record, []error) {
	batch := make([]*tokenBatchCall, len(calls))
	for i, p := range calls {
		batch[i] = &pending[*store.TokenCall, tokenRow]{id: p.RecordID, params: p.Call()}
	}
	s.runTokens(tokenKinds[store.CallComplete])(ctx, sortedCopy(batch))
	recs, errs := make([]*store.Record, len(calls)), make([]error, len(calls))
	for i, c := range batch {
		switch row := c.res; {
		case c.err != nil:
			errs[i] = c.err
		case row.rec == nil:
			errs[i] = store.ErrNotFound
		case row.changed:
			recs[i] = row.rec
		default:
			if d := c.params.Decide(row.rec); d.Action == store.ChangeRepeat {
				recs[i] = row.rec
			} else {
				errs[i] = d.Err
			}
		}
	}
	return recs, errs
}

// sortedCopy is batch in primary-key order, as a coalescer hands it over.
func sortedCopy[P, R any](batch []*pending[P, R]) []*pending[P, R] {
	c := &coalescer[P, R]{maxRows: len(batch), queue: append([]*pending[P, R](nil), batch...)}
	return c.take()
}

// Queued is how many Claims wait in the store's coalescer for a statement.
func (s *Store) Queued() int {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	return len(s.claims.queue)
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
	return b.pool.Config().ConnConfig.Tracer != nil, b.claims.tracer != nil
}

// ClaimTogether runs calls, each on its own context, through the Claim
// coalescer as one batch: the coalescer's statement slots are held while
// the calls queue, then one drain takes them all. The keys must be distinct
// and the coalescer idle.
func (s *Store) ClaimTogether(ctxs []context.Context, calls []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	c := s.claims
	c.mu.Lock()
	c.inFlight = c.maxInFlight + maxOverflow // nobody starts a statement
	c.mu.Unlock()
	res, errs := make([]*store.ClaimResult, len(calls)), make([]error, len(calls))
	var wg sync.WaitGroup
	for i, p := range calls {
		wg.Go(func() { res[i], errs[i] = s.RecordClaim(ctxs[i], p) })
	}
	for {
		c.mu.Lock()
		queued := len(c.queue)
		if queued == len(calls) {
			c.inFlight = 1 // the drain below; it gives the slot back
		}
		c.mu.Unlock()
		if queued == len(calls) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	go c.drain()
	wg.Wait()
	return res, errs
}

// Listens is how many times the store's listener started listening: once
// per connection it made.
func (s *Store) Listens() int64 { return s.listen.listens.Load() }

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
		{"claim", claimSQL, one + `, 'c', '', 60000000, 3600000000, '', false`},
		{"claim batch", claimBatchSQL, two + `, '{c,c}', '{"",""}', '{60000000,60000000}', '{3600000000,3600000000}', '{"",""}', '{f,f}'`},
		{"complete", tokenCalls[store.CallComplete], one + `, 1, 'result'`},
		{"complete batch", tokenKinds[store.CallComplete].batch, two + `, '{1,2}', '{r1,r2}'`},
		{"fail", tokenCalls[store.CallFail], one + `, 1, 'error', true`},
		{"fail batch", tokenKinds[store.CallFail].batch, two + `, '{1,2}', '{e1,e2}', '{t,f}'`},
		{"heartbeat", tokenCalls[store.CallHeartbeat], one + `, 1, 60000000`},
		{"heartbeat batch", tokenKinds[store.CallHeartbeat].batch, two + `, '{1,2}', '{60000000,60000000}'`},
		{"lookup", getSQL, one},
		{"a waiting claim's mark", markWaitedSQL, one + `, 1`},
		{"resolve", resolveSQL, one + `, 'completed', 'result', ''`},
		{"delete", deleteSQL, one},
	}
}
