package main

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
)

// exitCode is how idem tells a script what happened. The numbers are part of
// the CLI's contract: add new ones, never renumber one.
type exitCode int

// The exit codes. exitCodes below describes each one for --help and
// docs/cli.md.
const (
	exitOK                  exitCode = 0
	exitError               exitCode = 1
	exitInProgress          exitCode = 10
	exitCompleted           exitCode = 11
	exitFailed              exitCode = 12
	exitNotFound            exitCode = 13
	exitLeaseLost           exitCode = 14
	exitFingerprintMismatch exitCode = 15
	exitAlreadyTerminal     exitCode = 16
	exitInvalidArgument     exitCode = 17
	exitDenied              exitCode = 18
	exitUnavailable         exitCode = 19
	exitUnresolved          exitCode = 20
	exitNotUnresolved       exitCode = 21
	exitMixed               exitCode = 22
	exitInterrupted         exitCode = 130
)

// exitCodes is the table of exit codes, in the order --help lists them.
var exitCodes = []struct {
	code    exitCode
	name    string
	meaning string
}{
	{exitOK, "ok", "done; for claim: ACQUIRED, the lease token is on stdout"},
	{exitError, "error", "a bad flag, a file that cannot be read, or any other error"},
	{exitInProgress, "in progress", "claim: another worker holds a live lease; try again later"},
	{exitCompleted, "completed", "claim: the job completed earlier (replay); do not do it again"},
	{exitFailed, "failed", "claim: the job failed permanently earlier (replay); its error is on stderr"},
	{exitNotFound, "not found", "no such record: never claimed, purged, or deleted"},
	{exitLeaseLost, "lease lost", "the lease token is superseded: another worker took over; stop"},
	{exitFingerprintMismatch, "fingerprint mismatch", "the key was claimed for a request with another fingerprint"},
	{exitAlreadyTerminal, "already terminal", "the record already ended, and not by this very call (also when an operator resolved it)"},
	{exitInvalidArgument, "invalid argument", "idemd rejected a value (namespace, key, duration, size); nothing changed"},
	{exitDenied, "denied", "unauthenticated or permission denied: check --token or the tenant's rights"},
	{exitUnavailable, "unavailable", "idemd or its database cannot be reached, or the rate limit hit; retry later"},
	{exitUnresolved, "unresolved", "claim: the record is held for resolution (its lease ran out under a hold policy); park the message"},
	{exitNotUnresolved, "not unresolved", "resolve: the record is not UNRESOLVED, so there is nothing to resolve"},
	{exitMixed, "mixed", "claim with many keys, complete and fail --stdin: their lines on stdout have different codes; read each line"},
	{exitInterrupted, "interrupted", "SIGINT or SIGTERM arrived before the answer; the outcome is unknown"},
}

// otherExitCodes ends each command's own table of exit codes in its help.
const otherExitCodes = "Any command may also end with 1 (a usage or other error), 17 (invalid argument), 18 (denied), 19 (unavailable) or 130 (interrupted); idem --help has the whole table."

// exitCodeTable is the table for idem --help.
func exitCodeTable() string {
	var b strings.Builder
	for _, e := range exitCodes {
		fmt.Fprintf(&b, "  %3d  %-20s  %s\n", e.code, e.name, e.meaning)
	}
	return b.String()
}

// cliError ends idem with code after printing msg, prefixed with "idem: ",
// on stderr; an empty msg prints nothing (the command has said it already).
type cliError struct {
	code exitCode
	msg  string
}

func (e *cliError) Error() string { return e.msg }

// usageError is a mistake in the command line: exit code 1.
func usageError(format string, args ...any) error {
	return &cliError{code: exitError, msg: fmt.Sprintf(format, args...)}
}

// exitWith ends idem with code and no further message.
func exitWith(code exitCode) error { return &cliError{code: code} }

// rpcError is a failed RPC and what idem was doing when it failed.
type rpcError struct {
	op   string // "complete jobs/k1"
	addr string
	err  error
}

func (e *rpcError) Error() string { return e.op + ": " + e.err.Error() }
func (e *rpcError) Unwrap() error { return e.err }

// grpcStatus returns the status err carries, nil when it carries none.
func grpcStatus(err error) *status.Status {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus()
	}
	return nil
}

// classify maps an error to its exit code: by idem's ErrorInfo reason where
// it has one, by the gRPC code otherwise.
func classify(err error) exitCode {
	if err == nil {
		return exitOK
	}
	var ce *cliError
	if errors.As(err, &ce) {
		return ce.code
	}
	st := grpcStatus(err)
	if st == nil {
		return exitError
	}
	switch client.Reason(err) {
	case "LEASE_LOST":
		return exitLeaseLost
	case "FINGERPRINT_MISMATCH":
		return exitFingerprintMismatch
	case "ALREADY_TERMINAL", "RESOLVED_BY_OPERATOR":
		return exitAlreadyTerminal
	case "NOT_UNRESOLVED":
		return exitNotUnresolved
	}
	switch st.Code() {
	case codes.NotFound:
		return exitNotFound
	case codes.InvalidArgument:
		return exitInvalidArgument
	case codes.Unauthenticated, codes.PermissionDenied:
		return exitDenied
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return exitUnavailable
	}
	return exitError
}

// describe is the one line idem prints for err: what failed, the server's
// message (which says what to do), a hint where the server cannot give one,
// and the code and reason a script or a search can match.
func describe(err error) string {
	var ce *cliError
	if errors.As(err, &ce) {
		return ce.msg
	}
	var re *rpcError
	st := grpcStatus(err)
	if !errors.As(err, &re) || st == nil {
		return err.Error()
	}
	tag := upperSnake(st.Code().String())
	if reason := client.Reason(err); reason != "" {
		tag += "/" + reason
	}
	msg := st.Message()
	switch {
	case st.Code() == codes.Unavailable && client.Reason(err) == "":
		// No reason means the server did not answer at all.
		msg = fmt.Sprintf("cannot reach idemd at %s: %s; check --addr (IDEM_ADDR), that idemd is running, and that --tls matches how it serves", re.addr, msg)
	case st.Code() == codes.Unauthenticated:
		msg += "; pass your tenant's token with --token (IDEM_TOKEN), or a client certificate with --tls-cert and --tls-key"
	case st.Code() == codes.Unimplemented:
		msg = fmt.Sprintf("idemd at %s does not serve this call (%s): it is older than this idem; upgrade idemd", re.addr, msg)
	case st.Code() == codes.DeadlineExceeded:
		msg = fmt.Sprintf("no answer from idemd at %s within --timeout: %s; the call may or may not have taken effect", re.addr, msg)
	}
	return fmt.Sprintf("%s: %s (%s)", re.op, msg, tag)
}

// upperSnake turns a gRPC code's Go name (DeadlineExceeded) into its
// canonical name (DEADLINE_EXCEEDED).
func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}
