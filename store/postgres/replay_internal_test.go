package postgres

import (
	"fmt"
	"testing"

	"github.com/idemhq/idem/store"
)

// The hint remembers finished records only, and forgets an id without
// forgetting another that took its slot.
func TestFinishedHint(t *testing.T) {
	h := newFinishedHint()
	id := func(k string) store.RecordID { return store.RecordID{Tenant: "t", Namespace: "n", Key: k} }
	rec := func(k string, state store.State) *store.Record {
		return &store.Record{RecordID: id(k), State: state}
	}

	h.note(rec("done", store.StateCompleted))
	h.note(rec("failed", store.StateFailed))
	h.note(rec("held", store.StateProcessing))
	h.note(nil)
	if !h.has(id("done")) || !h.has(id("failed")) || h.has(id("held")) || h.has(id("never")) {
		t.Fatalf("has: done %v failed %v held %v never %v; want true true false false",
			h.has(id("done")), h.has(id("failed")), h.has(id("held")), h.has(id("never")))
	}
	h.note(rec("done", store.StateReleased))
	if h.has(id("done")) {
		t.Fatal("a record noted RELEASED is still remembered finished")
	}
	h.forget(id("failed"))
	if h.has(id("failed")) {
		t.Fatal("a forgotten record is still remembered")
	}

	// Find an id that shares a slot with "a" and takes it over: forgetting
	// "a" then leaves it be.
	h.note(rec("a", store.StateCompleted))
	var other string
	for i := 0; other == ""; i++ {
		if k := fmt.Sprint("b", i); h.hash(id(k))%finishedHintSlots == h.hash(id("a"))%finishedHintSlots {
			other = k
		}
	}
	h.note(rec(other, store.StateCompleted))
	h.forget(id("a"))
	if h.has(id("a")) || !h.has(id(other)) {
		t.Fatalf("after %q took the slot of a and a was forgotten: has a %v, has %q %v; want false true",
			other, h.has(id("a")), other, h.has(id(other)))
	}
}
