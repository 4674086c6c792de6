// Package storetest is the conformance suite of store.Store: every
// implementation runs it, so that DESIGN §1–§3 is checked once, in one place,
// against each of them.
//
// A store's tests call Run with a Harness, which gives each test a fresh,
// empty store and the few backdoors the suite needs that the interface does
// not have: moving a lease or an expiry into the past (so that no test sleeps
// for a lease to run out), backdating updated_at, reading the store's clock,
// and closing the store. What only one implementation does (PostgreSQL's
// READ COMMITTED races and SKIP LOCKED, SQLite's durability across a crash)
// stays in that implementation's own tests.
package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// Harness gives the suite stores of one implementation. Its methods fail t
// when they cannot do what they say.
type Harness interface {
	// New returns an empty store of its own for t, released in t.Cleanup.
	// conns is how many calls the test makes at once, at most 16: a hint
	// for sizing a connection pool.
	New(t *testing.T, conns int) store.Store
	// Now reads the clock st stamps records with and compares leases to.
	Now(t *testing.T, st store.Store) time.Time
	// Lapse sets the lease_expires_at of the record id to one second before
	// the store's now, whatever the record's state, as if its holder had
	// stalled.
	Lapse(t *testing.T, st store.Store, id store.RecordID)
	// LapseAll does what Lapse does to every PROCESSING record of st and
	// returns how many it changed.
	LapseAll(t *testing.T, st store.Store) int
	// AgeOut sets the expires_at of the record id to one second before the
	// store's now, whatever the record's state, as if its retention had run
	// out.
	AgeOut(t *testing.T, st store.Store, id store.RecordID)
	// AgeOutAll does what AgeOut does to every record of st that is not
	// PROCESSING and returns how many it changed.
	AgeOutAll(t *testing.T, st store.Store) int
	// SetUpdatedAt sets the updated_at of the record id.
	SetUpdatedAt(t *testing.T, st store.Store, id store.RecordID, at time.Time)
	// AgeOutTimeline sets the expires_at of the timeline entries of id's
	// key that have one to one second before the store's now, as if the
	// retention that keeps them had run out, and returns how many it
	// changed.
	AgeOutTimeline(t *testing.T, st store.Store, id store.RecordID) int
	// Close closes st as a server does when it shuts down. The suite calls
	// it at most once per store; t.Cleanup may release the store again.
	Close(t *testing.T, st store.Store)
}

// Run runs the whole suite against h, each test in parallel with the others.
func Run(t *testing.T, h Harness) {
	for _, tc := range append(tests, stepTests...) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// tests is the suite, in the order of DESIGN: the state table, claimants and
// fingerprints, the token-bearing calls, concurrency, the sweeper, the admin
// methods, text, errors.
var tests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"ClaimNewKeyAcquires", testClaimNewKeyAcquires},
	{"ClaimLiveLeaseIsInProgress", testClaimLiveLeaseIsInProgress},
	{"ClaimLapsedLeaseTakesOver", testClaimLapsedLeaseTakesOver},
	{"ClaimTakeoverAfterRealLapse", testClaimTakeoverAfterRealLapse},
	{"ClaimCompletedReplaysResult", testClaimCompletedReplaysResult},
	{"ClaimFailedReplaysError", testClaimFailedReplaysError},
	{"ClaimReleasedAcquires", testClaimReleasedAcquires},
	{"ClaimExpiredAcquires", testClaimExpiredAcquires},
	{"ClaimRetentionRoundTrips", testClaimRetentionRoundTrips},
	{"ClaimStoresPolicy", testClaimStoresPolicy},
	{"ClaimHoldBecomesUnresolved", testClaimHoldBecomesUnresolved},
	{"ClaimTokensIncreaseAcrossKeys", testClaimTokensIncreaseAcrossKeys},
	{"ClaimReportsTakeover", testClaimReportsTakeover},
	{"ClaimAttemptCountsAcquisitions", testClaimAttemptCountsAcquisitions},
	{"ClaimSameClaimantReenters", testClaimSameClaimantReenters},
	{"ClaimEmptyClaimantNeverReenters", testClaimEmptyClaimantNeverReenters},
	{"ClaimSameClaimantAfterLapseTakesOver", testClaimSameClaimantAfterLapseTakesOver},
	{"FingerprintMismatchChangesNothing", testFingerprintMismatchChangesNothing},
	{"FingerprintEmptyIsNotMismatch", testFingerprintEmptyIsNotMismatch},
	{"FingerprintSameIsAccepted", testFingerprintSameIsAccepted},
	{"ClaimManyAnswersEachAsAlone", testClaimManyAnswersEachAsAlone},

	{"HeartbeatExtendsLease", testHeartbeatExtendsLease},
	{"TokenCallsOnLapsedLease", testTokenCallsOnLapsedLease},
	{"TokenCallsSupersededToken", testTokenCallsSupersededToken},
	{"CompleteRepeatedReturnsStoredRecord", testCompleteRepeatedReturnsStoredRecord},
	{"FailRepeatedReturnsStoredRecord", testFailRepeatedReturnsStoredRecord},
	{"TokenCallsAfterTerminal", testTokenCallsAfterTerminal},
	{"TokenCallsAfterResolution", testTokenCallsAfterResolution},
	{"TokenCallsUnknownKey", testTokenCallsUnknownKey},
	{"Fencing", testFencing},
	{"CompleteStoresBinaryResult", testCompleteStoresBinaryResult},
	{"TokenCallsManyAnswerEachAsAlone", testTokenCallsManyAnswerEachAsAlone},

	{"ClaimConcurrentNewKey", testClaimConcurrentNewKey},
	{"ClaimConcurrentManyKeys", testClaimConcurrentManyKeys},
	{"ClaimConcurrentTakeover", testClaimConcurrentTakeover},
	{"SameJobProcessedTwiceConcurrently", testSameJobProcessedTwiceConcurrently},
	{"ClaimManyRacesClaim", testClaimManyRacesClaim},

	{"SweepExpireMarksOnlyLapsedProcessing", testSweepExpireMarksOnlyLapsedProcessing},
	{"SweepPurgeDeletesOnlyDue", testSweepPurgeDeletesOnlyDue},
	{"SweepRespectsLimit", testSweepRespectsLimit},
	{"SweepersConcurrent", testSweepersConcurrent},
	{"SweepEmptyStore", testSweepEmptyStore},
	{"TokensIncreaseAfterPurge", testTokensIncreaseAfterPurge},

	{"GetManyAnswersEach", testGetManyAnswersEach},
	{"ListPagesInKeyOrder", testListPagesInKeyOrder},
	{"ListFilters", testListFilters},
	{"ListKeyPrefix", testListKeyPrefix},
	{"DeleteReturnsOldRecord", testDeleteReturnsOldRecord},
	{"Stats", testStats},
	{"CountByState", testCountByState},

	{"TimelineOrdinaryPathWritesNothing", testTimelineOrdinaryPathWritesNothing},
	{"TimelineTakeover", testTimelineTakeover},
	{"TimelineFail", testTimelineFail},
	{"TimelineHeld", testTimelineHeld},
	{"TimelineResolved", testTimelineResolved},
	{"TimelineDeleted", testTimelineDeleted},
	{"TimelineFingerprintMismatch", testTimelineFingerprintMismatch},
	{"TimelinePurgedWithRecord", testTimelinePurgedWithRecord},
	{"TimelineLatestEntries", testTimelineLatestEntries},
	{"ListHeld", testListHeld},
	{"WatchHeld", testWatchHeld},

	{"InvalidTextIsRefused", testInvalidTextIsRefused},
	{"TextRoundTrips", testTextRoundTrips},

	{"CanceledContextPassesThrough", testCanceledContextPassesThrough},
	{"ClosedStoreIsUnavailable", testClosedStoreIsUnavailable},
}

// The lease and retention most tests claim with: long enough that nothing
// lapses on its own while a test runs. Tests that need a lapsed lease use the
// harness's Lapse instead of sleeping.
const (
	testLease     = 5 * time.Minute
	testRetention = time.Hour
)

// bundle is what setup gives every test: a store of its own, its harness and
// a context with a deadline.
type bundle struct {
	ctx   context.Context
	h     Harness
	store store.Store
}

// setup returns a bundle on a fresh store sized for conns concurrent calls
// (4 when not given).
func setup(t *testing.T, h Harness, conns ...int) *bundle {
	t.Helper()
	n := 4
	if len(conns) > 0 {
		n = conns[0]
	}
	st := h.New(t, n)
	// A deadline turns a deadlock or a lost wake-up into a failure instead of
	// a hung test binary.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return &bundle{ctx: ctx, h: h, store: st}
}

func recordID(key string) store.RecordID {
	return store.RecordID{Tenant: "acme", Namespace: "process_payment", Key: key}
}

func claimParams(id store.RecordID, claimant string) *store.ClaimParams {
	return &store.ClaimParams{RecordID: id, Claimant: claimant, LeaseTTL: testLease, Retention: testRetention}
}

// claim runs RecordClaim and fails the test on an error.
func (b *bundle) claim(t *testing.T, p *store.ClaimParams) *store.ClaimResult {
	t.Helper()
	res, err := b.store.RecordClaim(b.ctx, p)
	if err != nil {
		t.Fatalf("RecordClaim(%q, claimant %q): %v", p.Key, p.Claimant, err)
	}
	if res == nil || res.Record == nil {
		t.Fatalf("RecordClaim(%q): nil result without an error: %+v", p.Key, res)
	}
	return res
}

// acquire claims id and requires ACQUIRED.
func (b *bundle) acquire(t *testing.T, id store.RecordID, claimant string) *store.Record {
	t.Helper()
	res := b.claim(t, claimParams(id, claimant))
	if res.Outcome != store.OutcomeAcquired {
		t.Fatalf("RecordClaim(%q): outcome %v, want acquired (record %+v)", id.Key, res.Outcome, res.Record)
	}
	return res.Record
}

func (b *bundle) complete(t *testing.T, id store.RecordID, token int64, result string) *store.Record {
	t.Helper()
	rec, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: token, Result: []byte(result)})
	if err != nil {
		t.Fatalf("RecordComplete(%q, token %d): %v", id.Key, token, err)
	}
	return rec
}

func (b *bundle) fail(t *testing.T, id store.RecordID, token int64, msg string, retryable bool) *store.Record {
	t.Helper()
	rec, err := b.store.RecordFail(b.ctx, &store.FailParams{RecordID: id, Token: token, Error: msg, Retryable: retryable})
	if err != nil {
		t.Fatalf("RecordFail(%q, token %d, retryable %v): %v", id.Key, token, retryable, err)
	}
	return rec
}

func (b *bundle) get(t *testing.T, id store.RecordID) *store.Record {
	t.Helper()
	rec, err := b.store.RecordGet(b.ctx, id)
	if err != nil {
		t.Fatalf("RecordGet(%q): %v", id.Key, err)
	}
	return rec
}

// requireGone fails unless id has no record.
func (b *bundle) requireGone(t *testing.T, id store.RecordID) {
	t.Helper()
	rec, err := b.store.RecordGet(b.ctx, id)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RecordGet(%q): %+v, %v; want ErrNotFound", id.Key, rec, err)
	}
}

// now reads the store's clock, the only clock the store uses.
func (b *bundle) now(t *testing.T) time.Time {
	t.Helper()
	return b.h.Now(t, b.store)
}

// lapse makes the lease of id run out now, as if its holder had stalled.
func (b *bundle) lapse(t *testing.T, id store.RecordID) {
	t.Helper()
	b.h.Lapse(t, b.store, id)
}

// expire lapses the lease of id and lets the sweeper mark it EXPIRED.
func (b *bundle) expire(t *testing.T, id store.RecordID) *store.Record {
	t.Helper()
	b.lapse(t, id)
	n, err := b.store.SweepExpire(b.ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("SweepExpire: %d, %v; want 1, nil", n, err)
	}
	rec := b.get(t, id)
	if rec.State != store.StateExpired {
		t.Fatalf("after SweepExpire: state %s, want expired", rec.State)
	}
	return rec
}

// countStates counts every record of the store per state.
func (b *bundle) countStates(t *testing.T) map[store.State]int64 {
	t.Helper()
	counts, err := b.store.CountByState(b.ctx)
	if err != nil {
		t.Fatalf("CountByState: %v", err)
	}
	return counts
}

// total counts every record of the store.
func (b *bundle) total(t *testing.T) int64 {
	t.Helper()
	var n int64
	for _, c := range b.countStates(t) {
		n += c
	}
	return n
}

// requireErr fails unless errors.Is(err, want).
func requireErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// requireSameRecord fails unless got and want are equal field by field.
func requireSameRecord(t *testing.T, what string, got, want *store.Record) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: record changed\n got: %+v\nwant: %+v", what, got, want)
	}
}

// requireBetween fails unless lo <= got <= hi.
func requireBetween(t *testing.T, what string, got, lo, hi time.Time) {
	t.Helper()
	if got.Before(lo) || got.After(hi) {
		t.Fatalf("%s = %v, want between %v and %v", what, got, lo, hi)
	}
}

// requireUTC fails unless every set time of rec is in UTC.
func requireUTC(t *testing.T, rec *store.Record) {
	t.Helper()
	for name, ts := range map[string]time.Time{
		"created_at": rec.CreatedAt, "updated_at": rec.UpdatedAt, "lease_expires_at": rec.LeaseExpiresAt,
		"completed_at": rec.CompletedAt, "expires_at": rec.ExpiresAt,
	} {
		if !ts.IsZero() && ts.Location() != time.UTC {
			t.Fatalf("%s is in %v, want UTC", name, ts.Location())
		}
	}
}
