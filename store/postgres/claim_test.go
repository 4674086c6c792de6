package postgres_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// The behaviour every store shares (the state table of DESIGN §1, claimants,
// fingerprints) is checked by the conformance suite in store/storetest, run
// by TestStore. What follows is PostgreSQL's own.

// A Claim that only reports (IN_PROGRESS, a replay) must not write: no token
// drawn, no row lock taken. Under load most Claims of a hot key are these.
// They are made on the Store that wrote the record and on another that has
// no hint of it (another replica), whose lone Claims take other statements.
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
		for _, st := range []*postgres.Store{b.store, postgres.New(b.pool)} {
			for range 5 {
				if res, err := st.RecordClaim(b.ctx, claimParams(id, "other")); err != nil || res.Outcome != want {
					t.Fatalf("%s: outcome %v, %v; want %s", what, res, err, want)
				}
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

// A lone Claim of a new key answers with a record the statement returned
// only part of (claimNewSQL); the rest is filled in from the Claim, and must
// be what the row holds: the record a read returns, to the microsecond the
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

// The lone Claim of a key this process has no hint of takes the insert
// alone first; when the key has a record, it reads it after. Another Store
// on the same database (another replica) meets the records the first one
// made in every state it can answer from or take over.
func TestClaimOfAKeyAnotherReplicaMade(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := func() *postgres.Store { return postgres.New(b.pool) } // no hints
	claim := func(p *store.ClaimParams) *store.ClaimResult {
		t.Helper()
		res, err := other().RecordClaim(b.ctx, p)
		if err != nil {
			t.Fatalf("RecordClaim(%q) on another Store: %v", p.Key, err)
		}
		return res
	}

	held := b.acquire(t, recordID("held"), "a")
	if res := claim(claimParams(held.RecordID, "b")); res.Outcome != store.OutcomeInProgress || res.Record.Token != held.Token {
		t.Fatalf("held: %v token %d, want in_progress token %d", res.Outcome, res.Record.Token, held.Token)
	}
	if res := claim(claimParams(held.RecordID, "a")); res.Outcome != store.OutcomeAcquired || res.Record.Token != held.Token {
		t.Fatalf("held, its claimant again: %v token %d, want acquired token %d", res.Outcome, res.Record.Token, held.Token)
	}

	done := b.acquire(t, recordID("done"), "a")
	b.complete(t, done.RecordID, done.Token, "result")
	if res := claim(claimParams(done.RecordID, "b")); res.Outcome != store.OutcomeCompleted || string(res.Record.Result) != "result" {
		t.Fatalf("completed: %v %q, want completed %q", res.Outcome, res.Record.Result, "result")
	}

	released := b.acquire(t, recordID("released"), "a")
	b.fail(t, released.RecordID, released.Token, "again", true)
	res := claim(claimParams(released.RecordID, "b"))
	if res.Outcome != store.OutcomeAcquired || res.Record.Token <= released.Token || res.Record.Attempt != 2 {
		t.Fatalf("released: %v token %d attempt %d, want acquired with a token over %d, attempt 2", res.Outcome, res.Record.Token, res.Record.Attempt, released.Token)
	}

	lapsed := b.acquire(t, recordID("lapsed"), "a")
	b.lapse(t, lapsed.RecordID)
	if res := claim(claimParams(lapsed.RecordID, "b")); res.Outcome != store.OutcomeAcquired || res.Record.Token <= lapsed.Token {
		t.Fatalf("lapsed: %v token %d, want acquired with a token over %d", res.Outcome, res.Record.Token, lapsed.Token)
	}

	fp := claimParams(recordID("fingerprinted"), "a")
	fp.Fingerprint = []byte("one")
	b.claim(t, fp)
	fp2 := claimParams(fp.RecordID, "b")
	fp2.Fingerprint = []byte("two")
	if _, err := other().RecordClaim(b.ctx, fp2); !errors.Is(err, store.ErrFingerprintMismatch) {
		t.Fatalf("another fingerprint: %v, want %v", err, store.ErrFingerprintMismatch)
	}
}
