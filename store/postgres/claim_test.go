package postgres_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The behaviour every store shares (the state table of DESIGN §1, claimants,
// fingerprints) is checked by the conformance suite in internal/testsupport/storetest, run
// by TestStore. What follows is PostgreSQL's own.

// A Claim that only reports (IN_PROGRESS, a replay) must not write: no token
// drawn, no row lock taken. Under load most Claims of a hot key are these.
// They are made alone and many at once.
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
			if res, err := b.store.RecordClaim(b.ctx, claimParams(id, "other")); err != nil || res.Outcome != want {
				t.Fatalf("%s: outcome %v, %v; want %s", what, res, err, want)
			}
		}
		res, errs := b.store.RecordClaimMany(b.ctx, []*store.ClaimParams{claimParams(id, "other"), claimParams(id, "another")})
		for i := range res {
			if errs[i] != nil || res[i].Outcome != want {
				t.Fatalf("%s, many at once: outcome %v, %v; want %s", what, res[i], errs[i], want)
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

// A Claim of a new key answers with a record the statement returned only
// part of (claimSQL); the rest is filled in from the Claim, and must be
// what the row holds: the record a read returns, to the microsecond the
// database keeps, with and without a fingerprint.
func TestClaimOfANewKeyAnswersTheStoredRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []*store.ClaimParams{
		{RecordID: recordID("new-plain"), Claimant: "c", LeaseTTL: 90*time.Second + 1234567*time.Nanosecond, Retention: 36*time.Hour + 7654321*time.Nanosecond},
		{RecordID: recordID("new-full"), Claimant: "c", Fingerprint: []byte("fp"), LeaseTTL: time.Minute, Retention: 400 * 24 * time.Hour,
			Policy: "payments.*", Hold: true},
		{RecordID: recordID("new-empty-fingerprint"), Fingerprint: []byte{}, LeaseTTL: time.Second, Retention: time.Minute},
	} {
		res := b.claim(t, p)
		if res.Outcome != store.OutcomeAcquired {
			t.Fatalf("%s: outcome %v, want acquired", p.Key, res.Outcome)
		}
		if got := b.get(t, p.RecordID); !reflect.DeepEqual(res.Record, got) {
			t.Errorf("%s: the Claim answered\n%+v\nthe row reads\n%+v", p.Key, res.Record, got)
		}
	}
}
