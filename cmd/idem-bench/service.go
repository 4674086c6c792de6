package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// serviceTarget does a job through idem: Claim, then Complete, with the Go
// SDK's typed calls on one client (one HTTP/2 connection), as a worker
// process would; in the batch scenario, BatchClaim then BatchComplete.
type serviceTarget struct {
	// label is the target's name: service (idemd on Postgres),
	// service-sqlite (idemd on its embedded SQLite store), ….
	label     string
	client    *client.Client
	namespace string
	leaseTTL  time.Duration
	result    []byte
	// idemd is the idemd process of --start-idemd; nil with --addr.
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
	if c.Coalesce {
		opts = append(opts, client.WithCoalescing())
	}
	return client.New(addr, opts...)
}

func (t *serviceTarget) name() string { return t.label }

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

// pgApp is the application_name of the started idemd's connections; ""
// with --addr or on SQLite, where no backend is the target's.
func (t *serviceTarget) pgApp() string {
	if t.idemd == nil {
		return ""
	}
	return t.idemd.appName
}

// processPID is the started idemd; 0 with --addr.
func (t *serviceTarget) processPID() uint32 {
	if t.idemd == nil {
		return 0
	}
	return t.idemd.pid()
}

// poolAcquires reads the started idemd's pool from its /metrics; nothing
// with --addr or on SQLite.
func (t *serviceTarget) poolAcquires(ctx context.Context) (int64, time.Duration) {
	if t.idemd == nil || t.idemd.appName == "" {
		return 0, 0
	}
	m, err := t.idemd.metrics(ctx, "idem_db_pool_acquires_total", "idem_db_pool_acquire_wait_seconds_total")
	if err != nil {
		return 0, 0
	}
	return int64(m["idem_db_pool_acquires_total"]), time.Duration(m["idem_db_pool_acquire_wait_seconds_total"] * float64(time.Second))
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
	_, err := t.client.Lookup(ctx, client.LookupRequest{Namespace: t.namespace, Key: "idem-bench-probe"})
	if err == nil || errors.Is(err, client.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("idemd at %s does not answer: %w (start one, or pass --start-idemd)", addr, err)
}

// jobs is the batch scenario's delivery through idem: one BatchClaim of
// every key, then one BatchComplete of those it acquired, with the generated
// client (the SDK's typed calls take one job each).
func (t *serviceTarget) jobs(ctx context.Context, keys []string, outs []outcome, errs []error) time.Duration {
	claims := &idemv1.BatchClaimRequest{Requests: make([]*idemv1.ClaimRequest, len(keys))}
	for i, key := range keys {
		claims.Requests[i] = &idemv1.ClaimRequest{Namespace: t.namespace, Key: key}
		if t.leaseTTL > 0 {
			claims.Requests[i].LeaseTtl = durationpb.New(t.leaseTTL)
		}
	}
	start := time.Now()
	claimed, err := t.client.IdempotencyService().BatchClaim(ctx, claims)
	claimTook := time.Since(start)
	if err == nil && len(claimed.GetResults()) != len(keys) {
		err = fmt.Errorf("%d results for %d Claims", len(claimed.GetResults()), len(keys))
	}
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("BatchClaim: %w", err)
		}
		return claimTook
	}
	completes := &idemv1.BatchCompleteRequest{}
	var acquired []int // the index in keys of each Complete
	for i, res := range claimed.GetResults() {
		if st := res.GetError(); st != nil {
			errs[i] = fmt.Errorf("BatchClaim of %s: %w", keys[i], status.FromProto(st).Err())
			continue
		}
		switch o := res.GetResponse().GetOutcome(); o {
		case idemv1.Outcome_OUTCOME_ACQUIRED:
			// The work itself is nothing, as in the other scenarios.
			completes.Requests = append(completes.Requests, &idemv1.CompleteRequest{
				Namespace: t.namespace, Key: keys[i], Token: res.GetResponse().GetRecord().GetToken(), Result: t.result,
			})
			acquired = append(acquired, i)
		case idemv1.Outcome_OUTCOME_IN_PROGRESS:
			outs[i] = outcomeInProgress
		case idemv1.Outcome_OUTCOME_COMPLETED, idemv1.Outcome_OUTCOME_FAILED:
			outs[i] = outcomeReplayed
		default:
			errs[i] = fmt.Errorf("BatchClaim of %s answered %v", keys[i], o)
		}
	}
	if len(acquired) == 0 {
		return claimTook
	}
	completed, err := t.client.IdempotencyService().BatchComplete(ctx, completes)
	if err == nil && len(completed.GetResults()) != len(acquired) {
		err = fmt.Errorf("%d results for %d Completes", len(completed.GetResults()), len(acquired))
	}
	for k, i := range acquired {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("BatchComplete: %w", err)
		case completed.GetResults()[k].GetError() != nil:
			errs[i] = fmt.Errorf("BatchComplete of %s: %w", keys[i], status.FromProto(completed.GetResults()[k].GetError()).Err())
		default:
			outs[i] = outcomeAcquired
		}
	}
	return claimTook
}
