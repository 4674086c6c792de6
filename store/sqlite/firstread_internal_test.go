package sqlite

import "testing"

// TestFirstReads: a new store skips the first read but for one Claim in
// firstReadsProbe; once a quarter of the last 64 Claims were answered by a
// read (or would have been), every Claim reads first; after 64 Claims that
// found nothing, they skip it again.
func TestFirstReads(t *testing.T) {
	t.Parallel()
	var f firstReads
	reads := 0
	for range 4 * firstReadsProbe {
		if f.worth() {
			reads++
		}
	}
	if reads != 4 {
		t.Fatalf("a new store read first for %d of %d Claims, want 4 (one in %d)", reads, 4*firstReadsProbe, firstReadsProbe)
	}
	for range firstReadsMin - 1 {
		f.note(true)
	}
	if f.claims.Store(0); f.worth() {
		t.Fatalf("read first after %d answered Claims of 64, want not before %d", firstReadsMin-1, firstReadsMin)
	}
	f.note(true)
	for i := range 3 * firstReadsProbe {
		if !f.worth() {
			t.Fatalf("Claim %d after %d answered of 64 skipped the read", i, firstReadsMin)
		}
	}
	for range 64 - firstReadsMin {
		f.note(false)
	}
	if f.claims.Store(0); !f.worth() {
		t.Fatalf("skipped the read with %d answered of the last 64", firstReadsMin)
	}
	f.note(false)
	if f.claims.Store(0); f.worth() {
		t.Fatalf("read first with %d answered of the last 64", firstReadsMin-1)
	}
}
