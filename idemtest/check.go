package idemtest

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/limits"
)

// Handler returns the function that a worker passes to client.Do for one
// delivery of job, built the way the worker builds it from the message it
// got. CheckHandler calls it once per delivery. Take the job's key from
// job.Key rather than from a constant: each case runs on a key of its own
// (see CheckJob), so that what one case leaves downstream (a charge, a
// provider's idempotency record) cannot answer another's.
//
//	handler := func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
//		return func(ctx context.Context, a client.Attempt) ([]byte, error) {
//			return provider.Charge(ctx, job.Key, 1250)
//		}
//	}
type Handler func(job client.Job) func(ctx context.Context, a client.Attempt) ([]byte, error)

// Case is one pattern of deliveries that a real queue produces and that
// CheckHandler runs against a handler.
type Case string

// The cases CheckHandler runs, in this order. Each runs on a fresh key, on
// a real idem server with the policy of the job's namespace.
const (
	// TwiceInSequence delivers the job, and once it completed, delivers
	// it again: the second delivery must replay the stored result.
	TwiceInSequence Case = "twice-in-sequence"
	// Concurrent delivers the job several times at once (CheckConcurrency),
	// then delivers again each copy that found it in progress.
	Concurrent Case = "concurrent"
	// CrashAfterEffect runs the handler under a 1 s lease (the server's
	// minimum) with heartbeats held, and then "kills" the worker: its
	// Complete never goes out. A redelivery waits for the lease to lapse
	// (the server's own wait, no sleep) and finds the job taken over, or
	// UNRESOLVED under on_lease_expiry: hold.
	CrashAfterEffect Case = "crash-after-effect"
	// CrashAfterComplete runs the handler under a 1 s lease and "kills" the
	// worker as soon as a Complete of its record is applied: the handler's
	// own (a Complete with its token, sent through WorkerClient while it
	// runs) or Do's. What the handler does after that is not counted, as a
	// dead worker does nothing; then the job is delivered again.
	CrashAfterComplete Case = "crash-after-complete"
	// LeaseLapsed holds the handler before it starts, and its heartbeats,
	// while its 1 s lease lapses and a second delivery takes the job over
	// (or finds it UNRESOLVED under hold); then it lets the first
	// handler run, as a worker resuming from a stall does.
	LeaseLapsed Case = "lease-lapsed"
	// CompleteAnswerLost lets the first Complete reach the server and drops
	// its answer, so that the worker retries it; then the queue delivers the
	// job again.
	CompleteAnswerLost Case = "complete-answer-lost"
	// RetryableFailure makes the first delivery return an error after the
	// handler returned (the handler's effect made, the delivery failed),
	// so that the job is released; a second delivery runs it again.
	RetryableFailure Case = "retryable-failure"
	// StepsCrashBetweenSteps runs the handler under a 1 s lease with
	// heartbeats held, and "kills" the worker between two of the job's
	// effects: at the first step call after a step was recorded FINISHED,
	// or before Complete. The redelivery takes the job over once the lease
	// lapses: a recorded step is not run again, and an effect made outside
	// every step is.
	StepsCrashBetweenSteps Case = "steps-crash-between-steps"
	// StepsCrashInsideStep is StepsCrashBetweenSteps with the worker killed
	// inside the first step, after its effect and before its CompleteStep
	// (before Complete when the handler records no step): the step stays
	// STARTED, and the namespace's on_unfinished_step policy says what the
	// redelivery does.
	StepsCrashInsideStep Case = "steps-crash-inside-step"
	// StepsHeldResolver runs after the others when CheckResolver gives a
	// resolver: the worker dies inside the first step (before Complete
	// when the handler records no step) in a namespace whose policy holds
	// the job, the redelivery finds it UNRESOLVED, the resolver runs until
	// it decided the record (10 s at most), and the job is delivered
	// again. A resolver that releases a job whose effect happened makes
	// the effect twice; one that cannot tell leaves it held.
	StepsHeldResolver Case = "steps-held-resolver"
)

// resolverWait bounds how long StepsHeldResolver waits for the resolver's
// decision.
const resolverWait = 10 * time.Second

// AllCases returns every Case in the order CheckHandler runs them.
func AllCases() []Case {
	return []Case{TwiceInSequence, Concurrent, CrashAfterEffect, CrashAfterComplete, LeaseLapsed, CompleteAnswerLost, RetryableFailure,
		StepsCrashBetweenSteps, StepsCrashInsideStep}
}

// CheckOption configures CheckHandler and InspectHandler.
type CheckOption func(*checkOptions)

type checkOptions struct {
	job         client.Job
	server      []Option
	concurrency int
	resolver    func(context.Context, client.Record) (client.Resolution, error)
}

// CheckResolver adds the case StepsHeldResolver, which checks that
// resolve, the function a resolver of yours runs (client.RunResolver),
// decides a held job of the handler right: completed when its effect
// happened, release when it did not. The job's namespace must be held
// (on_unfinished_step: hold or on_lease_expiry: hold, through
// CheckServer). Not run by default.
func CheckResolver(resolve func(ctx context.Context, rec client.Record) (client.Resolution, error)) CheckOption {
	return func(o *checkOptions) { o.resolver = resolve }
}

// CheckJob is the job the cases deliver: its Namespace (whose policy
// applies: retry, or on_lease_expiry: hold), Fingerprint, LeaseTTL and
// Retention as the worker sends them. Each case runs on the key
// job.Key + "." + the case's name ("order-1042.crash-after-effect"). The
// kit gives the deliveries whose lease must lapse a lease of 1 s instead of
// job.LeaseTTL. It defaults to namespace "jobs", key "job-1", and the
// server's or the policy's lease.
func CheckJob(job client.Job) CheckOption { return func(o *checkOptions) { o.job = job } }

// CheckServer are the options of the server the cases run on, as a test
// gives NewServer: WithTenantsYAML with the tenants and policies of your
// idemd config (so that a namespace held with on_lease_expiry: hold is
// held), WithClientOptions with a tenant's token. None by default.
func CheckServer(opts ...Option) CheckOption {
	return func(o *checkOptions) { o.server = append(o.server, opts...) }
}

// CheckConcurrency is how many deliveries the Concurrent case makes at once.
// It defaults to 8.
func CheckConcurrency(n int) CheckOption { return func(o *checkOptions) { o.concurrency = n } }

// CheckHandler runs every Case against h on a real idem server of its own
// (NewServer), each delivery through client.Do on a client of its own, as a
// worker process of its own (a handler that calls idem itself reaches it
// with WorkerClient). effects counts the handler's side effect (rows in your
// table, charges a fake payment API applied): CheckHandler reads it before
// and after each case, which must make the effect once, and while the case
// runs (around the building of each delivery's handler, around each run of
// it, when a worker dies), to tell an effect made outside the handler or
// after it returned; it must be safe to call from any goroutine. For each
// case where the effect did not happen once, CheckHandler fails t with the
// report of that case: the count, what every delivery did and the window
// and the remedy, or what else is wrong. Passing cases are logged.
//
// A handler that records its effects as steps (Attempt.Step) makes one
// effect per step: the kit counts, from the step calls its worker sends,
// what each step made and what was made outside every step, and a report
// of a repeated effect names the step (pass its step key downstream) or
// says it was made outside one (record it as a step).
//
//	func TestChargeIsExactlyOnce(t *testing.T) {
//		provider := newFakeProvider()
//		idemtest.CheckHandler(t, func(job client.Job) func(context.Context, client.Attempt) ([]byte, error) {
//			return func(ctx context.Context, a client.Attempt) ([]byte, error) {
//				return provider.Charge(ctx, job.Key, 1250, "order/"+job.Key)
//			}
//		}, provider.ChargesApplied, idemtest.CheckJob(client.Job{Namespace: "payments", Key: "order-1042"}))
//	}
//
// The windows are driven by controls, not by timing: a 1 s lease (the
// server's minimum) whose heartbeats are held, a Claim that waits on the
// server for the lease to lapse, a Complete that is not sent, a Complete
// whose answer is dropped after the server applied it. The faults live in the
// kit's clients (a gRPC interceptor); the server is the one idemd serves.
// The cases with a lapsing lease take about a second each.
func CheckHandler(t testing.TB, h Handler, effects func() int, opts ...CheckOption) *Report {
	t.Helper()
	r := InspectHandler(t, h, effects, opts...)
	for _, c := range r.Cases {
		if c.OK() {
			t.Log(c.String())
		} else {
			t.Error(c.String())
		}
	}
	return r
}

// InspectHandler runs the cases of CheckHandler and returns the report
// without failing t for what it found, for a test that asserts what the kit
// finds (that a naive handler's report names the window and the remedy,
// say). It fails t only when the server cannot start.
func InspectHandler(t testing.TB, h Handler, effects func() int, opts ...CheckOption) *Report {
	t.Helper()
	o := checkOptions{job: client.Job{Namespace: "jobs", Key: "job-1"}, concurrency: 8}
	for _, opt := range opts {
		opt(&o)
	}
	o.concurrency = max(o.concurrency, 2)
	k := &kit{srv: NewServer(t, o.server...), h: h, effects: effects, o: o}
	r := &Report{}
	cases := AllCases()
	if o.resolver != nil {
		cases = append(cases, StepsHeldResolver)
	}
	for _, c := range cases {
		r.Cases = append(r.Cases, k.run(c))
	}
	return r
}

// Report is what CheckHandler and InspectHandler found, case by case.
type Report struct {
	Cases []*CaseReport
}

// Case returns the report of case c, or nil.
func (r *Report) Case(c Case) *CaseReport {
	for _, cr := range r.Cases {
		if cr.Case == c {
			return cr
		}
	}
	return nil
}

// Failed returns the reports of the cases that did not make the effect once.
func (r *Report) Failed() []*CaseReport {
	var out []*CaseReport
	for _, cr := range r.Cases {
		if !cr.OK() {
			out = append(out, cr)
		}
	}
	return out
}

// String is every case's report, one after the other.
func (r *Report) String() string {
	parts := make([]string, len(r.Cases))
	for i, cr := range r.Cases {
		parts[i] = cr.String()
	}
	return strings.Join(parts, "\n")
}

// CaseReport is what one case found.
type CaseReport struct {
	// Case is the case that ran.
	Case Case
	// Title says what the deliveries were.
	Title string
	// Job is the job the case delivered, with the case's own key.
	Job client.Job
	// Effects is how much the effect counter went up during the case (or
	// for a second after it, when it had not moved by its end), leaving out
	// what a handler did after its worker died.
	Effects int
	// Outside is how many of the effects happened while the handler of a
	// delivery was being built, before Do claimed the job.
	Outside int
	// Late is how many of the effects happened after the handler that made
	// them returned.
	Late int
	// Runs is how many times the handler ran.
	Runs int
	// Deliveries says what each delivery did, in order.
	Deliveries []string
	// Record is the record after the last delivery (nil if it could not be
	// read).
	Record *client.Record
	// Window names where the effect ran more than once (or, after the
	// handler's own Complete, not at all), and Remedy what closes it; both
	// empty unless the case found such a window.
	Window, Remedy string
	// Held says how on_lease_expiry: hold kept the effect at one, when it
	// did.
	Held string
	// Finding says what is wrong when it is not one of the windows: no
	// effect counted, more effects than runs, an effect made outside the
	// handler or after it returned.
	Finding string
	// Err is why the case could not run as designed: the handler failed
	// where it should succeed, a call to the server failed.
	Err error
	// StepEffects is, for a handler that records steps (Attempt.Step), how
	// much the effect counter went up inside each step, by the step's
	// name, and outside every step (""); nil for a handler that records
	// none. Such a handler makes one effect per step, and at most one
	// outside them.
	StepEffects map[string]int
	// RepeatedStep names the step whose effect ran more than once, and
	// RepeatedUnrecorded says an effect outside every step did.
	RepeatedStep       string
	RepeatedUnrecorded bool
}

// OK reports whether the case ran and made the effect exactly once (each
// step's, for a handler that records steps), inside the handler.
func (c *CaseReport) OK() bool {
	if c.Err != nil || c.Outside != 0 || c.Late != 0 || c.Finding != "" {
		return false
	}
	if c.StepEffects != nil {
		return c.Effects >= 1 && c.RepeatedStep == "" && !c.RepeatedUnrecorded
	}
	return c.Effects == 1
}

// String is the case's report: a line that says whether the effect ran
// once, what the deliveries were and did, the record, and the window and
// remedy, or the finding.
func (c *CaseReport) String() string {
	w := words()
	vars := map[string]string{"id": string(c.Case), "effects": strconv.Itoa(c.Effects)}
	switch {
	case c.RepeatedStep != "":
		vars["effects"] = strconv.Itoa(c.StepEffects[c.RepeatedStep])
	case c.RepeatedUnrecorded:
		vars["effects"] = strconv.Itoa(c.StepEffects[""])
	}
	var b strings.Builder
	switch {
	case c.Err != nil:
		vars["error"] = c.Err.Error()
		b.WriteString(fill(w.Messages["error"], vars))
	case c.Late > 0 && c.Outside == 0:
		b.WriteString(fill(w.Messages["late"], vars))
	case c.OK() || c.Effects == 1:
		b.WriteString(fill(w.Messages["ok"], vars))
	case c.Effects > 1:
		b.WriteString(fill(w.Messages["more"], vars))
	case c.Window != "":
		b.WriteString(fill(w.Messages["lost"], vars))
	default:
		b.WriteString(fill(w.Messages["none"], vars))
	}
	lines := append([]string{c.Title}, c.Deliveries...)
	if c.Record != nil {
		lines = append(lines, fill(w.Messages["record"], map[string]string{
			"state": c.Record.State.String(), "attempt": strconv.Itoa(c.Record.Attempt), "token": strconv.FormatInt(c.Record.Token, 10)}))
	}
	if c.Window != "" {
		lines = append(lines, fill(w.Messages["window"], map[string]string{"text": c.Window}),
			fill(w.Messages["remedy"], map[string]string{"text": c.Remedy}))
	}
	if c.Held != "" {
		lines = append(lines, fill(w.Messages["held"], map[string]string{"text": c.Held}))
	}
	if c.Finding != "" {
		lines = append(lines, c.Finding)
	}
	for _, l := range lines {
		b.WriteString("\n  ")
		b.WriteString(l)
	}
	return b.String()
}

// goTerms are the Go SDK's names for what the remedies point at.
var goTerms = map[string]string{
	"takeover":      "a.Takeover",
	"token_field":   "a.Token",
	"permanent":     "client.Permanent(err)",
	"lost_check":    "ctx.Err()",
	"worker_client": "idemtest.WorkerClient(ctx)",
	"step_call":     "a.Step(ctx, name, fn)",
	"step_key_call": "a.StepKey(name)",
}

//go:embed cases.json
var casesJSON []byte

// caseWords is the text of one case in cases.json.
type caseWords struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Window string `json:"window"`
	Remedy string `json:"remedy"`
	Held   string `json:"held"`
	// For an effect made outside every step, where they differ.
	WindowUnrecorded string `json:"window_unrecorded"`
	RemedyUnrecorded string `json:"remedy_unrecorded"`
	// StepsHeldResolver's findings.
	Undecided string `json:"undecided"`
	NotHeld   string `json:"not_held"`
}

type wordsFile struct {
	Cases    []caseWords       `json:"cases"`
	Messages map[string]string `json:"messages"`
}

// words is cases.json, the text every language's kit reports.
var words = sync.OnceValue(func() wordsFile {
	var f wordsFile
	if err := json.Unmarshal(casesJSON, &f); err != nil {
		panic("idemtest: cases.json: " + err.Error())
	}
	return f
})

func (f wordsFile) caseWords(c Case) caseWords {
	for _, cw := range f.Cases {
		if cw.ID == string(c) {
			return cw
		}
	}
	panic("idemtest: cases.json has no case " + string(c))
}

// fill replaces each {name} in s with vars[name].
func fill(s string, vars map[string]string) string {
	pairs := make([]string, 0, 2*len(vars))
	for k, v := range vars {
		pairs = append(pairs, "{"+k+"}", v)
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// kit runs the cases of one CheckHandler call.
type kit struct {
	srv     *Server
	h       Handler
	effects func() int
	o       checkOptions
}

// errAfterEffect is the error RetryableFailure's first delivery returns
// after the handler returned.
var errAfterEffect = errors.New(words().Messages["injected_failure"])

// caseTimeout bounds one case, so that a handler that never returns fails
// the case instead of hanging the test until go test's timeout.
const caseTimeout = 2 * time.Minute

// lateWait is how long a case whose effect counter did not move waits for an
// effect that comes after the handler returned, before it reports none.
const lateWait = time.Second

type workerKey struct{}

// WorkerClient returns the client of the worker that runs the delivery whose
// handler got ctx, for a handler that calls idem itself (a Complete of its
// own token, say) as a worker's handler calls it with the worker's client:
// the kit's faults apply to those calls, and CrashAfterComplete stops the
// worker right after such a Complete. It returns nil outside a delivery of
// CheckHandler or InspectHandler.
func WorkerClient(ctx context.Context) *client.Client {
	c, _ := ctx.Value(workerKey{}).(*client.Client)
	return c
}

// run runs case c and reports it.
func (k *kit) run(c Case) *CaseReport {
	cw := words().caseWords(c)
	job := k.o.job
	job.Key += "." + string(c)
	cr := &CaseReport{Case: c, Job: job, Title: fill(cw.Title, map[string]string{"n": strconv.Itoa(k.o.concurrency)})}
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	before := k.effects()
	ds, decided := k.deliveries(ctx, c, job)
	end := k.effects()

	// What the counter saw, by when it moved: while a handler was built,
	// while one ran (before its worker died), after a dead worker's, and
	// the rest, which came after the handler that made it returned.
	during, zombie, lost := 0, 0, false
	for _, d := range ds {
		if d.ran != nil {
			cr.Runs++
		}
		cr.Outside += d.built
		during += d.during
		zombie += d.zombie
		lost = lost || d.lostAtOwnComplete()
	}
	cr.Effects = end - before - zombie
	cr.Late = max(cr.Effects-cr.Outside-during, 0)
	var stepOrder []string
	cr.StepEffects, stepOrder = stepEffects(ds)
	cr.Deliveries = describe(ds)
	if rec, err := k.srv.Client.Lookup(ctx, client.LookupRequest{Namespace: job.Namespace, Key: job.Key}); err == nil {
		cr.Record = &rec
	}
	cr.Err = caseError(c, ds)
	if cr.Err != nil {
		return cr
	}
	if cr.Runs > 0 && cr.Effects <= 0 && !lost {
		if moved := k.awaitLateEffects(ctx, end); moved > 0 {
			cr.Effects += moved
			cr.Late += moved
		}
	}
	held := false
	for _, d := range ds {
		held = held || d.outcome() == outcomeUnresolved
	}
	judge(cr, c, cw, verdictOf{lost: lost, held: held, decided: decided, stepOrder: stepOrder, deliveries: len(ds)})
	return cr
}

// deliveries delivers job as case c has it and returns the deliveries in
// the order the report tells them, and whether the resolver of
// StepsHeldResolver decided the job.
func (k *kit) deliveries(ctx context.Context, c Case, job client.Job) (ds []*delivery, decided bool) {
	// The deliveries whose lease must lapse hold it for the server's
	// minimum, and their heartbeats do not get through.
	lapsing := job
	lapsing.LeaseTTL = limits.MinLeaseTTL
	waitForLapse := client.WithWait(client.MaxWait)

	switch c {
	case TwiceInSequence:
		ds = append(ds, k.deliver(ctx, job, nil, nil))
		ds = append(ds, k.deliver(ctx, job, nil, nil))
	case Concurrent:
		ds = k.concurrent(ctx, job)
	case CrashAfterEffect:
		ds = append(ds, k.deliver(ctx, lapsing, &faults{holdHeartbeats: true, dieBeforeComplete: true}, nil))
		ds = append(ds, k.deliver(ctx, job, nil, nil, waitForLapse))
	case CrashAfterComplete:
		// A lapsing lease, so that a record the dead worker left PROCESSING
		// is taken over by the redelivery.
		ds = append(ds, k.deliver(ctx, lapsing, &faults{dieAfterComplete: true}, nil))
		ds = append(ds, k.deliver(ctx, job, nil, nil, waitForLapse))
	case LeaseLapsed:
		ds = k.leaseLapsed(ctx, job, lapsing, waitForLapse)
	case CompleteAnswerLost:
		ds = append(ds, k.deliver(ctx, job, &faults{loseCompleteAnswer: true}, nil))
		ds = append(ds, k.deliver(ctx, job, nil, nil))
	case RetryableFailure:
		ds = append(ds, k.deliver(ctx, job, nil, &wrap{failAfter: true}))
		ds = append(ds, k.deliver(ctx, job, nil, nil))
	case StepsCrashBetweenSteps:
		ds = append(ds, k.deliver(ctx, lapsing, &faults{holdHeartbeats: true, dieBetweenSteps: true}, nil))
		ds = append(ds, k.deliver(ctx, job, nil, nil, waitForLapse))
	case StepsCrashInsideStep:
		ds = append(ds, k.deliver(ctx, lapsing, &faults{holdHeartbeats: true, dieInStep: true}, nil))
		ds = append(ds, k.deliver(ctx, job, nil, nil, waitForLapse))
	case StepsHeldResolver:
		ds = append(ds, k.deliver(ctx, lapsing, &faults{holdHeartbeats: true, dieInStep: true}, nil))
		ds = append(ds, k.deliver(ctx, job, nil, nil, waitForLapse))
		if ds[1].outcome() == outcomeUnresolved {
			decided = k.resolve(ctx, job)
			ds = append(ds, k.deliver(ctx, job, nil, nil))
		}
	}
	return ds, decided
}

// concurrent delivers job to k's concurrency at once, then once more for
// each copy that found it in progress, as a queue redelivers.
func (k *kit) concurrent(ctx context.Context, job client.Job) []*delivery {
	// Built one after the other before any is sent, so that what
	// building one makes is counted as its own.
	ds := make([]*delivery, k.o.concurrency)
	for i := range ds {
		ds[i] = k.build(job, nil)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() {
			<-start
			k.send(ctx, d, job, nil)
		})
	}
	close(start)
	wg.Wait()
	// The report tells the one that ran first, then the others.
	slices.SortStableFunc(ds, func(a, b *delivery) int { return cmp.Compare(a.outcome(), b.outcome()) })
	// The queue redelivers each copy that found the job in progress.
	for _, d := range ds[:k.o.concurrency] {
		if d.outcome() == outcomeInProgress {
			ds = append(ds, k.deliver(ctx, job, nil, nil))
		}
	}
	return ds
}

// leaseLapsed delivers job to a worker that stalls after it acquired it,
// until a second delivery has taken the lapsed lease over.
func (k *kit) leaseLapsed(ctx context.Context, job, lapsing client.Job, waitForLapse client.DoOption) []*delivery {
	acquired, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stall := func(ctx context.Context) error {
		once.Do(func() { close(acquired) })
		select {
		case <-resume:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stalled := k.build(lapsing, &wrap{stall: stall})
	first := make(chan *delivery, 1)
	go func() { first <- k.send(ctx, stalled, lapsing, &faults{holdHeartbeats: true}) }()
	var second *delivery
	select {
	case <-acquired:
		second = k.deliver(ctx, job, nil, nil, waitForLapse)
	case d := <-first: // it never acquired: its outcome says why
		first <- d
	}
	close(resume)
	ds := []*delivery{<-first}
	if second != nil {
		ds = append(ds, second)
	}
	return ds
}

// verdictOf is what judge needs to know of a case's deliveries beyond its
// report.
type verdictOf struct {
	lost, held, decided bool
	stepOrder           []string
	deliveries          int
}

// judge writes cr's finding, or its window and remedy, or what held it,
// from what the deliveries of case c did.
func judge(cr *CaseReport, c Case, cw caseWords, v verdictOf) {
	vars := map[string]string{"namespace": cr.Job.Namespace, "key": cr.Job.Key,
		"effects": strconv.Itoa(cr.Effects), "runs": strconv.Itoa(cr.Runs), "deliveries": strconv.Itoa(v.deliveries),
		"outside": strconv.Itoa(cr.Outside), "late": strconv.Itoa(cr.Late)}
	maps.Copy(vars, goTerms)
	msg := words().Messages
	switch {
	case cr.Outside > 0:
		cr.Finding = fill(msg["outside_effects"], vars)
	case cr.Late > 0:
		cr.Finding = fill(msg["late_effect"], vars)
	case v.lost && cr.Effects <= 0:
		cr.Window, cr.Remedy = fill(cw.Window, vars), fill(cw.Remedy, vars)
	case cr.Effects <= 0:
		cr.Finding = fill(msg["no_effect"], vars)
	case c == StepsHeldResolver:
		judgeResolver(cr, cw, v.stepOrder, vars, v.held, v.decided)
	case cr.StepEffects != nil:
		judgeSteps(cr, cw, v.stepOrder, vars, v.held)
	case cr.Effects > cr.Runs:
		cr.Finding = fill(msg["extra_effects"], vars)
	case cr.Effects > 1 && (cw.Window == "" || c == CrashAfterComplete):
		cr.Finding = fill(msg["extra_runs"], vars)
	case cr.Effects > 1:
		// A handler that records no step: the effect was made outside one.
		cr.Window, cr.Remedy = fill(cmp.Or(cw.WindowUnrecorded, cw.Window), vars), fill(cmp.Or(cw.RemedyUnrecorded, cw.Remedy), vars)
	case v.held && cw.Held != "":
		cr.Held = fill(cw.Held, vars)
	}
}

// awaitLateEffects waits up to lateWait for the effect counter to move past
// end, and returns by how much it did.
func (k *kit) awaitLateEffects(ctx context.Context, end int) int {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(lateWait)
	for {
		if moved := k.effects() - end; moved > 0 {
			return moved
		}
		select {
		case <-t.C:
		case <-deadline:
			return 0
		case <-ctx.Done():
			return 0
		}
	}
}

// caseError is why case c could not run as designed, or nil: a delivery
// failed where it should not have, or the fault the case injects did not
// happen.
func caseError(c Case, ds []*delivery) error {
	msg := words().Messages
	for _, d := range ds {
		// A record ended where the kit cannot see it explains a failure
		// that follows, and leaves CrashAfterComplete blind.
		if d.ended != "" && (c == CrashAfterComplete || d.outcome() == outcomeFailed) {
			return errors.New(fill(msg["ended_unseen"], map[string]string{"state": d.ended, "worker_client": goTerms["worker_client"]}))
		}
	}
	for _, d := range ds {
		switch d.outcome() {
		case outcomePanicked:
			return errors.New(fill(msg["handler_panicked"], map[string]string{"error": fmt.Sprint(d.panicked)}))
		case outcomeFailed:
			if d.ran != nil && !errors.Is(d.err, client.ErrCompletionUnknown) {
				return errors.New(fill(msg["handler_failed"], map[string]string{"error": d.err.Error()}))
			}
			return d.err
		}
	}
	first := ds[0]
	switch {
	case c == CrashAfterEffect && !first.f.dead():
		return errors.New("the first delivery did not reach its Complete")
	case c == CrashAfterComplete && !first.f.dead():
		return errors.New("no Complete of the first delivery was applied")
	case c == CompleteAnswerLost && !first.f.lostAnswer():
		return errors.New("the first delivery's Complete was not applied")
	case (c == StepsCrashBetweenSteps || c == StepsCrashInsideStep || c == StepsHeldResolver) && !first.f.dead():
		return errors.New("the first delivery did not reach the step call or the Complete its worker dies at")
	case c == LeaseLapsed && len(ds) < 2:
		return errors.New("the first delivery did not acquire the job")
	}
	if last := ds[len(ds)-1]; last.outcome() == outcomeInProgress {
		return fmt.Errorf("the last delivery still found the job in progress (after waiting up to %.0fs for a lease to lapse)", client.MaxWait.Seconds())
	}
	return nil
}

// wrap is what the kit does around the handler of one delivery.
type wrap struct {
	// stall, when set, runs before the handler: the handler starts once it
	// returns nil.
	stall func(context.Context) error
	// failAfter makes the delivery fail with errAfterEffect once the
	// handler returned a value.
	failAfter bool
}

// delivery is one delivery of a job to a worker of its own, and what
// became of it.
type delivery struct {
	w  wrap
	f  *faults
	fn func(context.Context, client.Attempt) ([]byte, error) // the handler, as built for this delivery
	// What the effect counter saw: while the handler was built, while it
	// ran (until its worker died, when it died in it), and after that.
	built, during, zombie int
	// ended is the state the handler left the record in when it ended the
	// record itself through a client the kit does not see; "" otherwise.
	ended    string
	ran      *client.Attempt // the attempt the handler ran under, if it ran
	res      client.Result
	err      error
	panicked any
}

// deliver builds the handler of a delivery of job and sends it (see send).
func (k *kit) deliver(ctx context.Context, job client.Job, f *faults, w *wrap, opts ...client.DoOption) *delivery {
	return k.send(ctx, k.build(job, w), job, f, opts...)
}

// build builds the handler of one delivery of job, as a worker builds it
// from the message it got, and counts what the effect counter saw
// meanwhile: an effect made there happens on every delivery, outside Do.
func (k *kit) build(job client.Job, w *wrap) *delivery {
	d := &delivery{}
	if w != nil {
		d.w = *w
	}
	before := k.effects()
	d.fn = k.h(job)
	d.built = k.effects() - before
	return d
}

// send delivers job to a new worker (a client of its own, with faults f in
// its connection, when set) that runs d's handler through client.Do.
func (k *kit) send(ctx context.Context, d *delivery, job client.Job, f *faults, opts ...client.DoOption) (sent *delivery) {
	sent = d // named: a panic that Do passes on still returns it
	if f == nil {
		f = &faults{}
	}
	f.effects = k.effects
	d.f = f
	c, err := k.worker(f)
	if err != nil {
		d.err = err
		return d
	}
	defer c.Close()
	defer func() {
		if p := recover(); p != nil {
			d.panicked = p // a panic that Do passes on
		}
	}()
	d.res, d.err = c.Do(context.WithValue(ctx, workerKey{}, c), job, func(fnCtx context.Context, a client.Attempt) ([]byte, error) {
		if d.w.stall != nil {
			if err := d.w.stall(fnCtx); err != nil {
				return nil, err
			}
		}
		d.ran = &a
		start := k.effects()
		f.setRunning(true)
		defer func() {
			f.setRunning(false)
			returned := k.effects()
			if at, ok := f.deathInHandler(); ok {
				d.during, d.zombie = at-start, returned-at
			} else {
				d.during = returned - start
			}
			d.ended = k.endedUnseen(ctx, job, a, f)
		}()
		v, err := d.fn(fnCtx, a)
		if err == nil && d.w.failAfter {
			return nil, errAfterEffect
		}
		return v, err
	}, opts...)
	return d
}

// endedUnseen is the state the handler of attempt a left job's record in,
// when it ended the record itself (Complete or Fail with its token) through
// a client other than its worker's; "" otherwise.
func (k *kit) endedUnseen(ctx context.Context, job client.Job, a client.Attempt, f *faults) string {
	if f.ownCallSeen() {
		return ""
	}
	rec, err := k.srv.Client.Lookup(ctx, client.LookupRequest{Namespace: job.Namespace, Key: job.Key})
	if err != nil || rec.Token != a.Token || rec.State == client.StateProcessing {
		return ""
	}
	return rec.State.String()
}

// worker returns a client as a worker process of its own would have, with
// the server's client options and f in its connection.
func (k *kit) worker(f *faults) (*client.Client, error) {
	opts := []client.Option{client.WithInsecure(),
		// Quick retries: the answer-lost case's retried Complete need not
		// wait the production backoff. The test's own WithRetry wins.
		client.WithRetry(client.RetryPolicy{BaseDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond})}
	opts = append(opts, k.srv.clientOpts...)
	opts = append(opts, client.WithDialOptions(grpc.WithChainUnaryInterceptor(f.unary)))
	return client.New(k.srv.Addr, opts...)
}

// outcome is what became of a delivery, as its report line tells it.
type outcome int

const (
	outcomeCompleted outcome = iota
	outcomeReplayed
	outcomeInProgress
	outcomeUnresolved
	outcomeLeaseLost
	outcomeDied
	outcomeReleased
	outcomeNotReleased
	outcomePanicked
	outcomeFailed
)

func (d *delivery) outcome() outcome {
	var busy *client.InProgressError
	var unresolved *client.UnresolvedError
	switch {
	case d.panicked != nil:
		return outcomePanicked
	case d.f.dead() && d.ran != nil:
		return outcomeDied
	case d.err == nil && d.res.Replayed:
		return outcomeReplayed
	case d.err == nil:
		return outcomeCompleted
	case errors.As(d.err, &busy):
		return outcomeInProgress
	case errors.As(d.err, &unresolved):
		return outcomeUnresolved
	case errors.Is(d.err, client.ErrLeaseLost):
		return outcomeLeaseLost
	case d.w.failAfter && errors.Is(d.err, errAfterEffect) && errors.Is(d.err, client.ErrFailureNotRecorded):
		return outcomeNotReleased
	case d.w.failAfter && errors.Is(d.err, errAfterEffect):
		return outcomeReleased
	}
	return outcomeFailed
}

// lostAtOwnComplete reports whether the worker died right after the
// handler's own Complete was applied, before the handler made its effect.
func (d *delivery) lostAtOwnComplete() bool {
	_, in := d.f.deathInHandler()
	return in && d.f.dieAfterComplete && d.during <= 0
}

// line is the delivery's report line, after "delivery i: ".
func (d *delivery) line() string {
	msg := words().Messages
	var ran string
	if d.ran != nil {
		key := "ran"
		if d.w.stall != nil {
			key = "ran_stalled"
		}
		ran = fill(msg[key], map[string]string{"attempt": strconv.Itoa(d.ran.Number), "token": strconv.FormatInt(d.ran.Token, 10)})
	}
	var end string
	switch d.outcome() {
	case outcomeCompleted:
		switch {
		case d.f.lostAnswer():
			end = msg["answer_lost"]
		case d.w.stall != nil:
			end = msg["late_complete"]
		default:
			end = msg["completed"]
		}
	case outcomeReplayed:
		return msg["replayed"]
	case outcomeInProgress:
		return msg["in_progress"]
	case outcomeUnresolved:
		return msg["unresolved"]
	case outcomeLeaseLost:
		end = msg["lease_lost"]
	case outcomeDied:
		_, inHandler := d.f.deathInHandler()
		switch {
		case d.f.dieAfterComplete && inHandler:
			end = msg["died_after_own_complete"]
		case d.f.dieAfterComplete:
			end = msg["died_after_complete"]
		default:
			end = msg["died"]
		}
	case outcomeReleased:
		end = msg["released"]
	case outcomeNotReleased:
		var nr *client.FailureNotRecordedError
		reason := d.err.Error()
		if errors.As(d.err, &nr) {
			if reason = client.Reason(nr.FailErr); reason == "" {
				reason = nr.FailErr.Error()
			}
		}
		end = fill(msg["not_released"], map[string]string{"reason": reason})
	case outcomePanicked:
		end = fill(msg["handler_panicked"], map[string]string{"error": fmt.Sprint(d.panicked)})
	default:
		end = fill(msg["failed"], map[string]string{"error": d.err.Error()})
	}
	if ran == "" {
		return end
	}
	return ran + "; " + end
}

// describe is the report's lines for ds: one per delivery, or one for a
// run of deliveries that did the same.
func describe(ds []*delivery) []string {
	msg := words().Messages
	var out []string
	for i := 0; i < len(ds); {
		j := i + 1
		what := ds[i].line()
		for j < len(ds) && ds[j].line() == what {
			j++
		}
		if j-i == 1 {
			out = append(out, fill(msg["delivery"], map[string]string{"i": strconv.Itoa(i + 1), "what": what}))
		} else {
			out = append(out, fill(msg["deliveries"], map[string]string{"i": strconv.Itoa(i + 1), "to": strconv.Itoa(j), "what": what}))
		}
		i = j
	}
	return out
}

// stepEffects sums what the deliveries' handlers made inside each step and
// outside them, and returns the steps in the order they first opened; nil
// when no handler called a step RPC. A redelivery that found every step
// FINISHED calls none, and what it makes outside them still counts.
func stepEffects(ds []*delivery) (map[string]int, []string) {
	sum := map[string]int{}
	var order []string
	anySeen := false
	for _, d := range ds {
		byStep, opened, seen := d.f.steps()
		anySeen = anySeen || seen
		for _, name := range opened {
			if !slices.Contains(order, name) {
				order = append(order, name)
			}
			sum[name] += byStep[name]
		}
	}
	if !anySeen {
		return nil, nil
	}
	return sum, order
}

// judgeResolver reports StepsHeldResolver: the record was not held, the
// resolver left it held, or an effect ran twice after its decision.
func judgeResolver(cr *CaseReport, cw caseWords, order []string, vars map[string]string, held, decided bool) {
	switch {
	case !held:
		cr.Finding = fill(cw.NotHeld, vars)
		return
	case !decided:
		cr.Finding = fill(cw.Undecided, vars)
		return
	}
	repeated := cr.StepEffects == nil && cr.Effects > 1
	for _, name := range order {
		if cr.StepEffects[name] > 1 {
			cr.RepeatedStep, cr.RepeatedUnrecorded = name, name == ""
			repeated = true
			break
		}
	}
	if repeated {
		cr.Window, cr.Remedy = fill(cw.Window, vars), fill(cw.Remedy, vars)
	}
}

// resolve runs the resolver of CheckResolver until it decided job's held
// record, for resolverWait at most, and reports whether it did.
func (k *kit) resolve(ctx context.Context, job client.Job) bool {
	ctx, cancel := context.WithTimeout(ctx, resolverWait)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = k.srv.Client.RunResolver(ctx, client.ResolverOptions{Name: "idemtest", Namespaces: []string{job.Namespace},
			Logger: slog.New(slog.DiscardHandler)}, k.o.resolver)
	}()
	defer func() { cancel(); <-stopped }()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		rec, err := k.srv.Client.Lookup(ctx, client.LookupRequest{Namespace: job.Namespace, Key: job.Key})
		if err == nil && rec.State != client.StateUnresolved {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// judgeSteps names, for a handler that records steps, the first step whose
// effect ran more than once, or the effect outside every step that did,
// with the case's window and remedy for it.
func judgeSteps(cr *CaseReport, cw caseWords, order []string, vars map[string]string, held bool) {
	steps := words().caseWords(StepsCrashInsideStep)
	for _, name := range order {
		if name != "" && cr.StepEffects[name] > 1 {
			cr.RepeatedStep = name
			vars["step"] = name
			remedy := steps.Remedy // a step run again is closed by its key, whatever the window
			if cw.ID == string(StepsCrashBetweenSteps) {
				remedy = cw.Remedy // there a step is run again only when its name changed
			}
			if cw.Window == "" {
				cr.Finding = fill(words().Messages["extra_runs"], vars)
				return
			}
			cr.Window, cr.Remedy = fill(cw.Window, vars), fill(remedy, vars)
			return
		}
	}
	if cr.StepEffects[""] > 1 {
		cr.RepeatedUnrecorded = true
		if cw.Window == "" {
			cr.Finding = fill(words().Messages["extra_runs"], vars)
			return
		}
		cr.Window = fill(cmp.Or(cw.WindowUnrecorded, cw.Window), vars)
		cr.Remedy = fill(cmp.Or(cw.RemedyUnrecorded, words().caseWords(StepsCrashBetweenSteps).RemedyUnrecorded), vars)
		return
	}
	if held && cw.Held != "" {
		cr.Held = fill(cw.Held, vars)
	}
}
