package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/sdkharness/drive"
)

// scenarioFile is the language-neutral scenario file every SDK's suite runs.
const scenarioFile = "../clients/scenarios/scenarios.json"

// scenarios are the Go SDK's implementations of the file's scenarios, by
// id. TestScenarioFileMatches fails when the two disagree.
var scenarios = map[string]func(t *testing.T, e *scenarioEnv){
	"claim-complete-replay":       scenarioClaimCompleteReplay,
	"concurrent-deliveries":       scenarioConcurrentDeliveries,
	"in-progress-retry-after":     scenarioInProgressRetryAfter,
	"fingerprint-mismatch":        scenarioFingerprintMismatch,
	"lease-lost-mid-job":          scenarioLeaseLostMidJob,
	"retryable-failure":           scenarioRetryableFailure,
	"permanent-failure":           scenarioPermanentFailure,
	"fail-after-own-complete":     scenarioFailAfterOwnComplete,
	"unresolved":                  scenarioUnresolved,
	"resolved-by-operator":        scenarioResolvedByOperator,
	"wait":                        scenarioWait,
	"unavailable-retried":         scenarioUnavailableRetried,
	"restart-mid-complete":        scenarioRestartMidComplete,
	"restart-mid-claim":           scenarioRestartMidClaim,
	"rate-limited":                scenarioRateLimited,
	"error-text-unstorable":       scenarioErrorTextUnstorable,
	"unknown-field-refused":       scenarioUnknownFieldRefused,
	"batch-claim-mixed":           scenarioBatchClaimMixed,
	"batch-same-key-twice":        scenarioBatchSameKeyTwice,
	"batch-restart-mid-complete":  scenarioBatchRestartMidComplete,
	"steps-crash-between-steps":   scenarioStepsCrashBetweenSteps,
	"steps-stale-holder-refused":  scenarioStepsStaleHolderRefused,
	"steps-repeat-and-conflict":   scenarioStepsRepeatAndConflict,
	"steps-unfinished-rerun":      scenarioStepsUnfinishedRerun,
	"steps-unfinished-hold":       scenarioStepsUnfinishedHold,
	"steps-key-vectors":           scenarioStepsKeyVectors,
	"resolver-decides-held":       scenarioResolverDecidesHeld,
	"resolver-cant-tell-and-race": scenarioResolverCantTellAndRace,
}

type scenarioSpec struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Steps     string `json:"steps"`
	Expect    string `json:"expect"`
	Exclusive bool   `json:"exclusive"`
}

func loadScenarios(t *testing.T) []scenarioSpec {
	t.Helper()
	data, err := os.ReadFile(scenarioFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Version   int            `json:"version"`
		Scenarios []scenarioSpec `json:"scenarios"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", scenarioFile, err)
	}
	if file.Version != 1 {
		t.Fatalf("%s is version %d; this suite reads version 1", scenarioFile, file.Version)
	}
	return file.Scenarios
}

// TestScenarioFileMatches fails when the scenario file has an id that the
// Go SDK does not implement, or the Go SDK implements one the file no
// longer has: a scenario added to the file fails every SDK until it is
// implemented there.
func TestScenarioFileMatches(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range loadScenarios(t) {
		if seen[s.ID] {
			t.Errorf("%s has scenario %q twice", scenarioFile, s.ID)
		}
		seen[s.ID] = true
		if s.Title == "" || s.Steps == "" || s.Expect == "" {
			t.Errorf("%s: scenario %q needs a title, steps and expect", scenarioFile, s.ID)
		}
		if scenarios[s.ID] == nil {
			t.Errorf("scenario %q of %s has no Go implementation: add it to the scenarios map in client/scenario_test.go", s.ID, scenarioFile)
		}
	}
	for id := range scenarios {
		if !seen[id] {
			t.Errorf("client/scenario_test.go implements scenario %q, which %s no longer has: remove it", id, scenarioFile)
		}
	}
}

var scenarioRun atomic.Int64 // distinguishes the keys of repeated runs (-count)

// TestScenarios runs every scenario of the file against a real idemd on
// each store: the ones that leave idemd alone in parallel, then the
// exclusive ones, which restart idemd or cut its store, one at a time.
func TestScenarios(t *testing.T) {
	specs := loadScenarios(t)
	bins, err := drive.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			e := &scenarioEnv{h: drive.Start(t, bins, store), run: scenarioRun.Add(1)}
			e.Info = e.h.Info
			t.Run("shared", func(t *testing.T) {
				for _, s := range specs {
					if !s.Exclusive {
						t.Run(s.ID, func(t *testing.T) {
							t.Parallel()
							e.run1(t, s)
						})
					}
				}
			})
			for _, s := range specs {
				if s.Exclusive {
					t.Run(s.ID, func(t *testing.T) {
						t.Cleanup(func() {
							if err := e.h.Control("/ready"); err != nil {
								t.Errorf("idemd after the scenario: %v", err)
							}
						})
						e.run1(t, s)
					})
				}
			}
		})
	}
}

// scenarioEnv is one harness and what the scenarios reach it with.
type scenarioEnv struct {
	drive.Info
	h   *drive.Harness
	run int64
}

func (e *scenarioEnv) run1(t *testing.T, s scenarioSpec) {
	impl := scenarios[s.ID]
	if impl == nil {
		t.Fatalf("scenario %q has no Go implementation", s.ID)
	}
	impl(t, e)
}

// key is a key of the scenario's own, fresh for each run.
func (e *scenarioEnv) key(t *testing.T, part string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]
	return fmt.Sprintf("%s-%s-%d-%s", name, part, e.run, hex.EncodeToString(b[:]))
}

// client is a client for the tenant, with the SDK's defaults, that logs
// its RPCs into log when log is not nil.
func (e *scenarioEnv) client(t *testing.T, tenant string, log *rpcLog) *client.Client {
	t.Helper()
	opts := []client.Option{client.WithInsecure(), client.WithToken(e.Tokens[tenant])}
	if log != nil {
		opts = append(opts, client.WithDialOptions(grpc.WithChainUnaryInterceptor(log.intercept)))
	}
	c, err := client.New(e.GRPCAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *scenarioEnv) worker(t *testing.T) *client.Client { return e.client(t, "worker", nil) }

// scenarioCtx bounds one scenario.
func scenarioCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// rpcLog records the RPCs of one client, as the scenarios observe the SDK.
type rpcLog struct {
	mu    sync.Mutex
	calls []rpcCall
	beats chan struct{} // a value per heartbeat answered OK
}

type rpcCall struct {
	method     string
	start, end time.Time
	err        error
}

func newRPCLog() *rpcLog { return &rpcLog{beats: make(chan struct{}, 100)} }

func (l *rpcLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	l.mu.Lock()
	l.calls = append(l.calls, rpcCall{method: method, start: start, end: time.Now(), err: err})
	l.mu.Unlock()
	if err == nil && strings.HasSuffix(method, "/Heartbeat") {
		select {
		case l.beats <- struct{}{}:
		default:
		}
	}
	return err
}

func (l *rpcLog) snapshot() []rpcCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *rpcLog) count(method string) int {
	n := 0
	for _, c := range l.snapshot() {
		if strings.HasSuffix(c.method, "/"+method) {
			n++
		}
	}
	return n
}

// handlerCalls counts a handler's calls.
type handlerCalls struct{ n atomic.Int32 }

func (h *handlerCalls) fails(t *testing.T) func(context.Context, client.Attempt) ([]byte, error) {
	return func(context.Context, client.Attempt) ([]byte, error) {
		h.n.Add(1)
		t.Error("the handler ran; it must not")
		return nil, errors.New("the handler must not run")
	}
}

func (h *handlerCalls) returns(v string) func(context.Context, client.Attempt) ([]byte, error) {
	return func(context.Context, client.Attempt) ([]byte, error) {
		h.n.Add(1)
		return []byte(v), nil
	}
}

func lookup(t *testing.T, ctx context.Context, c *client.Client, ns, key string) client.Record {
	t.Helper()
	rec, err := c.Lookup(ctx, client.LookupRequest{Namespace: ns, Key: key})
	if err != nil {
		t.Fatalf("Lookup(%s): %v", key, err)
	}
	return rec
}

func wantValue(t *testing.T, step string, res client.Result, err error, value string, replayed bool) {
	t.Helper()
	if err != nil || string(res.Value) != value || res.Replayed != replayed {
		t.Fatalf("%s: do() = %q (replayed %v), %v; want %q (replayed %v)", step, res.Value, res.Replayed, err, value, replayed)
	}
}

func wantCodeReason(t *testing.T, step string, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || client.Reason(err) != reason {
		t.Fatalf("%s: %v; want %s with reason %s", step, err, code, reason)
	}
}

// await receives from ch, failing t after d.
func await[T any](t *testing.T, what string, ch <-chan T, d time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not happen within %s", what, d)
		panic("unreachable")
	}
}

type doOutcome struct {
	res client.Result
	err error
}

func scenarioClaimCompleteReplay(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	r := "result-" + k
	var calls atomic.Int32
	handler := func(_ context.Context, a client.Attempt) ([]byte, error) {
		calls.Add(1)
		if a.Number != 1 || a.Takeover {
			t.Errorf("attempt = %+v; want attempt 1, no takeover", a)
		}
		return []byte(r), nil
	}
	job := client.Job{Namespace: e.Namespaces.Plain, Key: k}
	res, err := c.Do(ctx, job, handler)
	wantValue(t, "step 1", res, err, r, false)
	res, err = c.Do(ctx, job, handler)
	wantValue(t, "step 2", res, err, r, true)
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times; want 1", n)
	}
	rec := lookup(t, ctx, c, e.Namespaces.Plain, k)
	if rec.State != client.StateCompleted || string(rec.Result) != r || rec.Attempt != 1 {
		t.Fatalf("record = %v %q attempt %d; want COMPLETED %q attempt 1", rec.State, rec.Result, rec.Attempt, r)
	}
}

func scenarioConcurrentDeliveries(t *testing.T, e *scenarioEnv) {
	ctx, c := scenarioCtx(t), e.worker(t)
	deliver := func(job client.Job, handler func(context.Context, client.Attempt) ([]byte, error), opts ...client.DoOption) [2]doOutcome {
		var out [2]doOutcome
		var wg sync.WaitGroup
		for i := range out {
			wg.Go(func() {
				res, err := c.Do(ctx, job, handler, opts...)
				out[i] = doOutcome{res, err}
			})
		}
		wg.Wait()
		return out
	}
	// Each Do returns R or an error: which one did which.
	split := func(out [2]doOutcome) (winner, other doOutcome) {
		if out[0].err == nil && !out[0].res.Replayed {
			return out[0], out[1]
		}
		return out[1], out[0]
	}

	// Part A: the winner's handler holds the job until the other delivery
	// has returned.
	r := "R-a"
	var callsA atomic.Int32
	returned := make(chan struct{}, 2)
	handlerA := func(ctx context.Context, _ client.Attempt) ([]byte, error) {
		callsA.Add(1)
		select {
		case <-returned:
			return []byte(r), nil
		case <-time.After(10 * time.Second):
			return nil, errors.New("the other delivery did not return within 10 s")
		}
	}
	jobA := client.Job{Namespace: e.Namespaces.Plain, Key: e.key(t, "a")}
	var out [2]doOutcome
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			res, err := c.Do(ctx, jobA, handlerA)
			out[i] = doOutcome{res, err}
			returned <- struct{}{}
		})
	}
	wg.Wait()
	winner, other := split(out)
	wantValue(t, "part A, the delivery that ran", winner.res, winner.err, r, false)
	var busy *client.InProgressError
	if !errors.As(other.err, &busy) || busy.RetryAfter <= 0 {
		t.Fatalf("part A, the other delivery: %v; want InProgress with retry_after > 0", other.err)
	}
	if n := callsA.Load(); n != 1 {
		t.Fatalf("part A: the handler ran %d times; want 1", n)
	}

	// Part B: both wait; the one that does not run gets the replay.
	var callsB atomic.Int32
	handlerB := func(ctx context.Context, _ client.Attempt) ([]byte, error) {
		callsB.Add(1)
		time.Sleep(200 * time.Millisecond)
		return []byte("R-b"), nil
	}
	winner, other = split(deliver(client.Job{Namespace: e.Namespaces.Plain, Key: e.key(t, "b")}, handlerB, client.WithWait(10*time.Second)))
	wantValue(t, "part B, the delivery that ran", winner.res, winner.err, "R-b", false)
	wantValue(t, "part B, the delivery that waited", other.res, other.err, "R-b", true)
	if n := callsB.Load(); n != 1 {
		t.Fatalf("part B: the handler ran %d times; want 1", n)
	}
}

func scenarioInProgressRetryAfter(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	held, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, LeaseTTL: 30 * time.Second, Claimant: "holder"})
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("raw Claim = %v, %v; want ACQUIRED", held.Outcome, err)
	}
	var calls handlerCalls
	_, err = c.Do(ctx, client.Job{Namespace: ns, Key: k}, calls.fails(t))
	var busy *client.InProgressError
	if !errors.As(err, &busy) || busy.RetryAfter <= 0 || busy.RetryAfter > 30*time.Second {
		t.Fatalf("do() = %v; want InProgress with 0 < retry_after <= 30s", err)
	}
	if rec := lookup(t, ctx, c, ns, k); rec.State != client.StateProcessing || rec.Token != held.Record.Token {
		t.Fatalf("record = %v token %d; want PROCESSING with the holder's token %d", rec.State, rec.Token, held.Record.Token)
	}
}

func scenarioFingerprintMismatch(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	f1, f2 := client.Fingerprint([]byte("payload-1")), client.Fingerprint([]byte("payload-2"))
	var calls handlerCalls
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k, Fingerprint: f1}, calls.returns("R"))
	wantValue(t, "step 1", res, err, "R", false)
	_, err = c.Do(ctx, client.Job{Namespace: ns, Key: k, Fingerprint: f2}, calls.fails(t))
	wantCodeReason(t, "step 2", err, codes.FailedPrecondition, "FINGERPRINT_MISMATCH")
	if !errors.Is(err, client.ErrFingerprintMismatch) {
		t.Fatalf("step 2: %v; want it to match ErrFingerprintMismatch", err)
	}
	res, err = c.Do(ctx, client.Job{Namespace: ns, Key: k, Fingerprint: f1}, calls.fails(t))
	wantValue(t, "step 3", res, err, "R", true)
	rec := lookup(t, ctx, c, ns, k)
	if rec.State != client.StateCompleted || string(rec.Result) != "R" || !bytes.Equal(rec.Fingerprint, f1) {
		t.Fatalf("record = %v %q fingerprint %x; want COMPLETED R with %x", rec.State, rec.Result, rec.Fingerprint, f1)
	}
}

func scenarioLeaseLostMidJob(t *testing.T, e *scenarioEnv) {
	ctx, k := scenarioCtx(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	log := newRPCLog()
	holder, other, operator := e.client(t, "worker", log), e.worker(t), e.client(t, "operator", nil)

	started := make(chan int64, 1)
	var toldToStop atomic.Bool
	handler := func(ctx context.Context, a client.Attempt) ([]byte, error) {
		started <- a.Token
		select {
		case <-ctx.Done():
			toldToStop.Store(true)
		case <-time.After(10 * time.Second):
		}
		return []byte("late"), nil
	}
	done := make(chan doOutcome, 1)
	go func() {
		res, err := holder.Do(ctx, client.Job{Namespace: ns, Key: k, LeaseTTL: 3 * time.Second}, handler)
		done <- doOutcome{res, err}
	}()
	t1 := await(t, "the handler's start", started, time.Minute)
	await(t, "do()'s first heartbeat", log.beats, time.Minute)
	if _, err := operator.AdminService().DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Tenant: "worker", Namespace: ns, Key: k}); err != nil {
		t.Fatalf("operator DeleteRecord: %v", err)
	}
	succ, err := other.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, LeaseTTL: 30 * time.Second, Claimant: "successor"})
	if err != nil || succ.Outcome != client.OutcomeAcquired {
		t.Fatalf("the successor's raw Claim = %v, %v; want ACQUIRED", succ.Outcome, err)
	}
	t2 := succ.Record.Token
	if t2 <= t1 {
		t.Fatalf("the successor's token %d is not above the holder's %d", t2, t1)
	}
	out := await(t, "do()'s return", done, time.Minute)
	if !toldToStop.Load() {
		t.Fatal("the handler was not told to stop (its context was not cancelled within 10 s)")
	}
	if !errors.Is(out.err, client.ErrLeaseLost) || errors.Is(out.err, client.ErrCompletionUnknown) {
		t.Fatalf("do() = %v; want LeaseLost", out.err)
	}
	wantCodeReason(t, "do()", out.err, codes.Aborted, "LEASE_LOST")
	rec := lookup(t, ctx, other, ns, k)
	if rec.State != client.StateProcessing || rec.Token != t2 || rec.Claimant != "successor" || len(rec.Result) != 0 {
		t.Fatalf("record = %v token %d claimant %q result %q; want PROCESSING under the successor's token %d, no result",
			rec.State, rec.Token, rec.Claimant, rec.Result, t2)
	}
}

func scenarioRetryableFailure(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	job := client.Job{Namespace: e.Namespaces.Plain, Key: k}
	transient := errors.New("transient: try again")
	_, err := c.Do(ctx, job, func(context.Context, client.Attempt) ([]byte, error) { return nil, transient })
	if err != transient {
		t.Fatalf("step 1: do() = %v; want the handler's error itself", err)
	}
	rec := lookup(t, ctx, c, job.Namespace, k)
	if rec.State != client.StateReleased || rec.Error != "transient: try again" || rec.Attempt != 1 {
		t.Fatalf("step 2: record = %v %q attempt %d; want RELEASED \"transient: try again\" attempt 1", rec.State, rec.Error, rec.Attempt)
	}
	res, err := c.Do(ctx, job, func(_ context.Context, a client.Attempt) ([]byte, error) {
		if a.Number != 2 || !a.Takeover {
			t.Errorf("step 3: attempt = %+v; want attempt 2, a takeover", a)
		}
		return []byte("R"), nil
	})
	wantValue(t, "step 3", res, err, "R", false)
	if rec := lookup(t, ctx, c, job.Namespace, k); rec.State != client.StateCompleted || string(rec.Result) != "R" || rec.Attempt != 2 {
		t.Fatalf("record = %v %q attempt %d; want COMPLETED R attempt 2", rec.State, rec.Result, rec.Attempt)
	}
}

func scenarioPermanentFailure(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	job := client.Job{Namespace: e.Namespaces.Plain, Key: k}
	declined := client.Permanent(errors.New("card declined"))
	_, err := c.Do(ctx, job, func(context.Context, client.Attempt) ([]byte, error) { return nil, declined })
	if err != declined {
		t.Fatalf("step 1: do() = %v; want the handler's error itself", err)
	}
	if rec := lookup(t, ctx, c, job.Namespace, k); rec.State != client.StateFailed || rec.Error != "card declined" {
		t.Fatalf("step 2: record = %v %q; want FAILED \"card declined\"", rec.State, rec.Error)
	}
	var calls handlerCalls
	_, err = c.Do(ctx, job, calls.fails(t))
	var failed *client.JobFailedError
	if !errors.As(err, &failed) || failed.Message != "card declined" {
		t.Fatalf("step 3: do() = %v; want JobFailed with the message \"card declined\"", err)
	}
}

// leaseLapse is how long the scenarios wait for a 1 s lease to run out.
const leaseLapse = 1500 * time.Millisecond

func scenarioFailAfterOwnComplete(t *testing.T, e *scenarioEnv) {
	ctx, c := scenarioCtx(t), e.worker(t)
	ns, k, k2 := e.Namespaces.Plain, e.key(t, "k"), e.key(t, "k2")
	const r = "completed-by-handler"
	// completesThenFails is the handler of step 1: a raw Complete of its own
	// token, then an error of its own.
	completesThenFails := func(key string, handlerErr error) func(context.Context, client.Attempt) ([]byte, error) {
		return func(ctx context.Context, a client.Attempt) ([]byte, error) {
			if _, err := c.Complete(ctx, client.CompleteRequest{Namespace: ns, Key: key, Token: a.Token, Result: []byte(r)}); err != nil {
				t.Errorf("the handler's raw Complete of %s: %v", key, err)
			}
			return nil, handlerErr
		}
	}
	// wantBoth checks the error of a Fail refused after the handler completed.
	wantBoth := func(step string, err, handlerErr error) {
		t.Helper()
		var nr *client.FailureNotRecordedError
		if !errors.As(err, &nr) || nr.HandlerErr != handlerErr || !errors.Is(err, handlerErr) || !errors.Is(err, client.ErrFailureNotRecorded) {
			t.Fatalf("%s: do() = %#v (%v); want a *FailureNotRecordedError with the handler's error itself", step, err, err)
		}
		if !errors.Is(nr.FailErr, client.ErrAlreadyTerminal) || !errors.Is(err, client.ErrAlreadyTerminal) {
			t.Fatalf("%s: the fail error is %v; want AlreadyTerminal", step, nr.FailErr)
		}
		wantCodeReason(t, step, nr.FailErr, codes.FailedPrecondition, "ALREADY_TERMINAL")
		wantCodeReason(t, step, err, codes.FailedPrecondition, "ALREADY_TERMINAL")
		if msg := err.Error(); !strings.Contains(msg, "failed after completing") || !strings.Contains(msg, "ALREADY_TERMINAL") {
			t.Fatalf("%s: the message %q does not have the handler's text and the refusal's reason", step, msg)
		}
	}

	handlerErr := errors.New("failed after completing")
	_, err := c.Do(ctx, client.Job{Namespace: ns, Key: k}, completesThenFails(k, handlerErr))
	wantBoth("step 1", err, handlerErr)
	if rec := lookup(t, ctx, c, ns, k); rec.State != client.StateCompleted || string(rec.Result) != r || rec.Attempt != 1 || rec.Error != "" {
		t.Fatalf("step 2: record = %v %q attempt %d error %q; want COMPLETED %q attempt 1, no error", rec.State, rec.Result, rec.Attempt, rec.Error, r)
	}
	var calls handlerCalls
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k}, calls.fails(t))
	wantValue(t, "step 3", res, err, r, true)

	handlerErr2 := errors.New("failed after completing")
	items, err := c.DoBatch(ctx, []client.Job{{Namespace: ns, Key: k2}}, func(ctx context.Context, _ int, a client.Attempt) ([]byte, error) {
		return completesThenFails(k2, handlerErr2)(ctx, a)
	})
	if err != nil || len(items) != 1 {
		t.Fatalf("step 4: do_batch = %d items, %v; want 1", len(items), err)
	}
	wantBoth("step 4", items[0].Err, handlerErr2)
	if rec := lookup(t, ctx, c, ns, k2); rec.State != client.StateCompleted || string(rec.Result) != r {
		t.Fatalf("step 4: record = %v %q; want COMPLETED %q", rec.State, rec.Result, r)
	}
}

func scenarioUnresolved(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Held
	held, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, LeaseTTL: time.Second, Claimant: "holder"})
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("raw Claim = %v, %v; want ACQUIRED", held.Outcome, err)
	}
	time.Sleep(leaseLapse)
	var calls handlerCalls
	_, err = c.Do(ctx, client.Job{Namespace: ns, Key: k}, calls.fails(t))
	var unresolved *client.UnresolvedError
	if !errors.As(err, &unresolved) {
		t.Fatalf("do() = %v; want Unresolved", err)
	}
	rec := lookup(t, ctx, c, ns, k)
	if rec.State != client.StateUnresolved || !rec.Hold || rec.Token != held.Record.Token || rec.Policy != "held*" {
		t.Fatalf("record = %v hold %v token %d policy %q; want UNRESOLVED, held, token %d, policy held*",
			rec.State, rec.Hold, rec.Token, rec.Policy, held.Record.Token)
	}
}

func scenarioResolvedByOperator(t *testing.T, e *scenarioEnv) {
	ctx, c, operator, k := scenarioCtx(t), e.worker(t), e.client(t, "operator", nil), e.key(t, "k")
	ns := e.Namespaces.Held
	held, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, LeaseTTL: time.Second, Claimant: "holder"})
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("step 1: raw Claim = %v, %v; want ACQUIRED", held.Outcome, err)
	}
	token := held.Record.Token
	time.Sleep(leaseLapse)
	var unresolved *client.UnresolvedError
	if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, Claimant: "other"}); !errors.As(err, &unresolved) {
		t.Fatalf("step 2: raw Claim = %v; want Unresolved", err)
	}
	resolved, err := operator.AdminService().ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Tenant: "worker", Namespace: ns, Key: k,
		Resolution: &idemv1.ResolveRecordRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("resolved-by-operator")}}})
	if err != nil || resolved.GetRecord().GetState() != idemv1.State_STATE_COMPLETED {
		t.Fatalf("step 3: ResolveRecord = %v, %v; want the record COMPLETED", resolved.GetRecord().GetState(), err)
	}
	_, err = c.Complete(ctx, client.CompleteRequest{Namespace: ns, Key: k, Token: token, Result: []byte("late-holder")})
	wantCodeReason(t, "step 4: the holder's Complete with B", err, codes.FailedPrecondition, "RESOLVED_BY_OPERATOR")
	if !errors.Is(err, client.ErrResolvedByOperator) {
		t.Fatalf("step 4: the holder's Complete with B = %v; want it to match client.ErrResolvedByOperator", err)
	}
	if rec := lookup(t, ctx, c, ns, k); rec.State != client.StateCompleted || string(rec.Result) != "resolved-by-operator" {
		t.Fatalf("step 5: record = %v %q; want COMPLETED with the operator's result", rec.State, rec.Result)
	}
	rec, err := c.Complete(ctx, client.CompleteRequest{Namespace: ns, Key: k, Token: token, Result: []byte("resolved-by-operator")})
	if err != nil || rec.State != client.StateCompleted || string(rec.Result) != "resolved-by-operator" {
		t.Fatalf("step 6: the holder's Complete with A = %v %q, %v; want COMPLETED with A", rec.State, rec.Result, err)
	}
}

func scenarioWait(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	held, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, LeaseTTL: 30 * time.Second, Claimant: "holder"})
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("step 1: raw Claim = %v, %v; want ACQUIRED", held.Outcome, err)
	}
	log := newRPCLog()
	waiter := e.client(t, "worker", log)
	var calls handlerCalls
	done := make(chan doOutcome, 1)
	go func() {
		res, err := waiter.Do(ctx, client.Job{Namespace: ns, Key: k}, calls.fails(t), client.WithWait(10*time.Second))
		done <- doOutcome{res, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if _, err := c.Complete(ctx, client.CompleteRequest{Namespace: ns, Key: k, Token: held.Record.Token, Result: []byte("R")}); err != nil {
		t.Fatalf("step 3: the holder's Complete: %v", err)
	}
	out := await(t, "do()'s return", done, time.Minute)
	wantValue(t, "do()", out.res, out.err, "R", true)
	if n := log.count("Claim"); n > 2 {
		t.Fatalf("do() sent %d Claims; want at most 2 (the server waits, the SDK does not poll)", n)
	}
}

func scenarioUnavailableRetried(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	if err := e.h.Control("/unavailable?ms=1000"); err != nil {
		t.Fatal(err)
	}
	var calls handlerCalls
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k}, calls.returns("R"))
	wantValue(t, "do()", res, err, "R", false)
	if n := calls.n.Load(); n != 1 {
		t.Fatalf("the handler ran %d times; want 1", n)
	}
	if rec := lookup(t, ctx, c, ns, k); rec.State != client.StateCompleted || string(rec.Result) != "R" {
		t.Fatalf("record = %v %q; want COMPLETED R", rec.State, rec.Result)
	}
}

func scenarioRestartMidComplete(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	var effects atomic.Int32
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k, LeaseTTL: 30 * time.Second}, func(context.Context, client.Attempt) ([]byte, error) {
		effects.Add(1)
		if err := e.h.Control("/restart?down_ms=1500"); err != nil {
			return nil, err
		}
		return []byte("R"), nil
	})
	wantValue(t, "do()", res, err, "R", false)
	if n := effects.Load(); n != 1 {
		t.Fatalf("the effect ran %d times; want 1", n)
	}
	if rec := lookup(t, ctx, c, ns, k); rec.State != client.StateCompleted || string(rec.Result) != "R" || rec.Attempt != 1 {
		t.Fatalf("record = %v %q attempt %d; want COMPLETED R attempt 1", rec.State, rec.Result, rec.Attempt)
	}
}

func scenarioRestartMidClaim(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	if err := e.h.Control("/restart?down_ms=4000"); err != nil {
		t.Fatal(err)
	}
	var calls handlerCalls
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k}, calls.returns("R"))
	wantValue(t, "do()", res, err, "R", false)
	if n := calls.n.Load(); n != 1 {
		t.Fatalf("the handler ran %d times; want 1", n)
	}
	if rec := lookup(t, ctx, c, ns, k); rec.State != client.StateCompleted || string(rec.Result) != "R" || rec.Attempt != 1 {
		t.Fatalf("record = %v %q attempt %d; want COMPLETED R attempt 1", rec.State, rec.Result, rec.Attempt)
	}
}

func scenarioRateLimited(t *testing.T, e *scenarioEnv) {
	ctx := scenarioCtx(t)
	log := newRPCLog()
	c := e.client(t, "limited", log)
	for i := 1; i <= 5; i++ {
		v := fmt.Sprintf("R%d", i)
		res, err := c.Do(ctx, client.Job{Namespace: e.Namespaces.Plain, Key: e.key(t, fmt.Sprint(i))}, func(context.Context, client.Attempt) ([]byte, error) {
			return []byte(v), nil
		})
		wantValue(t, fmt.Sprintf("do() %d", i), res, err, v, false)
	}
	calls := log.snapshot()
	slices.SortFunc(calls, func(a, b rpcCall) int { return a.start.Compare(b.start) })
	limited := 0
	for i, call := range calls {
		if status.Code(call.err) != codes.ResourceExhausted || client.Reason(call.err) != "RATE_LIMITED" {
			continue
		}
		limited++
		var delay time.Duration
		found := false
		for _, d := range status.Convert(call.err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay, found = ri.GetRetryDelay().AsDuration(), true
			}
		}
		if !found {
			t.Fatalf("%s was refused RATE_LIMITED without a RetryInfo: %v", call.method, call.err)
		}
		if i+1 < len(calls) {
			if gap := calls[i+1].start.Sub(call.end); gap < delay {
				t.Fatalf("the SDK sent its next RPC %s after a RATE_LIMITED answer whose RetryInfo said %s", gap, delay)
			}
		}
	}
	if limited == 0 {
		t.Fatalf("none of the %d RPCs was answered RATE_LIMITED; the limit (5/s, burst 1) was not met", len(calls))
	}
}

func scenarioErrorTextUnstorable(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	text := "nul:\x00:" + strings.Repeat("€", 2000)
	if len(text) != 6006 {
		t.Fatalf("the text is %d bytes; the scenario says 6006", len(text))
	}
	unstorable := errors.New(text)
	_, err := c.Do(ctx, client.Job{Namespace: ns, Key: k}, func(context.Context, client.Attempt) ([]byte, error) { return nil, unstorable })
	if err != unstorable {
		t.Fatalf("step 1: do() = %.200v; want the handler's error itself", err)
	}
	rec := lookup(t, ctx, c, ns, k)
	want := "nul:\uFFFD:" + strings.Repeat("€", 1362)
	switch {
	case rec.State != client.StateReleased:
		t.Fatalf("step 2: record is %v; want RELEASED", rec.State)
	case !utf8.ValidString(rec.Error) || strings.IndexByte(rec.Error, 0) >= 0 || len(rec.Error) > 4096:
		t.Fatalf("step 2: the stored error (%d bytes) is not valid UTF-8 without NUL within 4096 bytes", len(rec.Error))
	case rec.Error != want:
		t.Fatalf("step 2: the stored error is %d bytes starting %.20q; want %d bytes starting %.20q", len(rec.Error), rec.Error, len(want), want)
	}
}

func scenarioUnknownFieldRefused(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	body, _ := json.Marshal(map[string]string{"namespace": ns, "key": k, "leaseTTL": "5s"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.HTTPURL+"/idem.v1.IdempotencyService/Claim", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.Tokens["worker"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var connectErr struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &connectErr)
	if resp.StatusCode != http.StatusBadRequest || connectErr.Code != "invalid_argument" || !strings.Contains(connectErr.Message, "leaseTTL") {
		t.Fatalf("Claim with leaseTTL: %s %s; want 400 invalid_argument naming leaseTTL", resp.Status, raw)
	}
	if _, err := c.Lookup(ctx, client.LookupRequest{Namespace: ns, Key: k}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("step 2: Lookup = %v; want NOT_FOUND (nothing written)", err)
	}
}

func scenarioBatchClaimMixed(t *testing.T, e *scenarioEnv) {
	ctx, c := scenarioCtx(t), e.worker(t)
	ns := e.Namespaces.Plain
	k1, k2, k3, k4 := e.key(t, "k1"), e.key(t, "k2"), e.key(t, "k3"), e.key(t, "k4")
	f1, f2 := client.Fingerprint([]byte("payload-1")), client.Fingerprint([]byte("payload-2"))
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k2}, func(context.Context, client.Attempt) ([]byte, error) { return []byte("result-2"), nil })
	wantValue(t, "setup do(K2)", res, err, "result-2", false)
	held, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k3, LeaseTTL: 30 * time.Second, Claimant: "holder"})
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("setup raw Claim(K3) = %v, %v; want ACQUIRED", held.Outcome, err)
	}
	res, err = c.Do(ctx, client.Job{Namespace: ns, Key: k4, Fingerprint: f1}, func(context.Context, client.Attempt) ([]byte, error) { return []byte("result-4"), nil })
	wantValue(t, "setup do(K4)", res, err, "result-4", false)

	items, err := c.BatchClaim(ctx, []client.ClaimRequest{
		{Namespace: ns, Key: k1, Claimant: "batch"},
		{Namespace: ns, Key: k2, Claimant: "batch"},
		{Namespace: ns, Key: k3, Claimant: "batch"},
		{Namespace: ns, Key: k4, Fingerprint: f2, Claimant: "batch"},
	})
	if err != nil || len(items) != 4 {
		t.Fatalf("step 1: raw BatchClaim = %d items, %v; want 4 items", len(items), err)
	}
	if it := items[0]; it.Err != nil || it.Value.Outcome != client.OutcomeAcquired || it.Value.Record.Attempt != 1 {
		t.Fatalf("step 1 item 1: %v attempt %d, %v; want ACQUIRED attempt 1", it.Value.Outcome, it.Value.Record.Attempt, it.Err)
	}
	if it := items[1]; it.Err != nil || it.Value.Outcome != client.OutcomeCompleted || string(it.Value.Record.Result) != "result-2" {
		t.Fatalf("step 1 item 2: %v %q, %v; want COMPLETED result-2", it.Value.Outcome, it.Value.Record.Result, it.Err)
	}
	var busy *client.InProgressError
	if it := items[2]; !errors.As(it.Err, &busy) || busy.RetryAfter <= 0 || busy.RetryAfter > 30*time.Second {
		t.Fatalf("step 1 item 3: %v; want InProgress with 0 < retry_after <= 30s", it.Err)
	}
	wantCodeReason(t, "step 1 item 4", items[3].Err, codes.FailedPrecondition, "FINGERPRINT_MISMATCH")
	if !errors.Is(items[3].Err, client.ErrFingerprintMismatch) {
		t.Fatalf("step 1 item 4: %v; want FingerprintMismatch", items[3].Err)
	}

	done, err := c.BatchComplete(ctx, []client.CompleteRequest{{Namespace: ns, Key: k1, Token: items[0].Value.Record.Token, Result: []byte("result-1")}})
	if err != nil || len(done) != 1 || done[0].Err != nil || done[0].Value.State != client.StateCompleted || string(done[0].Value.Result) != "result-1" {
		t.Fatalf("step 2: raw BatchComplete = %+v, %v; want one item, COMPLETED result-1", done, err)
	}
	if rec := lookup(t, ctx, c, ns, k1); rec.State != client.StateCompleted || string(rec.Result) != "result-1" || rec.Attempt != 1 {
		t.Fatalf("step 3: K1 = %v %q attempt %d; want COMPLETED result-1 attempt 1", rec.State, rec.Result, rec.Attempt)
	}
	if rec := lookup(t, ctx, c, ns, k3); rec.State != client.StateProcessing || rec.Token != held.Record.Token {
		t.Fatalf("step 3: K3 = %v token %d; want PROCESSING with the holder's token %d", rec.State, rec.Token, held.Record.Token)
	}
}

func scenarioBatchSameKeyTwice(t *testing.T, e *scenarioEnv) {
	ctx, c := scenarioCtx(t), e.worker(t)
	ns := e.Namespaces.Plain
	k1, k2 := e.key(t, "k1"), e.key(t, "k2")

	// Part A
	claims, err := c.BatchClaim(ctx, []client.ClaimRequest{{Namespace: ns, Key: k1, Claimant: "a"}, {Namespace: ns, Key: k1, Claimant: "b"}})
	if err != nil || len(claims) != 2 {
		t.Fatalf("part A step 1: raw BatchClaim = %d items, %v; want 2", len(claims), err)
	}
	var busy *client.InProgressError
	if claims[0].Err != nil || claims[0].Value.Outcome != client.OutcomeAcquired || !errors.As(claims[1].Err, &busy) {
		t.Fatalf("part A step 1: %v, %v / %v; want ACQUIRED, then InProgress", claims[0].Value.Outcome, claims[0].Err, claims[1].Err)
	}
	token := claims[0].Value.Record.Token
	done, err := c.BatchComplete(ctx, []client.CompleteRequest{
		{Namespace: ns, Key: k1, Token: token, Result: []byte("result")},
		{Namespace: ns, Key: k1, Token: token, Result: []byte("other")},
	})
	if err != nil || len(done) != 2 {
		t.Fatalf("part A step 2: raw BatchComplete = %d items, %v; want 2", len(done), err)
	}
	if done[0].Err != nil || done[0].Value.State != client.StateCompleted || string(done[0].Value.Result) != "result" {
		t.Fatalf("part A step 2 item 1: %v %q, %v; want COMPLETED result", done[0].Value.State, done[0].Value.Result, done[0].Err)
	}
	wantCodeReason(t, "part A step 2 item 2", done[1].Err, codes.FailedPrecondition, "ALREADY_TERMINAL")
	if rec := lookup(t, ctx, c, ns, k1); rec.State != client.StateCompleted || string(rec.Result) != "result" {
		t.Fatalf("part A: K1 = %v %q; want COMPLETED result", rec.State, rec.Result)
	}

	// Part B
	var calls atomic.Int32
	job := client.Job{Namespace: ns, Key: k2}
	items, err := c.DoBatch(ctx, []client.Job{job, job}, func(context.Context, int, client.Attempt) ([]byte, error) {
		calls.Add(1)
		return []byte("result"), nil
	})
	if err != nil || len(items) != 2 {
		t.Fatalf("part B: do_batch = %d items, %v; want 2", len(items), err)
	}
	wantValue(t, "part B item 1", items[0].Value, items[0].Err, "result", false)
	if !errors.As(items[1].Err, &busy) {
		t.Fatalf("part B item 2: %v; want InProgress", items[1].Err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("part B: the handler ran %d times; want 1", n)
	}
	if rec := lookup(t, ctx, c, ns, k2); rec.State != client.StateCompleted || string(rec.Result) != "result" || rec.Attempt != 1 {
		t.Fatalf("part B: K2 = %v %q attempt %d; want COMPLETED result attempt 1", rec.State, rec.Result, rec.Attempt)
	}
}

func scenarioBatchRestartMidComplete(t *testing.T, e *scenarioEnv) {
	ctx, c := scenarioCtx(t), e.worker(t)
	ns := e.Namespaces.Plain
	jobs := make([]client.Job, 3)
	for i := range jobs {
		jobs[i] = client.Job{Namespace: ns, Key: e.key(t, fmt.Sprint("k", i+1)), LeaseTTL: 30 * time.Second}
	}
	var effects [3]atomic.Int32
	down := make(chan error, 1)
	stopped := make(chan struct{})
	items, err := c.DoBatch(ctx, jobs, func(_ context.Context, i int, _ client.Attempt) ([]byte, error) {
		effects[i].Add(1)
		if i == 0 {
			err := e.h.Control("/restart?down_ms=1500")
			down <- err
			close(stopped)
			if err != nil {
				return nil, err
			}
		}
		<-stopped
		return []byte("result-" + jobs[i].Key), nil
	})
	if err := <-down; err != nil {
		t.Fatalf("restarting idemd: %v", err)
	}
	if err != nil || len(items) != 3 {
		t.Fatalf("do_batch = %d items, %v; want 3", len(items), err)
	}
	for i, it := range items {
		wantValue(t, fmt.Sprint("do_batch item ", i+1), it.Value, it.Err, "result-"+jobs[i].Key, false)
		if n := effects[i].Load(); n != 1 {
			t.Fatalf("job %d's effect ran %d times; want 1", i+1, n)
		}
	}
	for _, job := range jobs {
		if rec := lookup(t, ctx, c, ns, job.Key); rec.State != client.StateCompleted || string(rec.Result) != "result-"+job.Key || rec.Attempt != 1 {
			t.Fatalf("record %s = %v %q attempt %d; want COMPLETED attempt 1", job.Key, rec.State, rec.Result, rec.Attempt)
		}
	}
}
