package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/client"
)

// serviceTarget does a job through idem: Claim, then Complete, with the Go
// SDK's typed calls on one client (one HTTP/2 connection), as a worker
// process would.
type serviceTarget struct {
	client    *client.Client
	namespace string
	leaseTTL  time.Duration
	result    []byte
	// idemd is the in-process idemd of --start-idemd; nil with --addr.
	idemd *localIdemd
}

func (c *cli) dialService(addr string) (*client.Client, error) {
	loopback := client.IsLoopback(addr)
	var opts []client.Option
	switch {
	case c.TLS:
		opts = append(opts, client.WithTLS(nil))
	case loopback || c.Insecure:
		opts = append(opts, client.WithInsecure())
	default:
		return nil, fmt.Errorf("--addr %s is not a loopback address: pass --tls, or --insecure if plaintext is intended", addr)
	}
	if c.Token != "" {
		opts = append(opts, client.WithToken(c.Token))
	}
	return client.New(addr, opts...)
}

func (t *serviceTarget) name() string { return "service" }

func (t *serviceTarget) job(ctx context.Context, key string) (outcome, time.Duration, error) {
	start := time.Now()
	res, err := t.client.Claim(ctx, client.ClaimRequest{Namespace: t.namespace, Key: key, LeaseTTL: t.leaseTTL})
	claimTook := time.Since(start)
	if _, ok := errors.AsType[*client.InProgressError](err); ok {
		return outcomeInProgress, claimTook, nil
	}
	if err != nil {
		return 0, claimTook, fmt.Errorf("Claim: %w", err)
	}
	switch res.Outcome {
	case client.OutcomeAcquired:
		_, err := t.client.Complete(ctx, client.CompleteRequest{
			Namespace: t.namespace, Key: key, Token: res.Record.Token, Result: t.result,
		})
		if err != nil {
			return 0, claimTook, fmt.Errorf("Complete: %w", err)
		}
		return outcomeAcquired, claimTook, nil
	case client.OutcomeCompleted, client.OutcomeFailed:
		return outcomeReplayed, claimTook, nil
	}
	return 0, claimTook, fmt.Errorf("Claim answered %v", res.Outcome)
}

// serverPIDs are the in-process idemd's backends; none with --addr.
func (t *serviceTarget) serverPIDs(ctx context.Context) []uint32 {
	if t.idemd == nil {
		return nil
	}
	return backendPIDs(ctx, t.idemd.pool)
}

// poolAcquires is the in-process idemd's pool; nothing with --addr.
func (t *serviceTarget) poolAcquires() (int64, time.Duration) {
	if t.idemd == nil {
		return 0, 0
	}
	st := t.idemd.pool.Stat()
	return st.AcquireCount(), st.AcquireDuration()
}

func (t *serviceTarget) close(ctx context.Context) error {
	err := t.client.Close()
	if t.idemd != nil {
		err = errors.Join(err, t.idemd.close(ctx))
	}
	return err
}

// probe checks that idemd answers before the rounds start, so that a wrong
// --addr is one clear error rather than a round of failures.
func (t *serviceTarget) probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := t.client.Lookup(ctx, t.namespace, "idem-bench-probe")
	if err == nil || errors.Is(err, client.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("idemd at %s does not answer: %w (start one, or pass --start-idemd)", addr, err)
}
