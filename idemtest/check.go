package idemtest

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
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
)

// AllCases returns every Case in the order CheckHandler runs them.
func AllCases() []Case {
	return []Case{TwiceInSequence, Concurrent, CrashAfterEffect, LeaseLapsed, CompleteAnswerLost, RetryableFailure}
}

// CheckOption configures CheckHandler and InspectHandler.
type CheckOption func(*checkOptions)

type checkOptions struct {
	job         client.Job
	server      []Option
	concurrency int
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
// worker process of its own. effects counts the handler's side effect (rows
// in your table, charges a fake payment API applied): CheckHandler reads it
// before and after each case, which must make the effect once. For each case
// where it did not, CheckHandler fails t with the report of that case: the
// count, what every delivery did and, when the effect ran more than once,
// the window it ran twice in and the remedy. Passing cases are logged.
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
	for _, c := range AllCases() {
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
	// Effects is how much the effect counter went up during the case.
	Effects int
	// Runs is how many times the handler ran.
	Runs int
	// Deliveries says what each delivery did, in order.
	Deliveries []string
	// Record is the record after the last delivery (nil if it could not be
	// read).
	Record *client.Record
	// Window names where the effect ran more than once, and Remedy what
	// closes it; both empty unless the effect ran more than once in a
	// window the case opens.
	Window, Remedy string
	// Held says how on_lease_expiry: hold kept the effect at one, when it
	// did.
	Held string
	// Finding says what is wrong when it is not one of the windows: no
	// effect counted, more effects than runs.
	Finding string
	// Err is why the case could not run as designed: the handler failed
	// where it should succeed, a call to the server failed.
	Err error
}

// OK reports whether the case ran and made the effect exactly once.
func (c *CaseReport) OK() bool { return c.Err == nil && c.Effects == 1 }

// String is the case's report: a line that says whether the effect ran
// once, what the deliveries were and did, the record, and the window and
// remedy, or the finding.
func (c *CaseReport) String() string {
	w := words()
	vars := map[string]string{"id": string(c.Case), "effects": strconv.Itoa(c.Effects)}
	var b strings.Builder
	switch {
	case c.Err != nil:
		vars["error"] = c.Err.Error()
		b.WriteString(fill(w.Messages["error"], vars))
	case c.Effects == 1:
		b.WriteString(fill(w.Messages["ok"], vars))
	case c.Effects > 1:
		b.WriteString(fill(w.Messages["more"], vars))
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
	"takeover":    "a.Takeover",
	"token_field": "a.Token",
	"permanent":   "client.Permanent(err)",
	"lost_check":  "ctx.Err()",
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

// run runs case c and reports it.
func (k *kit) run(c Case) *CaseReport {
	cw := words().caseWords(c)
	job := k.o.job
	job.Key += "." + string(c)
	cr := &CaseReport{Case: c, Job: job, Title: fill(cw.Title, map[string]string{"n": strconv.Itoa(k.o.concurrency)})}
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// The deliveries whose lease must lapse hold it for the server's
	// minimum, and their heartbeats do not get through.
	lapsing := job
	lapsing.LeaseTTL = limits.MinLeaseTTL
	waitForLapse := client.WithWait(client.MaxWait)

	before := k.effects()
	var ds []*delivery
	switch c {
	case TwiceInSequence:
		ds = append(ds, k.deliver(ctx, job, nil, nil), k.deliver(ctx, job, nil, nil))
	case Concurrent:
		ds = make([]*delivery, k.o.concurrency)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range ds {
			wg.Go(func() {
				<-start
				ds[i] = k.deliver(ctx, job, nil, nil)
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
	case CrashAfterEffect:
		ds = append(ds, k.deliver(ctx, lapsing, &faults{holdHeartbeats: true, dieBeforeComplete: true}, nil))
		ds = append(ds, k.deliver(ctx, job, nil, nil, waitForLapse))
	case LeaseLapsed:
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
		first := make(chan *delivery, 1)
		go func() { first <- k.deliver(ctx, lapsing, &faults{holdHeartbeats: true}, &wrap{stall: stall}) }()
		var second *delivery
		select {
		case <-acquired:
			second = k.deliver(ctx, job, nil, nil, waitForLapse)
		case d := <-first: // it never acquired: its outcome says why
			first <- d
		}
		close(resume)
		ds = append(ds, <-first)
		if second != nil {
			ds = append(ds, second)
		}
	case CompleteAnswerLost:
		ds = append(ds, k.deliver(ctx, job, &faults{loseCompleteAnswer: true}, nil), k.deliver(ctx, job, nil, nil))
	case RetryableFailure:
		ds = append(ds, k.deliver(ctx, job, nil, &wrap{failAfter: true}), k.deliver(ctx, job, nil, nil))
	}
	cr.Effects = k.effects() - before

	for _, d := range ds {
		if d.ran != nil {
			cr.Runs++
		}
	}
	cr.Deliveries = describe(ds)
	if rec, err := k.srv.Client.Lookup(ctx, client.LookupRequest{Namespace: job.Namespace, Key: job.Key}); err == nil {
		cr.Record = &rec
	}
	cr.Err = caseError(c, ds)
	if cr.Err != nil {
		return cr
	}

	vars := map[string]string{"namespace": job.Namespace, "key": job.Key,
		"effects": strconv.Itoa(cr.Effects), "runs": strconv.Itoa(cr.Runs)}
	maps.Copy(vars, goTerms)
	msg := words().Messages
	held := false
	for _, d := range ds {
		held = held || d.outcome() == outcomeUnresolved
	}
	switch {
	case cr.Effects <= 0:
		cr.Finding = fill(msg["no_effect"], vars)
	case cr.Effects > cr.Runs:
		cr.Finding = fill(msg["extra_effects"], vars)
	case cr.Effects > 1 && cw.Window == "":
		cr.Finding = fill(msg["extra_runs"], vars)
	case cr.Effects > 1:
		cr.Window, cr.Remedy = fill(cw.Window, vars), fill(cw.Remedy, vars)
	case held && cw.Held != "":
		cr.Held = fill(cw.Held, vars)
	}
	return cr
}

// caseError is why case c could not run as designed, or nil: a delivery
// failed where it should not have, or the fault the case injects did not
// happen.
func caseError(c Case, ds []*delivery) error {
	msg := words().Messages
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
	case c == CrashAfterEffect && !first.died:
		return errors.New("the first delivery did not reach its Complete")
	case c == CompleteAnswerLost && !first.answerLost:
		return errors.New("the first delivery's Complete was not applied")
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
	w        wrap
	ran      *client.Attempt // the attempt the handler ran under, if it ran
	res      client.Result
	err      error
	panicked any
	// What the kit's faults did.
	died, answerLost bool
}

// deliver delivers job to a new worker (a client of its own, with faults f
// in its connection, when set) that runs the handler through client.Do.
func (k *kit) deliver(ctx context.Context, job client.Job, f *faults, w *wrap, opts ...client.DoOption) (d *delivery) {
	d = &delivery{} // named: a panic that Do passes on still returns it
	if w != nil {
		d.w = *w
	}
	if f == nil {
		f = &faults{}
	}
	c, err := k.worker(f)
	if err != nil {
		d.err = err
		return d
	}
	defer c.Close()
	fn := k.h(job)
	defer func() {
		if p := recover(); p != nil {
			d.panicked = p
		}
		d.died, d.answerLost = f.happened()
	}()
	d.res, d.err = c.Do(ctx, job, func(ctx context.Context, a client.Attempt) ([]byte, error) {
		if d.w.stall != nil {
			if err := d.w.stall(ctx); err != nil {
				return nil, err
			}
		}
		d.ran = &a
		v, err := fn(ctx, a)
		if err == nil && d.w.failAfter {
			return nil, errAfterEffect
		}
		return v, err
	}, opts...)
	return d
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
	outcomePanicked
	outcomeFailed
)

func (d *delivery) outcome() outcome {
	var busy *client.InProgressError
	var unresolved *client.UnresolvedError
	switch {
	case d.panicked != nil:
		return outcomePanicked
	case d.died && d.ran != nil:
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
	case d.w.failAfter && errors.Is(d.err, errAfterEffect):
		return outcomeReleased
	}
	return outcomeFailed
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
		case d.answerLost:
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
		end = msg["died"]
	case outcomeReleased:
		end = msg["released"]
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
