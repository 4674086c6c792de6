package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// claimLineOut is one line of claim's many-keys output in table mode.
type claimLineOut struct {
	code    int
	outcome string
	token   string
	key     string
}

// parseClaimLines reads "CODE OUTCOME TOKEN KEY" lines as a shell's
// `read -r code outcome token key` would: the key is the rest of the line.
func parseClaimLines(t *testing.T, stdout string) []claimLineOut {
	t.Helper()
	var out []claimLineOut
	for line := range strings.Lines(stdout) {
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 4)
		if len(f) != 4 {
			t.Fatalf("line %q is not CODE OUTCOME TOKEN KEY", line)
		}
		code, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("line %q: CODE %q is not a number", line, f[0])
		}
		out = append(out, claimLineOut{code, f[1], f[2], f[3]})
	}
	return out
}

// TestClaimManyKeys claims keys given as arguments: a line per key in their
// order, with the exit code of each key's claim alone, and an exit code that
// is the lines' when they agree and 22 when they do not.
func TestClaimManyKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)

	r := f.idem("claim", "-n", "jobs", "--lease-ttl", "1m", "m-1", "m-2", "m 3 with spaces").must(t, 0, "claim of three new keys")
	lines := parseClaimLines(t, r.stdout)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), r.stdout)
	}
	tokens := map[string]string{}
	for i, want := range []string{"m-1", "m-2", "m 3 with spaces"} {
		l := lines[i]
		if l.key != want || l.code != 0 || l.outcome != "ACQUIRED" {
			t.Errorf("line %d = %+v; want 0 ACQUIRED for %q", i+1, l, want)
		}
		if _, err := strconv.ParseInt(l.token, 10, 64); err != nil {
			t.Errorf("line %d: token %q is not a number", i+1, l.token)
		}
		tokens[l.key] = l.token
	}
	if !strings.Contains(r.stderr, "claim of 3 keys in jobs: 3 acquired") {
		t.Errorf("stderr %q does not sum the batch up", r.stderr)
	}

	// Each line's token works as the single form's would.
	f.idem("complete", "-n", "jobs", "-k", "m-1", "--lease-token", tokens["m-1"], "--result", "ok").must(t, 0, "complete m-1")

	r = f.idem("claim", "-n", "jobs", "m-1", "m-2", "m-4").must(t, int(exitMixed), "claim of a completed, a held and a new key")
	lines = parseClaimLines(t, r.stdout)
	want := []claimLineOut{
		{int(exitCompleted), "COMPLETED", tokens["m-1"], "m-1"},
		{int(exitInProgress), "IN_PROGRESS", tokens["m-2"], "m-2"},
	}
	if len(lines) != 3 || lines[0] != want[0] || lines[1] != want[1] || lines[2].code != 0 || lines[2].outcome != "ACQUIRED" || lines[2].key != "m-4" {
		t.Fatalf("lines %+v; want %+v, then m-4 ACQUIRED", lines, want)
	}

	// Lines that all agree give their code: every key done before is 11.
	r = f.idem("-q", "claim", "-n", "jobs", "m-1", "m-1").must(t, int(exitCompleted), "claim of a completed key twice")
	if len(parseClaimLines(t, r.stdout)) != 2 || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q; want two lines and nothing on stderr with -q", r.stdout, r.stderr)
	}

	// A key idemd refuses gets its line and its message; the others go on.
	long := strings.Repeat("x", 300)
	r = f.idem("claim", "-n", "jobs", "m-5", long).must(t, int(exitMixed), "claim with a key over the limit")
	lines = parseClaimLines(t, r.stdout)
	if len(lines) != 2 || lines[0].code != 0 || lines[1] != (claimLineOut{int(exitInvalidArgument), "INVALID_ARGUMENT/INVALID_KEY", "-", long}) {
		t.Fatalf("lines %+v; want m-5 ACQUIRED, then 17 INVALID_ARGUMENT/INVALID_KEY - for the long key", lines)
	}
	if !strings.Contains(r.stderr, "claim jobs/"+long+": key is 300 bytes; the limit is 256 (INVALID_ARGUMENT/INVALID_KEY)") {
		t.Errorf("stderr %q does not say what was wrong with the key", r.stderr)
	}
}

// TestClaimManyJSON: with -o json each key's line is one JSON object with
// its exit code and the ClaimResponse, or its error.
func TestClaimManyJSON(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.claim("jobs", "fp", "--fingerprint", "0a")

	stdin := `{"key": "j-1", "claimant": "worker-7"}
{"key": "fp", "fingerprint": "0b"}

{"key": "j-2", "fingerprint": "00ff"}
`
	r := f.idemWith(runOpts{stdin: []byte(stdin)}, "-o", "json", "claim", "-n", "jobs", "--stdin", "--claimant", "default").
		must(t, int(exitMixed), "claim --stdin -o json")
	var lines []map[string]json.RawMessage
	for line := range strings.Lines(r.stdout) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not one JSON object: %v", line, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (the blank line is skipped):\n%s", len(lines), r.stdout)
	}
	response := func(i int) *idemv1.ClaimResponse {
		t.Helper()
		var resp idemv1.ClaimResponse
		if err := protojson.Unmarshal(lines[i]["response"], &resp); err != nil {
			t.Fatalf("line %d: response is not a ClaimResponse: %v\n%s", i+1, err, r.stdout)
		}
		return &resp
	}
	if string(lines[0]["key"]) != `"j-1"` || string(lines[0]["exitCode"]) != "0" {
		t.Errorf("line 1 = %s", r.stdout)
	}
	if rec := response(0).GetRecord(); response(0).GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || rec.GetClaimant() != "worker-7" {
		t.Errorf("line 1: %v; want ACQUIRED by the line's claimant worker-7", response(0))
	}
	if rec := response(2).GetRecord(); rec.GetClaimant() != "default" || fmt.Sprintf("%x", rec.GetFingerprint()) != "00ff" {
		t.Errorf("line 3: %v; want --claimant's default and the line's fingerprint", rec)
	}
	var e jsonLineError
	if err := json.Unmarshal(lines[1]["error"], &e); err != nil {
		t.Fatalf("line 2 has no error object: %v\n%s", err, r.stdout)
	}
	if string(lines[1]["exitCode"]) != "15" || e.Code != "FAILED_PRECONDITION" || e.Reason != "FINGERPRINT_MISMATCH" || e.Message == "" || lines[1]["response"] != nil {
		t.Errorf("line 2 = %s; want exit code 15 and the FINGERPRINT_MISMATCH error, no response", r.stdout)
	}
	if n := strings.Count(r.stderr, "(FAILED_PRECONDITION/FINGERPRINT_MISMATCH)"); n != 1 {
		t.Errorf("stderr %q; want the mismatch's message once", r.stderr)
	}
}

// TestClaimManySplits sends more keys than one batch holds: idem splits them
// (idemd refuses a batch over 500), and the lines keep the input's order.
func TestClaimManySplits(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var stdin strings.Builder
	const n = 1201
	for i := range n {
		fmt.Fprintf(&stdin, "{\"key\": \"s-%04d\"}\n", i)
	}
	r := f.idemWith(runOpts{stdin: []byte(stdin.String())}, "claim", "-n", "jobs", "--stdin").must(t, 0, "claim of 1201 keys")
	lines := parseClaimLines(t, r.stdout)
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	seen := map[string]bool{}
	for i, l := range lines {
		if l.key != fmt.Sprintf("s-%04d", i) || l.code != 0 || seen[l.token] {
			t.Fatalf("line %d = %+v; want s-%04d ACQUIRED with a token of its own", i+1, l, i)
		}
		seen[l.token] = true
	}

	// --batch-size over what idemd takes: every key's line says so, and
	// the message says what to do.
	r = f.idemWith(runOpts{stdin: []byte(stdin.String())}, "claim", "-n", "other", "--stdin", "--batch-size", "600").must(t, int(exitInvalidArgument), "--batch-size 600")
	if lines := parseClaimLines(t, r.stdout); len(lines) != n || lines[0].outcome != "INVALID_ARGUMENT/INVALID_BATCH_SIZE" || lines[n-1].code != int(exitInvalidArgument) {
		t.Errorf("%d lines, the first %+v; want %d lines of 17 INVALID_ARGUMENT/INVALID_BATCH_SIZE", len(lines), lines[0], n)
	}
	if !strings.Contains(r.stderr, "claim other (items 1 to 600): ") || !strings.Contains(r.stderr, "(INVALID_ARGUMENT/INVALID_BATCH_SIZE); pass a smaller --batch-size") {
		t.Errorf("stderr %q does not point at --batch-size", r.stderr)
	}
	// The next batches were not sent: their keys are not claimed.
	f.idem("lookup", "-n", "other", "-k", "s-1200").must(t, int(exitNotFound), "lookup of a key of the batch not sent")
}

// TestClaimManyBadInput: a bad line of --stdin names its line and field and
// ends idem before anything is sent; so do flags that are for one key.
func TestClaimManyBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, c := range []struct{ stdin, want string }{
		{"{\"key\": \"b-1\"}\n{\"kee\": \"b-2\"}\n", `stdin line 2: unknown field "kee"`},
		{"{\"key\": \"b-1\"}\n{\"key\": 5}\n", `stdin line 2: "key" is a JSON number; it must be a string`},
		{"{\"key\": \"b-1\", \"fingerprint\": \"zz\"}\n", `stdin line 1: "fingerprint" "zz" is not hex`},
		{"{\"key\": \"b-1\"}\n\n{\"claimant\": \"me\"}\n", `stdin line 3 has no "key"`},
		{"b-1\n", `stdin line 1 is not a JSON object`},
		{"{\"key\": \"b-1\"} {\"key\": \"b-2\"}\n", `stdin line 1 holds more than one JSON value`},
		{"{\"key\": \"b-1\"}\n" + strings.Repeat(" ", maxLineBytes+1) + "\n", `stdin line 2 is over 1024 KiB`},
	} {
		r := f.idemWith(runOpts{stdin: []byte(c.stdin)}, "claim", "-n", "jobs", "--stdin").must(t, int(exitError), "claim --stdin of "+c.stdin[:min(len(c.stdin), 40)])
		if r.stdout != "" || !strings.Contains(r.stderr, c.want) {
			t.Errorf("stdin %.60q: stdout %q, stderr %q; want no lines and a message with %q", c.stdin, r.stdout, r.stderr, c.want)
		}
		oneLine(t, r.stderr)
	}
	// Nothing was sent: the first good line's key was not claimed.
	f.idem("lookup", "-n", "jobs", "-k", "b-1").must(t, int(exitNotFound), "lookup after bad input")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-k", "a", "b"}, "pass the keys either as arguments"},
		{[]string{"--stdin", "a"}, "--stdin and keys as arguments"},
		{[]string{"--fingerprint", "0a", "a", "b"}, "give each its fingerprint in its line of --stdin"},
		{[]string{"--wait", "1s", "a", "b"}, "a batch answers at once"},
		{[]string{"--result-out", "-", "a"}, "-o json carries each replayed result"},
		{[]string{"--batch-size", "0", "a"}, "--batch-size is 0"},
		{nil, "claim needs a key"},
	} {
		r := f.idem(append([]string{"claim", "-n", "jobs"}, c.args...)...).must(t, int(exitError), strings.Join(c.args, " "))
		if r.stdout != "" || !strings.Contains(r.stderr, c.want) {
			t.Errorf("claim %v: stdout %q, stderr %q; want a message with %q", c.args, r.stdout, r.stderr, c.want)
		}
	}

	// No lines at all is no job: nothing to do.
	r := f.idemWith(runOpts{stdin: []byte("\n")}, "claim", "-n", "jobs", "--stdin").must(t, 0, "claim --stdin of nothing")
	if r.stdout != "" {
		t.Errorf("stdout %q; want nothing", r.stdout)
	}
}

// TestClaimManyUnavailable: when idemd cannot be reached every key still gets
// its line, with code 19, and the error is said once.
func TestClaimManyUnavailable(t *testing.T) {
	t.Parallel()
	r := runIdem(t, runOpts{}, "--addr", closedAddr(t), "--timeout", "2s", "claim", "-n", "jobs", "--batch-size", "2", "u-1", "u-2", "u-3").
		must(t, int(exitUnavailable), "claim with no idemd")
	lines := parseClaimLines(t, r.stdout)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), r.stdout)
	}
	for i, l := range lines {
		if l.code != int(exitUnavailable) || l.outcome != "UNAVAILABLE" || l.token != "-" || l.key != fmt.Sprintf("u-%d", i+1) {
			t.Errorf("line %d = %+v; want 19 UNAVAILABLE - u-%d", i+1, l, i+1)
		}
	}
	if n := strings.Count(r.stderr, "cannot reach idemd"); n != 1 {
		t.Errorf("stderr %q; want the error said once", r.stderr)
	}

	// With -o json each line carries the error too.
	r = runIdem(t, runOpts{}, "--addr", closedAddr(t), "-o", "json", "claim", "-n", "jobs", "u-1").must(t, int(exitUnavailable), "claim -o json with no idemd")
	var line jsonLine
	if err := json.Unmarshal([]byte(r.stdout), &line); err != nil || line.Key != "u-1" || line.ExitCode != exitUnavailable || line.Error == nil || line.Error.Code != "UNAVAILABLE" {
		t.Errorf("-o json line %q (%v); want u-1 with exit code 19 and the UNAVAILABLE error", r.stdout, err)
	}
}

// TestCompleteAndFailMany finishes a claimed batch from a shell: complete
// --stdin and fail --stdin take each job's key and lease token from its
// line and print a line per job, as claim does.
func TestCompleteAndFailMany(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.idem("claim", "-n", "jobs", "c-1", "c-2", "c-3", "c-4").must(t, 0, "claim of four keys")
	tok := map[string]string{}
	for _, l := range parseClaimLines(t, r.stdout) {
		tok[l.key] = l.token
	}

	// The token as a number and as a string (claim -o json prints int64
	// values as strings); c-2's token is not its own.
	stdin := fmt.Sprintf(`{"key": "c-1", "leaseToken": %s, "result": "sent"}
{"key": "c-2", "leaseToken": "%s"}
{"key": "c-3", "leaseToken": %s}
`, tok["c-1"], tok["c-1"], tok["c-3"])
	r = f.idemWith(runOpts{stdin: []byte(stdin)}, "complete", "-n", "jobs", "--stdin").must(t, int(exitMixed), "complete --stdin")
	lines := parseClaimLines(t, r.stdout)
	want := []claimLineOut{
		{0, "COMPLETED", tok["c-1"], "c-1"},
		{int(exitLeaseLost), "ABORTED/LEASE_LOST", "-", "c-2"},
		{0, "COMPLETED", tok["c-3"], "c-3"},
	}
	if len(lines) != 3 || lines[0] != want[0] || lines[1] != want[1] || lines[2] != want[2] {
		t.Fatalf("lines %+v; want %+v", lines, want)
	}
	if !strings.Contains(r.stderr, "complete jobs/c-2: lease lost") || !strings.Contains(r.stderr, "complete of 3 keys in jobs: 2 completed, 1 aborted/lease_lost") {
		t.Errorf("stderr %q; want c-2's error and the summary", r.stderr)
	}
	r = f.idem("claim", "-n", "jobs", "-k", "c-1", "--result-out", "-").must(t, int(exitCompleted), "claim of c-1 after its complete")
	if r.stdout != "sent" {
		t.Errorf("c-1's stored result %q; want the line's result sent", r.stdout)
	}

	// fail --stdin: the line's retryable overrides --retryable, its error
	// --error.
	stdin = fmt.Sprintf(`{"key": "c-2", "leaseToken": %s, "error": "smtp timeout"}
{"key": "c-4", "leaseToken": %s, "retryable": false}
`, tok["c-2"], tok["c-4"])
	r = f.idemWith(runOpts{stdin: []byte(stdin)}, "-o", "json", "fail", "-n", "jobs", "--stdin", "--retryable", "--error", "default").must(t, 0, "fail --stdin")
	var got []jsonLine
	for line := range strings.Lines(r.stdout) {
		var l jsonLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, l)
	}
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(got), r.stdout)
	}
	for i, c := range []struct {
		key   string
		state idemv1.State
		error string
	}{{"c-2", idemv1.State_STATE_RELEASED, "smtp timeout"}, {"c-4", idemv1.State_STATE_FAILED, "default"}} {
		var resp idemv1.FailResponse
		if err := protojson.Unmarshal(got[i].Response, &resp); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if got[i].Key != c.key || got[i].ExitCode != 0 || resp.GetRecord().GetState() != c.state {
			t.Errorf("line %d = %+v, %v; want %s %v", i+1, got[i], &resp, c.key, c.state)
		}
	}
	r = f.idem("claim", "-n", "jobs", "-k", "c-4").must(t, int(exitFailed), "claim of c-4 after its fail")
	if !strings.Contains(r.stderr, "its stored error: default") {
		t.Errorf("stderr %q; want --error's default stored", r.stderr)
	}
	f.claim("jobs", "c-2") // released: the next claim runs it again

	for _, c := range []struct {
		cmd, stdin, want string
		args             []string
	}{
		{"complete", `{"key": "c-9"}`, `stdin line 1 has no "leaseToken"`, nil},
		{"complete", `{"key": "c-9", "leaseToken": 1.5}`, `"leaseToken" 1.5 is not a lease token`, nil},
		{"complete", `{"key": "c-9", "leaseToken": true}`, `"leaseToken" is a JSON boolean`, nil},
		{"complete", `{"key": "c-9", "token": 1}`, `stdin line 1: unknown field "token"`, nil},
		{"complete", `{"leaseToken": 1}`, `stdin line 1 has no "key"`, nil},
		{"fail", `{"key": "c-9", "leaseToken": 1, "retryable": "yes"}`, `"retryable" is a JSON string; it must be a boolean`, nil},
		{"complete", `{"key": "c-9", "leaseToken": 1}`, "with --stdin each line carries its result", []string{"--result", "x"}},
		{"fail", `{"key": "c-9", "leaseToken": 1}`, "with --stdin each line names its key", []string{"-k", "c-9"}},
		{"fail", `{"key": "c-9", "leaseToken": 1}`, "with --stdin each line carries its leaseToken", []string{"--lease-token", "3"}},
	} {
		args := append([]string{c.cmd, "-n", "jobs", "--stdin"}, c.args...)
		r := f.idemWith(runOpts{stdin: []byte(c.stdin + "\n")}, args...).must(t, int(exitError), c.cmd+" --stdin of "+c.stdin)
		if r.stdout != "" || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s %s: stdout %q, stderr %q; want a message with %q", c.cmd, c.stdin, r.stdout, r.stderr, c.want)
		}
	}
	// The form for one job still needs its key and token.
	r = f.idem("complete", "-n", "jobs", "-k", "c-9").must(t, int(exitError), "complete without --lease-token")
	if !strings.Contains(r.stderr, "--lease-token N is required") {
		t.Errorf("stderr %q", r.stderr)
	}
	r = f.idem("fail", "-n", "jobs", "--lease-token", "1").must(t, int(exitError), "fail without -k")
	if !strings.Contains(r.stderr, "-k KEY is required") {
		t.Errorf("stderr %q", r.stderr)
	}
}
