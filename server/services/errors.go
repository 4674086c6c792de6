package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

// ErrorDomain is the domain of every ErrorInfo idem sends.
const ErrorDomain = "idem"

// reasonPrefix is what the names of idemv1.ErrorReason's values have before
// the reason they stand for.
const reasonPrefix = "ERROR_REASON_"

// reasonName is the ErrorInfo reason of r: the name of its value without
// the prefix (ERROR_REASON_LEASE_LOST is sent as "LEASE_LOST"). Workers
// branch on these, never on messages.
func reasonName(r idemv1.ErrorReason) string {
	return strings.TrimPrefix(r.String(), reasonPrefix)
}

// NewError builds a status with an ErrorInfo detail, and the extra details
// after it (a RetryInfo, say): every error of the API has this shape.
func NewError(code codes.Code, reason idemv1.ErrorReason, msg string, metadata map[string]string, extra ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	details := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reasonName(reason), Domain: ErrorDomain, Metadata: metadata}}, extra...)
	if withInfo, err := st.WithDetails(details...); err == nil {
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
		return NewError(codes.NotFound, idemv1.ErrorReason_ERROR_REASON_NOT_FOUND, "no record with this namespace and key (never claimed, purged after its retention, or deleted)", nil)
	case errors.Is(err, store.ErrLeaseLost):
		return NewError(codes.Aborted, idemv1.ErrorReason_ERROR_REASON_LEASE_LOST, "lease lost: the token is not the record's current token; another worker took over, so stop and do not retry", nil)
	case errors.Is(err, store.ErrAlreadyTerminal):
		return NewError(codes.FailedPrecondition, idemv1.ErrorReason_ERROR_REASON_ALREADY_TERMINAL, "the record is no longer PROCESSING, EXPIRED or UNRESOLVED, and this call does not repeat, with the same value, the one that ended it; the record keeps what that call stored", nil)
	case errors.Is(err, store.ErrResolvedByOperator):
		return NewError(codes.FailedPrecondition, idemv1.ErrorReason_ERROR_REASON_RESOLVED_BY_OPERATOR, "your result was not stored: the record was resolved by an operator after your lease ran out; look it up to see the resolution, and do not retry", nil)
	case errors.Is(err, store.ErrNotUnresolved):
		return NewError(codes.FailedPrecondition, idemv1.ErrorReason_ERROR_REASON_NOT_UNRESOLVED, "the record is not UNRESOLVED, so there is nothing to resolve; look it up to see its state", nil)
	case errors.Is(err, store.ErrFingerprintMismatch):
		return NewError(codes.FailedPrecondition, idemv1.ErrorReason_ERROR_REASON_FINGERPRINT_MISMATCH, "fingerprint mismatch: this key was claimed for a request with another fingerprint; use a new key for a new request", nil)
	case errors.Is(err, store.ErrUnavailable):
		logger.WarnContext(ctx, "store unavailable", "error", err)
		return NewError(codes.Unavailable, idemv1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, "the database is unavailable; retry with backoff", nil)
	case errors.Is(err, store.ErrContention):
		return NewError(codes.Unavailable, idemv1.ErrorReason_ERROR_REASON_CONTENTION, "the record changed concurrently on every try; retry with backoff", nil)
	}
	// The server checks every text field before the store does, so this is
	// a field it missed: still the caller's input, never INTERNAL.
	var textErr *store.TextError
	if errors.As(err, &textErr) {
		if reason, ok := textReasons[textErr.Field]; ok {
			return InvalidText(reason, textErr)
		}
	}
	logger.ErrorContext(ctx, "internal error", "error", err)
	return NewError(codes.Internal, idemv1.ErrorReason_ERROR_REASON_INTERNAL, "internal error", nil)
}

// Unauthenticated is UNAUTHENTICATED with msg.
func Unauthenticated(msg string) error {
	return NewError(codes.Unauthenticated, idemv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, msg, nil)
}

// TooLarge is RESOURCE_EXHAUSTED / REQUEST_TOO_LARGE; over HTTP it is 413.
func TooLarge(format string, args ...any) error {
	return NewError(codes.ResourceExhausted, idemv1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE, fmt.Sprintf(format, args...), nil)
}
