package robustness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// Namespace is the namespace every workload uses.
const Namespace = "robustness"

// Profile is the mix of calls a worker makes.
type Profile int

const (
	// Mixed: Claim, then Complete, Fail (retryable or not), Heartbeat, a late
	// Complete after the lease ran out, or nothing at all; Lookups and
	// Completes with stale tokens in between.
	Mixed Profile = iota
	// LeaseRace: every holder completes within a few tens of milliseconds of
	// its lease's end while the other workers poll the same keys, so that
	// Completes race the takeovers at expiry.
	LeaseRace
)

// Workload is what the workers do.
type Workload struct {
	// Targets are the idemd addresses; each call goes to one at random.
	Targets []string
	Workers int
	// Keys is how many keys are live at once; a key that ends COMPLETED or
	// FAILED is replaced by a fresh one.
	Keys int
	// Duration bounds the run; MaxCalls bounds each worker's calls.
	Duration time.Duration
	MaxCalls int
	LeaseTTL time.Duration
	// CallTimeout is each call's deadline.
	CallTimeout time.Duration
	Profile     Profile
	// BatchShare is the share of each worker's calls that it sends as items
	// of batch RPCs (BatchClaim, BatchComplete, …), whole jobs at a time; 0
	// sends none.
	BatchShare float64
	Seed       uint64
	// Stop, when set, ends the run early once it returns true.
	Stop func() bool
	// Settle, when set, runs after the workers stopped and before the final
	// reads: the scenario heals its faults there.
	Settle func()
}

// Stats counts what the calls answered.
type Stats struct {
	mu sync.Mutex
	// Calls counts the recorded calls, unary ones and batch items alike;
	// BatchItems those of them that were items of a batch RPC.
	Calls, BatchItems int
	// ByAnswer counts unary calls and batch items together, by the unary
	// call's name: "Claim ACQUIRED", "Complete ok", "Fail maybe: Unavailable", …
	ByAnswer map[string]int
	// BatchRPCs counts the batch RPCs sent, by name ("BatchClaim", …), and
	// BatchAnswers the batch items' part of ByAnswer.
	BatchRPCs, BatchAnswers map[string]int
	Unexpected              []string // answers that are errors the service should never send
}

func (s *Stats) add(in Input, out Output, err error, batched bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Calls++
	if batched {
		s.BatchItems++
	}
	if s.ByAnswer == nil {
		s.ByAnswer = map[string]int{}
	}
	what := in.Kind.String() + " " + out.Code.String()
	if out.Code == CodeOK && in.Kind == OpClaim {
		what = in.Kind.String() + " " + out.Outcome.String()
	}
	if out.Code == CodeMaybe {
		code := status.Code(err)
		what += ": " + code.String()
		switch code {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		default:
			if len(s.Unexpected) < 20 {
				s.Unexpected = append(s.Unexpected, fmt.Sprintf("%s: %v", in.Kind, err))
			}
		}
	}
	s.ByAnswer[what]++
	if batched {
		if s.BatchAnswers == nil {
			s.BatchAnswers = map[string]int{}
		}
		s.BatchAnswers[what]++
	}
}

func (s *Stats) notSent(in Input) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ByAnswer == nil {
		s.ByAnswer = map[string]int{}
	}
	s.ByAnswer[in.Kind.String()+" not sent"]++
}

func (s *Stats) batchSent(kind OpKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.BatchRPCs == nil {
		s.BatchRPCs = map[string]int{}
	}
	s.BatchRPCs["Batch"+kind.String()]++
}

// Batched says on one line how many of the recorded calls were batch items
// and how many batch RPCs of each kind were sent, and what the items
// answered.
func (s *Stats) Batched() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	rpcs, n := make([]string, 0, len(s.BatchRPCs)), 0
	for k, v := range s.BatchRPCs {
		rpcs = append(rpcs, fmt.Sprintf("%s=%d", k, v))
		n += v
	}
	sort.Strings(rpcs)
	share := 0.0
	if s.Calls > 0 {
		share = float64(s.BatchItems) / float64(s.Calls)
	}
	return fmt.Sprintf("%d of %d recorded calls (%.0f %%) were items of %d batch RPCs (%s); the items answered %s",
		s.BatchItems, s.Calls, 100*share, n, strings.Join(rpcs, ", "), counts(s.BatchAnswers))
}

// Summary is the counts on one line, sorted.
func (s *Stats) Summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return counts(s.ByAnswer)
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Count returns how many calls answered what.
func (s *Stats) Count(what string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ByAnswer[what]
}

// Dial connects to each target without TLS, reconnecting quickly after a
// server comes back.
func Dial(targets []string) ([]idemv1.IdempotencyServiceClient, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	var clients []idemv1.IdempotencyServiceClient
	for _, t := range targets {
		cc, err := grpc.NewClient(t,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(sentHandler{}),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 300 * time.Millisecond},
				MinConnectTimeout: time.Second,
			}))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, cc)
		clients = append(clients, idemv1.NewIdempotencyServiceClient(cc))
	}
	return clients, closeAll, nil
}

// sentKey marks a call's context with the flag sentHandler sets once the
// request was handed to a connection.
type sentKey struct{}

// sentHandler tells a call that failed before its request was written to any
// connection (gRPC fails fast while the server is down) from one that may
// have reached the server. Only the second can have been applied; the first
// is left out of the history, where it would only slow the checker.
type sentHandler struct{}

func (sentHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (sentHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutPayload); ok {
		if f, ok := ctx.Value(sentKey{}).(*atomic.Bool); ok {
			f.Store(true)
		}
	}
}

func (sentHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (sentHandler) HandleConn(context.Context, stats.ConnStats) {}

// caller makes one worker's calls and records them.
type caller struct {
	id      int
	clients []idemv1.IdempotencyServiceClient
	hist    *History
	stats   *Stats
	rng     *mrand.Rand
	timeout time.Duration
	// calls counts the calls made, unary ones and batch items; batched the
	// batch items among them.
	calls, batched int
	// base is the context calls run in: the run's end stops workers between
	// calls, not in the middle of one.
	base context.Context
}

func (c *caller) client() idemv1.IdempotencyServiceClient {
	return c.clients[c.rng.IntN(len(c.clients))]
}

func (c *caller) do(ctx context.Context, in Input, call func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Record, idemv1.Outcome, error)) Output {
	c.calls++
	var rec *idemv1.Record
	var outcome idemv1.Outcome
	var err error
	start, end, sent := c.send(ctx, func(ctx context.Context, cl idemv1.IdempotencyServiceClient) {
		rec, outcome, err = call(ctx, cl)
	})
	return c.record(0, in, start, end, sent, rec, outcome, err)
}

// send makes one RPC on a client picked at random and returns when it was
// sent and answered, and whether its request reached a connection.
func (c *caller) send(ctx context.Context, call func(ctx context.Context, cl idemv1.IdempotencyServiceClient)) (start, end int64, sent bool) {
	cl := c.client()
	if c.base != nil {
		ctx = c.base
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	wrote := new(atomic.Bool)
	cctx = context.WithValue(cctx, sentKey{}, wrote)
	start = time.Now().UnixNano()
	call(cctx, cl)
	end = time.Now().UnixNano()
	return start, end, wrote.Load()
}

// record classifies one call's answer and adds the call to the history; a
// call that failed before its request was sent is only counted. batch is
// the batch RPC the call was an item of, 0 for a unary call.
func (c *caller) record(batch int64, in Input, start, end int64, sent bool, rec *idemv1.Record, outcome idemv1.Outcome, err error) Output {
	return c.recordAnswer(batch, in, start, end, sent, rec, outcome, nil, err)
}

// recordAnswer is record of any call's answer: a record and a Claim's
// outcome, or a step call's step.
func (c *caller) recordAnswer(batch int64, in Input, start, end int64, sent bool, rec *idemv1.Record, outcome idemv1.Outcome,
	step *idemv1.Step, err error) Output {
	out := classify(err)
	in.Start, in.End = start, end
	if out.Code == CodeMaybe {
		in.End = Never
	}
	if out.Code == CodeOK {
		out.Rec = recFromProto(rec)
		out.Outcome = outcomeFromProto(outcome)
		if step != nil {
			out.Step = stepFromProto(step)
		}
	}
	if out.Code == CodeMaybe && !sent {
		c.stats.notSent(in)
		return out
	}
	c.hist.Add(Op{Worker: c.id, Batch: batch, In: in, Out: out})
	c.stats.add(in, out, err, batch != 0)
	return out
}

func classify(err error) Output {
	if err == nil {
		return Output{Code: CodeOK}
	}
	st, _ := status.FromError(err)
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	switch {
	case st.Code() == codes.NotFound:
		return Output{Code: CodeNotFound}
	case st.Code() == codes.Aborted && reason == "LEASE_LOST":
		return Output{Code: CodeLeaseLost}
	case st.Code() == codes.FailedPrecondition && reason == "ALREADY_TERMINAL":
		return Output{Code: CodeAlreadyTerminal}
	case st.Code() == codes.FailedPrecondition && reason == "STEP_ALREADY_FINISHED":
		return Output{Code: CodeStepFinished}
	}
	return Output{Code: CodeMaybe}
}

func recFromProto(r *idemv1.Record) Rec {
	if r == nil {
		return Rec{}
	}
	out := Rec{Token: r.GetToken(), Claimant: r.GetClaimant()}
	if r.GetLeaseExpiresAt() != nil {
		out.Lease = r.GetLeaseExpiresAt().AsTime().UnixNano()
	}
	switch r.GetState() {
	case idemv1.State_STATE_PROCESSING:
		out.State = RecProcessing
	case idemv1.State_STATE_COMPLETED:
		out.State, out.Value = RecCompleted, string(r.GetResult())
	case idemv1.State_STATE_FAILED:
		out.State, out.Value = RecFailed, r.GetError()
	case idemv1.State_STATE_RELEASED:
		out.State, out.Value = RecReleased, r.GetError()
	case idemv1.State_STATE_EXPIRED:
		out.State = RecExpired
	}
	for _, st := range r.GetSteps() {
		i := stepIndex(st.GetName())
		if i < 0 {
			out.UnknownSteps = true
			continue
		}
		out.Steps[i] = stepFromProto(st)
	}
	return out
}

// stepIndex is the index in StepNames of name, -1 for none.
func stepIndex(name string) int {
	for i, n := range StepNames {
		if n == name {
			return i
		}
	}
	return -1
}

func stepFromProto(st *idemv1.Step) StepObs {
	switch st.GetState() {
	case idemv1.StepState_STEP_STATE_STARTED:
		return StepObs{Phase: StepStarted, Token: st.GetToken()}
	case idemv1.StepState_STEP_STATE_FINISHED:
		return StepObs{Phase: StepFinished, Value: string(st.GetResult()), Token: st.GetToken()}
	}
	return StepObs{}
}

func outcomeFromProto(o idemv1.Outcome) Outcome {
	switch o {
	case idemv1.Outcome_OUTCOME_ACQUIRED:
		return OutcomeAcquired
	case idemv1.Outcome_OUTCOME_IN_PROGRESS:
		return OutcomeInProgress
	case idemv1.Outcome_OUTCOME_COMPLETED:
		return OutcomeCompleted
	case idemv1.Outcome_OUTCOME_FAILED:
		return OutcomeFailed
	}
	return OutcomeNone
}

func (c *caller) claim(ctx context.Context, key, claimant string, ttl time.Duration) (Output, time.Duration) {
	var retryAfter time.Duration
	out := c.do(ctx, Input{Kind: OpClaim, Key: key, Claimant: claimant, TTL: ttl},
		func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Record, idemv1.Outcome, error) {
			resp, err := cl.Claim(ctx, &idemv1.ClaimRequest{Namespace: Namespace, Key: key, Claimant: claimant, LeaseTtl: durationpb.New(ttl)})
			retryAfter = resp.GetRetryAfter().AsDuration()
			return resp.GetRecord(), resp.GetOutcome(), err
		})
	return out, retryAfter
}

func (c *caller) complete(ctx context.Context, key string, token int64, result string) Output {
	return c.do(ctx, Input{Kind: OpComplete, Key: key, Token: token, Value: result},
		func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Record, idemv1.Outcome, error) {
			resp, err := cl.Complete(ctx, &idemv1.CompleteRequest{Namespace: Namespace, Key: key, Token: token, Result: []byte(result)})
			return resp.GetRecord(), 0, err
		})
}

func (c *caller) fail(ctx context.Context, key string, token int64, msg string, retryable bool) Output {
	return c.do(ctx, Input{Kind: OpFail, Key: key, Token: token, Value: msg, Retryable: retryable},
		func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Record, idemv1.Outcome, error) {
			resp, err := cl.Fail(ctx, &idemv1.FailRequest{Namespace: Namespace, Key: key, Token: token, Error: msg, Retryable: retryable})
			return resp.GetRecord(), 0, err
		})
}

func (c *caller) heartbeat(ctx context.Context, key string, token int64, ttl time.Duration) Output {
	return c.do(ctx, Input{Kind: OpHeartbeat, Key: key, Token: token, TTL: ttl},
		func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Record, idemv1.Outcome, error) {
			resp, err := cl.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: Namespace, Key: key, Token: token, LeaseTtl: durationpb.New(ttl)})
			return resp.GetRecord(), 0, err
		})
}

func (c *caller) lookup(ctx context.Context, key string) Output {
	return c.do(ctx, Input{Kind: OpLookup, Key: key},
		func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Record, idemv1.Outcome, error) {
			resp, err := cl.Lookup(ctx, &idemv1.LookupRequest{Namespace: Namespace, Key: key})
			return resp.GetRecord(), 0, err
		})
}

// startStep and completeStep make the step calls of step i of StepNames.
func (c *caller) startStep(ctx context.Context, key string, token int64, i int) Output {
	return c.stepCall(ctx, Input{Kind: OpStartStep, Key: key, Token: token, Step: i},
		func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Step, error) {
			resp, err := cl.StartStep(ctx, &idemv1.StartStepRequest{Namespace: Namespace, Key: key, Token: token, Step: StepNames[i]})
			return resp.GetStep(), err
		})
}

func (c *caller) completeStep(ctx context.Context, key string, token int64, i int, result string) Output {
	return c.stepCall(ctx, Input{Kind: OpCompleteStep, Key: key, Token: token, Step: i, Value: result},
		func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Step, error) {
			resp, err := cl.CompleteStep(ctx, &idemv1.CompleteStepRequest{Namespace: Namespace, Key: key, Token: token,
				Step: StepNames[i], Result: []byte(result)})
			return resp.GetStep(), err
		})
}

func (c *caller) stepCall(ctx context.Context, in Input, call func(ctx context.Context, cl idemv1.IdempotencyServiceClient) (*idemv1.Step, error)) Output {
	c.calls++
	var step *idemv1.Step
	var err error
	start, end, sent := c.send(ctx, func(ctx context.Context, cl idemv1.IdempotencyServiceClient) {
		step, err = call(ctx, cl)
	})
	return c.recordAnswer(0, in, start, end, sent, nil, 0, step, err)
}

// keySpace is the set of live keys; a finished key is replaced by a new one.
type keySpace struct {
	mu    sync.Mutex
	slots []string
	all   []string
	next  int
}

func newKeySpace(n int) *keySpace {
	ks := &keySpace{slots: make([]string, n)}
	for i := range ks.slots {
		ks.slots[i] = ks.fresh()
	}
	return ks
}

func (ks *keySpace) fresh() string {
	k := fmt.Sprintf("k%04d", ks.next)
	ks.next++
	ks.all = append(ks.all, k)
	return k
}

func (ks *keySpace) pick(rng *mrand.Rand) string {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.slots[rng.IntN(len(ks.slots))]
}

// pickN returns n distinct live keys (all of them when there are fewer).
func (ks *keySpace) pickN(rng *mrand.Rand, n int) []string {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	perm := rng.Perm(len(ks.slots))
	out := make([]string, 0, n)
	for _, i := range perm[:min(n, len(perm))] {
		out = append(out, ks.slots[i])
	}
	return out
}

func (ks *keySpace) retire(key string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for i, k := range ks.slots {
		if k == key {
			ks.slots[i] = ks.fresh()
		}
	}
}

func (ks *keySpace) keys() []string {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return append([]string(nil), ks.all...)
}

func newClaimant() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Result is what a run of a workload recorded.
type Result struct {
	History *History
	Stats   *Stats
	Keys    []string
	// Completes is every Complete that was acknowledged: key → result.
	Completes map[string]string
}

// Run runs the workload until Duration has passed or every worker made
// MaxCalls calls, then reads every key it touched once more (retrying a lost
// answer a bounded number of times) so that a lost write shows in the
// history.
func Run(ctx context.Context, w Workload) (*Result, error) {
	if len(w.Targets) == 0 || w.Workers < 1 || w.Keys < 1 {
		return nil, errors.New("robustness: a workload needs targets, workers and keys")
	}
	clients, closeAll, err := Dial(w.Targets)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	res := &Result{History: &History{}, Stats: &Stats{}}
	ks := newKeySpace(w.Keys)
	runCtx, cancel := context.WithTimeout(ctx, w.Duration)
	defer cancel()
	var wg sync.WaitGroup
	var completesMu sync.Mutex
	completes := map[string]string{}
	var seq atomic.Int64
	for i := range w.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &caller{id: i, clients: clients, hist: res.History, stats: res.Stats,
				rng: mrand.New(mrand.NewPCG(w.Seed, uint64(i))), timeout: w.CallTimeout, base: ctx}
			wk := &worker{caller: c, w: w, ks: ks, seq: &seq, acked: func(key, v string) {
				completesMu.Lock()
				completes[key] = v
				completesMu.Unlock()
			}}
			for runCtx.Err() == nil && c.calls < w.MaxCalls && (w.Stop == nil || !w.Stop()) {
				wk.job(runCtx)
			}
		}()
	}
	wg.Wait()
	res.Completes = completes
	res.Keys = ks.keys()
	// The final reads, after the faults have stopped.
	if w.Settle != nil {
		w.Settle()
	}
	c := &caller{id: w.Workers, clients: clients, hist: res.History, stats: res.Stats,
		rng: mrand.New(mrand.NewPCG(w.Seed, 1<<32)), timeout: w.CallTimeout}
	for _, k := range res.Keys {
		for try := 0; try < 40 && ctx.Err() == nil; try++ {
			if c.lookup(ctx, k).Code != CodeMaybe {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	return res, ctx.Err()
}

// LostCompletes returns the acknowledged Completes whose result is not what
// the final read of their key shows.
func (r *Result) LostCompletes() []string {
	final := map[string]Output{}
	for _, op := range r.History.Ops() {
		if op.In.Kind == OpLookup && op.Out.Code != CodeMaybe {
			final[op.In.Key] = op.Out // the final reads come last
		}
	}
	var lost []string
	for k, v := range r.Completes {
		out := final[k]
		if out.Code != CodeOK || out.Rec.State != RecCompleted || out.Rec.Value != v {
			lost = append(lost, fmt.Sprintf("%s: acknowledged %q, read back %s", k, v, describe(Input{Kind: OpLookup}, out)))
		}
	}
	sort.Strings(lost)
	return lost
}

// ReusedTokens returns the tokens that two Claims with different claimants
// were both granted: a token must never be handed out twice.
func (r *Result) ReusedTokens() []int64 {
	holder := map[int64]string{}
	var reused []int64
	for _, op := range r.History.Ops() {
		if op.In.Kind != OpClaim || op.Out.Code != CodeOK || op.Out.Outcome != OutcomeAcquired {
			continue
		}
		tok := op.Out.Rec.Token
		if c, ok := holder[tok]; ok && c != op.In.Claimant {
			reused = append(reused, tok)
		}
		holder[tok] = op.In.Claimant
	}
	return reused
}

type worker struct {
	*caller
	w     Workload
	ks    *keySpace
	seq   *atomic.Int64
	acked func(key, value string)
	// old remembers tokens this worker held, to send stale ones; gaveUp
	// those of the jobs of its batches that it released or abandoned, whose
	// keys a successor may hold by now.
	old, gaveUp []heldToken
}

type heldToken struct {
	key   string
	token int64
}

func (wk *worker) value(what string) string {
	return fmt.Sprintf("%s-w%d-%d", what, wk.id, wk.seq.Add(1))
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// retry repeats a call whose answer was lost, as a worker would, a bounded
// number of times.
func retry(ctx context.Context, call func() Output) Output {
	out := call()
	for try := 0; try < 2 && out.Code == CodeMaybe && ctx.Err() == nil; try++ {
		sleep(ctx, 100*time.Millisecond)
		out = call()
	}
	return out
}

// remember keeps a token the worker held, to send it stale later.
func (wk *worker) remember(key string, token int64) {
	if len(wk.old) < 16 {
		wk.old = append(wk.old, heldToken{key, token})
	} else {
		wk.old[wk.rng.IntN(len(wk.old))] = heldToken{key, token}
	}
}

// job is one job: a unary one, or a batch of them while the worker's batch
// items are no more than the workload's share of its calls (a share of 1:
// batches only).
func (wk *worker) job(ctx context.Context) {
	if wk.w.BatchShare > 0 && float64(wk.batched) <= wk.w.BatchShare*float64(wk.calls) {
		wk.batchJob(ctx)
		return
	}
	rng := wk.rng
	ttl := wk.w.LeaseTTL
	if wk.w.Profile == Mixed {
		switch r := rng.Float64(); {
		case r < 0.08:
			wk.lookup(ctx, wk.ks.pick(rng))
			return
		case r < 0.12 && len(wk.old) > 0:
			h := wk.old[rng.IntN(len(wk.old))]
			if rng.IntN(2) == 0 {
				wk.completeStep(ctx, h.key, h.token, rng.IntN(NumSteps), wk.value("stale"))
				return
			}
			wk.complete(ctx, h.key, h.token, wk.value("stale"))
			return
		}
	}
	key := wk.ks.pick(rng)
	claimant := newClaimant()
	var retryAfter time.Duration
	out := retry(ctx, func() Output {
		var o Output
		o, retryAfter = wk.claim(ctx, key, claimant, ttl)
		return o
	})
	if out.Code != CodeOK {
		// The service or its database is away: give it a moment.
		sleep(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond)
		return
	}
	switch out.Outcome {
	case OutcomeInProgress:
		if wk.w.Profile == LeaseRace {
			// Wake just before the holder's lease runs out and ask every
			// few milliseconds, to take over at the first moment allowed.
			sleep(ctx, retryAfter-time.Duration(rng.IntN(30))*time.Millisecond)
			for try := 0; try < 20 && ctx.Err() == nil && out.Code == CodeOK && out.Outcome == OutcomeInProgress; try++ {
				out, _ = wk.claim(ctx, key, claimant, ttl)
				if out.Outcome == OutcomeInProgress {
					sleep(ctx, 5*time.Millisecond)
				}
			}
			if out.Code != CodeOK || out.Outcome != OutcomeAcquired {
				return // someone else took over, or the key is finished
			}
			break // took over: hold it like any holder
		}
		sleep(ctx, time.Duration(10+rng.IntN(90))*time.Millisecond)
		return
	case OutcomeCompleted, OutcomeFailed:
		wk.ks.retire(key)
		return
	case OutcomeAcquired:
	default:
		return
	}
	tok := out.Rec.Token
	wk.remember(key, tok)
	complete := func() {
		v := wk.value("done")
		o := retry(ctx, func() Output { return wk.complete(ctx, key, tok, v) })
		if o.Code == CodeOK && o.Rec.Value == v {
			wk.acked(key, v)
		}
	}
	if wk.w.Profile == LeaseRace {
		// Finish, or ask for more time, within ±60 ms of the lease's end.
		sleep(ctx, time.Until(time.Unix(0, out.Rec.Lease))+time.Duration(rng.IntN(120)-60)*time.Millisecond)
		if rng.IntN(4) == 0 {
			if wk.heartbeat(ctx, key, tok, ttl).Code != CodeOK {
				return
			}
			sleep(ctx, ttl+time.Duration(rng.IntN(120)-60)*time.Millisecond)
		}
		// A step recorded at the lease's end races the takeover too.
		if i := rng.IntN(NumSteps + 1); i < NumSteps && out.Rec.Steps[i].Phase != StepFinished {
			if wk.completeStep(ctx, key, tok, i, wk.value("step")).Code != CodeOK {
				return
			}
		}
		complete()
		return
	}
	// Half the jobs have two effects, recorded as steps before the job's
	// end, as a worker of a two-effect job would.
	if rng.IntN(2) == 0 && !wk.steps(ctx, key, tok, out.Rec.Steps) {
		return
	}
	switch r := rng.Float64(); {
	case r < 0.35:
		complete()
	case r < 0.45:
		if retry(ctx, func() Output { return wk.heartbeat(ctx, key, tok, ttl) }).Code == CodeOK {
			sleep(ctx, time.Duration(rng.IntN(int(ttl/time.Millisecond)))*time.Millisecond)
		}
		complete()
	case r < 0.60:
		retry(ctx, func() Output { return wk.fail(ctx, key, tok, wk.value("again"), true) })
	case r < 0.65:
		retry(ctx, func() Output { return wk.fail(ctx, key, tok, wk.value("broken"), false) })
	case r < 0.80:
		// A worker that paused past its lease: its Complete races the takeover.
		sleep(ctx, ttl+time.Duration(rng.IntN(400)-100)*time.Millisecond)
		complete()
	case r < 0.90:
		// The worker dies: the lease runs out and someone takes over.
	default:
		sleep(ctx, time.Duration(rng.IntN(int(ttl/2/time.Millisecond)))*time.Millisecond)
		retry(ctx, func() Output { return wk.heartbeat(ctx, key, tok, ttl) })
		complete()
	}
}

// steps runs the job's steps as a worker of a two-effect job does: a step
// the Claim's answer shows FINISHED is skipped (its effect happened);
// another is started half the time, and finished. It returns false when
// the worker stops: a call refused or lost, or (now and then) a worker that
// dies inside a step, leaving it STARTED.
func (wk *worker) steps(ctx context.Context, key string, tok int64, seen [NumSteps]StepObs) bool {
	for i := range NumSteps {
		if seen[i].Phase == StepFinished {
			continue
		}
		if wk.rng.IntN(2) == 0 {
			if retry(ctx, func() Output { return wk.startStep(ctx, key, tok, i) }).Code != CodeOK {
				return false
			}
			if wk.rng.IntN(10) == 0 {
				return false
			}
		}
		v := wk.value("step")
		if retry(ctx, func() Output { return wk.completeStep(ctx, key, tok, i, v) }).Code != CodeOK {
			return false
		}
	}
	return true
}
