package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The token counter lives in memory for one batch (writer.go): read at the
// batch's first token, written back before COMMIT. These tests hold it to
// what the one UPDATE per token guaranteed: tokens strictly increase, and no
// committed token is above the committed counter.

// requireTokensCovered fails unless the committed counter is at least every
// committed token.
func (f *batchFixture) requireTokensCovered(t *testing.T) {
	t.Helper()
	var maxToken int64
	if err := f.raw.QueryRowContext(f.ctx, "SELECT coalesce(max(token), 0) FROM idem_records").Scan(&maxToken); err != nil {
		t.Fatal(err)
	}
	if counter := f.tokenCounter(t); counter < maxToken {
		t.Fatalf("token counter %d is below the committed token %d", counter, maxToken)
	}
}

// TestTokensIncreaseAcrossBatches: tokens drawn in one batch and in the
// batches after it, also after the records are deleted or purged, are
// greater than all before them, and the counter holds the last.
func TestTokensIncreaseAcrossBatches(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	var last int64
	for round := range 3 {
		res := make([]claimAnswer, 4)
		var calls []func()
		for i := range res {
			p := batchClaim(fmt.Sprintf("k%d", i), "w") // the same keys every round
			calls = append(calls, func() { res[i].res, res[i].err = f.s.RecordClaim(f.ctx, p) })
		}
		f.oneBatch(t, calls...)
		for i, r := range res {
			if r.err != nil || r.res.Outcome != store.OutcomeAcquired {
				t.Fatalf("round %d claim %d: %+v, %v", round, i, r.res, r.err)
			}
			if r.res.Record.Token <= last {
				t.Fatalf("round %d claim %d: token %d, not above the earlier %d", round, i, r.res.Record.Token, last)
			}
			last = r.res.Record.Token
		}
		if got := f.tokenCounter(t); got != last {
			t.Fatalf("round %d: counter %d, want the last token %d", round, got, last)
		}
		// Gone, one by delete and the rest by a purge: the next round
		// creates them anew.
		if _, err := f.s.RecordDelete(f.ctx, &store.DeleteParams{RecordID: batchID("k0")}); err != nil {
			t.Fatal(err)
		}
		f.rawExec(t, `UPDATE idem_records SET state = 'completed', expires_at = 1`)
		if n, err := f.s.SweepPurge(f.ctx, 100); err != nil || n != len(res)-1 {
			t.Fatalf("purge: %d, %v", n, err)
		}
	}
}

// TestTokensAfterAFailedBatch: a batch given up by a call that drew a token
// and then failed commits no counter, however many tokens its calls drew;
// tokens after it are above every committed one.
func TestTokensAfterAFailedBatch(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	first := f.acquire(t, "first")

	var drawn int64
	var lostErr, failedErr, afterErr error
	f.oneBatch(t,
		func() { _, lostErr = f.s.RecordClaim(f.ctx, batchClaim("lost", "w")) },
		func() {
			failedErr = f.s.inWriteTx(f.ctx, func(tx *writeTx, _ time.Time) error {
				var err error
				if drawn, err = tx.drawToken(); err != nil {
					return err
				}
				return errors.New("gave up")
			})
		},
		func() { _, afterErr = f.s.RecordClaim(f.ctx, batchClaim("after-call", "w")) },
	)
	if failedErr == nil || errors.Is(failedErr, store.ErrUnavailable) || drawn != first.Token+2 {
		t.Fatalf("the failing call: drew %d, %v; want %d and its own error", drawn, failedErr, first.Token+2)
	}
	for name, err := range map[string]error{"before": lostErr, "after": afterErr} {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("the claim %s the failing call: %v; want ErrUnavailable", name, err)
		}
	}
	if got := f.tokenCounter(t); got != first.Token {
		t.Fatalf("counter %d after the failed batch, want %d", got, first.Token)
	}
	f.requireGone(t, "lost")
	f.requireGone(t, "after-call")
	next := f.acquire(t, "lost")
	if next.Token <= first.Token {
		t.Fatalf("token %d after the failed batch, not above the committed %d", next.Token, first.Token)
	}
	f.requireTokensCovered(t)
}

// TestTokensAcrossStoresTakingTurns: two Stores on one file (a Store and a
// tool that writes to its file) draw from one counter. Each batch reads it again, so tokens that one Store drew since
// the other's last batch are never drawn twice.
func TestTokensAcrossStoresTakingTurns(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	other, err := Open(f.ctx, f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	stores := []*Store{f.s, other}
	var last int64
	for i := range 20 {
		st := stores[i%2]
		res, err := st.RecordClaim(f.ctx, batchClaim(fmt.Sprint("k", i), "w"))
		if err != nil || res.Outcome != store.OutcomeAcquired {
			t.Fatalf("claim %d: %+v, %v", i, res, err)
		}
		if res.Record.Token <= last {
			t.Fatalf("claim %d through store %d: token %d, not above the earlier %d", i, i%2, res.Record.Token, last)
		}
		last = res.Record.Token
	}
	if got := f.tokenCounter(t); got != last {
		t.Fatalf("counter %d, want %d", got, last)
	}
}

// TestTokensAcrossReopen: a Store opened again on the file draws above
// every token drawn before, also when the records holding them are gone.
func TestTokensAcrossReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	var last int64
	for round := range 3 {
		s, err := Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			res, err := s.RecordClaim(t.Context(), batchClaim(fmt.Sprint("k", i), "w"))
			if err != nil || res.Outcome != store.OutcomeAcquired {
				t.Fatalf("round %d claim %d: %+v, %v", round, i, res, err)
			}
			if res.Record.Token <= last {
				t.Fatalf("round %d claim %d: token %d, not above the earlier %d", round, i, res.Record.Token, last)
			}
			last = res.Record.Token
			if _, err := s.RecordDelete(t.Context(), &store.DeleteParams{RecordID: batchID(fmt.Sprint("k", i))}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClaimsRacingInOneBatch: Claims of one key in one batch, by different
// claimants, acquire once, a new key and a lapsed one alike.
func TestClaimsRacingInOneBatch(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	lapsed := f.acquire(t, "lapsed")
	f.lapse(t, "lapsed")
	for _, key := range []string{"new", "lapsed"} {
		res := make([]claimAnswer, 8)
		var calls []func()
		for i := range res {
			p := batchClaim(key, fmt.Sprint("w", i))
			calls = append(calls, func() { res[i].res, res[i].err = f.s.RecordClaim(f.ctx, p) })
		}
		f.oneBatch(t, calls...)
		acquired := 0
		for i, r := range res {
			switch {
			case r.err != nil:
				t.Fatalf("%s claim %d: %v", key, i, r.err)
			case r.res.Outcome == store.OutcomeAcquired:
				acquired++
				if i != 0 || r.res.Takeover != (key == "lapsed") || r.res.Record.Token <= lapsed.Token {
					t.Fatalf("%s claim %d acquired: %+v; want the first, a takeover only of the lapsed key", key, i, r.res)
				}
			case r.res.Outcome != store.OutcomeInProgress:
				t.Fatalf("%s claim %d: %v, want in progress", key, i, r.res.Outcome)
			}
		}
		if acquired != 1 {
			t.Fatalf("%s: %d claims acquired, want 1", key, acquired)
		}
	}
	f.requireTokensCovered(t)
}
