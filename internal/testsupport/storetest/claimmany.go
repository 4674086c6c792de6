package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemhq/idem/store"
)

// testClaimManyAnswersEachAsAlone: RecordClaimMany gives every call the
// answer RecordClaim would give it, in the order of the calls, and a call's
// error is its own: its neighbours are answered and written as if alone.
func testClaimManyAnswersEachAsAlone(t *testing.T, h Harness) {
	b := setup(t, h)
	held := b.acquire(t, recordID("held"), "holder")
	mine := b.acquire(t, recordID("mine"), "me")
	done := b.acquire(t, recordID("done"), "w")
	b.complete(t, done.RecordID, done.Token, "result")
	released := b.acquire(t, recordID("released"), "w")
	b.fail(t, released.RecordID, released.Token, "again", true)
	lapsed := b.acquire(t, recordID("lapsed"), "w")
	b.lapse(t, lapsed.RecordID)
	guarded := b.claim(t, &store.ClaimParams{RecordID: recordID("guarded"), Claimant: "w", Fingerprint: []byte("fp-1"),
		LeaseTTL: testLease, Retention: testRetention}).Record

	calls := []*store.ClaimParams{
		claimParams(recordID("new"), "me"),
		claimParams(held.RecordID, "me"),
		claimParams(mine.RecordID, "me"),
		claimParams(done.RecordID, "me"),
		claimParams(released.RecordID, "me"),
		claimParams(lapsed.RecordID, "me"),
		{RecordID: guarded.RecordID, Claimant: "me", Fingerprint: []byte("fp-2"), LeaseTTL: testLease, Retention: testRetention},
		claimParams(recordID("bad-claimant"), "me\x00"),
		claimParams(recordID("new-2"), "me"),
	}
	res, errs := b.store.RecordClaimMany(b.ctx, calls)
	if len(res) != len(calls) || len(errs) != len(calls) {
		t.Fatalf("%d results and %d errors for %d calls", len(res), len(errs), len(calls))
	}
	want := []store.Outcome{store.OutcomeAcquired, store.OutcomeInProgress, store.OutcomeAcquired, store.OutcomeCompleted,
		store.OutcomeAcquired, store.OutcomeAcquired, 0, 0, store.OutcomeAcquired}
	for i, p := range calls {
		switch i {
		case 6:
			if !errors.Is(errs[i], store.ErrFingerprintMismatch) {
				t.Errorf("call %d (%s): %v, %v; want ErrFingerprintMismatch", i, p.Key, res[i], errs[i])
			}
			continue
		case 7:
			var textErr *store.TextError
			if !errors.As(errs[i], &textErr) || textErr.Field != "claimant" {
				t.Errorf("call %d (%s): %v; want the claimant's TextError", i, p.Key, errs[i])
			}
			continue
		}
		if errs[i] != nil || res[i] == nil || res[i].Outcome != want[i] || res[i].Record.RecordID != p.RecordID {
			t.Errorf("call %d (%s): %+v, %v; want %s of its own record", i, p.Key, res[i], errs[i], want[i])
		}
	}
	if res[2].Record.Token != mine.Token {
		t.Errorf("the claimant's re-entry has token %d; want its own %d", res[2].Record.Token, mine.Token)
	}
	if !res[5].Takeover || res[5].Record.Token <= lapsed.Token {
		t.Errorf("the lapsed lease's takeover: %+v; want a takeover with a new token", res[5])
	}
	requireSameRecord(t, "the held record", b.get(t, held.RecordID), held)
	requireSameRecord(t, "the guarded record", b.get(t, guarded.RecordID), guarded)
	b.requireGone(t, recordID("bad-claimant"))
	requireSameRecord(t, "RecordGet of a new record", b.get(t, recordID("new-2")), res[8].Record)
}

// testClaimManyRacesClaim: RecordClaimMany and RecordClaim calls of shared
// keys at once, each by its own claimant: exactly one ACQUIRED per key.
func testClaimManyRacesClaim(t *testing.T, h Harness) {
	b := setup(t, h, 8)
	const callers, keys = 16, 40
	ids := make([]store.RecordID, keys)
	for i := range ids {
		ids[i] = recordID(fmt.Sprintf("race-%02d", i))
	}
	var (
		mu       sync.Mutex
		acquired = map[store.RecordID]int{}
		failures []error
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	for c := range callers {
		wg.Go(func() {
			<-start
			claimant := fmt.Sprintf("caller-%d", c)
			var res []*store.ClaimResult
			var errs []error
			if c%2 == 0 {
				calls := make([]*store.ClaimParams, keys)
				for i := range calls {
					calls[i] = claimParams(ids[(i+c)%keys], claimant)
				}
				res, errs = b.store.RecordClaimMany(b.ctx, calls)
			} else {
				for i := range keys {
					r, err := b.store.RecordClaim(b.ctx, claimParams(ids[(keys-i+c)%keys], claimant))
					res, errs = append(res, r), append(errs, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i, err := range errs {
				if err != nil {
					failures = append(failures, err)
				} else if res[i].Outcome == store.OutcomeAcquired {
					acquired[res[i].Record.RecordID]++
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d calls failed, first: %v", len(failures), failures[0])
	}
	for _, id := range ids {
		if acquired[id] != 1 {
			t.Errorf("%s acquired %d times; want once", id.Key, acquired[id])
		}
	}
}
