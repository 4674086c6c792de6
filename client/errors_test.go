package client_test

import (
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// TestReasonOf: a reason maps to the ErrorReason value of the same name; a
// reason this SDK does not know, or none, is UNSPECIFIED while Reason still
// gives the raw string.
func TestReasonOf(t *testing.T) {
	t.Parallel()
	withReason := func(reason string) error {
		st, err := status.New(codes.Aborted, "x").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "idem"})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Errorf("wrapped: %w", st.Err())
	}
	for _, tc := range []struct {
		err    error
		reason string
		want   idemv1.ErrorReason
	}{
		{withReason("LEASE_LOST"), "LEASE_LOST", idemv1.ErrorReason_ERROR_REASON_LEASE_LOST},
		{withReason("RATE_LIMITED"), "RATE_LIMITED", idemv1.ErrorReason_ERROR_REASON_RATE_LIMITED},
		{withReason("A_REASON_FROM_THE_FUTURE"), "A_REASON_FROM_THE_FUTURE", idemv1.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{status.Error(codes.Unavailable, "no details"), "", idemv1.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{fmt.Errorf("not a status"), "", idemv1.ErrorReason_ERROR_REASON_UNSPECIFIED},
	} {
		if got := client.ReasonOf(tc.err); got != tc.want {
			t.Errorf("ReasonOf(%v) = %v; want %v", tc.err, got, tc.want)
		}
		if got := client.Reason(tc.err); got != tc.reason {
			t.Errorf("Reason(%v) = %q; want %q", tc.err, got, tc.reason)
		}
	}
}
