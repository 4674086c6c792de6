package postgres_test

import (
	"testing"

	"github.com/idemhq/idem/store"
)

// The behaviour every store shares (the state table of DESIGN §1, claimants,
// fingerprints) is checked by the conformance suite in store/storetest, run
// by TestStore. What follows is PostgreSQL's own.

// A Claim that only reports (IN_PROGRESS, a replay) must not write: no token
// drawn, no row lock taken. Under load most Claims of a hot key are these.
func TestClaimThatOnlyReportsWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := recordID("read-only")
	rec := b.acquire(t, id, "holder")

	snapshot := func() (seq int64, xmax string) {
		t.Helper()
		if err := b.pool.QueryRow(b.ctx, `SELECT last_value FROM idem_token_seq`).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		if err := b.pool.QueryRow(b.ctx, `SELECT xmax::text FROM idem_records WHERE key = $1`, id.Key).Scan(&xmax); err != nil {
			t.Fatal(err)
		}
		return seq, xmax
	}
	check := func(what string, want store.Outcome) {
		t.Helper()
		seq, xmax := snapshot()
		for range 5 {
			if res := b.claim(t, claimParams(id, "other")); res.Outcome != want {
				t.Fatalf("%s: outcome %s, want %s", what, res.Outcome, want)
			}
		}
		if seq2, xmax2 := snapshot(); seq2 != seq || xmax2 != xmax {
			t.Fatalf("%s: claims that only report moved the token sequence %d→%d or locked the row (xmax %s→%s)", what, seq, seq2, xmax, xmax2)
		}
	}
	check("in progress", store.OutcomeInProgress)
	b.complete(t, id, rec.Token, "done")
	check("replay", store.OutcomeCompleted)
}
