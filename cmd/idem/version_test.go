package main

import (
	"runtime"
	"strings"
	"testing"
)

// TestVersionCommandAndFlag: `idem version` and `idem --version` print the
// same one line: the version, the commit and the Go version that built it.
func TestVersionCommandAndFlag(t *testing.T) {
	t.Parallel()
	cmd := runIdem(t, runOpts{}, "version").must(t, 0, "idem version")
	flag := runIdem(t, runOpts{}, "--version").must(t, 0, "idem --version")
	if cmd.stdout != flag.stdout || cmd.stderr != "" || flag.stderr != "" {
		t.Errorf("idem version printed %q, idem --version %q (stderr %q, %q); want the same line on stdout", cmd.stdout, flag.stdout, cmd.stderr, flag.stderr)
	}
	line := strings.TrimSuffix(cmd.stdout, "\n")
	if strings.Contains(line, "\n") || !strings.HasPrefix(line, "idem ") {
		t.Fatalf("idem version = %q; want one line that starts with idem", cmd.stdout)
	}
	for _, want := range []string{"commit ", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(line, want) {
			t.Errorf("idem version = %q; want it to name %q", line, want)
		}
	}
}
