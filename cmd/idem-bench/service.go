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
	label string
	// clients has one client per idemd replica; client is the one this
	// target's jobs use (worker).
	clients   []*client.Client
	client    *client.Client
	namespace string
	leaseTTL  time.Duration
	result    []byte
	// idemds are the idemd processes of --start-idemd, the replicas of
	// --idemd-replicas (their clients in the same order); nil with --addr.
	idemds []*localIdemd
}

// worker returns the target worker i runs its jobs on: that of replica i
// mod the replicas, so that the workers spread over the replicas as worker
// processes do over a load balancer's, each keeping to its own.
func (t *serviceTarget) worker(i int) target {
	if len(t.clients) < 2 {
		return t
	}
	w := *t
	w.client = t.clients[i%len(t.clients)]
	return &w
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
		return 0, claimTook, fmt.Errorf("claim: %w", err)
	}
	switch res.Outcome {
	case client.OutcomeAcquired:
		_, err := t.client.Complete(ctx, client.CompleteRequest{
			Namespace: t.namespace, Key: key, Token: res.Record.Token, Result: t.result,
		})
		if err != nil {
			return 0, claimTook, fmt.Errorf("complete: %w", err)
		}
		return outcomeAcquired, claimTook, nil
	case client.OutcomeCompleted, client.OutcomeFailed:
		return outcomeReplayed, claimTook, nil
	}
	return 0, claimTook, fmt.Errorf("claim answered %v", res.Outcome)
}

// pgApp is the application_name of the started idemds' connections, one
// for all replicas; "" with --addr or on SQLite, where no backend is the
// target's.
func (t *serviceTarget) pgApp() string {
	if len(t.idemds) == 0 {
		return ""
	}
	return t.idemds[0].appName
}

// processPIDs are the started idemds; none with --addr.
func (t *serviceTarget) processPIDs() []uint32 {
	pids := make([]uint32, len(t.idemds))
	for k, d := range t.idemds {
		pids[k] = d.pid()
	}
	return pids
}

// poolAcquires reads the started idemds' pools from their /metrics and adds
// them up; nothing with --addr or on SQLite.
func (t *serviceTarget) poolAcquires(ctx context.Context) (int64, time.Duration) {
	var n int64
	var wait time.Duration
	for _, d := range t.idemds {
		if d.appName == "" {
			return 0, 0
		}
		m, err := d.metrics(ctx, "idem_db_pool_acquires_total", "idem_db_pool_acquire_wait_seconds_total")
		if err != nil {
			return 0, 0
		}
		n += int64(m["idem_db_pool_acquires_total"])
		wait += time.Duration(m["idem_db_pool_acquire_wait_seconds_total"] * float64(time.Second))
	}
	return n, wait
}

func (t *serviceTarget) close(ctx context.Context) error {
	var err error
	for _, cl := range t.clients {
		err = errors.Join(err, cl.Close())
	}
	return errors.Join(err, closeIdemds(ctx, t.idemds))
}

// probe checks that every idemd at addrs (the clients' in order) answers
// before the rounds start, so that a wrong --addr is one clear error rather
// than a round of failures.
func (t *serviceTarget) probe(ctx context.Context, addrs []string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for k, cl := range t.clients {
		_, err := cl.Lookup(ctx, client.LookupRequest{Namespace: t.namespace, Key: "idem-bench-probe"})
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("idemd at %s does not answer: %w (start one, or pass --start-idemd)", addrs[k], err)
		}
	}
	return nil
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
