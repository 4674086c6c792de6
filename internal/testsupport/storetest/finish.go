package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// tokenCalls are the three calls that present a token, each as a function
// of the bundle, the record and the token.
var tokenCalls = map[string]func(b *bundle, id store.RecordID, token int64) (*store.Record, error){
	"Complete": func(b *bundle, id store.RecordID, token int64) (*store.Record, error) {
		return b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: token, Result: []byte("late result")})
	},
	"Fail": func(b *bundle, id store.RecordID, token int64) (*store.Record, error) {
		return b.store.RecordFail(b.ctx, &store.FailParams{RecordID: id, Token: token, Error: "late error"})
	},
	"FailRetryable": func(b *bundle, id store.RecordID, token int64) (*store.Record, error) {
		return b.store.RecordFail(b.ctx, &store.FailParams{RecordID: id, Token: token, Error: "late error", Retryable: true})
	},
	"Heartbeat": func(b *bundle, id store.RecordID, token int64) (*store.Record, error) {
		return b.store.RecordHeartbeat(b.ctx, &store.HeartbeatParams{RecordID: id, Token: token, LeaseTTL: testLease})
	},
}

func testHeartbeatExtendsLease(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("hb")
	held := b.acquire(t, id, "w1")

	before := b.now(t)
	rec, err := b.store.RecordHeartbeat(b.ctx, &store.HeartbeatParams{RecordID: id, Token: held.Token, LeaseTTL: 10 * time.Minute})
	after := b.now(t)
	if err != nil {
		t.Fatalf("RecordHeartbeat: %v", err)
	}
	if rec.State != store.StateProcessing || rec.Token != held.Token || rec.Attempt != 1 || rec.Claimant != "w1" {
		t.Fatalf("state %s token %d attempt %d claimant %q, want processing, %d, 1, w1", rec.State, rec.Token, rec.Attempt, rec.Claimant, held.Token)
	}
	requireBetween(t, "updated_at", rec.UpdatedAt, before, after)
	if want := rec.UpdatedAt.Add(10 * time.Minute); !rec.LeaseExpiresAt.Equal(want) {
		t.Fatalf("lease_expires_at %v, want updated_at + ttl = %v", rec.LeaseExpiresAt, want)
	}
	if !rec.ExpiresAt.IsZero() {
		t.Fatalf("expires_at %v, want unset", rec.ExpiresAt)
	}
	requireSameRecord(t, "RecordGet", b.get(t, id), rec)

	// A heartbeat also rescues a lapsed lease that nobody has taken over yet.
	b.lapse(t, id)
	_, err = b.store.RecordHeartbeat(b.ctx, &store.HeartbeatParams{RecordID: id, Token: held.Token, LeaseTTL: testLease})
	if err != nil {
		t.Fatalf("RecordHeartbeat on a lapsed lease: %v", err)
	}
	if res := b.claim(t, claimParams(id, "w2")); res.Outcome != store.OutcomeInProgress {
		t.Fatalf("claim after the heartbeat: outcome %v, want in_progress", res.Outcome)
	}
}

// testTokenCallsOnLapsedLease: expiry alone does not revoke, only a takeover
// does, whether or not the sweeper has marked the record EXPIRED yet.
func testTokenCallsOnLapsedLease(t *testing.T, h Harness) {
	for _, swept := range []bool{false, true} {
		for name, call := range tokenCalls {
			label := name + "/lapsed"
			if swept {
				label = name + "/expired"
			}
			t.Run(label, func(t *testing.T) {
				t.Parallel()
				b := setup(t, h)
				id := recordID("k")
				held := b.acquire(t, id, "w1")
				if swept {
					b.expire(t, id)
				} else {
					b.lapse(t, id)
				}
				before := b.now(t)
				rec, err := call(b, id, held.Token)
				after := b.now(t)
				if err != nil {
					t.Fatalf("%s with the current token: %v", name, err)
				}
				if rec.Token != held.Token || rec.Attempt != 1 {
					t.Fatalf("token %d attempt %d, want %d, 1", rec.Token, rec.Attempt, held.Token)
				}
				requireBetween(t, "updated_at", rec.UpdatedAt, before, after)
				switch name {
				case "Complete":
					if rec.State != store.StateCompleted || string(rec.Result) != "late result" ||
						!rec.CompletedAt.Equal(rec.UpdatedAt) || !rec.ExpiresAt.Equal(rec.UpdatedAt.Add(testRetention)) ||
						!rec.LeaseExpiresAt.IsZero() {
						t.Fatalf("after Complete: %+v", rec)
					}
				case "Fail":
					if rec.State != store.StateFailed || rec.Error != "late error" ||
						!rec.CompletedAt.Equal(rec.UpdatedAt) || !rec.ExpiresAt.Equal(rec.UpdatedAt.Add(testRetention)) ||
						!rec.LeaseExpiresAt.IsZero() {
						t.Fatalf("after Fail: %+v", rec)
					}
				case "FailRetryable":
					if rec.State != store.StateReleased || rec.Error != "late error" ||
						!rec.CompletedAt.IsZero() || !rec.ExpiresAt.Equal(rec.UpdatedAt.Add(testRetention)) ||
						!rec.LeaseExpiresAt.IsZero() {
						t.Fatalf("after Fail(retryable): %+v", rec)
					}
				case "Heartbeat":
					// An EXPIRED record becomes PROCESSING again with a fresh
					// lease, and is no longer due for purging.
					if rec.State != store.StateProcessing || !rec.ExpiresAt.IsZero() ||
						!rec.LeaseExpiresAt.Equal(rec.UpdatedAt.Add(testLease)) {
						t.Fatalf("after Heartbeat: %+v", rec)
					}
					if res := b.claim(t, claimParams(id, "w2")); res.Outcome != store.OutcomeInProgress {
						t.Fatalf("claim after the heartbeat: outcome %v, want in_progress", res.Outcome)
					}
				}
				requireSameRecord(t, "RecordGet", b.get(t, id), rec)
			})
		}
	}
}

// testTokenCallsSupersededToken: a token that is not the current one is
// LEASE_LOST whatever state the record is in, and changes nothing.
func testTokenCallsSupersededToken(t *testing.T, h Harness) {
	// Each case takes the record over from the old holder and leaves it in
	// one state.
	successor := map[string]func(t *testing.T, b *bundle, id store.RecordID, token int64){
		"processing": func(t *testing.T, b *bundle, id store.RecordID, token int64) {},
		"completed": func(t *testing.T, b *bundle, id store.RecordID, token int64) {
			b.complete(t, id, token, "successor's result")
		},
		"failed": func(t *testing.T, b *bundle, id store.RecordID, token int64) {
			b.fail(t, id, token, "successor's error", false)
		},
		"released": func(t *testing.T, b *bundle, id store.RecordID, token int64) {
			b.fail(t, id, token, "successor's error", true)
		},
		"expired": func(t *testing.T, b *bundle, id store.RecordID, token int64) {
			b.expire(t, id)
		},
	}
	for state, leave := range successor {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			id := recordID("k")
			old := b.acquire(t, id, "w1")
			b.lapse(t, id)
			current := b.acquire(t, id, "w2")
			leave(t, b, id, current.Token)
			before := b.get(t, id)
			if string(before.State) != state {
				t.Fatalf("state %s, want %s", before.State, state)
			}
			for name, call := range tokenCalls {
				for _, token := range []int64{old.Token, current.Token + 1000, 0} {
					rec, err := call(b, id, token)
					requireErr(t, name+" with a token that is not the current one", err, store.ErrLeaseLost)
					if rec != nil {
						t.Fatalf("%s: record %+v alongside the error", name, rec)
					}
				}
			}
			requireSameRecord(t, "RecordGet after the rejected calls", b.get(t, id), before)
		})
	}
}

func testCompleteRepeatedReturnsStoredRecord(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("k")
	held := b.acquire(t, id, "w1")
	first := b.complete(t, id, held.Token, "first")
	if first.ResolvedByOperator {
		t.Fatal("the holder's Complete is marked resolved by an operator")
	}

	// A retry after a lost response, with the same bytes, gets the record
	// the first call produced.
	for range 2 {
		again := b.complete(t, id, held.Token, "first")
		requireSameRecord(t, "repeated Complete", again, first)
	}
	// Other bytes are not a retry: they were not stored, and the caller is
	// told so.
	for _, result := range []string{"second", ""} {
		rec, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: held.Token, Result: []byte(result)})
		requireErr(t, "Complete with another result after Complete", err, store.ErrAlreadyTerminal)
		if rec != nil {
			t.Fatalf("record %+v alongside the error", rec)
		}
	}
	requireSameRecord(t, "RecordGet", b.get(t, id), first)
}

func testFailRepeatedReturnsStoredRecord(t *testing.T, h Harness) {
	for _, retryable := range []bool{false, true} {
		b := setup(t, h)
		id := recordID("k")
		held := b.acquire(t, id, "w1")
		first := b.fail(t, id, held.Token, "first error", retryable)

		// The same Fail repeated on the record it produced returns it
		// unchanged.
		rec := b.fail(t, id, held.Token, "first error", retryable)
		requireSameRecord(t, "repeated Fail", rec, first)
		// Another error, or the other kind of Fail, is not a retry.
		for _, other := range []struct {
			msg       string
			retryable bool
		}{{"second error", retryable}, {"first error", !retryable}, {"", retryable}} {
			rec, err := b.store.RecordFail(b.ctx, &store.FailParams{RecordID: id, Token: held.Token, Error: other.msg, Retryable: other.retryable})
			requireErr(t, "another Fail after Fail", err, store.ErrAlreadyTerminal)
			if rec != nil {
				t.Fatalf("record %+v alongside the error", rec)
			}
		}
		requireSameRecord(t, "RecordGet", b.get(t, id), first)
	}
}

// testTokenCallsAfterResolution: once an operator resolved a held record
// whose lease ran out, the holder's token call with the value the
// resolution stored gets the record (as a retry would), and any other,
// of any kind, is ErrResolvedByOperator and changes nothing. Whoever
// acquires a released record next is a holder again: its calls are judged
// as a holder's.
func testTokenCallsAfterResolution(t *testing.T, h Harness) {
	complete := func(result string) func(b *bundle, id store.RecordID, token int64) (*store.Record, error) {
		return func(b *bundle, id store.RecordID, token int64) (*store.Record, error) {
			return b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: token, Result: []byte(result)})
		}
	}
	fail := func(msg string, retryable bool) func(b *bundle, id store.RecordID, token int64) (*store.Record, error) {
		return func(b *bundle, id store.RecordID, token int64) (*store.Record, error) {
			return b.store.RecordFail(b.ctx, &store.FailParams{RecordID: id, Token: token, Error: msg, Retryable: retryable})
		}
	}
	cases := []struct {
		name       string
		resolution store.ResolveParams
		// same is the call that carries the resolution's value; nil when
		// none does (a release).
		same    func(b *bundle, id store.RecordID, token int64) (*store.Record, error)
		refused map[string]func(b *bundle, id store.RecordID, token int64) (*store.Record, error)
	}{
		{
			name:       "completed",
			resolution: store.ResolveParams{Resolution: store.ResolveCompleted, Result: []byte("operator's result")},
			same:       complete("operator's result"),
			refused: map[string]func(b *bundle, id store.RecordID, token int64) (*store.Record, error){
				"Complete with another result": complete("holder's result"),
				"Complete with no result":      complete(""),
				"Fail":                         fail("holder's error", false),
				"FailRetryable":                fail("holder's error", true),
				"Heartbeat":                    tokenCalls["Heartbeat"],
			},
		},
		{
			name:       "failed",
			resolution: store.ResolveParams{Resolution: store.ResolveFailed, Error: "operator's error"},
			same:       fail("operator's error", false),
			refused: map[string]func(b *bundle, id store.RecordID, token int64) (*store.Record, error){
				"Fail with another error":   fail("holder's error", false),
				"FailRetryable, same error": fail("operator's error", true),
				"Complete":                  complete("holder's result"),
				"Heartbeat":                 tokenCalls["Heartbeat"],
			},
		},
		{
			name:       "released",
			resolution: store.ResolveParams{Resolution: store.ResolveReleased},
			refused: map[string]func(b *bundle, id store.RecordID, token int64) (*store.Record, error){
				"FailRetryable": fail("holder's error", true),
				"Fail":          fail("holder's error", false),
				"Complete":      complete("holder's result"),
				"Heartbeat":     tokenCalls["Heartbeat"],
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			id := recordID("held")
			p := claimParams(id, "holder")
			p.Hold, p.Policy = true, "held.*"
			held := b.claim(t, p).Record
			b.lapse(t, id)
			if res := b.claim(t, claimParams(id, "other")); res.Outcome != store.OutcomeUnresolved {
				t.Fatalf("Claim of the lapsed held lease: %v; want unresolved", res.Outcome)
			}
			r := c.resolution
			r.RecordID = id
			resolved, err := b.store.RecordResolve(b.ctx, &r)
			if err != nil {
				t.Fatalf("RecordResolve: %v", err)
			}
			if !resolved.ResolvedByOperator || resolved.Token != held.Token {
				t.Fatalf("resolved: %+v; want ResolvedByOperator with the holder's token %d", resolved, held.Token)
			}
			requireSameRecord(t, "RecordGet after RecordResolve", b.get(t, id), resolved)

			if c.same != nil {
				for range 2 {
					rec, err := c.same(b, id, held.Token)
					if err != nil {
						t.Fatalf("the holder's call with the resolution's value: %v; want the record", err)
					}
					requireSameRecord(t, "the holder's call with the resolution's value", rec, resolved)
				}
			}
			for name, call := range c.refused {
				rec, err := call(b, id, held.Token)
				requireErr(t, "the holder's "+name+" after the operator's resolution", err, store.ErrResolvedByOperator)
				if errors.Is(err, store.ErrAlreadyTerminal) {
					t.Fatalf("%s: %v is also ErrAlreadyTerminal", name, err)
				}
				if rec != nil {
					t.Fatalf("%s: record %+v alongside the error", name, rec)
				}
			}
			requireSameRecord(t, "RecordGet after the refused calls", b.get(t, id), resolved)
			if c.resolution.Resolution != store.ResolveReleased {
				return
			}

			// The next holder of the released record finishes it itself.
			next := b.acquire(t, id, "next")
			if next.ResolvedByOperator {
				t.Fatalf("acquired after the release: %+v; want ResolvedByOperator unset", next)
			}
			for name, call := range tokenCalls {
				_, err := call(b, id, held.Token)
				requireErr(t, "the first holder's "+name+" after a takeover", err, store.ErrLeaseLost)
			}
			done := b.complete(t, id, next.Token, "next result")
			if done.ResolvedByOperator {
				t.Fatalf("completed by its holder: %+v; want ResolvedByOperator unset", done)
			}
			_, err = complete("other result")(b, id, next.Token)
			requireErr(t, "the next holder's Complete with another result", err, store.ErrAlreadyTerminal)
		})
	}
}

func testTokenCallsAfterTerminal(t *testing.T, h Harness) {
	cases := []struct {
		name string
		end  func(t *testing.T, b *bundle, id store.RecordID, token int64)
		call []string
	}{
		{
			name: "completed",
			end: func(t *testing.T, b *bundle, id store.RecordID, token int64) {
				b.complete(t, id, token, "r")
			},
			call: []string{"Fail", "FailRetryable", "Heartbeat"},
		},
		{
			name: "failed",
			end: func(t *testing.T, b *bundle, id store.RecordID, token int64) {
				b.fail(t, id, token, "e", false)
			},
			call: []string{"Complete", "Heartbeat"},
		},
		{
			name: "released",
			end: func(t *testing.T, b *bundle, id store.RecordID, token int64) {
				b.fail(t, id, token, "e", true)
			},
			call: []string{"Complete", "Heartbeat"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			id := recordID("k")
			held := b.acquire(t, id, "w1")
			c.end(t, b, id, held.Token)
			before := b.get(t, id)
			for _, name := range c.call {
				rec, err := tokenCalls[name](b, id, held.Token)
				requireErr(t, name+" after "+c.name, err, store.ErrAlreadyTerminal)
				if rec != nil {
					t.Fatalf("%s: record %+v alongside the error", name, rec)
				}
			}
			requireSameRecord(t, "RecordGet after the rejected calls", b.get(t, id), before)
		})
	}
}

func testTokenCallsUnknownKey(t *testing.T, h Harness) {
	b := setup(t, h)
	b.acquire(t, recordID("other"), "")
	for name, call := range tokenCalls {
		for _, id := range []store.RecordID{
			recordID("missing"),
			{Tenant: "other-tenant", Namespace: "process_payment", Key: "other"},
			{Tenant: "acme", Namespace: "other_namespace", Key: "other"},
		} {
			rec, err := call(b, id, 1)
			requireErr(t, name+" of "+id.Tenant+"/"+id.Namespace+"/"+id.Key, err, store.ErrNotFound)
			if rec != nil {
				t.Fatalf("%s: record %+v alongside the error", name, rec)
			}
		}
	}
	_, err := b.store.RecordGet(b.ctx, recordID("missing"))
	requireErr(t, "RecordGet of a missing key", err, store.ErrNotFound)
}

// testFencing is the story of DESIGN §1: a worker pauses past its lease, is
// taken over, wakes up and must not overwrite its successor.
func testFencing(t *testing.T, h Harness) {
	b := setup(t, h)
	id := recordID("charge-42")
	paused := b.acquire(t, id, "w1")
	b.lapse(t, id)
	successor := b.acquire(t, id, "w2")
	if successor.Token <= paused.Token || successor.Attempt != 2 {
		t.Fatalf("takeover: token %d attempt %d, want > %d, 2", successor.Token, successor.Attempt, paused.Token)
	}

	for name, call := range tokenCalls {
		_, err := call(b, id, paused.Token)
		requireErr(t, "the paused worker's "+name, err, store.ErrLeaseLost)
	}
	requireSameRecord(t, "record after the paused worker's calls", b.get(t, id), successor)

	done := b.complete(t, id, successor.Token, "successor's result")
	if done.State != store.StateCompleted || done.Token != successor.Token {
		t.Fatalf("successor's Complete: state %s token %d", done.State, done.Token)
	}
	_, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: paused.Token, Result: []byte("stale")})
	requireErr(t, "the paused worker's Complete after its successor's", err, store.ErrLeaseLost)

	res := b.claim(t, claimParams(id, "w3"))
	if res.Outcome != store.OutcomeCompleted || string(res.Record.Result) != "successor's result" {
		t.Fatalf("replay: outcome %v result %q, want the successor's", res.Outcome, res.Record.Result)
	}
}

func testCompleteStoresBinaryResult(t *testing.T, h Harness) {
	b := setup(t, h)
	result := make([]byte, 64<<10)
	for i := range result {
		result[i] = byte(i * 7)
	}
	for name, r := range map[string][]byte{"nil": nil, "empty": {}, "binary": result} {
		id := recordID(name)
		held := b.acquire(t, id, "")
		rec, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: held.Token, Result: r})
		if err != nil {
			t.Fatalf("%s: RecordComplete: %v", name, err)
		}
		if string(rec.Result) != string(r) {
			t.Fatalf("%s: result of %d bytes came back as %d bytes", name, len(r), len(rec.Result))
		}
		if res := b.claim(t, claimParams(id, "")); res.Outcome != store.OutcomeCompleted || string(res.Record.Result) != string(r) {
			t.Fatalf("%s: replay outcome %v with %d bytes", name, res.Outcome, len(res.Record.Result))
		}
	}
}
