package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

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

// Traced reports whether the backend's pool has a pgx tracer.
func (b *Backend) Traced() bool { return b.pool.Config().ConnConfig.Tracer != nil }

// Listens is how many times the store's listener started listening: once
// per connection it made.
func (s *Store) Listens() int64 { return s.listen.Listens() }

// Polls is how many times a polling store looked at its watched records.
func (s *Store) Polls() int64 { return s.listen.Polls() }

// HotStatement is a statement of the calls workers make (Claim, Complete,
// Fail, Heartbeat, Lookup, a waiting Claim) and of the admin calls on one
// record, with arguments written as SQL for EXECUTE.
type HotStatement struct{ Name, SQL, Args string }

// HotStatements is every prepared statement on one record or a batch of
// records, for the plan test.
func HotStatements() []HotStatement {
	one := `'acme', 'ns', 'k'`
	two := `'{acme,acme}', '{ns,ns}', '{k1,k2}'`
	return []HotStatement{
		{"claim", claimSQL, one + `, 'c', '', 60000000, 3600000000, '', false`},
		{"claim batch", claimManySQL, two + `, '{c,c}', '{"",""}', '{60000000,60000000}', '{3600000000,3600000000}', '{"",""}', '{f,f}'`},
		{"takeover", takeOverSQL, one + `, '5', 'c', 60000000, 3600000000, '', false, 4, 'expired', 'b'`},
		{"hold", holdSQL, one + `, '5'`},
		{"complete", completeOneSQL, one + `, 1, 'result'`},
		{"complete batch", completeManySQL, two + `, '{1,2}', '{r1,r2}'`},
		{"fail", failOneSQL, one + `, 1, 'error', true`},
		{"fail batch", failManySQL, two + `, '{1,2}', '{e1,e2}', '{t,f}'`},
		{"heartbeat", heartbeatOneSQL, one + `, 1, 60000000`},
		{"heartbeat batch", heartbeatManySQL, two + `, '{1,2}', '{60000000,60000000}'`},
		{"lookup", getSQL, one},
		{"lookup batch", getManySQL, two},
		{"a waiting claim's mark", markWaitedSQL, one + `, 1`},
		{"resolve", resolveSQL, one + `, 'completed', 'result', '', 0, 'acme', 'alice', '', 'why'`},
		{"delete", deleteSQL, one + `, 'acme', 'alice', '', 'why'`},
		{"fingerprint mismatch", mismatchSQL, one + `, 'c', 'fp'`},
		{"finish a step", stepOneSQL, one + `, 1, 'charge', 'ch_1', false, 64, 65536`},
		{"start a step", stepOneSQL, one + `, 1, 'charge', NULL, true, 64, 65536`},
		{"step batch", stepManySQL, two + `, '{1,2}', '{a,b}', '{"\\x01",NULL}', '{f,t}', 64, 65536`},
	}
}

// ListHeldSQL is the statement of RecordListHeld, for the plan test.
var ListHeldSQL = listHeldSQL
