package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/idemhq/idem/client"
)

// holdFor claims job k with claimant "holder" and a 1 s lease, in one raw
// Claim, and returns its token.
func holdFor(t *testing.T, ctx context.Context, c *client.Client, ns, k string) int64 {
	t.Helper()
	held, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, LeaseTTL: time.Second, Claimant: "holder"})
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("raw Claim(%s) = %v, %v; want ACQUIRED", k, held.Outcome, err)
	}
	return held.Record.Token
}

// wantStep fails t unless rec has the step name in state with result and
// token.
func wantStep(t *testing.T, rec client.Record, name string, state client.StepState, result string, token int64) {
	t.Helper()
	for _, s := range rec.Steps {
		if s.Name == name {
			if s.State != state || string(s.Result) != result || s.Token != token {
				t.Fatalf("step %s = %v %q token %d; want %v %q token %d", name, s.State, s.Result, s.Token, state, result, token)
			}
			return
		}
	}
	t.Fatalf("record %s has no step %s (steps %+v)", rec.Key, name, rec.Steps)
}

func scenarioStepsCrashBetweenSteps(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	t1 := holdFor(t, ctx, c, ns, k)
	if _, err := c.CompleteStep(ctx, client.StepRequest{Namespace: ns, Key: k, Token: t1, Step: "charge", Result: []byte("ch_1")}); err != nil {
		t.Fatalf("step 2: raw CompleteStep: %v", err)
	}
	time.Sleep(leaseLapse)
	var f1Runs, f2Runs atomic.Int32
	var f2Key string
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k}, func(ctx context.Context, a client.Attempt) ([]byte, error) {
		if a.Number != 2 || !a.Takeover {
			t.Errorf("attempt = %+v; want attempt 2, a takeover", a)
		}
		charge, err := a.Step(ctx, "charge", func(context.Context, string) ([]byte, error) {
			f1Runs.Add(1)
			return []byte("ch_2"), nil
		})
		if err != nil {
			return nil, err
		}
		receipt, err := a.Step(ctx, "receipt", func(_ context.Context, stepKey string) ([]byte, error) {
			f2Runs.Add(1)
			f2Key = stepKey
			return []byte("rc_1"), nil
		})
		if err != nil {
			return nil, err
		}
		if want := client.StepKey(ns, k, "receipt"); a.StepKey("receipt") != want {
			t.Errorf("a.StepKey(receipt) = %q; want %q", a.StepKey("receipt"), want)
		}
		return append(charge, receipt...), nil
	})
	wantValue(t, "step 4", res, err, "ch_1rc_1", false)
	if f1Runs.Load() != 0 || f2Runs.Load() != 1 {
		t.Fatalf("f1 ran %d times, f2 %d; want 0 and 1", f1Runs.Load(), f2Runs.Load())
	}
	if want := client.StepKey(ns, k, "receipt"); f2Key != want {
		t.Fatalf("f2 got step key %q; want %q", f2Key, want)
	}
	rec := lookup(t, ctx, c, ns, k)
	if rec.State != client.StateCompleted || len(rec.Steps) != 2 {
		t.Fatalf("record = %v with %d steps; want COMPLETED with 2", rec.State, len(rec.Steps))
	}
	wantStep(t, rec, "charge", client.StepFinished, "ch_1", t1)
	wantStep(t, rec, "receipt", client.StepFinished, "rc_1", res.Record.Token)
}

func scenarioStepsStaleHolderRefused(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	t1 := holdFor(t, ctx, c, ns, k)
	time.Sleep(leaseLapse)
	succ, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, Claimant: "successor"})
	if err != nil || succ.Outcome != client.OutcomeAcquired {
		t.Fatalf("step 3: raw Claim = %v, %v; want ACQUIRED", succ.Outcome, err)
	}
	_, err = c.CompleteStep(ctx, client.StepRequest{Namespace: ns, Key: k, Token: t1, Step: "charge", Result: []byte("ch_1")})
	wantCodeReason(t, "step 4", err, codes.Aborted, "LEASE_LOST")
	if !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("step 4: %v; want it to match ErrLeaseLost", err)
	}
	_, err = c.StartStep(ctx, client.StepRequest{Namespace: ns, Key: k, Token: t1, Step: "charge"})
	wantCodeReason(t, "step 5", err, codes.Aborted, "LEASE_LOST")
	rec := lookup(t, ctx, c, ns, k)
	if rec.State != client.StateProcessing || rec.Token != succ.Record.Token || len(rec.Steps) != 0 {
		t.Fatalf("step 6: record = %v token %d steps %+v; want PROCESSING, token %d, no steps", rec.State, rec.Token, rec.Steps, succ.Record.Token)
	}
}

func scenarioStepsRepeatAndConflict(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	claimed, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k})
	if err != nil || claimed.Outcome != client.OutcomeAcquired {
		t.Fatalf("step 1: raw Claim = %v, %v; want ACQUIRED", claimed.Outcome, err)
	}
	tok := claimed.Record.Token
	charge := client.StepRequest{Namespace: ns, Key: k, Token: tok, Step: "charge", Result: []byte("ch_1")}
	for _, step := range []string{"step 2", "step 3"} {
		s, err := c.CompleteStep(ctx, charge)
		if err != nil || s.Name != "charge" || s.State != client.StepFinished || string(s.Result) != "ch_1" || s.Token != tok {
			t.Fatalf("%s: CompleteStep = %+v, %v; want charge FINISHED ch_1 token %d", step, s, err, tok)
		}
	}
	other := charge
	other.Result = []byte("ch_2")
	_, err = c.CompleteStep(ctx, other)
	wantCodeReason(t, "step 4", err, codes.FailedPrecondition, "STEP_ALREADY_FINISHED")
	if !errors.Is(err, client.ErrStepAlreadyFinished) {
		t.Fatalf("step 4: %v; want it to match ErrStepAlreadyFinished", err)
	}
	_, err = c.StartStep(ctx, client.StepRequest{Namespace: ns, Key: k, Token: tok, Step: "charge"})
	wantCodeReason(t, "step 5", err, codes.FailedPrecondition, "STEP_ALREADY_FINISHED")
	_, err = c.CompleteStep(ctx, client.StepRequest{Namespace: ns, Key: k, Token: tok, Step: "bad\u0007name", Result: []byte("x")})
	wantCodeReason(t, "step 6", err, codes.InvalidArgument, "INVALID_STEP_NAME")
	rec := lookup(t, ctx, c, ns, k)
	if len(rec.Steps) != 1 {
		t.Fatalf("record steps = %+v; want charge alone", rec.Steps)
	}
	wantStep(t, rec, "charge", client.StepFinished, "ch_1", tok)
}

func scenarioStepsUnfinishedRerun(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Plain
	t1 := holdFor(t, ctx, c, ns, k)
	if _, err := c.StartStep(ctx, client.StepRequest{Namespace: ns, Key: k, Token: t1, Step: "charge"}); err != nil {
		t.Fatalf("step 2: raw StartStep: %v", err)
	}
	time.Sleep(leaseLapse)
	var keys []string
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k}, func(ctx context.Context, a client.Attempt) ([]byte, error) {
		return a.Step(ctx, "charge", func(_ context.Context, stepKey string) ([]byte, error) {
			keys = append(keys, stepKey)
			return []byte("ch_2"), nil
		})
	})
	wantValue(t, "step 4", res, err, "ch_2", false)
	if want := client.StepKey(ns, k, "charge"); len(keys) != 1 || keys[0] != want {
		t.Fatalf("f ran with keys %q; want once with %q", keys, want)
	}
	rec := lookup(t, ctx, c, ns, k)
	if rec.State != client.StateCompleted {
		t.Fatalf("record = %v; want COMPLETED", rec.State)
	}
	wantStep(t, rec, "charge", client.StepFinished, "ch_2", res.Record.Token)
}

func scenarioStepsUnfinishedHold(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.StepHeld
	t1 := holdFor(t, ctx, c, ns, k)
	if _, err := c.StartStep(ctx, client.StepRequest{Namespace: ns, Key: k, Token: t1, Step: "charge"}); err != nil {
		t.Fatalf("step 2: raw StartStep: %v", err)
	}
	time.Sleep(leaseLapse)
	var calls handlerCalls
	_, err := c.Do(ctx, client.Job{Namespace: ns, Key: k}, calls.fails(t))
	var unresolved *client.UnresolvedError
	if !errors.As(err, &unresolved) {
		t.Fatalf("step 4: do() = %v; want Unresolved", err)
	}
	rec := lookup(t, ctx, c, ns, k)
	if rec.State != client.StateUnresolved {
		t.Fatalf("record = %v; want UNRESOLVED", rec.State)
	}
	wantStep(t, rec, "charge", client.StepStarted, "", t1)
}

func scenarioStepsKeyVectors(t *testing.T, _ *scenarioEnv) {
	data, err := os.ReadFile(scenarioFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []struct {
			Namespace string `json:"namespace"`
			Key       string `json:"key"`
			Step      string `json:"step"`
			StepKey   string `json:"step_key"`
		} `json:"step_key_vectors"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	want := map[[3]string]bool{{"payments", "order-42", "charge"}: false, {"jobs", "k\u00e9y/1", "send receipt"}: false}
	for _, v := range file.Vectors {
		sum := sha256.Sum256([]byte(v.Namespace + "\x00" + v.Key + "\x00" + v.Step))
		ours := "idem-" + hex.EncodeToString(sum[:])
		if got := client.StepKey(v.Namespace, v.Key, v.Step); got != ours || got != v.StepKey {
			t.Errorf("StepKey(%q, %q, %q) = %q; SHA-256 says %q, the file %q", v.Namespace, v.Key, v.Step, got, ours, v.StepKey)
		}
		if _, ok := want[[3]string{v.Namespace, v.Key, v.Step}]; ok {
			want[[3]string{v.Namespace, v.Key, v.Step}] = true
		}
	}
	for v, seen := range want {
		if !seen {
			t.Errorf("the file's step_key_vectors lack %q", v)
		}
	}
}

// unresolvedNow makes sure each job, whose 1 s lease has run out under a
// hold policy, is UNRESOLVED: a Claim that finds it so makes it so.
func unresolvedNow(t *testing.T, ctx context.Context, c *client.Client, ns string, keys ...string) {
	t.Helper()
	time.Sleep(leaseLapse)
	for _, k := range keys {
		var unresolved *client.UnresolvedError
		if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: k, Claimant: "probe"}); !errors.As(err, &unresolved) {
			t.Fatalf("raw Claim(%s) after the lease = %v; want Unresolved", k, err)
		}
	}
}

// runResolver runs c.RunResolver in the background; stop cancels it and
// returns what it returned.
func runResolver(ctx context.Context, c *client.Client, opts client.ResolverOptions, fn func(context.Context, client.Record) (client.Resolution, error)) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.RunResolver(ctx, opts, fn) }()
	return func() error {
		cancel()
		return <-done
	}
}

func scenarioResolverDecidesHeld(t *testing.T, e *scenarioEnv) {
	ctx, c := scenarioCtx(t), e.worker(t)
	ns := e.Namespaces.Held
	k1, k2, k3 := e.key(t, "k1"), e.key(t, "k2"), e.key(t, "k3")
	tokens := map[string]int64{}
	for _, k := range []string{k1, k2, k3} {
		tokens[k] = holdFor(t, ctx, c, ns, k)
	}
	unresolvedNow(t, ctx, c, ns, k1, k2, k3)

	var mu sync.Mutex
	calls := map[string][]int64{}
	answers := map[string]client.Resolution{k1: client.Completed([]byte("found")), k2: client.Failed("no charge"), k3: client.Release()}
	stop := runResolver(ctx, c, client.ResolverOptions{Name: "charges-resolver", Namespaces: []string{ns}}, func(_ context.Context, rec client.Record) (client.Resolution, error) {
		answer, ours := answers[rec.Key]
		if !ours {
			return client.CantTell(), nil // another scenario's record
		}
		mu.Lock()
		calls[rec.Key] = append(calls[rec.Key], rec.Token)
		mu.Unlock()
		return answer, nil
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range []string{k1, k2, k3} {
		for lookup(t, ctx, c, ns, k).State == client.StateUnresolved {
			if time.Now().After(deadline) {
				_ = stop()
				t.Fatalf("step 3: %s is still UNRESOLVED after 10 s", k)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("stopping the resolver: %v; want nil", err)
	}
	mu.Lock()
	for _, k := range []string{k1, k2, k3} {
		if got := calls[k]; len(got) != 1 || got[0] != tokens[k] {
			t.Errorf("the function was called for %s with tokens %v; want once with %d", k, got, tokens[k])
		}
	}
	mu.Unlock()

	var handler handlerCalls
	res, err := c.Do(ctx, client.Job{Namespace: ns, Key: k1}, handler.fails(t))
	wantValue(t, "step 4, do(K1)", res, err, "found", true)
	res, err = c.Do(ctx, client.Job{Namespace: ns, Key: k3}, handler.returns("again"))
	wantValue(t, "step 4, do(K3)", res, err, "again", false)
	rec, history, err := c.LookupHistory(ctx, client.LookupRequest{Namespace: ns, Key: k2})
	if err != nil || rec.State != client.StateFailed || rec.Error != "no charge" {
		t.Fatalf("step 4: Lookup(K2) = %v %q, %v; want FAILED \"no charge\"", rec.State, rec.Error, err)
	}
	for _, entry := range history {
		if entry.Kind == "RESOLVED" {
			if entry.Actor.Resolver != "charges-resolver" {
				t.Fatalf("K2's resolved entry names resolver %q; want charges-resolver", entry.Actor.Resolver)
			}
			return
		}
	}
	t.Fatalf("K2's timeline %+v has no RESOLVED entry", history)
}

func scenarioResolverCantTellAndRace(t *testing.T, e *scenarioEnv) {
	ctx, c, k := scenarioCtx(t), e.worker(t), e.key(t, "k")
	ns := e.Namespaces.Held
	token := holdFor(t, ctx, c, ns, k)
	unresolvedNow(t, ctx, c, ns, k)

	asked := make(chan struct{}, 1)
	stop := runResolver(ctx, c, client.ResolverOptions{Name: "unsure", Namespaces: []string{ns}}, func(_ context.Context, rec client.Record) (client.Resolution, error) {
		if rec.Key == k {
			select {
			case asked <- struct{}{}:
			default:
			}
		}
		return client.CantTell(), nil
	})
	await(t, "the resolver's call for K", asked, time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("stopping the resolver: %v; want nil", err)
	}
	if rec := lookup(t, ctx, c, ns, k); rec.State != client.StateUnresolved {
		t.Fatalf("step 3: record = %v; want still UNRESOLVED", rec.State)
	}

	decisions := []client.ResolveRequest{
		{Namespace: ns, Key: k, Token: token, Resolver: "a", Resolution: client.Completed([]byte("x"))},
		{Namespace: ns, Key: k, Token: token, Resolver: "b", Resolution: client.Failed("y")},
	}
	var errs [2]error
	var wg sync.WaitGroup
	for i, d := range decisions {
		wg.Go(func() { _, errs[i] = c.Resolve(ctx, d) })
	}
	wg.Wait()
	winner, loser := 0, 1
	if errs[0] != nil {
		winner, loser = 1, 0
	}
	if errs[winner] != nil {
		t.Fatalf("step 4: both Resolves failed: %v; %v", errs[0], errs[1])
	}
	wantCodeReason(t, "step 4, the other Resolve", errs[loser], codes.FailedPrecondition, "NOT_UNRESOLVED")
	if !errors.Is(errs[loser], client.ErrNotUnresolved) {
		t.Fatalf("step 4: %v; want it to match ErrNotUnresolved", errs[loser])
	}
	rec := lookup(t, ctx, c, ns, k)
	if winner == 0 && (rec.State != client.StateCompleted || string(rec.Result) != "x") ||
		winner == 1 && (rec.State != client.StateFailed || rec.Error != "y") {
		t.Fatalf("record = %v %q %q; want resolver %s's decision", rec.State, rec.Result, rec.Error, decisions[winner].Resolver)
	}
}
