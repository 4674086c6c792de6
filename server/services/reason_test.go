package services

import (
	"regexp"
	"strings"
	"testing"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// TestReasonNames: every ErrorReason value but the zero one names a reason:
// its name is the prefix and an upper-case reason, and reasonName strips
// exactly the prefix.
func TestReasonNames(t *testing.T) {
	t.Parallel()
	reasonPattern := regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	if len(idemv1.ErrorReason_name) < 2 {
		t.Fatalf("ErrorReason has %d values", len(idemv1.ErrorReason_name))
	}
	for n, name := range idemv1.ErrorReason_name {
		r := idemv1.ErrorReason(n)
		got := reasonName(r)
		if r == idemv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		if !strings.HasPrefix(name, reasonPrefix) || name != reasonPrefix+got || !reasonPattern.MatchString(got) {
			t.Errorf("value %d %s: reason %q", n, name, got)
		}
	}
	if got := reasonName(idemv1.ErrorReason_ERROR_REASON_LEASE_LOST); got != "LEASE_LOST" {
		t.Errorf("reasonName(LEASE_LOST) = %q", got)
	}
}
