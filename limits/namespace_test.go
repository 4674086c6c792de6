package limits_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/limits"
)

func TestValidNamespace(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{"process_payment", "refund.v2", "a", "0-9", strings.Repeat("a", 64)} {
		if !limits.ValidNamespace(ns) {
			t.Errorf("ValidNamespace(%q) = false", ns)
		}
	}
	for _, ns := range []string{"", "Refund", "_x", ".x", "-x", "a b", "a/b", "é", strings.Repeat("a", 65), "a\n"} {
		if limits.ValidNamespace(ns) {
			t.Errorf("ValidNamespace(%q) = true", ns)
		}
	}
}

// FuzzValidNamespace: ValidNamespace gives NamespacePattern's answer.
func FuzzValidNamespace(f *testing.F) {
	for _, s := range []string{"process_payment", "refund.v2", "a", "", "Refund", "_x", "a b", "é", strings.Repeat("a", 64), strings.Repeat("a", 65), "a\n", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := limits.ValidNamespace(s), limits.NamespacePattern.MatchString(s); got != want {
			t.Fatalf("ValidNamespace(%q) = %v; NamespacePattern says %v", s, got, want)
		}
	})
}
