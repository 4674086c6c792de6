package namespace_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/namespace"
)

func TestValid(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{"process_payment", "refund.v2", "a", "0-9", strings.Repeat("a", 64)} {
		if !namespace.Valid(ns) {
			t.Errorf("Valid(%q) = false", ns)
		}
	}
	for _, ns := range []string{"", "Refund", "_x", ".x", "-x", "a b", "a/b", "é", strings.Repeat("a", 65), "a\n"} {
		if namespace.Valid(ns) {
			t.Errorf("Valid(%q) = true", ns)
		}
	}
}
