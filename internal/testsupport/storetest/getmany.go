package storetest

import (
	"errors"
	"testing"

	"github.com/idemhq/idem/store"
)

// testGetManyAnswersEach: RecordGetMany gives every id what RecordGet
// gives it, in the order of the ids, a missing record and a bad id each
// their own error, an id twice its record twice.
func testGetManyAnswersEach(t *testing.T, h Harness) {
	b := setup(t, h)
	held := b.acquire(t, recordID("held"), "w")
	done := b.acquire(t, recordID("done"), "w")
	done = b.complete(t, done.RecordID, done.Token, "result")
	bad := recordID("bad\x00key")
	ids := []store.RecordID{done.RecordID, recordID("missing"), held.RecordID, bad, done.RecordID}
	recs, errs := b.store.RecordGetMany(b.ctx, ids)
	if len(recs) != len(ids) || len(errs) != len(ids) {
		t.Fatalf("%d records and %d errors for %d ids", len(recs), len(errs), len(ids))
	}
	for _, i := range []int{0, 2, 4} {
		if errs[i] != nil {
			t.Fatalf("id %d (%s): %v", i, ids[i].Key, errs[i])
		}
		requireSameRecord(t, "RecordGetMany of "+ids[i].Key, recs[i], b.get(t, ids[i]))
	}
	if recs[1] != nil || !errors.Is(errs[1], store.ErrNotFound) {
		t.Errorf("the missing record: %v, %v; want ErrNotFound", recs[1], errs[1])
	}
	var textErr *store.TextError
	if recs[3] != nil || !errors.As(errs[3], &textErr) || textErr.Field != "key" {
		t.Errorf("the id with a NUL: %v, %v; want the key's TextError", recs[3], errs[3])
	}
	if string(recs[0].Result) != "result" || recs[2].State != store.StateProcessing {
		t.Errorf("records %+v and %+v", recs[0], recs[2])
	}
}
