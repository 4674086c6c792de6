package coalesce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemhq/idem/store"
)

func manyIDs(prefix string, n int) ([]store.RecordID, []int) {
	ids, params := make([]store.RecordID, n), make([]int, n)
	for i := range ids {
		ids[i], params[i] = id(fmt.Sprintf("%s%03d", prefix, i)), i
	}
	return ids, params
}

// TestDoManyFillsStatements: a group of calls goes in ceil(n/MaxRows)
// statements, all full but the last, each call answered its own, in the order of
// the group; a lone group of up to MaxRows is one statement.
func TestDoManyFillsStatements(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 7, 64, 65, 100, 200} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			f := newFixture(Options{MaxRows: 64}, func(p int) (int, error) { return p * 10, nil }, nil)
			ids, params := manyIDs("k", n)
			res, errs := f.c.DoMany(context.Background(), ids, params)
			f.requireIdle(t)
			for i := range ids {
				if errs[i] != nil || res[i] != i*10 {
					t.Fatalf("call %d: %d, %v; want %d", i, res[i], errs[i], i*10)
				}
			}
			want := (n + 63) / 64
			if statements, calls := f.observed(t); statements != uint64(want) || calls != float64(n) {
				t.Fatalf("%d calls in %d statements (%v answered); want %d statements", n, statements, calls, want)
			}
			// The statements run at once, so in any order: all full but one.
			full := 0
			for _, b := range f.batches {
				if len(b) == 64 {
					full++
				}
			}
			if full != n/64 {
				t.Fatalf("%d of the %d statements full; want %d", full, want, n/64)
			}
		})
	}
}

// TestDoManyBesideDo: calls of Do queued before a group share its
// statements, and everyone gets their own answer.
func TestDoManyBesideDo(t *testing.T) {
	t.Parallel()
	f := newFixture(Options{MaxRows: 8}, echo, nil)
	c := f.c
	c.mu.Lock()
	c.inFlight = c.opts.MaxInFlight + c.opts.MaxOverflow // nobody starts a statement
	c.mu.Unlock()
	var wg sync.WaitGroup
	lone := make([]answer, 3)
	for i := range lone {
		wg.Go(func() { lone[i].res, lone[i].err = c.Do(context.Background(), id(fmt.Sprint("lone", i)), 1000+i) })
		waitFor(t, "the lone calls queued", func() bool { return c.Queued() == i+1 })
	}
	ids, params := manyIDs("g", 13)
	var res []int
	var errs []error
	wg.Go(func() { res, errs = c.DoMany(context.Background(), ids, params) })
	waitFor(t, "the group queued", func() bool { return c.Queued() == 16 })
	c.mu.Lock()
	c.inFlight = 1
	c.mu.Unlock()
	go c.drain()
	wg.Wait()
	f.requireIdle(t)
	for i, a := range lone {
		if a.err != nil || a.res != 1000+i {
			t.Errorf("lone call %d: %d, %v", i, a.res, a.err)
		}
	}
	for i := range ids {
		if errs[i] != nil || res[i] != i {
			t.Errorf("group call %d: %d, %v", i, res[i], errs[i])
		}
	}
	if len(f.batches) != 2 {
		t.Errorf("statements: %v; want two of 8 calls", f.batches)
	}
}

// TestDoManyRepeatedKey: a key twice in a group is a follower of its first
// call, answered after it, never with the first's answer as its own.
func TestDoManyRepeatedKey(t *testing.T) {
	t.Parallel()
	f := newFixture(Options{}, echo, nil)
	res, errs := f.c.DoMany(context.Background(), []store.RecordID{id("a"), id("b"), id("a")}, []int{1, 2, 3})
	f.requireIdle(t)
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || res[0] != 1 || res[1] != 2 || res[2] != 1003 {
		t.Fatalf("answers %v, %v; want 1, 2 and the follower's 1003", res, errs)
	}
}

// TestDoManyStatementFailure: a statement that fails as a whole answers
// each of its calls UNAVAILABLE; the group's calls in another statement
// get their own answers.
func TestDoManyStatementFailure(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection lost")
	f := newFixture(Options{MaxRows: 4}, echo, func(batch []*pending[int, int]) error {
		if batch[0].ID.Key == "k000" {
			return cause
		}
		return nil
	})
	ids, params := manyIDs("k", 6)
	res, errs := f.c.DoMany(context.Background(), ids, params)
	f.requireIdle(t)
	for i := range ids {
		switch {
		case i < 4 && (!errors.Is(errs[i], store.ErrUnavailable) || !errors.Is(errs[i], cause)):
			t.Errorf("call %d of the failed statement: %v; want UNAVAILABLE wrapping the cause", i, errs[i])
		case i >= 4 && (errs[i] != nil || res[i] != i):
			t.Errorf("call %d of the other statement: %d, %v", i, res[i], errs[i])
		}
	}
}

// TestDoManyCallerLeaves: when the caller's context ends, every call
// without an answer gets the context's error at once, and the calls no
// statement took yet are never sent.
func TestDoManyCallerLeaves(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	f := newFixture(Options{MaxRows: 2, MaxOverflow: -1}, echo, func([]*pending[int, int]) error {
		started <- struct{}{}
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	ids, params := manyIDs("k", 6)
	done := make(chan struct{})
	var errs []error
	go func() {
		defer close(done)
		_, errs = f.c.DoMany(ctx, ids, params)
	}()
	<-started // the first statement, of two calls, runs
	cancel()
	<-done
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call %d: %v; want the context's error", i, err)
		}
	}
	close(release)
	f.requireIdle(t)
	if len(f.batches) != 1 {
		t.Errorf("statements: %v; want only the one that had started", f.batches)
	}
	res, errs := f.c.DoMany(ctx, ids[:1], params[:1])
	if !errors.Is(errs[0], context.Canceled) || res[0] != 0 {
		t.Errorf("DoMany on an ended context: %v, %v", res, errs)
	}
}
