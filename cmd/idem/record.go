package main

import (
	"encoding/hex"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// recordFlags name one record.
type recordFlags struct {
	Namespace string `short:"n" required:"" placeholder:"NS" help:"Namespace: the job type, e.g. process_payment (a-z, 0-9, _ . -)."`
	Key       string `short:"k" required:"" placeholder:"KEY" help:"The job's idempotency key, chosen when the job was made."`
}

func (f recordFlags) name() string { return f.Namespace + "/" + f.Key }

// leaseTokenFlag is the fencing token from claim. It is not called --token,
// which is the bearer token that authenticates the caller.
type leaseTokenFlag struct {
	LeaseToken int64 `name:"lease-token" aliases:"fencing-token" required:"" env:"IDEM_LEASE_TOKEN" placeholder:"N" help:"The lease (fencing) token that idem claim printed; --fencing-token is another name for it."`
}

// finishFlags name the record that complete or fail finishes, with its
// lease token; or with --stdin, many records, each line naming its own.
type finishFlags struct {
	Namespace  string `short:"n" required:"" placeholder:"NS" help:"Namespace: the job type, e.g. process_payment (a-z, 0-9, _ . -)."`
	Key        string `short:"k" placeholder:"KEY" help:"The job's idempotency key (required unless --stdin)."`
	LeaseToken int64  `name:"lease-token" aliases:"fencing-token" env:"IDEM_LEASE_TOKEN" placeholder:"N" help:"The lease (fencing) token that idem claim printed (required unless --stdin); --fencing-token is another name for it."`
	Stdin      bool   `help:"Finish many jobs read from stdin, a JSON object a line that names its key and leaseToken (see below): one batch call per --batch-size jobs, one line per job on stdout."`
	BatchSize  int    `default:"500" placeholder:"N" help:"With --stdin: the most jobs sent in one batch call (1 to idemd's --batch-max-items, ${default} unless configured)."`
}

func (f finishFlags) name() string { return f.Namespace + "/" + f.Key }

// checkOne refuses the form for one job without its key or token.
func (f finishFlags) checkOne() error {
	switch {
	case f.Key == "":
		return usageError("-k KEY is required: the job's key (or --stdin for many jobs)")
	case f.LeaseToken == 0:
		return usageError("--lease-token N is required: the token idem claim printed (or --stdin for many jobs)")
	}
	return nil
}

// checkMany refuses what is for one job in the form for many.
func (f finishFlags) checkMany() error {
	switch {
	case f.Key != "":
		return usageError("-k and --stdin: with --stdin each line names its key; leave -k out")
	case f.LeaseToken != 0:
		return usageError("--lease-token (or IDEM_LEASE_TOKEN) and --stdin: with --stdin each line carries its leaseToken; leave --lease-token out")
	}
	return checkBatchSize(f.BatchSize)
}

// durationProto leaves zero unset, so that idemd applies its default.
func durationProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// ---- claim ----

type claimCmd struct {
	Namespace     string        `short:"n" required:"" placeholder:"NS" help:"Namespace: the job type, e.g. process_payment (a-z, 0-9, _ . -)."`
	Key           string        `short:"k" placeholder:"KEY" help:"The job's idempotency key, chosen when the job was made. For many jobs at once pass their keys as arguments instead, or --stdin."`
	Keys          []string      `arg:"" optional:"" name:"key" help:"Claim many jobs at once: one line per key on stdout (see below), one BatchClaim per --batch-size keys."`
	Stdin         bool          `help:"Claim many jobs read from stdin, a JSON object a line: {\"key\": \"…\", \"fingerprint\": \"HEX\", \"claimant\": \"…\"} (only key is required)."`
	BatchSize     int           `default:"500" placeholder:"N" help:"With many keys: the most keys sent in one BatchClaim (1 to idemd's --batch-max-items, ${default} unless configured)."`
	Fingerprint   string        `xor:"fingerprint" placeholder:"HEX" help:"Fingerprint of the job's payload, in hex (at most 64 bytes)."`
	FingerprintOf string        `xor:"fingerprint" placeholder:"FILE|-" help:"Use the SHA-256 of this file's bytes (- for stdin) as the fingerprint."`
	LeaseTTL      time.Duration `name:"lease-ttl" placeholder:"DURATION" help:"How long the lease lasts without a heartbeat (1s to 24h; idemd's default, 5m, when unset)."`
	Retention     time.Duration `placeholder:"DURATION" help:"How long the record is kept after the job ends (1m to 2160h; idemd's default, 24h, when unset)."`
	Claimant      string        `placeholder:"ID" help:"Id of this attempt: claiming again with the same id while the lease lives returns the same token."`
	ResultOut     string        `placeholder:"FILE|-" help:"When the job completed earlier (exit 11), write its stored result here (- for stdout)."`
	Wait          time.Duration `placeholder:"DURATION" help:"While another worker holds the job, wait up to this long (at most 60s) for it to finish, and answer with its outcome: COMPLETED, FAILED, or ACQUIRED when it was given back or its lease ran out. idemd does the waiting and answers as soon as the holder finishes. --timeout counts from the end of the wait. 0 (the default) answers IN_PROGRESS at once."`
}

func (claimCmd) Help() string {
	return `Claim asks for the right to run one job. When it is granted (ACQUIRED, exit 0) the lease token is printed on stdout by itself; do the work, then "idem complete" or "idem fail" with --lease-token. Otherwise do not run the job; the exit code says why:

    0   ACQUIRED: the lease token is on stdout
    10  IN_PROGRESS: another worker holds a live lease (still, after --wait); try again later
    11  COMPLETED: the job was done before (replay); --result-out gets the stored result
    12  FAILED: the job failed permanently before; the stored error is on stderr
    15  the key was claimed before with another --fingerprint
    20  UNRESOLVED: held for resolution (its lease ran out under a hold policy); park the message

` + otherExitCodes + `

With -o json stdout carries the ClaimResponse (outcome, record, retryAfter) whatever the outcome, and the exit code is the same.

Example:

    if TOKEN=$(idem claim -n process_payment -k order-1042 --lease-ttl 30s); then
      charge_card && idem complete -n process_payment -k order-1042 --lease-token "$TOKEN" --result ok
    fi

A duplicate that would rather have the first delivery's outcome than exit 10 waits for it:

    idem claim -n process_payment -k order-1042 --wait 30s --result-out -

Many jobs at once: pass their keys as arguments, or --stdin with one JSON object a line ({"key": "…", "fingerprint": "HEX", "claimant": "…"}; only key is required, --claimant is the default claimant). idem sends one BatchClaim per --batch-size keys and prints one line per key, in their order:

    CODE OUTCOME TOKEN KEY

CODE is the exit code a claim of that key alone would have ended with (0 ACQUIRED: run the job with TOKEN; 10, 11, 12, 15, 20, … as above); OUTCOME is ACQUIRED, IN_PROGRESS, COMPLETED, FAILED or UNRESOLVED, or for a key that got an error its code and reason (FAILED_PRECONDITION/FINGERPRINT_MISMATCH, whose message is on stderr); TOKEN is the record's lease token, - after an error. With -o json each line is one JSON object: {"key", "exitCode", "response" (the ClaimResponse) or "error" ({"code", "reason", "message"})}. Every key gets its line, also when idemd cannot be reached. idem exits with the code all the lines share (0: every key ACQUIRED), or 22 (mixed) when they differ; a bad line of --stdin ends idem with 1 before anything is sent.

    idem claim -q -n emails msg-1 msg-2 msg-3 | while read -r code outcome token key; do
      [ "$code" = 0 ] && send_email "$key" && idem complete -q -n emails -k "$key" --lease-token "$token"
    done`
}

func (c *claimCmd) name() string { return c.Namespace + "/" + c.Key }

func (c *claimCmd) Run(a *app) error {
	if len(c.Keys) > 0 || c.Stdin {
		return c.runMany(a)
	}
	if c.Key == "" {
		return usageError("claim needs a key: -k KEY for one job, the keys as arguments or --stdin for many")
	}
	if err := a.checkResultOut(c.ResultOut); err != nil {
		return err
	}
	req := &idemv1.ClaimRequest{
		Namespace: c.Namespace,
		Key:       c.Key,
		LeaseTtl:  durationProto(c.LeaseTTL),
		Claimant:  c.Claimant,
		Retention: durationProto(c.Retention),
		Wait:      durationProto(c.Wait),
	}
	if c.Wait > 0 {
		// The answer may come only once the wait is over.
		timeout := a.Timeout
		a.Timeout += c.Wait
		defer func() { a.Timeout = timeout }()
	}
	var err error
	if req.Fingerprint, err = c.fingerprint(a); err != nil {
		return err
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	resp, err := call(a, "claim "+c.name(), conn.IdempotencyService().Claim, req)
	if err != nil {
		return err
	}
	rec := resp.GetRecord()
	code, err := c.report(a, resp)
	if err != nil {
		return err
	}
	if a.json() {
		if err := a.printJSON(resp); err != nil {
			return err
		}
	} else if code == exitOK {
		fmt.Fprintln(a.stdout, rec.GetToken())
	}
	if code == exitCompleted && c.ResultOut != "" {
		if err := a.writeOutput("--result-out", c.ResultOut, rec.GetResult()); err != nil {
			return err
		}
	}
	if code != exitOK {
		return exitWith(code)
	}
	return nil
}

// report says what a Claim's answer means for the caller and returns its
// exit code.
func (c *claimCmd) report(a *app, resp *idemv1.ClaimResponse) (exitCode, error) {
	rec := resp.GetRecord()
	var code exitCode
	switch resp.GetOutcome() {
	case idemv1.Outcome_OUTCOME_ACQUIRED:
		code = exitOK
		note := ""
		if rec.GetAttempt() > 1 {
			note = "; an earlier attempt may have done part of the work"
		}
		a.say("acquired %s with lease token %d (attempt %d%s); the lease runs out at %s unless you heartbeat; finish with idem complete or idem fail",
			c.name(), rec.GetToken(), rec.GetAttempt(), note, formatTime(rec.GetLeaseExpiresAt()))
	case idemv1.Outcome_OUTCOME_IN_PROGRESS:
		code = exitInProgress
		a.say("%s is in progress in another worker (token %d); its lease runs out in %s: do not run it now, try again later",
			c.name(), rec.GetToken(), resp.GetRetryAfter().AsDuration().Round(time.Millisecond))
	case idemv1.Outcome_OUTCOME_COMPLETED:
		code = exitCompleted
		hint := ""
		if c.ResultOut == "" && len(rec.GetResult()) > 0 {
			hint = " (--result-out - prints it)"
		}
		a.say("%s completed earlier (replay): do not run it again; its stored result is %s%s", c.name(), sizeOf(rec.GetResult()), hint)
	case idemv1.Outcome_OUTCOME_FAILED:
		code = exitFailed
		a.say("%s failed permanently earlier (replay): do not run it; its stored error: %s", c.name(), rec.GetError())
	case idemv1.Outcome_OUTCOME_UNRESOLVED:
		code = exitUnresolved
		a.say("%s is unresolved: its lease (token %d) ran out under the hold policy %q: do not run it; park the message until it is resolved (idem resolve)",
			c.name(), rec.GetToken(), rec.GetPolicy())
	default:
		return exitError, fmt.Errorf("claim %s: idemd answered with outcome %v, which this idem does not know; upgrade idem", c.name(), resp.GetOutcome())
	}
	return code, nil
}

// fingerprint is the fingerprint the flags give: --fingerprint in hex, or
// the hash of --fingerprint-of's payload; none without either.
func (c *claimCmd) fingerprint(a *app) ([]byte, error) {
	switch {
	case c.Fingerprint != "":
		fp, err := hex.DecodeString(c.Fingerprint)
		if err != nil {
			return nil, usageError("--fingerprint %q is not hex: %v; pass hex digits, or --fingerprint-of FILE to hash a payload", c.Fingerprint, err)
		}
		return fp, nil
	case c.FingerprintOf != "":
		payload, err := a.readInput("--fingerprint-of", c.FingerprintOf)
		if err != nil {
			return nil, err
		}
		return client.Fingerprint(payload), nil
	}
	return nil, nil
}

func sizeOf(b []byte) string {
	if len(b) == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", len(b))
}

// ---- complete ----

type completeCmd struct {
	finishFlags
	Result     string `xor:"result" placeholder:"STRING" help:"The result to store and replay to later claims."`
	ResultFile string `xor:"result" placeholder:"FILE|-" help:"Read the result's bytes from this file (- for stdin)."`
	ResultOut  string `placeholder:"FILE|-" help:"Write the stored result here (- for stdout): what was sent, or on a repeat, what was stored first."`
}

func (completeCmd) Help() string {
	return `Complete records the job's success with the lease token from claim, and stores a result (none by default) that later claims replay. Repeating it with the same token after a lost answer is safe: it returns the stored record.

Exit codes:

    0   completed
    13  no such record (purged or deleted)
    14  lease lost: another worker took the job over; do not retry
    16  the record already ended another way (e.g. failed)

` + otherExitCodes + `

Example:

    charge_card > receipt.json &&
      idem complete -n process_payment -k order-1042 --lease-token "$TOKEN" --result-file receipt.json

Many jobs at once: --stdin reads one JSON object a line, {"key": "…", "leaseToken": 17, "result": "…"} (leaseToken a number or a string of digits, as claim -o json prints it; result text, none when left out), and prints one line per job, "CODE STATE TOKEN KEY": CODE the exit code above for that job, STATE COMPLETED, or the error's code and reason (ABORTED/LEASE_LOST). idem exits with the code all the lines share, or 22 (mixed).`
}

func (c *completeCmd) Run(a *app) error {
	if c.Stdin {
		return c.runMany(a)
	}
	if err := c.checkOne(); err != nil {
		return err
	}
	if err := a.checkResultOut(c.ResultOut); err != nil {
		return err
	}
	result := []byte(c.Result)
	if c.ResultFile != "" {
		var err error
		if result, err = a.readInput("--result-file", c.ResultFile); err != nil {
			return err
		}
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	resp, err := call(a, "complete "+c.name(), conn.IdempotencyService().Complete, &idemv1.CompleteRequest{
		Namespace: c.Namespace, Key: c.Key, Token: c.LeaseToken, Result: result,
	})
	if err != nil {
		return err
	}
	rec := resp.GetRecord()
	a.say("completed %s with token %d; result of %s stored until %s", c.name(), rec.GetToken(), sizeOf(rec.GetResult()), formatTime(rec.GetExpiresAt()))
	if a.json() {
		if err := a.printJSON(resp); err != nil {
			return err
		}
	}
	if c.ResultOut != "" {
		return a.writeOutput("--result-out", c.ResultOut, rec.GetResult())
	}
	return nil
}

// ---- fail ----

type failCmd struct {
	finishFlags
	Error     string `placeholder:"TEXT" help:"What went wrong (at most 4 KiB); replayed to later claims when the failure is permanent."`
	Retryable bool   `help:"Hand the job back (RELEASED) so that the next claim runs it again, instead of failing it for good (FAILED)."`
}

func (failCmd) Help() string {
	return `Fail records the job's failure with the lease token from claim. By default the failure is permanent: the record becomes FAILED and every later claim replays the error (exit 12). With --retryable the record is RELEASED and the next claim acquires it again.

Exit codes:

    0   recorded
    13  no such record (purged or deleted)
    14  lease lost: another worker took the job over; do not retry
    16  the record already ended another way (e.g. completed)

` + otherExitCodes + `

Example:

    if ! send_email "$TO"; then
      idem fail -n welcome_email -k "user-$ID" --lease-token "$TOKEN" --error "smtp timeout" --retryable
    fi

Many jobs at once: --stdin reads one JSON object a line, {"key": "…", "leaseToken": 17, "error": "…", "retryable": true} (error and retryable default to --error and --retryable), and prints one line per job, "CODE STATE TOKEN KEY": CODE the exit code above for that job, STATE FAILED or RELEASED, or the error's code and reason. idem exits with the code all the lines share, or 22 (mixed).`
}

func (c *failCmd) Run(a *app) error {
	if c.Stdin {
		return c.runMany(a)
	}
	if err := c.checkOne(); err != nil {
		return err
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	resp, err := call(a, "fail "+c.name(), conn.IdempotencyService().Fail, &idemv1.FailRequest{
		Namespace: c.Namespace, Key: c.Key, Token: c.LeaseToken, Error: c.Error, Retryable: c.Retryable,
	})
	if err != nil {
		return err
	}
	rec := resp.GetRecord()
	if rec.GetState() == idemv1.State_STATE_RELEASED {
		a.say("released %s (token %d): the next claim runs it again", c.name(), rec.GetToken())
	} else {
		a.say("failed %s for good (token %d): later claims replay the error", c.name(), rec.GetToken())
	}
	if a.json() {
		return a.printJSON(resp)
	}
	return nil
}

// ---- heartbeat ----

type heartbeatCmd struct {
	recordFlags
	leaseTokenFlag
	LeaseTTL time.Duration `name:"lease-ttl" placeholder:"DURATION" help:"The new lease, counted from now (1s to 24h; idemd's default, 5m, when unset)."`
}

func (heartbeatCmd) Help() string {
	return `Heartbeat extends the lease of a job that is still running, so that no other worker takes it over. Call it well before the lease runs out, e.g. every third of --lease-ttl. On an EXPIRED record that nobody took over it makes the record PROCESSING again.

Exit codes:

    0   the lease is extended; the new expiry is on stderr (or leaseExpiresAt with -o json)
    13  no such record (purged or deleted)
    14  lease lost: another worker took the job over; stop the work
    16  the record already ended

` + otherExitCodes + `

Example:

    ( while sleep 10; do
        idem heartbeat -q -n reports -k "$KEY" --lease-token "$TOKEN" --lease-ttl 30s || exit
      done ) &`
}

func (c *heartbeatCmd) Run(a *app) error {
	conn, err := a.client()
	if err != nil {
		return err
	}
	resp, err := call(a, "heartbeat "+c.name(), conn.IdempotencyService().Heartbeat, &idemv1.HeartbeatRequest{
		Namespace: c.Namespace, Key: c.Key, Token: c.LeaseToken, LeaseTtl: durationProto(c.LeaseTTL),
	})
	if err != nil {
		return err
	}
	a.say("extended the lease of %s (token %d) to %s", c.name(), resp.GetRecord().GetToken(), formatTime(resp.GetRecord().GetLeaseExpiresAt()))
	if a.json() {
		return a.printJSON(resp)
	}
	return nil
}

// ---- lookup ----

type lookupCmd struct {
	recordFlags
	ResultOut string `placeholder:"FILE|-" help:"Write the record's stored result here (- for stdout, instead of the table)."`
	History   bool   `help:"Also show the record's timeline: every takeover, Fail, hold, resolution (who and why), deletion and refused fingerprint in the key's life."`
	Tenant    string `placeholder:"TENANT" help:"Look up the record of this tenant (an operator tenant only; through the AdminService)."`
}

func (lookupCmd) Help() string {
	return `Lookup shows a record without changing it: its state, token, lease, result or error, and timestamps (UTC, from the database's clock), then the job's steps, if it has any: each step's state (STARTED or FINISHED), the token that wrote it, when it started and finished, and its result. With --history, also its timeline: the exceptions in the key's life, oldest first, and who resolved or deleted it, and why. With --tenant, an operator reads another tenant's record through the AdminService; a deleted record's timeline is then shown even though the record is gone.

Exit codes:

    0   found
    13  no such record: never claimed, purged after its retention, or deleted

` + otherExitCodes + `

Example:

    idem lookup -n process_payment -k order-1042
    idem lookup -n process_payment -k order-1042 --history
    idem lookup --tenant payments -n process_payment -k order-1042 --history   # an operator
    idem lookup -n process_payment -k order-1042 --result-out - | jq .
    idem lookup -n process_payment -k order-1042 -o json | jq -r .record.state`
}

func (c *lookupCmd) Run(a *app) error {
	if err := a.checkResultOut(c.ResultOut); err != nil {
		return err
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	var (
		resp    proto.Message
		rec     *idemv1.Record
		history []*idemv1.TimelineEntry
	)
	if c.Tenant != "" {
		r, err := call(a, "lookup "+c.name()+" of tenant "+c.Tenant, conn.AdminService().GetRecord,
			&idemv1.GetRecordRequest{Namespace: c.Namespace, Key: c.Key, Tenant: c.Tenant, IncludeHistory: c.History})
		if err != nil {
			return err
		}
		resp, rec, history = r, r.GetRecord(), r.GetHistory()
	} else {
		r, err := call(a, "lookup "+c.name(), conn.IdempotencyService().Lookup,
			&idemv1.LookupRequest{Namespace: c.Namespace, Key: c.Key, IncludeHistory: c.History})
		if err != nil {
			return err
		}
		resp, rec, history = r, r.GetRecord(), r.GetHistory()
	}
	switch {
	case a.json():
		if err := a.printJSON(resp); err != nil {
			return err
		}
	case c.ResultOut != "-":
		if rec == nil {
			fmt.Fprintf(a.stdout, "%s has no record now: it was deleted. Its timeline:\n", c.name())
		} else if err := printRecord(a.stdout, rec); err != nil {
			return err
		}
		if c.History {
			if rec != nil {
				fmt.Fprintln(a.stdout)
			}
			if err := printHistory(a.stdout, history); err != nil {
				return err
			}
		}
	}
	if rec == nil {
		return &cliError{code: exitNotFound, msg: "lookup " + c.name() + ": no such record now; it was deleted"}
	}
	if c.ResultOut != "" {
		return a.writeOutput("--result-out", c.ResultOut, rec.GetResult())
	}
	return nil
}
