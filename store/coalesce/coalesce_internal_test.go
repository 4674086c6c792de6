package coalesce

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemhq/idem/store"
)

// The coalescer's rules, with a fake statement: no database is needed to
// decide which calls go together and who gets which answer, and every path
// must end with every caller answered, the queue empty and the statement
// slots given back.

// fixture is a coalescer of int calls whose statements answer through
// answer, and which records the batches it ran.
type fixture struct {
	c       *coalescer[int, int]
	calls   prometheus.Histogram
	mu      sync.Mutex
	batches [][]string // each statement's calls' keys, in order
}

// newFixture returns a fixture whose statements answer each call with
// answer(params), or fail as a whole with fail's error when fail is set.
// Followers get their leader's result times 1000 plus their own params, so a
// test can tell who answered them.
func newFixture(opts Options, answer func(params int) (int, error), fail func(batch []*pending[int, int]) error) *fixture {
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = 1 // one batch at a time, unless a test asks for more
	}
	f := &fixture{calls: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_batch_calls"})}
	run := func(ctx context.Context, batch []*pending[int, int]) error {
		var keys []string
		for _, call := range batch {
			keys = append(keys, call.ID.Key)
		}
		f.mu.Lock()
		f.batches = append(f.batches, keys)
		f.mu.Unlock()
		if fail != nil {
			if err := fail(batch); err != nil {
				return err
			}
		}
		for _, call := range batch {
			call.Res, call.Err = answer(call.Params)
		}
		return nil
	}
	// A leader's error says nothing of its followers, as for Claims.
	follow := func(leader, follower *pending[int, int]) bool {
		if leader.Err != nil {
			return false
		}
		follower.Res = leader.Res*1000 + follower.Params
		return true
	}
	f.c = newCoalescer("test", opts, f.calls, run, follow)
	return f
}

func echo(p int) (int, error) { return p, nil }

type answer struct {
	res int
	err error
}

func id(key string) store.RecordID {
	return store.RecordID{Tenant: "acme", Namespace: "ns", Key: key}
}

// together queues one call per key, in order, each with its context and
// params, while no statement may start, then lets one slot drain them, and
// returns every answer once the coalescer is idle again.
func (f *fixture) together(t *testing.T, ctxs []context.Context, keys []string, params []int) []answer {
	t.Helper()
	c := f.c
	c.mu.Lock()
	c.inFlight = c.opts.MaxInFlight + c.opts.MaxOverflow // nobody starts a statement
	c.mu.Unlock()
	answers := make([]answer, len(params))
	var wg sync.WaitGroup
	for i, p := range params {
		wg.Go(func() { answers[i].res, answers[i].err = c.Do(ctxs[i], id(keys[i]), p) })
		waitFor(t, fmt.Sprintf("%d calls queued", i+1), func() bool { return c.Queued() == i+1 })
	}
	c.mu.Lock()
	c.inFlight = 1 // the drain below; it gives the slot back
	c.mu.Unlock()
	go c.drain()
	wg.Wait()
	f.requireIdle(t)
	return answers
}

// requireIdle waits until nothing is queued and no slot is busy.
func (f *fixture) requireIdle(t *testing.T) {
	t.Helper()
	waitFor(t, "an idle coalescer", func() bool {
		f.c.mu.Lock()
		defer f.c.mu.Unlock()
		return len(f.c.queue) == 0 && f.c.inFlight == 0
	})
}

// observed is what the fixture's histogram holds: the statements that
// answered calls and the calls they answered.
func (f *fixture) observed(t *testing.T) (statements uint64, calls float64) {
	t.Helper()
	m := &dto.Metric{}
	if err := f.calls.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func background(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	return ctxs
}

func same(key string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = key
	}
	return keys
}

// TestBatchIsSortedByKeyWithEachKeyOnce: the calls queued together go in
// one statement, sorted by primary key whatever order they came in, and
// each gets its own answer.
func TestBatchIsSortedByKeyWithEachKeyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(Options{}, echo, nil)
	keys := []string{"d", "b", "a", "c"}
	answers := f.together(t, background(4), keys, []int{4, 2, 1, 3})
	for i, a := range answers {
		if a.err != nil || a.res != []int{4, 2, 1, 3}[i] {
			t.Errorf("call of %s: %d, %v; want its own params back", keys[i], a.res, a.err)
		}
	}
	if len(f.batches) != 1 || !slices.Equal(f.batches[0], []string{"a", "b", "c", "d"}) {
		t.Errorf("statements run: %v; want one, [a b c d]", f.batches)
	}
	if n, calls := f.observed(t); n != 1 || calls != 4 {
		t.Errorf("observed %d statements of %v calls; want 1 of 4", n, calls)
	}
}

// TestSecondCallOfAKeyWithoutFollowWaits: without Follow, a second call of
// a key in the batch waits for the next statement, and keeps its place
// ahead of the calls that queued after it.
func TestSecondCallOfAKeyWithoutFollowWaits(t *testing.T) {
	t.Parallel()
	f := newFixture(Options{MaxOverflow: -1}, echo, nil)
	f.c.follow = nil
	answers := f.together(t, background(3), []string{"a", "a", "b"}, []int{1, 2, 3})
	for i, a := range answers {
		if a.err != nil || a.res != i+1 {
			t.Errorf("call %d: %d, %v; want %d", i+1, a.res, a.err, i+1)
		}
	}
	if len(f.batches) != 2 || !slices.Equal(f.batches[0], []string{"a", "b"}) || !slices.Equal(f.batches[1], []string{"a"}) {
		t.Errorf("statements run: %v; want [[a b] [a]]", f.batches)
	}
}

// TestOverflowRunsBesideTheBatch: calls past MaxRows do not wait for the
// running statement: a statement of their own starts beside it, up to
// MaxOverflow beyond MaxInFlight.
func TestOverflowRunsBesideTheBatch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var running sync.WaitGroup
	running.Add(2)
	f := newFixture(Options{MaxRows: 2, MaxOverflow: 1}, echo, func([]*pending[int, int]) error {
		running.Done()
		<-release // both statements must run at once to get here
		return nil
	})
	c := f.c
	c.mu.Lock()
	c.inFlight = c.opts.MaxInFlight + c.opts.MaxOverflow
	c.mu.Unlock()
	answers := make([]answer, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { answers[i].res, answers[i].err = c.Do(context.Background(), id(fmt.Sprint("k", i)), i) })
		waitFor(t, "the calls queued", func() bool { return c.Queued() == i+1 })
	}
	c.mu.Lock()
	c.inFlight = 1
	c.mu.Unlock()
	go c.drain()
	running.Wait() // two statements of two rows each, at once
	close(release)
	wg.Wait()
	f.requireIdle(t)
	for i, a := range answers {
		if a.err != nil || a.res != i {
			t.Errorf("call %d: %d, %v", i, a.res, a.err)
		}
	}
	if len(f.batches) != 2 {
		t.Errorf("statements run: %v; want two of two calls", f.batches)
	}
}

// TestBatchFailureIsUnavailableForEveryCall: a statement that fails as a
// whole answers every call in it, followers included, store.ErrUnavailable
// wrapping the cause, whatever the cause; a call left for a later statement
// is not answered from it.
func TestBatchFailureIsUnavailableForEveryCall(t *testing.T) {
	t.Parallel()
	for _, cause := range []error{
		fmt.Errorf("%w: connection lost", store.ErrUnavailable),
		errors.New("the statement failed"),
		context.DeadlineExceeded,
	} {
		t.Run(cause.Error(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(Options{}, echo, func([]*pending[int, int]) error { return cause })
			answers := f.together(t, background(4), []string{"a", "a", "b", "c"}, []int{1, 2, 3, 4})
			for i, a := range answers {
				if !errors.Is(a.err, store.ErrUnavailable) || !errors.Is(a.err, cause) || a.res != 0 {
					t.Errorf("call %d: %d, %v; want UNAVAILABLE wrapping %v", i+1, a.res, a.err, cause)
				}
			}
			if len(f.batches) != 1 {
				t.Errorf("statements run: %v; want one: a follower of a failed statement is not sent again", f.batches)
			}
		})
	}
}

// TestStatementDeadline: a statement that outlasts Config.Deadline runs on a
// context that ends, and its calls are UNAVAILABLE; the callers' own
// contexts never reach it.
func TestStatementDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(Options{Deadline: 50 * time.Millisecond}, echo, nil)
	f.c.run = func(ctx context.Context, batch []*pending[int, int]) error {
		<-ctx.Done()
		return ctx.Err()
	}
	caller, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := f.c.Do(caller, id("a"), 1)
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a statement past its deadline: %d, %v; want UNAVAILABLE", res, err)
	}
	f.requireIdle(t)
}

// TestFollowersOfARowError: a leader answered with an error of its own row
// (a fingerprint mismatch) says nothing of its followers, which go in the
// next statement: the first of them leads it, and the rest follow that one.
func TestFollowersOfARowError(t *testing.T) {
	t.Parallel()
	f := newFixture(Options{}, func(p int) (int, error) {
		if p == 1 {
			return 0, store.ErrFingerprintMismatch
		}
		return p, nil
	}, nil)
	answers := f.together(t, background(3), same("k", 3), []int{1, 2, 3})
	if !errors.Is(answers[0].err, store.ErrFingerprintMismatch) {
		t.Errorf("leader: %d, %v; want its fingerprint mismatch", answers[0].res, answers[0].err)
	}
	if answers[1].err != nil || answers[1].res != 2 {
		t.Errorf("first follower: %d, %v; want 2, from a statement of its own", answers[1].res, answers[1].err)
	}
	if answers[2].err != nil || answers[2].res != 2*1000+3 {
		t.Errorf("second follower: %d, %v; want %d, following the first", answers[2].res, answers[2].err, 2*1000+3)
	}
	if len(f.batches) != 2 || len(f.batches[0]) != 1 || len(f.batches[1]) != 1 {
		t.Errorf("statements run: %v; want two of one call each", f.batches)
	}
	if n, calls := f.observed(t); n != 2 || calls != 3 {
		t.Errorf("observed %d statements of %v calls; want 2 of 3: each call counted once, by the statement that answered it", n, calls)
	}
}

// TestFollowerNotAnsweredGoesAgain: a follower that Follow does not answer
// goes in the next statement, ahead of the calls that queued after it.
func TestFollowerNotAnsweredGoesAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(Options{}, echo, nil)
	f.c.follow = func(leader, follower *pending[int, int]) bool { return false }
	answers := f.together(t, background(3), []string{"k", "k", "z"}, []int{1, 2, 3})
	for i, a := range answers {
		if a.err != nil || a.res != i+1 {
			t.Errorf("call %d: %d, %v; want %d", i+1, a.res, a.err, i+1)
		}
	}
	if len(f.batches) != 2 || !slices.Equal(f.batches[0], []string{"k", "z"}) || !slices.Equal(f.batches[1], []string{"k"}) {
		t.Errorf("statements run: %v; want [[k z] [k]]", f.batches)
	}
}

// TestAbandonedFollower: a follower whose caller stops waiting while its
// leader's statement runs gets its context's error, and the others their
// answers as if it were not there.
func TestAbandonedFollower(t *testing.T) {
	t.Parallel()
	gone, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(Options{}, func(p int) (int, error) {
		cancel() // the statement runs: the follower's caller leaves
		return p, nil
	}, nil)
	ctxs := background(3)
	ctxs[1] = gone
	answers := f.together(t, ctxs, same("k", 3), []int{1, 2, 3})
	if answers[0].err != nil || answers[0].res != 1 {
		t.Errorf("leader: %d, %v; want 1", answers[0].res, answers[0].err)
	}
	if !errors.Is(answers[1].err, context.Canceled) {
		t.Errorf("abandoned follower: %d, %v; want its context's error", answers[1].res, answers[1].err)
	}
	if answers[2].err != nil || answers[2].res != 1*1000+3 {
		t.Errorf("other follower: %d, %v; want %d", answers[2].res, answers[2].err, 1*1000+3)
	}
}

// TestAbandonedCallIsNotSent: a call whose caller stopped waiting before its
// batch was taken is dropped: no statement carries it.
func TestAbandonedCallIsNotSent(t *testing.T) {
	t.Parallel()
	f := newFixture(Options{}, echo, nil)
	gone, cancel := context.WithCancel(context.Background())
	c := f.c
	c.mu.Lock()
	c.inFlight = c.opts.MaxInFlight + c.opts.MaxOverflow
	c.mu.Unlock()
	left := make(chan error, 1)
	go func() { _, err := c.Do(gone, id("gone"), 1); left <- err }()
	waitFor(t, "the call queued", func() bool { return c.Queued() == 1 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call: %v; want its context's error", err)
	}
	stayed := make(chan answer, 1)
	go func() { r, err := c.Do(context.Background(), id("stayed"), 2); stayed <- answer{r, err} }()
	waitFor(t, "the second call queued", func() bool { return c.Queued() == 2 })
	c.mu.Lock()
	c.inFlight = 1
	c.mu.Unlock()
	go c.drain()
	if a := <-stayed; a.err != nil || a.res != 2 {
		t.Fatalf("the call that stayed: %d, %v", a.res, a.err)
	}
	f.requireIdle(t)
	if len(f.batches) != 1 || !slices.Equal(f.batches[0], []string{"stayed"}) {
		t.Errorf("statements run: %v; want [[stayed]]", f.batches)
	}
}

// goroutineID is the id of the calling goroutine, from its stack's header.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	return f[1]
}

// TestLoneCallsReuseWorkers: calls made one after another, each alone, run
// their statements on goroutines that outlive them (goDrain) and keep the
// stacks the driver grew, instead of on a new goroutine each. The idle
// workers are the process's, so earlier tests' workers take turns too.
func TestLoneCallsReuseWorkers(t *testing.T) {
	// Not parallel: other tests' drains would start workers meanwhile.
	var mu sync.Mutex
	ran := map[string]int{}
	c := newCoalescer("test", Options{}, nil, func(ctx context.Context, batch []*pending[int, int]) error {
		mu.Lock()
		ran[goroutineID()]++
		mu.Unlock()
		for _, call := range batch {
			call.Res = call.Params
		}
		return nil
	}, nil)
	idle := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue) == 0 && c.inFlight == 0
	}
	for i := range 50 {
		if res, err := c.Do(context.Background(), id(fmt.Sprint("k", i)), i); err != nil || res != i {
			t.Fatalf("call %d: %d, %v", i, res, err)
		}
		waitFor(t, "an idle coalescer", idle)
		// The worker parks once its drain returned; give it the time to.
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) > 10 {
		t.Fatalf("50 lone calls ran their statements on %d goroutines; want a few workers, each running many", len(ran))
	}
}
