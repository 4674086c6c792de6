package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

// TestRewriteError checks the one error mapper: statuses pass through,
// context errors keep their codes, store sentinels (also wrapped) get their
// code and reason, and anything else is a generic Internal whose cause is
// logged and not sent.
func TestRewriteError(t *testing.T) {
	t.Parallel()
	passthrough := status.Error(codes.ResourceExhausted, "slow down")
	for _, tc := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"status passes through", passthrough, codes.ResourceExhausted, ""},
		{"canceled", context.Canceled, codes.Canceled, ""},
		{"wrapped canceled", fmt.Errorf("query: %w", context.Canceled), codes.Canceled, ""},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded, ""},
		{"wrapped deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), codes.DeadlineExceeded, ""},
		{"not found", store.ErrNotFound, codes.NotFound, "NOT_FOUND"},
		{"lease lost", store.ErrLeaseLost, codes.Aborted, "LEASE_LOST"},
		{"already terminal", store.ErrAlreadyTerminal, codes.FailedPrecondition, "ALREADY_TERMINAL"},
		{"fingerprint mismatch", store.ErrFingerprintMismatch, codes.FailedPrecondition, "FINGERPRINT_MISMATCH"},
		{"unavailable with its cause", fmt.Errorf("%w: %w", store.ErrUnavailable, errors.New("dial tcp 10.9.8.7:5432: connection refused")),
			codes.Unavailable, "STORE_UNAVAILABLE"},
		{"contention", fmt.Errorf("%w: %w", store.ErrContention, errors.New("SQLSTATE 40001")), codes.Unavailable, "CONTENTION"},
		{"unknown", errors.New("ERROR: column \"secret_col\" does not exist (SQLSTATE 42703)"), codes.Internal, "INTERNAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			got := rewriteError(context.Background(), logger, tc.err)
			st, ok := status.FromError(got)
			if !ok || st.Code() != tc.code {
				t.Fatalf("rewriteError(%v) = %v; want code %s", tc.err, got, tc.code)
			}
			if tc.err == passthrough && got != passthrough {
				t.Errorf("a status was rewritten: %v", got)
			}
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			if tc.reason != "" && (info.GetReason() != tc.reason || info.GetDomain() != ErrorDomain) {
				t.Errorf("ErrorInfo %v; want reason %s domain %s", info, tc.reason, ErrorDomain)
			}
			for _, leak := range []string{"10.9.8.7", "secret_col", "40001"} {
				if strings.Contains(st.Message(), leak) {
					t.Errorf("message %q leaks %q", st.Message(), leak)
				}
			}
			if tc.code == codes.Internal && !strings.Contains(logs.String(), "secret_col") {
				t.Errorf("the cause of an Internal was not logged: %q", logs.String())
			}
			if tc.code == codes.Unavailable && tc.reason == "STORE_UNAVAILABLE" && !strings.Contains(logs.String(), "10.9.8.7") {
				t.Errorf("the cause of an outage was not logged: %q", logs.String())
			}
		})
	}
	if rewriteError(context.Background(), slog.New(slog.DiscardHandler), nil) != nil {
		t.Error("rewriteError(nil) != nil")
	}
}

// TestEnumMapsAreComplete: every store state and outcome has a wire value.
func TestEnumMapsAreComplete(t *testing.T) {
	t.Parallel()
	for _, s := range []store.State{store.StateProcessing, store.StateCompleted, store.StateFailed, store.StateReleased, store.StateExpired} {
		if v, ok := stateToProto[s]; !ok || v == idemv1.State_STATE_UNSPECIFIED {
			t.Errorf("state %q has no wire value", s)
		}
	}
	for _, o := range []store.Outcome{store.OutcomeAcquired, store.OutcomeInProgress, store.OutcomeCompleted, store.OutcomeFailed} {
		if v, ok := outcomeToProto[o]; !ok || v == idemv1.Outcome_OUTCOME_UNSPECIFIED {
			t.Errorf("outcome %s has no wire value", o)
		}
	}
}
