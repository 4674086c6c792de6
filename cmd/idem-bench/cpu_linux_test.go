package main

import (
	"testing"
	"time"
)

// TestParseMachineCPU reads /proc/stat's first line field by field: which
// counter is which is what the cores' shares rest on.
func TestParseMachineCPU(t *testing.T) {
	// cpu user nice system idle iowait irq softirq steal guest guest_nice
	stat := []byte("cpu  100 2 30 400 50 6 7 8 9 0\ncpu0 50 1 15 200 25 3 3 4 4 0\nintr 12345\n")
	got, ok := parseMachineCPU(stat)
	want := machineCPU{
		busy:   (100 + 2 + 30 + 6 + 7) * 10 * time.Millisecond, // guest is inside user
		idle:   400 * 10 * time.Millisecond,
		iowait: 50 * 10 * time.Millisecond,
		steal:  8 * 10 * time.Millisecond,
	}
	if !ok || got != want {
		t.Errorf("parseMachineCPU = %+v, %v; want %+v", got, ok, want)
	}
	for _, bad := range []string{"", "cpu  1 2 3 4 5\n", "cpu0 1 2 3 4 5 6 7 8\n", "intr 1 2 3 4 5 6 7 8 9\n"} {
		if _, ok := parseMachineCPU([]byte(bad)); ok {
			t.Errorf("parseMachineCPU(%q) read it; want it refused", bad)
		}
	}
}
