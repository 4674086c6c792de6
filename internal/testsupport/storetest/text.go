package storetest

import (
	"errors"
	"testing"

	"github.com/idemhq/idem/store"
)

// badTexts are values no store keeps, each with the problem CheckText names.
var badTexts = []struct {
	name    string
	value   string
	problem store.TextProblem
}{
	{"NUL", "a\x00b", store.TextNUL},
	{"NUL alone", "\x00", store.TextNUL},
	{"invalid byte", "a\xffb", store.TextInvalidUTF8},
	{"lone continuation byte", "\x80", store.TextInvalidUTF8},
	{"cut rune", "caf\xc3", store.TextInvalidUTF8},
	{"UTF-16 surrogate", "\xed\xa0\x80", store.TextInvalidUTF8},
}

// testInvalidTextIsRefused: a text field that is not UTF-8 or holds U+0000,
// in any call, is store.ErrInvalidText naming the field, and nothing is
// written: also when the Claim would only report (a live lease, a replay),
// and for a new key.
func testInvalidTextIsRefused(t *testing.T, h Harness) {
	b := setup(t, h)
	heldID, doneID := recordID("held"), recordID("done")
	held := b.acquire(t, heldID, "holder")
	done := b.complete(t, doneID, b.acquire(t, doneID, "holder").Token, "r")
	st, ctx := b.store, b.ctx

	// with returns id with bad in field (tenant, namespace or key).
	with := func(id store.RecordID, field, bad string) store.RecordID {
		switch field {
		case "tenant":
			id.Tenant += bad
		case "namespace":
			id.Namespace += bad
		case "key":
			id.Key += bad
		}
		return id
	}
	type call struct {
		name, field string
		do          func(bad string) error
	}
	var calls []call
	for _, field := range []string{"tenant", "namespace", "key"} {
		calls = append(calls,
			call{"RecordClaim of a held record", field, func(bad string) error {
				_, err := st.RecordClaim(ctx, claimParams(with(heldID, field, bad), "other"))
				return err
			}},
			call{"RecordComplete", field, func(bad string) error {
				_, err := st.RecordComplete(ctx, &store.CompleteParams{RecordID: with(heldID, field, bad), Token: held.Token, Result: []byte("r")})
				return err
			}},
			call{"RecordFail", field, func(bad string) error {
				_, err := st.RecordFail(ctx, &store.FailParams{RecordID: with(heldID, field, bad), Token: held.Token, Error: "e"})
				return err
			}},
			call{"RecordHeartbeat", field, func(bad string) error {
				_, err := st.RecordHeartbeat(ctx, &store.HeartbeatParams{RecordID: with(heldID, field, bad), Token: held.Token, LeaseTTL: testLease})
				return err
			}},
			call{"RecordGet", field, func(bad string) error {
				_, err := st.RecordGet(ctx, with(heldID, field, bad))
				return err
			}},
			call{"RecordDelete", field, func(bad string) error {
				_, err := st.RecordDelete(ctx, &store.DeleteParams{RecordID: with(heldID, field, bad)})
				return err
			}},
		)
	}
	calls = append(calls,
		call{"RecordClaim of a new key", "claimant", func(bad string) error {
			_, err := st.RecordClaim(ctx, claimParams(recordID("new"), bad))
			return err
		}},
		call{"RecordClaim of a held record", "claimant", func(bad string) error {
			_, err := st.RecordClaim(ctx, claimParams(heldID, bad))
			return err
		}},
		call{"RecordClaim that would replay", "claimant", func(bad string) error {
			_, err := st.RecordClaim(ctx, claimParams(doneID, bad))
			return err
		}},
		call{"RecordFail permanent", "error", func(bad string) error {
			_, err := st.RecordFail(ctx, &store.FailParams{RecordID: heldID, Token: held.Token, Error: "declined: " + bad})
			return err
		}},
		call{"RecordFail retryable", "error", func(bad string) error {
			_, err := st.RecordFail(ctx, &store.FailParams{RecordID: heldID, Token: held.Token, Error: bad, Retryable: true})
			return err
		}},
		call{"RecordList", "tenant", func(bad string) error {
			_, err := st.RecordList(ctx, &store.ListParams{Tenant: "acme" + bad, Limit: 10})
			return err
		}},
		call{"RecordList", "namespace", func(bad string) error {
			_, err := st.RecordList(ctx, &store.ListParams{Tenant: "acme", Namespace: heldID.Namespace + bad, Limit: 10})
			return err
		}},
		call{"RecordList after", "namespace", func(bad string) error {
			_, err := st.RecordList(ctx, &store.ListParams{Tenant: "acme", After: store.RecordID{Namespace: heldID.Namespace + bad, Key: "a"}, Limit: 10})
			return err
		}},
		call{"RecordList after", "key", func(bad string) error {
			_, err := st.RecordList(ctx, &store.ListParams{Tenant: "acme", After: store.RecordID{Namespace: heldID.Namespace, Key: bad}, Limit: 10})
			return err
		}},
		call{"RecordStats", "tenant", func(bad string) error {
			_, err := st.RecordStats(ctx, &store.StatsParams{Tenant: "acme" + bad})
			return err
		}},
		call{"RecordStats", "namespace", func(bad string) error {
			_, err := st.RecordStats(ctx, &store.StatsParams{Tenant: "acme", Namespace: heldID.Namespace + bad})
			return err
		}},
	)

	for _, bad := range badTexts {
		for _, c := range calls {
			err := c.do(bad.value)
			var textErr *store.TextError
			if !errors.Is(err, store.ErrInvalidText) || !errors.As(err, &textErr) {
				t.Errorf("%s with %s %q: %v; want store.ErrInvalidText", c.name, c.field, bad.value, err)
				continue
			}
			if textErr.Field != c.field || textErr.Problem != bad.problem {
				t.Errorf("%s with %s %q: %v names field %q, problem %s; want %q, %s",
					c.name, c.field, bad.value, err, textErr.Field, textErr.Problem, c.field, bad.problem)
			}
		}
	}

	requireSameRecord(t, "the held record after the refused calls", b.get(t, heldID), held)
	requireSameRecord(t, "the completed record after the refused calls", b.get(t, doneID), done)
	if n := b.total(t); n != 2 {
		t.Fatalf("%d records after the refused calls, want the 2 there were", n)
	}
}

// testTextRoundTrips: text that is UTF-8 without NUL is kept byte for byte,
// whatever else it holds (tabs, newlines, other control characters, U+FFFD,
// characters outside the Basic Multilingual Plane), and read back the same
// by every call that returns it.
func testTextRoundTrips(t *testing.T, h Harness) {
	b := setup(t, h)
	const (
		claimant = "worker\t1\n\u2028\U0001F600\uFFFD\x01\x7f"
		errText  = "declined:\n\tcard \u00e9\u0301 \U0001F4A5 \uFFFD \x01\x1f\x7f \u0085 end"
	)
	id := recordID("k\u00e9\U0001F511")
	held := b.acquire(t, id, claimant)
	if held.Claimant != claimant || held.Key != id.Key {
		t.Fatalf("acquired record: claimant %q key %q, want %q %q", held.Claimant, held.Key, claimant, id.Key)
	}
	again := b.claim(t, claimParams(id, claimant))
	if again.Outcome != store.OutcomeAcquired || again.Record.Token != held.Token {
		t.Fatalf("the same claimant asking again: %v token %d, want acquired with token %d", again.Outcome, again.Record.Token, held.Token)
	}
	failed := b.fail(t, id, held.Token, errText, false)
	if failed.Error != errText {
		t.Fatalf("RecordFail stored error %q, want %q", failed.Error, errText)
	}
	replay := b.claim(t, claimParams(id, "other"))
	if replay.Outcome != store.OutcomeFailed || replay.Record.Error != errText || replay.Record.Claimant != claimant {
		t.Fatalf("replay: %v error %q claimant %q, want failed with %q, %q", replay.Outcome, replay.Record.Error, replay.Record.Claimant, errText, claimant)
	}
	requireSameRecord(t, "RecordGet after RecordFail", b.get(t, id), failed)
	recs := b.list(t, store.ListParams{Tenant: id.Tenant, Limit: 10})
	b.requireListed(t, "RecordList", recs, id)
}
