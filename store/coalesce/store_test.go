package coalesce_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/sqlite"
)

// The decorator against the real stores: which calls reach the inner
// store, and what each caller is answered. The conformance suite runs on
// both stores behind it too (TestStoreCoalesced in store/postgres and
// store/sqlite).

// stores opens each real store for t.
var stores = map[string]func(t *testing.T) store.Store{
	"postgres": func(t *testing.T) store.Store {
		st := postgres.New(testdb.New(t, testdb.MaxConns(4)).Pool)
		t.Cleanup(st.Close)
		return st
	},
	"sqlite": func(t *testing.T) store.Store {
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
}

// gate is a real store whose RecordClaim of the key blocker waits for
// release, so that a test can keep the coalescer's one batch slot busy
// while it queues calls; and which records the keys of every Claim call
// that reaches the store.
type gate struct {
	store.Store
	blocker string
	blocked chan struct{} // closed when the blocker's call arrives
	release chan struct{}

	mu    sync.Mutex
	calls [][]string
}

func newGate(inner store.Store) *gate {
	return &gate{Store: inner, blocker: "blocker", blocked: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) note(ps ...*store.ClaimParams) {
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = p.Key
	}
	g.mu.Lock()
	g.calls = append(g.calls, keys)
	g.mu.Unlock()
}

func (g *gate) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if p.Key == g.blocker {
		close(g.blocked)
		<-g.release
	}
	g.note(p)
	return g.Store.RecordClaim(ctx, p)
}

func (g *gate) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	g.note(ps...)
	return g.Store.RecordClaimMany(ctx, ps)
}

func claimParams(key, claimant string) *store.ClaimParams {
	return &store.ClaimParams{RecordID: store.RecordID{Tenant: "acme", Namespace: "ns", Key: key}, Claimant: claimant,
		LeaseTTL: time.Minute, Retention: time.Hour}
}

type answer struct {
	res *store.ClaimResult
	err error
}

// queueBehindBlocker sends each claim, in order, while a Claim of the
// blocker holds s's one batch slot, waits until each has queued, then lets
// the blocker go and returns every answer in the order of claims.
func queueBehindBlocker(t *testing.T, s *coalesce.Store, g *gate, claims ...*store.ClaimParams) []answer {
	t.Helper()
	ctx := t.Context()
	go func() { _, _ = s.RecordClaim(ctx, claimParams(g.blocker, "blocker")) }()
	<-g.blocked
	answers := make([]answer, len(claims))
	var wg sync.WaitGroup
	for i, p := range claims {
		wg.Go(func() { answers[i].res, answers[i].err = s.RecordClaim(ctx, p) })
		waitQueued(t, s, i+1)
	}
	close(g.release)
	wg.Wait()
	return answers
}

// batchCalls is what idem_db_batch_calls of kind holds: the batches and
// the calls they answered.
func batchCalls(t *testing.T, s *coalesce.Store, kind string) (batches uint64, calls float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == kind }) {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// TestSecondClaimOfAKeyFollows: Claims of one key queued together reach
// the store once: the first goes in the batch, and the others are answered
// from its answer as if they ran right after it (store.DecideClaim on
// ClaimResult.Now): IN_PROGRESS on its token, the same claimant's ACQUIRED
// again. A fingerprint mismatch goes to the store in a batch of its own,
// which keeps it on the record's timeline. A Claim of another key shares
// the batch.
func TestSecondClaimOfAKeyFollows(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newGate(open(t))
			s := coalesce.New(g, coalesce.Options{MaxInFlight: 1, MaxOverflow: -1})
			twice := func(claimant, fingerprint string) *store.ClaimParams {
				p := claimParams("twice", claimant)
				p.Fingerprint = []byte(fingerprint)
				return p
			}
			got := queueBehindBlocker(t, s, g, twice("first", "f"), twice("second", "f"), twice("first", "f"),
				twice("second", "other"), claimParams("else", "third"))
			for i, a := range got {
				if a.err != nil && i != 3 {
					t.Fatalf("claim %d: %v", i, a.err)
				}
			}
			first := got[0].res
			if first.Outcome != store.OutcomeAcquired {
				t.Fatalf("the first Claim: %v, want acquired", first.Outcome)
			}
			if r := got[1].res; r.Outcome != store.OutcomeInProgress || r.Record.Token != first.Record.Token || r.RetryAfter <= 0 {
				t.Errorf("another claimant: %v on token %d, retry after %v; want in_progress on %d", r.Outcome, r.Record.Token, r.RetryAfter, first.Record.Token)
			}
			if r := got[2].res; r.Outcome != store.OutcomeAcquired || r.Record.Token != first.Record.Token {
				t.Errorf("the first claimant again: %v on token %d; want acquired on %d", r.Outcome, r.Record.Token, first.Record.Token)
			}
			if r := got[1].res; r.Record == first.Record {
				t.Error("a follower shares the first Claim's Record; want a copy of its own")
			}
			if !errors.Is(got[3].err, store.ErrFingerprintMismatch) {
				t.Errorf("another fingerprint: %+v, %v; want a fingerprint mismatch", got[3].res, got[3].err)
			}
			if got[4].res.Outcome != store.OutcomeAcquired {
				t.Errorf("a Claim of another key: %v, want acquired", got[4].res.Outcome)
			}
			if want := [][]string{{"blocker"}, {"else", "twice"}, {"twice"}}; !slices.EqualFunc(g.calls, want, slices.Equal) {
				t.Errorf("the store saw the Claims %v; want %v", g.calls, want)
			}
			if n, calls := batchCalls(t, s, "claim"); n != 3 || calls != 6 {
				t.Errorf("idem_db_batch_calls{kind=\"claim\"}: %d batches answering %v calls; want 3 answering 6", n, calls)
			}
		})
	}
}

// TestFollowerThatWouldWriteGoesAgain: a second Claim of a key that would
// write, given the first's answer, is not answered from it: the first was
// refused (another fingerprint), so the second takes the released record
// over in a batch of its own; and one that would take over a record the
// first found released and took goes again and finds it held.
func TestFollowerThatWouldWriteGoesAgain(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inner := open(t)
			ctx := t.Context()
			p := claimParams("released", "w")
			p.Fingerprint = []byte("f")
			res, err := inner.RecordClaim(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := inner.RecordFail(ctx, &store.FailParams{RecordID: p.RecordID, Token: res.Record.Token, Retryable: true}); err != nil {
				t.Fatal(err)
			}
			g := newGate(inner)
			s := coalesce.New(g, coalesce.Options{MaxInFlight: 1, MaxOverflow: -1})
			refused, taker := claimParams("released", "refused"), claimParams("released", "taker")
			refused.Fingerprint, taker.Fingerprint = []byte("g"), []byte("f")
			got := queueBehindBlocker(t, s, g, refused, taker)
			if !errors.Is(got[0].err, store.ErrFingerprintMismatch) {
				t.Fatalf("the refused Claim: %+v, %v; want a fingerprint mismatch", got[0].res, got[0].err)
			}
			if r := got[1]; r.err != nil || r.res.Outcome != store.OutcomeAcquired || !r.res.Takeover {
				t.Fatalf("the Claim with the record's fingerprint: %+v, %v; want a takeover", r.res, r.err)
			}
			if want := [][]string{{"blocker"}, {"released"}, {"released"}}; !slices.EqualFunc(g.calls, want, slices.Equal) {
				t.Errorf("the store saw the Claims %v; want %v", g.calls, want)
			}
		})
	}
}

// TestBatchDeadlineIsUnavailable: a batch that outlasts Options.Deadline
// answers its callers ErrUnavailable, not their own deadline's error, which
// did not pass.
func TestBatchDeadlineIsUnavailable(t *testing.T) {
	t.Parallel()
	s := coalesce.New(stuckClaims{Store: stores["sqlite"](t)}, coalesce.Options{Deadline: 50 * time.Millisecond})
	_, err := s.RecordClaim(t.Context(), claimParams("k", "w"))
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Claim whose batch outlasted its deadline: %v; want ErrUnavailable, and not the caller's deadline", err)
	}
}

// stuckClaims is a store whose Claims never answer before their context
// ends: a database that stopped answering.
type stuckClaims struct{ store.Store }

func (stuckClaims) RecordClaim(ctx context.Context, _ *store.ClaimParams) (*store.ClaimResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestManyCallsOfOneKeyTokenCalls: RecordCompleteMany with two calls of
// one key answers each as if they ran one after the other: the first
// completes the record, the second, the same call again, gets it back.
func TestManyCallsOfOneKeyTokenCalls(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := coalesce.New(open(t), coalesce.Options{})
			ctx := t.Context()
			res, err := s.RecordClaim(ctx, claimParams("k", "w"))
			if err != nil {
				t.Fatal(err)
			}
			p := &store.CompleteParams{RecordID: res.Record.RecordID, Token: res.Record.Token, Result: []byte("r")}
			recs, errs := s.RecordCompleteMany(ctx, []*store.CompleteParams{p, p})
			for i := range recs {
				if errs[i] != nil || recs[i].State != store.StateCompleted || string(recs[i].Result) != "r" {
					t.Errorf("call %d: %+v, %v; want the completed record", i, recs[i], errs[i])
				}
			}
			if n, calls := batchCalls(t, s, "complete"); n != 2 || calls != 2 {
				t.Errorf("idem_db_batch_calls{kind=\"complete\"}: %d batches answering %v calls; want 2 answering 2", n, calls)
			}
		})
	}
}

// getGate is a real store whose RecordGet of the key blocker waits for
// release, and which records the keys of every read that reaches it.
type getGate struct {
	store.Store
	blocked chan struct{}
	release chan struct{}

	mu    sync.Mutex
	reads [][]string
}

func (g *getGate) note(ids ...store.RecordID) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = id.Key
	}
	g.mu.Lock()
	g.reads = append(g.reads, keys)
	g.mu.Unlock()
}

func (g *getGate) RecordGet(ctx context.Context, id store.RecordID) (*store.Record, error) {
	if id.Key == "blocker" {
		close(g.blocked)
		<-g.release
	}
	g.note(id)
	return g.Store.RecordGet(ctx, id)
}

func (g *getGate) RecordGetMany(ctx context.Context, ids []store.RecordID) ([]*store.Record, []error) {
	g.note(ids...)
	return g.Store.RecordGetMany(ctx, ids)
}

// TestReadsQueuedTogetherAreOneRead: reads that queue while a read runs
// reach the store as one many-row read, a key read twice once, each caller
// getting a Record of its own; a key with no record is not found for each
// of its readers. Reads do not wait behind Claims: they are a kind of their
// own.
func TestReadsQueuedTogetherAreOneRead(t *testing.T) {
	t.Parallel()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			g := &getGate{Store: open(t), blocked: make(chan struct{}), release: make(chan struct{})}
			s := coalesce.New(g, coalesce.Options{MaxInFlight: 1, MaxOverflow: -1})
			for _, key := range []string{"a", "b"} {
				if _, err := s.RecordClaim(ctx, claimParams(key, "c")); err != nil {
					t.Fatal(err)
				}
			}
			id := func(key string) store.RecordID { return store.RecordID{Tenant: "acme", Namespace: "ns", Key: key} }
			go func() { _, _ = s.RecordGet(ctx, id("blocker")) }()
			<-g.blocked
			keys := []string{"a", "b", "a", "none", "none"}
			recs, errs := make([]*store.Record, len(keys)), make([]error, len(keys))
			var wg sync.WaitGroup
			for i, key := range keys {
				wg.Go(func() { recs[i], errs[i] = s.RecordGet(ctx, id(key)) })
				for deadline := time.Now().Add(10 * time.Second); s.QueuedGets() < i+1; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d reads queued after 10s, want %d", s.QueuedGets(), i+1)
					}
				}
			}
			close(g.release)
			wg.Wait()
			for i, key := range keys[:3] {
				if errs[i] != nil || recs[i].Key != key || recs[i].State != store.StateProcessing {
					t.Fatalf("read %d of %s: %+v, %v; want its processing record", i, key, recs[i], errs[i])
				}
			}
			if recs[0] == recs[2] {
				t.Error("two readers of one key share a Record; want one each")
			}
			for i := 3; i < 5; i++ {
				if !errors.Is(errs[i], store.ErrNotFound) {
					t.Errorf("read %d of a key with no record: %v; want not found", i, errs[i])
				}
			}
			if want := [][]string{{"blocker"}, {"a", "b", "none"}}; !slices.EqualFunc(g.reads, want, slices.Equal) {
				t.Errorf("the store saw the reads %v; want %v", g.reads, want)
			}
		})
	}
}
