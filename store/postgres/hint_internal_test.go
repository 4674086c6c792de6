package postgres

import (
	"fmt"
	"testing"

	"github.com/idemhq/idem/store"
)

// The hint remembers finished records as finished and any other record as
// present, and forgets an id without forgetting another that took its
// slot.
func TestRecordHint(t *testing.T) {
	h := newRecordHint()
	id := func(k string) store.RecordID { return store.RecordID{Tenant: "t", Namespace: "n", Key: k} }
	rec := func(k string, state store.State) *store.Record {
		return &store.Record{RecordID: id(k), State: state}
	}
	check := func(k string, finished, present bool) {
		t.Helper()
		if h.finished(id(k)) != finished || h.present(id(k)) != present {
			t.Fatalf("%s: finished %v present %v; want %v %v", k, h.finished(id(k)), h.present(id(k)), finished, present)
		}
	}

	h.note(rec("done", store.StateCompleted))
	h.note(rec("failed", store.StateFailed))
	h.note(rec("held", store.StateProcessing))
	h.note(rec("released", store.StateReleased))
	h.note(nil)
	check("done", true, false)
	check("failed", true, false)
	check("held", false, true)
	check("released", false, true)
	check("never", false, false)

	h.note(rec("done", store.StateReleased))
	check("done", false, true)
	h.note(rec("held", store.StateCompleted))
	check("held", true, false)
	h.forget(id("failed"))
	check("failed", false, false)
	h.forget(id("released"))
	check("released", false, false)
	h.saw(id("gone"), rec("gone", store.StateProcessing))
	check("gone", false, true)
	h.saw(id("gone"), nil)
	check("gone", false, false)

	// Find an id that shares a slot with "a" and takes it over: forgetting
	// "a" then leaves it be, whatever either was seen as.
	for _, states := range [][2]store.State{{store.StateCompleted, store.StateCompleted}, {store.StateProcessing, store.StateCompleted}, {store.StateCompleted, store.StateProcessing}} {
		h.note(rec("a", states[0]))
		var other string
		for i := 0; other == ""; i++ {
			if k := fmt.Sprint("b", i); h.hash(id(k))%recordHintSlots == h.hash(id("a"))%recordHintSlots {
				other = k
			}
		}
		h.note(rec(other, states[1]))
		h.forget(id("a"))
		check("a", false, false)
		check(other, finished(rec(other, states[1])), !finished(rec(other, states[1])))
		h.forget(id(other))
	}
}
