package main

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestResolvedByOperatorIsAlreadyTerminal: a Complete or Fail refused because
// an operator resolved the record exits 16, as any call on a record that
// ended otherwise does, not 1, which a script cannot tell from a crash.
func TestResolvedByOperatorIsAlreadyTerminal(t *testing.T) {
	st, err := status.New(codes.FailedPrecondition, "your result was not stored: the record was resolved by an operator").
		WithDetails(&errdetails.ErrorInfo{Domain: "idem", Reason: "RESOLVED_BY_OPERATOR"})
	if err != nil {
		t.Fatal(err)
	}
	if got := classify(st.Err()); got != exitAlreadyTerminal {
		t.Fatalf("classify(RESOLVED_BY_OPERATOR) = %d; want %d (already terminal)", got, exitAlreadyTerminal)
	}
}
