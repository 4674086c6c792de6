package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// testTokenCallsManyAnswerEachAsAlone: RecordCompleteMany, RecordFailMany
// and RecordHeartbeatMany give every call what its unary method would, in
// the order of the calls, each error its own.
func testTokenCallsManyAnswerEachAsAlone(t *testing.T, h Harness) {
	b := setup(t, h)
	a := b.acquire(t, recordID("a"), "w")
	lost := b.acquire(t, recordID("lost"), "w")
	done := b.acquire(t, recordID("done"), "w")
	b.complete(t, done.RecordID, done.Token, "r")
	c := b.acquire(t, recordID("c"), "w")
	f := b.acquire(t, recordID("f"), "w")

	recs, errs := b.store.RecordCompleteMany(b.ctx, []*store.CompleteParams{
		{RecordID: a.RecordID, Token: a.Token, Result: []byte("ra")},
		{RecordID: lost.RecordID, Token: lost.Token + 100},
		{RecordID: recordID("missing"), Token: 1},
		{RecordID: done.RecordID, Token: done.Token, Result: []byte("r")},
		{RecordID: done.RecordID, Token: done.Token, Result: []byte("other")},
		{RecordID: recordID("bad\x00"), Token: 1},
	})
	if errs[0] != nil || recs[0].State != store.StateCompleted || string(recs[0].Result) != "ra" {
		t.Errorf("Complete of a held record: %+v, %v", recs[0], errs[0])
	}
	for i, want := range map[int]error{1: store.ErrLeaseLost, 2: store.ErrNotFound, 4: store.ErrAlreadyTerminal} {
		if recs[i] != nil || !errors.Is(errs[i], want) {
			t.Errorf("Complete %d: %v, %v; want %v", i, recs[i], errs[i], want)
		}
	}
	if errs[3] != nil || string(recs[3].Result) != "r" {
		t.Errorf("a repeated Complete: %+v, %v; want the stored record", recs[3], errs[3])
	}
	var textErr *store.TextError
	if !errors.As(errs[5], &textErr) {
		t.Errorf("Complete with a NUL in its key: %v; want a TextError", errs[5])
	}
	requireSameRecord(t, "the record of the lost lease", b.get(t, lost.RecordID), lost)

	recs, errs = b.store.RecordFailMany(b.ctx, []*store.FailParams{
		{RecordID: f.RecordID, Token: f.Token, Error: "boom", Retryable: true},
		{RecordID: c.RecordID, Token: c.Token, Error: "bad\x00"},
		{RecordID: done.RecordID, Token: done.Token, Error: "late"},
	})
	if errs[0] != nil || recs[0].State != store.StateReleased || recs[0].Error != "boom" {
		t.Errorf("retryable Fail: %+v, %v", recs[0], errs[0])
	}
	if !errors.As(errs[1], &textErr) || textErr.Field != "error" {
		t.Errorf("Fail with a NUL in its error: %v; want the error's TextError", errs[1])
	}
	if !errors.Is(errs[2], store.ErrAlreadyTerminal) {
		t.Errorf("Fail of a completed record: %v; want ErrAlreadyTerminal", errs[2])
	}

	before := b.get(t, c.RecordID)
	recs, errs = b.store.RecordHeartbeatMany(b.ctx, []*store.HeartbeatParams{
		{RecordID: c.RecordID, Token: c.Token, LeaseTTL: time.Hour},
		{RecordID: lost.RecordID, Token: lost.Token + 100, LeaseTTL: time.Hour},
	})
	if errs[0] != nil || !recs[0].LeaseExpiresAt.After(before.LeaseExpiresAt) {
		t.Errorf("Heartbeat: %+v, %v; want a later lease than %v", recs[0], errs[0], before.LeaseExpiresAt)
	}
	if !errors.Is(errs[1], store.ErrLeaseLost) {
		t.Errorf("Heartbeat with a superseded token: %v; want ErrLeaseLost", errs[1])
	}
}
