package main

import (
	"runtime/debug"
	"testing"
)

// TestGCPercent: idemd raises GOGC to defaultGCPercent unless the
// environment sets GOGC, which then wins.
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	debug.SetGCPercent(100)
	if got := setGCPercent(func(string) string { return "" }); got != defaultGCPercent {
		t.Fatalf("without GOGC: %d, want %d", got, defaultGCPercent)
	}
	if cur := debug.SetGCPercent(100); cur != defaultGCPercent {
		t.Fatalf("without GOGC the collector's target is %d, want %d", cur, defaultGCPercent)
	}
	debug.SetGCPercent(150) // as the runtime would have read GOGC=150
	if got := setGCPercent(func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	}); got != 150 {
		t.Fatalf("with GOGC=150: %d, want 150 kept", got)
	}
	if cur := debug.SetGCPercent(100); cur != 150 {
		t.Fatalf("with GOGC=150 the collector's target is %d, want 150 kept", cur)
	}
}
