package server

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/store"
)

// ErrorDomain is the domain of every ErrorInfo idem sends.
const ErrorDomain = "idem"

// Reasons sent in ErrorInfo. Workers branch on these, never on messages.
const (
	ReasonFingerprintMismatch = "FINGERPRINT_MISMATCH"
	ReasonLeaseLost           = "LEASE_LOST"
	ReasonAlreadyTerminal     = "ALREADY_TERMINAL"
	ReasonNotFound            = "NOT_FOUND"
	ReasonStoreUnavailable    = "STORE_UNAVAILABLE"
	ReasonContention          = "CONTENTION"
	ReasonInternal            = "INTERNAL"
	ReasonUnauthenticated     = "UNAUTHENTICATED"
	ReasonNamespaceNotAllowed = "NAMESPACE_NOT_ALLOWED"
	ReasonRateLimited         = "RATE_LIMITED"
	ReasonNotAdmin            = "NOT_ADMIN"
)

// newError builds a status with an ErrorInfo detail.
func newError(code codes.Code, reason, msg string, metadata map[string]string) error {
	st := status.New(code, msg)
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: metadata}); err == nil {
		st = withInfo
	}
	return st.Err()
}

// rewriteError is the one place where errors become gRPC statuses. Errors
// that already carry a status pass through; store sentinels get their code
// and reason; anything else is logged and sent as a generic Internal so that
// no internal detail leaks to the caller.
func rewriteError(ctx context.Context, logger *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed before the store answered")
	case errors.Is(err, store.ErrNotFound):
		return newError(codes.NotFound, ReasonNotFound, "no record with this namespace and key (never claimed, or purged after its retention)", nil)
	case errors.Is(err, store.ErrLeaseLost):
		return newError(codes.Aborted, ReasonLeaseLost, "lease lost: the token is not the record's current token; another worker took over, so stop and do not retry", nil)
	case errors.Is(err, store.ErrAlreadyTerminal):
		return newError(codes.FailedPrecondition, ReasonAlreadyTerminal, "the record is no longer PROCESSING or EXPIRED, and this call does not repeat the one that ended it", nil)
	case errors.Is(err, store.ErrFingerprintMismatch):
		return newError(codes.FailedPrecondition, ReasonFingerprintMismatch, "fingerprint mismatch: this key was claimed for a request with another fingerprint; use a new key for a new request", nil)
	case errors.Is(err, store.ErrUnavailable):
		logger.WarnContext(ctx, "store unavailable", "error", err)
		return newError(codes.Unavailable, ReasonStoreUnavailable, "the database is unavailable; retry with backoff", nil)
	case errors.Is(err, store.ErrContention):
		return newError(codes.Unavailable, ReasonContention, "the record changed concurrently on every try; retry with backoff", nil)
	}
	logger.ErrorContext(ctx, "internal error", "error", err)
	return newError(codes.Internal, ReasonInternal, "internal error", nil)
}
