package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
)

// maxInputBytes bounds what idem reads from a file or stdin: the largest
// result any idemd can be configured to accept, so that a wrong file fails
// fast instead of filling memory.
const maxInputBytes = limits.ResultBytesCeiling

// jsonOptions is protojson's default form: the proto's JSON (camelCase)
// field names, unset and zero fields left out. These names are what scripts
// parse, so they are stable as long as the proto is.
var jsonOptions = protojson.MarshalOptions{}

func (a *app) json() bool { return a.Output == "json" }

// printJSON writes m as protobuf JSON on stdout, indented by two spaces.
func (a *app) printJSON(m proto.Message) error {
	b, err := marshalJSON(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.stdout, "%s\n", b)
	return err
}

// marshalJSON is m as protobuf JSON, laid out by encoding/json: protojson
// varies its whitespace on purpose (one space after a colon or two, chosen
// per build) so that nobody compares its output byte for byte, but people
// read idem's and diff it, so idem lays it out the same way every time.
func marshalJSON(m proto.Message) ([]byte, error) {
	raw, err := jsonOptions.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode the response as JSON: %w", err)
	}
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("encode the response as JSON: %w", err)
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("encode the response as JSON: %w", err)
	}
	return out.Bytes(), nil
}

// readInput reads name, or stdin when name is "-".
func (a *app) readInput(flag, name string) ([]byte, error) {
	r := a.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, usageError("%s: %v", flag, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return nil, usageError("%s %s: %v", flag, name, err)
	}
	if len(b) > maxInputBytes {
		return nil, usageError("%s %s is over %d MiB; idemd keeps results of up to 64 KiB unless configured otherwise", flag, name, maxInputBytes>>20)
	}
	return b, nil
}

// writeOutput writes b raw to name, or to stdout when name is "-".
func (a *app) writeOutput(flag, name string, b []byte) error {
	if name == "-" {
		_, err := a.stdout.Write(b)
		return err
	}
	// 0600: a result may be as secret as the side effect it records.
	if err := os.WriteFile(name, b, 0o600); err != nil {
		return usageError("%s: %v", flag, err)
	}
	return nil
}

// checkResultOut refuses two writers of stdout.
func (a *app) checkResultOut(resultOut string) error {
	if resultOut == "-" && a.json() {
		return usageError("--result-out - and -o json both write to stdout: write the result to a file, or take it from the JSON (record.result, base64)")
	}
	return nil
}

// printRecord writes r as a two-column table.
func printRecord(w io.Writer, r *idemv1.Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, value string) {
		if value == "" {
			value = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, value)
	}
	row("namespace", r.GetNamespace())
	row("key", r.GetKey())
	row("state", stateName(r.GetState()))
	row("token", strconv.FormatInt(r.GetToken(), 10))
	row("attempt", strconv.Itoa(int(r.GetAttempt())))
	row("claimant", r.GetClaimant())
	row("fingerprint", fmt.Sprintf("%x", r.GetFingerprint()))
	row("lease expires at", formatTime(r.GetLeaseExpiresAt()))
	row("result", describeBytes(r.GetResult()))
	row("error", r.GetError())
	row("created at", formatTime(r.GetCreatedAt()))
	row("updated at", formatTime(r.GetUpdatedAt()))
	row("completed at", formatTime(r.GetCompletedAt()))
	row("expires at", formatTime(r.GetExpiresAt()))
	policy := r.GetPolicy()
	if r.GetHold() {
		policy += " (on_lease_expiry: hold)"
	}
	if r.GetHoldUnfinished() {
		policy += " (on_unfinished_step: hold)"
	}
	row("policy", policy)
	if err := tw.Flush(); err != nil {
		return err
	}
	return printSteps(w, r.GetSteps())
}

// printSteps writes a job's steps, if it has any, as a table under a blank
// line: one row each, in the order they were first recorded.
func printSteps(w io.Writer, steps []*idemv1.Step) error {
	if len(steps) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSTEP\tSTATE\tTOKEN\tSTARTED\tFINISHED\tRESULT")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, s := range steps {
		result := "-"
		if s.GetState() == idemv1.StepState_STEP_STATE_FINISHED {
			result = describeStepResult(s.GetResult())
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.GetName(), strings.TrimPrefix(s.GetState().String(), "STEP_STATE_"),
			s.GetToken(), dash(formatTime(s.GetStartedAt())), dash(formatTime(s.GetFinishedAt())), result)
	}
	return tw.Flush()
}

// describeStepResult is describeBytes of a step's result, which -o json
// shows whole.
func describeStepResult(b []byte) string {
	if q, ok := quotePrintable(b); ok {
		return q
	}
	return fmt.Sprintf("%d bytes (-o json for the bytes)", len(b))
}

// printRecords writes records as a table with one row each, led by a
// TENANT column when withTenant.
func printRecords(w io.Writer, records []*idemv1.Record, withTenant bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if withTenant {
		fmt.Fprint(tw, "TENANT\t")
	}
	fmt.Fprintln(tw, "NAMESPACE\tKEY\tSTATE\tTOKEN\tATTEMPT\tUPDATED\tLEASE EXPIRES\tPOLICY")
	for _, r := range records {
		if withTenant {
			fmt.Fprint(tw, r.GetTenant()+"\t")
		}
		lease := "-"
		if r.GetState() == idemv1.State_STATE_PROCESSING || r.GetState() == idemv1.State_STATE_EXPIRED || r.GetState() == idemv1.State_STATE_UNRESOLVED {
			lease = formatTime(r.GetLeaseExpiresAt())
		}
		policy := r.GetPolicy()
		if policy == "" {
			policy = "-"
		} else if r.GetHold() {
			policy += " (hold)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.GetNamespace(), r.GetKey(), stateName(r.GetState()),
			r.GetToken(), r.GetAttempt(), formatTime(r.GetUpdatedAt()), lease, policy)
	}
	return tw.Flush()
}

// printHistory writes a record's timeline as a table, oldest first, one
// entry a row: when, what, the token, and what else the entry holds.
func printHistory(w io.Writer, entries []*idemv1.TimelineEntry) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "history: none (no takeover, Fail, hold, resolution, deletion or refused fingerprint)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tWHAT\tTOKEN\tDETAIL")
	for _, e := range entries {
		what, detail := describeEntry(e)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", formatTime(e.GetAt()), what, e.GetToken(), detail)
	}
	return tw.Flush()
}

// describeEntry is what a timeline entry says, in words: what happened,
// and its details.
func describeEntry(e *idemv1.TimelineEntry) (what, detail string) {
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	claimant := func(c string) string {
		if c == "" {
			return "no claimant"
		}
		return "claimant " + strconv.Quote(c)
	}
	switch e.GetKind() {
	case idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_TAKEN_OVER:
		what = "taken over"
		from := stateName(e.GetPreviousState())
		if e.GetPreviousState() == idemv1.State_STATE_PROCESSING {
			from = "a lease that ran out"
		}
		add("from %s (token %d, %s) by %s", from, e.GetPreviousToken(), claimant(e.GetPreviousClaimant()), claimant(e.GetClaimant()))
	case idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_FAILED:
		what = "failed"
		add("by the holder (%s): %q", claimant(e.GetClaimant()), e.GetError())
	case idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_RELEASED:
		what = "released"
		add("by the holder (%s), retryable: %q", claimant(e.GetClaimant()), e.GetError())
	case idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_HELD:
		what = "held"
		if e.GetClaimant() == "" {
			add("the lease ran out under a hold policy: UNRESOLVED")
		} else {
			add("the lease of %s ran out under a hold policy: UNRESOLVED", claimant(e.GetClaimant()))
		}
	case idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_RESOLVED:
		what = "resolved " + stateName(e.GetState())
		add("by %s", describeActor(e.GetActor()))
		if e.GetError() != "" {
			add("error %q", e.GetError())
		}
	case idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_DELETED:
		what = "deleted"
		add("in state %s by %s", stateName(e.GetPreviousState()), describeActor(e.GetActor()))
	case idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_FINGERPRINT_MISMATCH:
		what = "fingerprint refused"
		add("a Claim by %s with fingerprint %x", claimant(e.GetClaimant()), e.GetFingerprint())
	default:
		what = strings.ToLower(strings.TrimPrefix(e.GetKind().String(), "TIMELINE_ENTRY_KIND_"))
	}
	if e.GetReason() != "" {
		add("reason %q", e.GetReason())
	}
	return what, strings.Join(parts, "; ")
}

// describeActor names who made a call: a resolver, a person by the name
// their token carries, or a tenant.
func describeActor(a *idemv1.Actor) string {
	switch {
	case a.GetResolver() != "":
		return fmt.Sprintf("resolver %q of tenant %s", a.GetResolver(), a.GetTenant())
	case a.GetOperator() != "":
		return fmt.Sprintf("%s of tenant %s", a.GetOperator(), a.GetTenant())
	}
	return "tenant " + a.GetTenant()
}

// stateName is the state without its prefix: COMPLETED.
func stateName(s idemv1.State) string { return strings.TrimPrefix(s.String(), "STATE_") }

// formatTime is UTC to the millisecond; "" when unset.
func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format("2006-01-02T15:04:05.000Z")
}

// describeBytes shows a short printable result as a quoted string and
// anything else by its size.
func describeBytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if q, ok := quotePrintable(b); ok {
		return q
	}
	return fmt.Sprintf("%d bytes (--result-out FILE or - for the bytes)", len(b))
}

// quotePrintable is b quoted when it is short printable text.
func quotePrintable(b []byte) (string, bool) {
	text := func(r rune) bool { return unicode.IsPrint(r) || unicode.IsSpace(r) }
	if len(b) <= 120 && utf8.Valid(b) && strings.IndexFunc(string(b), func(r rune) bool { return !text(r) }) < 0 {
		return strconv.Quote(string(b)), true
	}
	return "", false
}
