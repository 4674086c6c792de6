package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// The many-keys forms of claim, complete and fail send their items in
// batches (BatchClaim, BatchComplete, BatchFail) and print one line per item,
// in the order of the input: that line, not the exit code, tells a script
// what to do with each key. The exit code sums the lines up: the code every
// line has when they all agree, exitMixed when they do not.

// maxLineBytes bounds one line of --stdin, well above the largest item (a
// key of 256 bytes and a result of idemd's default 64 KiB, in JSON).
const maxLineBytes = 1 << 20

// batchLine is one item's line of output.
type batchLine struct {
	key  string
	code exitCode
	// outcome is the Claim's outcome (ACQUIRED, …) or, for complete and
	// fail, the record's state; for an item that got an error, its code
	// and reason: FAILED_PRECONDITION/FINGERPRINT_MISMATCH.
	outcome string
	token   int64 // the record's token; 0 for an error
	resp    proto.Message
	err     error // the item's error, as classify and describe take it
	// said is true when err was said on stderr already, once for a batch
	// that failed as a whole.
	said bool
}

// jsonLine is a batchLine with -o json.
type jsonLine struct {
	Key      string          `json:"key"`
	ExitCode exitCode        `json:"exitCode"`
	Response json.RawMessage `json:"response,omitempty"`
	Error    *jsonLineError  `json:"error,omitempty"`
}

type jsonLineError struct {
	Code    string `json:"code"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// printLine writes l on stdout: "CODE OUTCOME TOKEN KEY" (the key last, so
// that `read -r code outcome token key` reads a key with spaces whole), or
// one JSON object with -o json. An item's error also gets its one line on
// stderr.
func (a *app) printLine(op string, l batchLine) error {
	if l.err != nil && !l.said {
		if msg := describe(l.err); msg != "" {
			fmt.Fprintf(a.stderr, "idem: %s\n", msg)
		}
	}
	if !a.json() {
		token := "-"
		if l.token != 0 {
			token = strconv.FormatInt(l.token, 10)
		}
		_, err := fmt.Fprintf(a.stdout, "%d %s %s %s\n", l.code, l.outcome, token, l.key)
		return err
	}
	out := jsonLine{Key: l.key, ExitCode: l.code}
	if l.resp != nil {
		raw, err := jsonOptions.Marshal(l.resp)
		if err != nil {
			return fmt.Errorf("encode the response as JSON: %w", err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			return fmt.Errorf("encode the response as JSON: %w", err)
		}
		out.Response = compact.Bytes()
	}
	if st := grpcStatus(l.err); st != nil {
		out.Error = &jsonLineError{Code: upperSnake(st.Code().String()), Reason: client.Reason(l.err), Message: st.Message()}
	} else if l.err != nil {
		out.Error = &jsonLineError{Code: "UNKNOWN", Message: l.err.Error()}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode line of %s: %w", op, err)
	}
	_, err = fmt.Fprintf(a.stdout, "%s\n", b)
	return err
}

// errorLine is the line of an item that got err instead of an answer.
func errorLine(key string, err error) batchLine {
	tag := "ERROR"
	if st := grpcStatus(err); st != nil {
		tag = upperSnake(st.Code().String())
		if reason := client.Reason(err); reason != "" {
			tag += "/" + reason
		}
	}
	return batchLine{key: key, code: classify(err), outcome: tag, err: err}
}

// itemError is a batch item's google.rpc.Status as the error the unary call
// would have returned, so that classify and describe read it alike.
func itemError(op string, a *app, st *spb.Status) error {
	return &rpcError{op: op, addr: a.Addr, err: status.FromProto(st).Err()}
}

// batchTally sums the lines of a batch command up.
type batchTally struct {
	lines  int
	code   exitCode
	counts map[string]int
	order  []string
}

func (t *batchTally) add(l batchLine) {
	if t.lines == 0 {
		t.code = l.code
	} else if t.code != l.code {
		t.code = exitMixed
	}
	t.lines++
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	name := strings.ToLower(l.outcome)
	if t.counts[name] == 0 {
		t.order = append(t.order, name)
	}
	t.counts[name]++
}

// summary is "claim of 3 keys in jobs: 2 acquired, 1 in_progress".
func (t *batchTally) summary(verb, namespace string) string {
	parts := make([]string, len(t.order))
	for i, name := range t.order {
		parts[i] = fmt.Sprintf("%d %s", t.counts[name], name)
	}
	keys := "keys"
	if t.lines == 1 {
		keys = "key"
	}
	return fmt.Sprintf("%s %d %s in %s: %s", verb, t.lines, keys, namespace, strings.Join(parts, ", "))
}

// exit ends the command with the tally's code.
func (t *batchTally) exit() error {
	if t.code == exitOK {
		return nil
	}
	return exitWith(t.code)
}

// sendBatches sends items in batches of at most size and prints a line for
// each item, in order. answer sends one batch and returns a line per item.
// When a batch fails as a whole (idemd unreachable, the token refused), each
// of its items and of the batches not sent yet gets a line with that error:
// every item has its line whatever happens.
func sendBatches[Item any](a *app, op string, items []Item, size int, keyOf func(Item) string,
	answer func(ctx context.Context, batch []Item) ([]batchLine, error)) (*batchTally, error) {
	var t batchTally
	var failed error
	for start := 0; start < len(items); start += size {
		batch := items[start:min(start+size, len(items))]
		var lines []batchLine
		if failed == nil {
			ctx, cancel := context.WithTimeout(a.ctx, a.Timeout)
			var err error
			lines, err = answer(ctx, batch)
			cancel()
			if err == nil && len(lines) != len(batch) {
				err = fmt.Errorf("idemd answered %d items of %d; upgrade idem or idemd so that they agree", len(lines), len(batch))
			}
			if err != nil {
				failed = &rpcError{op: fmt.Sprintf("%s (items %d to %d)", op, start+1, start+len(batch)), addr: a.Addr, err: err}
				if a.ctx.Err() != nil {
					return &t, err // interrupted: run says so
				}
				msg := describe(failed)
				if client.Reason(err) == "INVALID_BATCH_SIZE" {
					msg += "; pass a smaller --batch-size"
				}
				fmt.Fprintf(a.stderr, "idem: %s; the keys from item %d on got no answer\n", msg, start+1)
			}
		}
		if failed != nil {
			lines = make([]batchLine, len(batch))
			for i, item := range batch {
				l := errorLine(keyOf(item), failed)
				l.said = true // once above, not once per item
				lines[i] = l
			}
		}
		for _, l := range lines {
			t.add(l)
			if err := a.printLine(op, l); err != nil {
				return &t, err
			}
		}
	}
	return &t, nil
}

// checkBatchSize refuses a --batch-size that no idemd takes.
func checkBatchSize(n int) error {
	if n < 1 {
		return usageError("--batch-size is %d; it must be at least 1 (idemd takes up to its --batch-max-items, 500 unless configured)", n)
	}
	return nil
}

// readLines decodes stdin's JSON lines into T, one per non-blank line, and
// refuses the whole input at its first bad line: nothing is sent then.
// fields names the fields of a line, for the messages.
func readLines[T any](a *app, fields string, check func(line int, v *T) error) ([]T, error) {
	limited := &io.LimitedReader{R: a.stdin, N: maxInputBytes + 1}
	sc := bufio.NewScanner(limited)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var out []T
	n := 0
	for sc.Scan() {
		n++
		if limited.N <= 0 {
			return nil, usageError("stdin is over %d MiB; split the jobs over several runs", maxInputBytes>>20)
		}
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		v, err := decodeLine[T](n, text, fields)
		if err != nil {
			return nil, err
		}
		if err := check(n, v); err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return nil, usageError("stdin line %d is over %d KiB; a line is one job: %s", n+1, maxLineBytes>>10, fields)
	case err != nil:
		return nil, usageError("read stdin: %v", err)
	case limited.N <= 0:
		return nil, usageError("stdin is over %d MiB; split the jobs over several runs", maxInputBytes>>20)
	}
	return out, nil
}

// decodeLine decodes one line strictly: one JSON object, no unknown field.
func decodeLine[T any](n int, text []byte, fields string) (*T, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	dec.UseNumber() // a leaseToken as a number keeps all its digits
	v := new(T)
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return nil, usageError("stdin line %d: %q is a JSON %s; it must be a %s (a line is %s)", n, typeErr.Field, typeErr.Value, jsonKind(typeErr.Type.Kind().String()), fields)
		case errors.As(err, &syntaxErr) || errors.As(err, &typeErr):
			return nil, usageError("stdin line %d is not a JSON object (%v); a line is %s", n, err, fields)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return nil, usageError("stdin line %d: %s; a line is %s", n, strings.TrimPrefix(err.Error(), "json: "), fields)
		}
		return nil, usageError("stdin line %d: %v; a line is %s", n, err, fields)
	}
	if dec.More() {
		return nil, usageError("stdin line %d holds more than one JSON value; put one job on a line: %s", n, fields)
	}
	return v, nil
}

// jsonKind names a Go kind as JSON does.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "boolean (true or false)"
	case "int64", "int", "int32", "float64":
		return "number"
	}
	return kind
}

// ---- claim ----

// claimLine is one job of claim --stdin.
type claimLine struct {
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"` // hex, as --fingerprint
	Claimant    string `json:"claimant"`    // --claimant when empty
}

const claimLineFields = `{"key": "…", "fingerprint": "HEX", "claimant": "…"} (only key is required)`

// runMany is claim with many keys: the arguments, or --stdin's lines.
func (c *claimCmd) runMany(a *app) error {
	switch {
	case c.Key != "":
		return usageError("-k %s and more keys: pass the keys either as arguments (or --stdin), or one with -k", c.Key)
	case c.Stdin && len(c.Keys) > 0:
		return usageError("--stdin and keys as arguments: pass the keys one way")
	case c.Fingerprint != "" || c.FingerprintOf != "":
		return usageError("--fingerprint and --fingerprint-of are for one key; with many, give each its fingerprint in its line of --stdin")
	case c.ResultOut != "":
		return usageError("--result-out is for one key; with many, -o json carries each replayed result (response.record.result, base64)")
	case c.Wait != 0:
		return usageError("--wait is for one key: a batch answers at once; claim a key that is in progress by itself to wait for it")
	}
	if err := checkBatchSize(c.BatchSize); err != nil {
		return err
	}
	jobs, err := c.jobs(a)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		a.say("no jobs on stdin: nothing to claim")
		return nil
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	op := "claim " + c.Namespace
	t, err := sendBatches(a, op, jobs, c.BatchSize, func(l claimLine) string { return l.Key },
		func(ctx context.Context, batch []claimLine) ([]batchLine, error) {
			req := &idemv1.BatchClaimRequest{Requests: make([]*idemv1.ClaimRequest, len(batch))}
			for i, l := range batch {
				fp, _ := hex.DecodeString(l.Fingerprint) // checked when read
				claimant := l.Claimant
				if claimant == "" {
					claimant = c.Claimant
				}
				req.Requests[i] = &idemv1.ClaimRequest{
					Namespace: c.Namespace, Key: l.Key, Fingerprint: fp, Claimant: claimant,
					LeaseTtl: durationProto(c.LeaseTTL), Retention: durationProto(c.Retention),
				}
			}
			resp, err := conn.IdempotencyService().BatchClaim(ctx, req)
			if err != nil {
				return nil, err
			}
			lines := make([]batchLine, len(resp.GetResults()))
			for i, res := range resp.GetResults() {
				key := ""
				if i < len(batch) {
					key = batch[i].Key
				}
				lines[i] = claimResultLine(a, c.Namespace, key, res)
			}
			return lines, nil
		})
	if t.lines > 0 {
		a.say("%s", t.summary("claim of", c.Namespace))
	}
	if err != nil {
		return err
	}
	return t.exit()
}

// jobs are the keys of a claim of many: the arguments, or the lines of
// --stdin, each checked as it is read.
func (c *claimCmd) jobs(a *app) ([]claimLine, error) {
	if !c.Stdin {
		jobs := make([]claimLine, 0, len(c.Keys))
		for _, k := range c.Keys {
			jobs = append(jobs, claimLine{Key: k})
		}
		return jobs, nil
	}
	return readLines(a, claimLineFields, func(n int, l *claimLine) error {
		if l.Key == "" {
			return usageError("stdin line %d has no \"key\"; every line needs one: %s", n, claimLineFields)
		}
		if _, err := hex.DecodeString(l.Fingerprint); err != nil {
			return usageError("stdin line %d: \"fingerprint\" %q is not hex: %v", n, l.Fingerprint, err)
		}
		return nil
	})
}

// claimResultLine is the line of one Claim of a batch, with the exit code
// the same Claim alone would have ended idem with.
func claimResultLine(a *app, namespace, key string, res *idemv1.BatchClaimResult) batchLine {
	if st := res.GetError(); st != nil {
		return errorLine(key, itemError("claim "+namespace+"/"+key, a, st))
	}
	resp := res.GetResponse()
	l := batchLine{key: key, token: resp.GetRecord().GetToken(), resp: resp,
		outcome: strings.TrimPrefix(resp.GetOutcome().String(), "OUTCOME_")}
	switch resp.GetOutcome() {
	case idemv1.Outcome_OUTCOME_ACQUIRED:
		l.code = exitOK
	case idemv1.Outcome_OUTCOME_IN_PROGRESS:
		l.code = exitInProgress
	case idemv1.Outcome_OUTCOME_COMPLETED:
		l.code = exitCompleted
	case idemv1.Outcome_OUTCOME_FAILED:
		l.code = exitFailed
	case idemv1.Outcome_OUTCOME_UNRESOLVED:
		l.code = exitUnresolved
	default:
		l.code = exitError
		l.err = fmt.Errorf("claim %s/%s: idemd answered with outcome %v, which this idem does not know; upgrade idem", namespace, key, resp.GetOutcome())
	}
	return l
}

// ---- complete and fail ----

// leaseTokenOf reads a line's leaseToken: a JSON number, or a string of
// digits (as -o json prints int64 values).
func leaseTokenOf(n int, v any) (int64, error) {
	var tok int64
	var err error
	switch v := v.(type) {
	case nil:
		return 0, usageError("stdin line %d has no \"leaseToken\": the token idem claim printed for its key", n)
	case json.Number:
		tok, err = v.Int64()
	case string:
		tok, err = strconv.ParseInt(v, 10, 64)
	default:
		return 0, usageError("stdin line %d: \"leaseToken\" is a JSON %s; it must be a number, the token idem claim printed", n, jsonType(v))
	}
	if err != nil || tok <= 0 {
		return 0, usageError("stdin line %d: \"leaseToken\" %v is not a lease token; pass the whole number idem claim printed", n, v)
	}
	return tok, nil
}

// jsonType names the JSON type of a decoded value.
func jsonType(v any) string {
	switch v.(type) {
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// completeLine is one job of complete --stdin.
type completeLine struct {
	Key        string `json:"key"`
	LeaseToken any    `json:"leaseToken"`
	Result     string `json:"result"`
	token      int64
}

const completeLineFields = `{"key": "…", "leaseToken": 17, "result": "…"} (result may be left out)`

// runMany is complete --stdin.
func (c *completeCmd) runMany(a *app) error {
	if c.Result != "" || c.ResultFile != "" || c.ResultOut != "" {
		return usageError("--result, --result-file and --result-out are for one job; with --stdin each line carries its result, and -o json each stored one")
	}
	if err := c.checkMany(); err != nil {
		return err
	}
	jobs, err := readLines(a, completeLineFields, func(n int, l *completeLine) error {
		if l.Key == "" {
			return usageError("stdin line %d has no \"key\"; every line needs one: %s", n, completeLineFields)
		}
		var err error
		l.token, err = leaseTokenOf(n, l.LeaseToken)
		return err
	})
	if err != nil || len(jobs) == 0 {
		if err == nil {
			a.say("no jobs on stdin: nothing to complete")
		}
		return err
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	op := "complete " + c.Namespace
	t, err := sendBatches(a, op, jobs, c.BatchSize, func(l completeLine) string { return l.Key },
		func(ctx context.Context, batch []completeLine) ([]batchLine, error) {
			req := &idemv1.BatchCompleteRequest{Requests: make([]*idemv1.CompleteRequest, len(batch))}
			for i, l := range batch {
				req.Requests[i] = &idemv1.CompleteRequest{Namespace: c.Namespace, Key: l.Key, Token: l.token, Result: []byte(l.Result)}
			}
			resp, err := conn.IdempotencyService().BatchComplete(ctx, req)
			if err != nil {
				return nil, err
			}
			lines := make([]batchLine, len(resp.GetResults()))
			for i, res := range resp.GetResults() {
				key := ""
				if i < len(batch) {
					key = batch[i].Key
				}
				if st := res.GetError(); st != nil {
					lines[i] = errorLine(key, itemError("complete "+c.Namespace+"/"+key, a, st))
					continue
				}
				rec := res.GetResponse().GetRecord()
				lines[i] = batchLine{key: key, code: exitOK, outcome: stateName(rec.GetState()), token: rec.GetToken(), resp: res.GetResponse()}
			}
			return lines, nil
		})
	if t.lines > 0 {
		a.say("%s", t.summary("complete of", c.Namespace))
	}
	if err != nil {
		return err
	}
	return t.exit()
}

// failLine is one job of fail --stdin.
type failLine struct {
	Key        string `json:"key"`
	LeaseToken any    `json:"leaseToken"`
	Error      string `json:"error"`
	Retryable  *bool  `json:"retryable"`
	token      int64
}

const failLineFields = `{"key": "…", "leaseToken": 17, "error": "…", "retryable": true} (error and retryable default to --error and --retryable)`

// runMany is fail --stdin.
func (c *failCmd) runMany(a *app) error {
	if err := c.checkMany(); err != nil {
		return err
	}
	jobs, err := readLines(a, failLineFields, func(n int, l *failLine) error {
		if l.Key == "" {
			return usageError("stdin line %d has no \"key\"; every line needs one: %s", n, failLineFields)
		}
		var err error
		l.token, err = leaseTokenOf(n, l.LeaseToken)
		return err
	})
	if err != nil || len(jobs) == 0 {
		if err == nil {
			a.say("no jobs on stdin: nothing to fail")
		}
		return err
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	op := "fail " + c.Namespace
	t, err := sendBatches(a, op, jobs, c.BatchSize, func(l failLine) string { return l.Key },
		func(ctx context.Context, batch []failLine) ([]batchLine, error) {
			req := &idemv1.BatchFailRequest{Requests: make([]*idemv1.FailRequest, len(batch))}
			for i, l := range batch {
				msg, retryable := l.Error, c.Retryable
				if msg == "" {
					msg = c.Error
				}
				if l.Retryable != nil {
					retryable = *l.Retryable
				}
				req.Requests[i] = &idemv1.FailRequest{Namespace: c.Namespace, Key: l.Key, Token: l.token, Error: msg, Retryable: retryable}
			}
			resp, err := conn.IdempotencyService().BatchFail(ctx, req)
			if err != nil {
				return nil, err
			}
			lines := make([]batchLine, len(resp.GetResults()))
			for i, res := range resp.GetResults() {
				key := ""
				if i < len(batch) {
					key = batch[i].Key
				}
				if st := res.GetError(); st != nil {
					lines[i] = errorLine(key, itemError("fail "+c.Namespace+"/"+key, a, st))
					continue
				}
				rec := res.GetResponse().GetRecord()
				lines[i] = batchLine{key: key, code: exitOK, outcome: stateName(rec.GetState()), token: rec.GetToken(), resp: res.GetResponse()}
			}
			return lines, nil
		})
	if t.lines > 0 {
		a.say("%s", t.summary("fail of", c.Namespace))
	}
	if err != nil {
		return err
	}
	return t.exit()
}
