package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// errorDomain is the ErrorInfo domain of every error idem sends.
const errorDomain = "idem"

// Errors the server sends, matched with errors.Is. The error returned also
// carries the gRPC status (status.FromError works on it) and its reason
// (see Reason).
var (
	// ErrLeaseLost (ABORTED / LEASE_LOST): the token is no longer the
	// record's current token because another worker took the job over. Stop
	// the work and do not retry with that token.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrFingerprintMismatch (FAILED_PRECONDITION / FINGERPRINT_MISMATCH): the
	// key was claimed before for a request with another fingerprint. Reusing
	// a key for a different request is a bug in the producer.
	ErrFingerprintMismatch = errors.New("idem: fingerprint mismatch")
	// ErrNotFound (NOT_FOUND): no such record: never claimed, purged after
	// its retention, or deleted by an operator.
	ErrNotFound = errors.New("idem: record not found")
	// ErrAlreadyTerminal (FAILED_PRECONDITION / ALREADY_TERMINAL): the record
	// already left PROCESSING, and this call does not repeat the one that
	// ended it: another kind of call, or the same kind with another value
	// (other result bytes, another error or retryable). The record keeps
	// what the first call stored.
	ErrAlreadyTerminal = errors.New("idem: record already terminal")
	// ErrResolvedByOperator (FAILED_PRECONDITION / RESOLVED_BY_OPERATOR):
	// the lease ran out, an operator resolved the record (`idem resolve`,
	// AdminService.ResolveRecord), and this call did not carry the value the
	// resolution stored: your result was not stored. Do not retry; look the
	// record up to see how it was resolved.
	ErrResolvedByOperator = errors.New("idem: your result was not stored: the record was resolved by an operator")
	// ErrCompletionUnknown is matched by the error Do returns when fn ran and
	// returned a value but idem did not confirm the Complete. The side effect
	// has happened; the error is a *CompletionUnknownError with fn's value.
	ErrCompletionUnknown = errors.New("idem: completion not confirmed")
	// ErrFailureNotRecorded is matched by the error Do returns when fn
	// returned an error and idem did not record the failure; the error is a
	// *FailureNotRecordedError with fn's error and the Fail's.
	ErrFailureNotRecorded = errors.New("idem: the handler's failure was not recorded")
	// ErrStepAlreadyFinished (FAILED_PRECONDITION / STEP_ALREADY_FINISHED):
	// the step is FINISHED with another result, or was started again after
	// it finished; a FINISHED step never changes.
	ErrStepAlreadyFinished = errors.New("idem: step already finished")
	// ErrNotUnresolved (FAILED_PRECONDITION / NOT_UNRESOLVED): a Resolve
	// found the record no longer UNRESOLVED: someone else decided it first.
	ErrNotUnresolved = errors.New("idem: record is not unresolved")
)

var reasonSentinels = map[idemv1.ErrorReason]error{
	idemv1.ErrorReason_ERROR_REASON_LEASE_LOST:            ErrLeaseLost,
	idemv1.ErrorReason_ERROR_REASON_FINGERPRINT_MISMATCH:  ErrFingerprintMismatch,
	idemv1.ErrorReason_ERROR_REASON_NOT_FOUND:             ErrNotFound,
	idemv1.ErrorReason_ERROR_REASON_ALREADY_TERMINAL:      ErrAlreadyTerminal,
	idemv1.ErrorReason_ERROR_REASON_RESOLVED_BY_OPERATOR:  ErrResolvedByOperator,
	idemv1.ErrorReason_ERROR_REASON_STEP_ALREADY_FINISHED: ErrStepAlreadyFinished,
	idemv1.ErrorReason_ERROR_REASON_NOT_UNRESOLVED:        ErrNotUnresolved,
}

// rpcError is an error status from an RPC, linked to what caused it so that
// errors.Is works without reading the message: the sentinel of its ErrorInfo
// reason, or the context error when the caller's context ended the call.
type rpcError struct {
	st    *status.Status
	cause error // nil when neither applies
}

// Error reads like the SDK's other errors: "idem: ", the server's message
// (which says what to do), and the code and reason to search for or match:
//
//	idem: fingerprint mismatch: this key was claimed … (FAILED_PRECONDITION/FINGERPRINT_MISMATCH)
func (e *rpcError) Error() string {
	tag := codeName(e.st.Code())
	if reason := reasonOf(e.st); reason != "" {
		tag += "/" + reason
	}
	return fmt.Sprintf("idem: %s (%s)", e.st.Message(), tag)
}

// codeName is a gRPC code's canonical name: DEADLINE_EXCEEDED for
// DeadlineExceeded.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

func (e *rpcError) Unwrap() error              { return e.cause }
func (e *rpcError) GRPCStatus() *status.Status { return e.st }

// decodeError turns the error of an RPC made with ctx into an *rpcError;
// errors without a status pass through.
func decodeError(ctx context.Context, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	cause := reasonSentinels[reasonValue(reasonOf(st))]
	if cause == nil && ctx.Err() != nil && (st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded) {
		cause = ctx.Err() // gRPC reports it as a status that does not wrap it
	}
	return &rpcError{st: st, cause: cause}
}

// Reason returns the ErrorInfo reason that idem attached to err (or to an
// error err wraps), such as "LEASE_LOST" or "INVALID_KEY"; "" when there is
// none. The reasons are the values of idemv1.ErrorReason without their
// ERROR_REASON_ prefix (proto/idem/v1/error_reason.proto); Reason also
// returns one that this SDK's version does not know yet.
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	return reasonOf(st)
}

// ReasonOf returns err's reason as an idemv1.ErrorReason, to switch on:
// idemv1.ErrorReason_ERROR_REASON_LEASE_LOST for "LEASE_LOST".
// ERROR_REASON_UNSPECIFIED when err has no reason or one this SDK's version
// does not know (Reason returns its name).
func ReasonOf(err error) idemv1.ErrorReason {
	return reasonValue(Reason(err))
}

// reasonValue maps a reason to its enum value: the value whose name is the
// reason with the ERROR_REASON_ prefix.
func reasonValue(reason string) idemv1.ErrorReason {
	if reason == "" {
		return idemv1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	return idemv1.ErrorReason(idemv1.ErrorReason_value["ERROR_REASON_"+reason])
}

func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// InProgressError says that another worker holds a live lease on the record.
// Do not perform the side effect; try again later (or let the queue
// redeliver the job).
type InProgressError struct {
	// RetryAfter is how long until the holder's lease runs out; a Claim after
	// that may acquire the record. The holder usually finishes sooner.
	RetryAfter time.Duration
	// Record is the record as the Claim saw it.
	Record Record
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("idem: %s/%s is in progress in another worker; its lease runs out in %s",
		e.Record.Namespace, e.Record.Key, e.RetryAfter.Round(time.Millisecond))
}

// UnresolvedError is the error of a Claim (and of Do) that found the record
// UNRESOLVED: its lease ran out under a policy that holds such records for
// resolution, so the side effect may or may not have happened. Do not run
// the job; park the message (a dead-letter queue) until the late holder or
// an operator (AdminService.ResolveRecord, `idem resolve`) resolves it.
type UnresolvedError struct {
	// Record is the UNRESOLVED record.
	Record Record
}

func (e *UnresolvedError) Error() string {
	return fmt.Sprintf("idem: %s/%s is unresolved: its lease ran out under a hold policy; park the message until it is resolved (idem resolve)",
		e.Record.Namespace, e.Record.Key)
}

// JobFailedError is Do's answer for a job that failed permanently earlier
// (FAILED): the function was not called.
type JobFailedError struct {
	// Message is the error stored by the permanent Fail.
	Message string
	// Record is the FAILED record.
	Record Record
}

func (e *JobFailedError) Error() string {
	return fmt.Sprintf("idem: %s/%s failed permanently earlier: %s", e.Record.Namespace, e.Record.Key, e.Message)
}

// CompletionUnknownError is Do's answer when fn returned a value but the
// Complete was not confirmed: it failed after every retry, or the server
// rejected it (for instance a result over the server's size limit). The side
// effect ran; whether idem recorded it is unknown, so a later delivery may run
// it again once the lease runs out. It matches ErrCompletionUnknown with
// errors.Is, and the Complete's own error through Unwrap.
type CompletionUnknownError struct {
	// Value is what fn returned.
	Value []byte
	// Record is the record as acquired (PROCESSING, with the attempt's token).
	Record Record
	// Err is the last Complete error.
	Err error
}

func (e *CompletionUnknownError) Error() string {
	return fmt.Sprintf("idem: %s/%s ran, but its completion was not confirmed: %v", e.Record.Namespace, e.Record.Key, e.Err)
}

// Is makes errors.Is(err, ErrCompletionUnknown) true.
func (e *CompletionUnknownError) Is(target error) bool { return target == ErrCompletionUnknown }

func (e *CompletionUnknownError) Unwrap() error { return e.Err }

// FailureNotRecordedError is the error Do returns when fn returned an error
// and its Fail was not recorded: the server refused it (ALREADY_TERMINAL
// when fn completed its own token first, LEASE_LOST when another worker took
// the job over) or it failed until the lease ran out. fn's error is never
// lost: errors.Is and errors.As find it, and the Fail's error too
// (errors.Is(err, ErrAlreadyTerminal), Reason(err) when fn's error has no
// reason of its own). It matches ErrFailureNotRecorded with errors.Is.
type FailureNotRecordedError struct {
	// HandlerErr is the error fn returned.
	HandlerErr error
	// FailErr is the last Fail error.
	FailErr error
	// Record is the record as acquired (with the attempt's token).
	Record Record
}

func (e *FailureNotRecordedError) Error() string {
	return fmt.Sprintf("idem: %s/%s: the handler failed (%v), and its failure was not recorded: %v", e.Record.Namespace, e.Record.Key, e.HandlerErr, e.FailErr)
}

// Is makes errors.Is(err, ErrFailureNotRecorded) true.
func (e *FailureNotRecordedError) Is(target error) bool { return target == ErrFailureNotRecorded }

// Unwrap returns fn's error and the Fail's, in that order.
func (e *FailureNotRecordedError) Unwrap() []error { return []error{e.HandlerErr, e.FailErr} }

// Permanent marks err as a permanent failure: when fn returns it, Do records
// the failure with retryable=false, and every later Do for the key returns a
// *JobFailedError with err's message (made storable: see Do) without running
// fn. Errors not marked
// release the record (retryable=true) so that the next delivery runs fn
// again. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
