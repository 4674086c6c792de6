package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
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

// TestDoAfterOperatorResolution: the lease of a held record runs out while
// fn runs, an operator resolves the record, and fn then returns: Do says
// that the value was not stored because an operator resolved the record,
// with an error callers match (ErrResolvedByOperator, the reason
// RESOLVED_BY_OPERATOR), not one that claims the outcome is unknown, and
// the record keeps the operator's resolution. The same for a failure.
func TestDoAfterOperatorResolution(t *testing.T) {
	t.Parallel()
	srv := testserver.StartWith(t, testserver.Options{Config: server.Config{Policies: []config.Policy{
		{Namespaces: []string{"held"}, OnLeaseExpiry: config.OnLeaseExpiryHold},
	}}})
	c, err := client.New(srv.Addr, client.WithInsecure(), client.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	const notStored = "your result was not stored: the record was resolved by an operator"

	// resolveWhileHeld is fn's first part: it lets the lease run out, sees
	// the next Claim find the record UNRESOLVED, and resolves it as how.
	resolveWhileHeld := func(t *testing.T, key string, how *idemv1.ResolveRecordRequest) {
		t.Helper()
		if _, err := srv.DB.Pool.Exec(t.Context(), `UPDATE idem_records SET lease_expires_at = now() - interval '1 second'
			WHERE namespace = 'held' AND key = $1`, key); err != nil {
			t.Error(err)
			return
		}
		var unresolved *client.UnresolvedError
		if _, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: "held", Key: key}); !errors.As(err, &unresolved) {
			t.Errorf("Claim of the lapsed held lease: %v; want *UnresolvedError", err)
			return
		}
		how.Namespace, how.Key = "held", key
		if _, err := c.AdminService().ResolveRecord(t.Context(), how); err != nil {
			t.Errorf("ResolveRecord: %v", err)
		}
	}
	requireNotStored := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrResolvedByOperator) || client.ReasonOf(err) != idemv1.ErrorReason_ERROR_REASON_RESOLVED_BY_OPERATOR ||
			!strings.Contains(err.Error(), notStored) {
			t.Fatalf("Do: %v (reason %s); want ErrResolvedByOperator saying %q", err, client.ReasonOf(err), notStored)
		}
		for _, wrong := range []error{client.ErrCompletionUnknown, client.ErrAlreadyTerminal, client.ErrLeaseLost} {
			if errors.Is(err, wrong) {
				t.Fatalf("Do: %v also matches %v", err, wrong)
			}
		}
	}

	t.Run("Complete", func(t *testing.T) {
		t.Parallel()
		job := client.Job{Namespace: "held", Key: "complete", LeaseTTL: time.Minute}
		res, err := c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) {
			resolveWhileHeld(t, job.Key, &idemv1.ResolveRecordRequest{Resolution: &idemv1.ResolveRecordRequest_Completed{
				Completed: &idemv1.ResolveCompleted{Result: []byte("operator's result")}}})
			return []byte("worker's result"), nil
		}, client.WithoutHeartbeat())
		requireNotStored(t, err)
		if string(res.Value) != "worker's result" {
			t.Errorf("Result.Value = %q; want fn's value", res.Value)
		}
		rec, err := c.Lookup(t.Context(), client.LookupRequest{Namespace: "held", Key: job.Key})
		if err != nil || rec.State != client.StateCompleted || string(rec.Result) != "operator's result" {
			t.Fatalf("Lookup: %+v, %v; want the operator's COMPLETED", rec, err)
		}
		// The holder's own Complete with the operator's value is a repeat.
		if _, err := c.Complete(t.Context(), client.CompleteRequest{Namespace: "held", Key: job.Key, Token: rec.Token, Result: []byte("operator's result")}); err != nil {
			t.Errorf("Complete with the operator's result: %v; want the record", err)
		}
	})

	t.Run("Fail", func(t *testing.T) {
		t.Parallel()
		job := client.Job{Namespace: "held", Key: "fail", LeaseTTL: time.Minute}
		declined := errors.New("card declined")
		_, err := c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) {
			resolveWhileHeld(t, job.Key, &idemv1.ResolveRecordRequest{Resolution: &idemv1.ResolveRecordRequest_Failed{
				Failed: &idemv1.ResolveFailed{Error: "refunded by hand"}}})
			return nil, client.Permanent(declined)
		}, client.WithoutHeartbeat())
		if !errors.Is(err, declined) {
			t.Errorf("Do: %v; want fn's error too", err)
		}
		requireNotStored(t, err)
		rec, err := c.Lookup(t.Context(), client.LookupRequest{Namespace: "held", Key: job.Key})
		if err != nil || rec.State != client.StateFailed || rec.Error != "refunded by hand" {
			t.Fatalf("Lookup: %+v, %v; want the operator's FAILED", rec, err)
		}
	})
}
