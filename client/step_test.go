package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
)

// A step works in DoBatch as in Do: a step a predecessor finished is not
// run again, a step this attempt finished is not run twice, and the step
// key is the job's.
func TestStepInDoBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := setup(t)
	done, fresh := client.Job{Namespace: "steps", Key: "done"}, client.Job{Namespace: "steps", Key: "fresh"}
	held, err := c.Claim(ctx, client.ClaimRequest{Namespace: done.Namespace, Key: done.Key, LeaseTTL: time.Second, Claimant: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteStep(ctx, client.StepRequest{Namespace: done.Namespace, Key: done.Key, Token: held.Record.Token, Step: "charge", Result: []byte("ch_1")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the holder's lease lapses

	var runs atomic.Int32
	items, err := c.DoBatch(ctx, []client.Job{done, fresh}, func(ctx context.Context, i int, a client.Attempt) ([]byte, error) {
		job := []client.Job{done, fresh}[i]
		charge := func(_ context.Context, stepKey string) ([]byte, error) {
			runs.Add(1)
			if want := client.StepKey(job.Namespace, job.Key, "charge"); stepKey != want {
				t.Errorf("%s: step key %q; want %q", job.Key, stepKey, want)
			}
			return []byte("ch_" + job.Key), nil
		}
		first, err := a.Step(ctx, "charge", charge)
		if err != nil {
			return nil, err
		}
		again, err := a.Step(ctx, "charge", charge)
		if err != nil || string(again) != string(first) {
			return nil, errors.Join(err, errors.New("the second Step of a finished step did not return its result"))
		}
		return first, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"ch_1", "ch_fresh"} {
		if items[i].Err != nil || string(items[i].Value.Value) != want {
			t.Errorf("job %d: %q, %v; want %q", i, items[i].Value.Value, items[i].Err, want)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the step's function ran %d times; want once, for the fresh job", n)
	}
	rec, err := c.Lookup(ctx, client.LookupRequest{Namespace: fresh.Namespace, Key: fresh.Key})
	if err != nil || len(rec.Steps) != 1 || rec.Steps[0].State != client.StepFinished || rec.Steps[0].Token != rec.Token {
		t.Fatalf("fresh record steps = %+v, %v; want charge FINISHED under its token %d", rec.Steps, err, rec.Token)
	}
}

// A refused step call is the SDK's typed error, and the step's function
// does not run.
func TestStepRefusalIsTyped(t *testing.T) {
	t.Parallel()
	c := setup(t)
	_, err := c.Do(context.Background(), client.Job{Namespace: "steps", Key: "refused"}, func(ctx context.Context, a client.Attempt) ([]byte, error) {
		return a.Step(ctx, "bad\nname", func(context.Context, string) ([]byte, error) {
			t.Error("the step's function ran")
			return nil, nil
		})
	})
	wantReason(t, "Step with a bad name", err, codes.InvalidArgument, "INVALID_STEP_NAME")
}

// A resolver whose function panics, then errs, then answers, decides the
// record on the third look, each an interval after the last, and stops
// with nil.
func TestRunResolverAsksAgainAfterACantTell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testserver.StartWith(t, testserver.Options{Config: server.Config{
		Policies: []config.Policy{{Namespaces: []string{"held"}, OnLeaseExpiry: config.OnLeaseExpiryHold}},
	}})
	c, err := client.New(srv.Addr, client.WithInsecure(), client.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: "held", Key: "k", LeaseTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	var unresolved *client.UnresolvedError
	if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: "held", Key: "k"}); !errors.As(err, &unresolved) {
		t.Fatalf("Claim after the lease = %v; want Unresolved", err)
	}

	var looks atomic.Int32
	runCtx, stop := context.WithCancel(ctx)
	returned := make(chan error, 1)
	go func() {
		returned <- c.RunResolver(runCtx, client.ResolverOptions{Name: "flaky", RetryInterval: 100 * time.Millisecond},
			func(context.Context, client.Record) (client.Resolution, error) {
				switch looks.Add(1) {
				case 1:
					panic("the provider's SDK panicked")
				case 2:
					return client.CantTell(), errors.New("the provider is down")
				}
				return client.Completed([]byte("found")).Because("third look"), nil
			})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, err := c.Lookup(ctx, client.LookupRequest{Namespace: "held", Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if rec.State == client.StateCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record still %v after 30 s (%d looks)", rec.State, looks.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-returned; err != nil {
		t.Fatalf("RunResolver returned %v; want nil", err)
	}
	if n := looks.Load(); n != 3 {
		t.Errorf("the function was asked %d times; want 3", n)
	}
	_, history, err := c.LookupHistory(ctx, client.LookupRequest{Namespace: "held", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	last := history[len(history)-1]
	if last.Kind != "RESOLVED" || last.Actor.Resolver != "flaky" || last.Reason != "third look" || last.State != client.StateCompleted {
		t.Errorf("last timeline entry = %+v; want RESOLVED COMPLETED by resolver flaky, reason \"third look\"", last)
	}
	if err := c.RunResolver(ctx, client.ResolverOptions{}, nil); err == nil || !strings.Contains(err.Error(), "Name") {
		t.Errorf("RunResolver without a name = %v; want an error that asks for one", err)
	}
}
