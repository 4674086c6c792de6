package readfirst_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/readfirst"
	"github.com/idemhq/idem/store/sqlite"
)

// The conformance suite runs on both stores behind this layer too
// (TestStoreReadFirst in store/postgres and store/sqlite); these tests say
// which calls reach the inner store's Claim.

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

// counting counts the Claims that reach the inner store.
type counting struct {
	store.Store
	claims atomic.Int64
}

func (c *counting) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	c.claims.Add(1)
	return c.Store.RecordClaim(ctx, p)
}

func (c *counting) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	c.claims.Add(int64(len(ps)))
	return c.Store.RecordClaimMany(ctx, ps)
}

func claimParams(key string, fp string) *store.ClaimParams {
	return &store.ClaimParams{
		RecordID:    store.RecordID{Tenant: "t", Namespace: "ns", Key: key},
		Fingerprint: []byte(fp),
		LeaseTTL:    time.Minute,
		Retention:   time.Hour,
	}
}

func forEachStore(t *testing.T, test func(t *testing.T, inner *counting, st *readfirst.Store)) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inner := &counting{Store: open(t)}
			test(t, inner, readfirst.New(inner, 0))
		})
	}
}

// finish claims and completes key through st.
func finish(t *testing.T, st store.Store, key, fp string) *store.Record {
	t.Helper()
	ctx := t.Context()
	res, err := st.RecordClaim(ctx, claimParams(key, fp))
	if err != nil || res.Outcome != store.OutcomeAcquired {
		t.Fatalf("claim %s: %v, %v", key, res, err)
	}
	rec, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: res.Record.RecordID, Token: res.Record.Token, Result: []byte("done")})
	if err != nil {
		t.Fatalf("complete %s: %v", key, err)
	}
	return rec
}

func TestReplayIsARead(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, inner *counting, st *readfirst.Store) {
		ctx := t.Context()
		done := finish(t, st, "k", "fp")
		before := inner.claims.Load()
		for range 3 {
			res, err := st.RecordClaim(ctx, claimParams("k", "fp"))
			if err != nil || res.Outcome != store.OutcomeCompleted || string(res.Record.Result) != "done" || res.Record.Token != done.Token {
				t.Fatalf("replay: %+v, %v; want COMPLETED with the result and token %d", res, err, done.Token)
			}
		}
		if _, err := st.RecordClaim(ctx, claimParams("k", "other")); !errors.Is(err, store.ErrFingerprintMismatch) {
			t.Fatalf("another fingerprint: %v; want ErrFingerprintMismatch", err)
		}
		ress, errs := st.RecordClaimMany(ctx, []*store.ClaimParams{claimParams("k", "fp"), claimParams("new", "")})
		if errs[0] != nil || ress[0].Outcome != store.OutcomeCompleted || errs[1] != nil || ress[1].Outcome != store.OutcomeAcquired {
			t.Fatalf("many: %+v %v; want COMPLETED and ACQUIRED", ress, errs)
		}
		if got := inner.claims.Load() - before; got != 2 {
			t.Fatalf("%d Claims reached the inner store; want 2 (the refused fingerprint's, which the inner store keeps on the record's timeline, and the new key's): replays of a finished record are reads", got)
		}
	})
}

func TestDeletedRecordIsClaimedAfresh(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, inner *counting, st *readfirst.Store) {
		ctx := t.Context()
		done := finish(t, st, "k", "")
		if _, err := st.RecordDelete(ctx, &store.DeleteParams{RecordID: done.RecordID}); err != nil {
			t.Fatal(err)
		}
		res, err := st.RecordClaim(ctx, claimParams("k", ""))
		if err != nil || res.Outcome != store.OutcomeAcquired || res.Record.Token <= done.Token || res.Record.Attempt != 1 {
			t.Fatalf("claim after delete: %+v, %v; want a new record ACQUIRED with a greater token", res, err)
		}
		// A released record is claimed too: only a finished one is replayed.
		if _, err := st.RecordFail(ctx, &store.FailParams{RecordID: res.Record.RecordID, Token: res.Record.Token, Error: "again", Retryable: true}); err != nil {
			t.Fatal(err)
		}
		if res, err := st.RecordClaim(ctx, claimParams("k", "")); err != nil || res.Outcome != store.OutcomeAcquired {
			t.Fatalf("claim after release: %+v, %v; want ACQUIRED", res, err)
		}
	})
}

// TestReplaysRaceADelete: Claims of a finished record while it is deleted
// get a replay or, once the delete is done, the new record: one of them
// ACQUIRED at most, the others IN_PROGRESS on it.
func TestReplaysRaceADelete(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, inner *counting, st *readfirst.Store) {
		ctx := t.Context()
		done := finish(t, st, "k", "")
		var (
			wg       sync.WaitGroup
			acquired atomic.Int64
			mu       sync.Mutex
			outcomes []store.Outcome
		)
		start := make(chan struct{})
		for range 16 {
			wg.Go(func() {
				<-start
				for range 10 {
					res, err := st.RecordClaim(ctx, claimParams("k", ""))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					outcomes = append(outcomes, res.Outcome)
					mu.Unlock()
					if res.Outcome == store.OutcomeAcquired {
						acquired.Add(1)
					}
				}
			})
		}
		close(start)
		if _, err := st.RecordDelete(ctx, &store.DeleteParams{RecordID: done.RecordID}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if n := acquired.Load(); n > 1 {
			t.Fatalf("%d Claims ACQUIRED the key after its delete; want at most one", n)
		}
		for _, o := range outcomes {
			if o != store.OutcomeCompleted && o != store.OutcomeAcquired && o != store.OutcomeInProgress {
				t.Fatalf("outcome %v; want COMPLETED before the delete, then ACQUIRED or IN_PROGRESS", o)
			}
		}
	})
}
