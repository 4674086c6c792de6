package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// claimAll sends n concurrent Claims of key, released together, each with a
// claimant of its own, and returns the responses.
func claimAll(ctx context.Context, c idemv1.IdempotencyServiceClient, key string, n int) ([]*idemv1.ClaimResponse, []error) {
	resps := make([]*idemv1.ClaimResponse, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			resps[i], errs[i] = c.Claim(ctx, &idemv1.ClaimRequest{
				Namespace: ns, Key: key, Claimant: fmt.Sprintf("worker-%d", i), LeaseTtl: dur(time.Minute),
			})
		})
	}
	close(start)
	wg.Wait()
	return resps, errs
}

// checkOneAcquired checks that exactly one of the responses is ACQUIRED and
// every other one IN_PROGRESS on the same token.
func checkOneAcquired(t *testing.T, key string, resps []*idemv1.ClaimResponse, errs []error) {
	t.Helper()
	acquired := 0
	var token int64
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: Claim %d: %v", key, i, err)
			continue
		}
		switch resps[i].GetOutcome() {
		case idemv1.Outcome_OUTCOME_ACQUIRED:
			acquired++
		case idemv1.Outcome_OUTCOME_IN_PROGRESS:
		default:
			t.Errorf("%s: Claim %d: outcome %s", key, i, resps[i].GetOutcome())
		}
		if token == 0 {
			token = resps[i].GetRecord().GetToken()
		} else if got := resps[i].GetRecord().GetToken(); got != token {
			t.Errorf("%s: Claim %d saw token %d, another %d", key, i, got, token)
		}
		if a := resps[i].GetRecord().GetAttempt(); a != 1 {
			t.Errorf("%s: Claim %d saw attempt %d; want 1", key, i, a)
		}
	}
	if acquired != 1 {
		t.Errorf("%s: %d of %d concurrent Claims ACQUIRED; want exactly 1", key, acquired, len(resps))
	}
}

// TestConcurrentClaimsOneKey: 64 concurrent Claims of one new key through
// gRPC, exactly one ACQUIRED (DESIGN §6).
func TestConcurrentClaimsOneKey(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{DBOptions: []testdb.Option{testdb.MaxConns(8)}})
	ctx := testContext(t)
	for round := range 3 {
		key := fmt.Sprintf("hot-%d", round)
		resps, errs := claimAll(ctx, ts.Client, key, 64)
		checkOneAcquired(t, key, resps, errs)
	}
}

// TestConcurrentClaimsManyKeys repeats the race over 200 fresh keys with 8
// Claims each.
func TestConcurrentClaimsManyKeys(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{DBOptions: []testdb.Option{testdb.MaxConns(8)}})
	ctx := testContext(t)
	for i := range 200 {
		key := fmt.Sprintf("key-%d", i)
		resps, errs := claimAll(ctx, ts.Client, key, 8)
		checkOneAcquired(t, key, resps, errs)
		if t.Failed() {
			return
		}
	}
	if n := countRows(t, ts.DB.Pool, "processing"); n != 200 {
		t.Errorf("%d PROCESSING records; want 200", n)
	}
}

// process is a worker handling one delivery of a job the way the SDK's Do
// does: Claim; on ACQUIRED perform the side effect and Complete; on
// IN_PROGRESS wait and ask again; on COMPLETED return the stored result.
func process(ctx context.Context, c idemv1.IdempotencyServiceClient, key string, effect func() string) (string, error) {
	for {
		resp, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: key, LeaseTtl: dur(time.Minute)})
		if err != nil {
			return "", err
		}
		switch resp.GetOutcome() {
		case idemv1.Outcome_OUTCOME_ACQUIRED:
			result := effect()
			_, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: resp.GetRecord().GetToken(), Result: []byte(result)})
			return result, err
		case idemv1.Outcome_OUTCOME_COMPLETED:
			return string(resp.GetRecord().GetResult()), nil
		case idemv1.Outcome_OUTCOME_IN_PROGRESS:
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		default:
			return "", fmt.Errorf("outcome %s", resp.GetOutcome())
		}
	}
}

// TestSameJobTwiceOneSideEffect: the same job delivered twice and processed
// concurrently has its side effect once, and both deliveries see its result.
func TestSameJobTwiceOneSideEffect(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := testContext(t)
	for i := range 50 {
		key := fmt.Sprintf("charge-%d", i)
		var effects atomic.Int32
		effect := func() string {
			n := effects.Add(1)
			time.Sleep(time.Millisecond) // the side effect takes a moment
			return fmt.Sprintf("charge #%d of %s", n, key)
		}
		var results [2]string
		var errs [2]error
		var wg sync.WaitGroup
		for d := range 2 {
			wg.Go(func() { results[d], errs[d] = process(ctx, ts.Client, key, effect) })
		}
		wg.Wait()
		for d, err := range errs {
			if err != nil {
				t.Fatalf("%s delivery %d: %v", key, d, err)
			}
		}
		if n := effects.Load(); n != 1 {
			t.Fatalf("%s: %d side effects from two deliveries; want 1", key, n)
		}
		if results[0] != results[1] {
			t.Errorf("%s: the deliveries saw different results %q and %q", key, results[0], results[1])
		}
	}
}

// TestTakeoversNeverShareAToken: 20 concurrent deliveries of one job, where
// the first holders stall past their lease (made to run out by SQL) and are
// taken over. No token ever belongs to two holders, so a fenced side effect
// happens at most once per token; tokens rise with attempts; exactly one
// Complete succeeds, with the last token; the stalled holders' calls are
// LEASE_LOST or, when nobody took over yet, succeed. A stalled holder waits
// until it was taken over rather than for a fixed time: with the Postgres
// store's coalescing, Claims of one key run one per statement, and how many
// run in a given time depends on the load of the machine.
func TestTakeoversNeverShareAToken(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{DBOptions: []testdb.Option{testdb.MaxConns(8)}})
	ctx := testContext(t)

	for job := range 3 {
		key := fmt.Sprintf("job-%d", job)
		var (
			mu        sync.Mutex
			effects   = map[int64]int{}   // side effects per token
			attempts  = map[int32]int64{} // token per attempt
			completed []int64             // tokens whose Complete succeeded
			stalls    atomic.Int32
			problems  []string
		)
		report := func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		worker := func(w int) {
			for {
				resp, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{
					Namespace: ns, Key: key, LeaseTtl: dur(time.Minute), Claimant: fmt.Sprintf("w%d-%d", w, time.Now().UnixNano()),
				})
				if err != nil {
					report("worker %d: Claim: %v", w, err)
					return
				}
				rec := resp.GetRecord()
				switch resp.GetOutcome() {
				case idemv1.Outcome_OUTCOME_COMPLETED:
					return
				case idemv1.Outcome_OUTCOME_IN_PROGRESS:
					time.Sleep(2 * time.Millisecond)
					continue
				case idemv1.Outcome_OUTCOME_ACQUIRED:
				default:
					report("worker %d: outcome %s", w, resp.GetOutcome())
					return
				}
				token := rec.GetToken()
				mu.Lock()
				effects[token]++
				if prev, dup := attempts[rec.GetAttempt()]; dup {
					problems = append(problems, fmt.Sprintf("attempt %d handed out twice (tokens %d, %d)", rec.GetAttempt(), prev, token))
				}
				attempts[rec.GetAttempt()] = token
				mu.Unlock()

				if stalls.Add(1) <= 8 {
					// Stall past the lease: another delivery takes over.
					if _, err := ts.DB.Pool.Exec(ctx, `UPDATE idem_records SET lease_expires_at = now() - interval '1 second'
						WHERE namespace = $1 AND key = $2 AND token = $3`, ns, key, token); err != nil {
						report("lapse: %v", err)
						return
					}
					// Stay stalled until another delivery took over (or 10 s
					// passed): how soon one does depends on the machine, and
					// the point is what happens after it.
					for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
						var current int64
						if err := ts.DB.Pool.QueryRow(ctx, `SELECT token FROM idem_records WHERE namespace = $1 AND key = $2`,
							ns, key).Scan(&current); err != nil || current != token {
							break
						}
						time.Sleep(2 * time.Millisecond)
					}
				}
				_, err = ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: token, Result: fmt.Appendf(nil, "by %d", token)})
				if err == nil {
					mu.Lock()
					completed = append(completed, token)
					mu.Unlock()
					return
				}
				if ok, why := checkStatus(err, codes.Aborted, "LEASE_LOST"); !ok {
					report("worker %d: Complete with token %d: %s; want OK or LEASE_LOST", w, token, why)
					return
				}
				// Taken over: this delivery goes back to the queue.
			}
		}
		var wg sync.WaitGroup
		for w := range 20 {
			wg.Go(func() { worker(w) })
		}
		wg.Wait()

		for _, p := range problems {
			t.Errorf("%s: %s", key, p)
		}
		for token, n := range effects {
			if n != 1 {
				t.Errorf("%s: token %d was ACQUIRED by %d holders", key, token, n)
			}
		}
		var tokens []int64
		for a := int32(1); a <= int32(len(attempts)); a++ {
			token, ok := attempts[a]
			if !ok {
				t.Fatalf("%s: attempts %v are not 1..%d", key, attempts, len(attempts))
			}
			tokens = append(tokens, token)
		}
		if !slices.IsSorted(tokens) || len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
			t.Errorf("%s: tokens by attempt %v are not strictly increasing", key, tokens)
		}
		if len(completed) != 1 {
			t.Fatalf("%s: %d Completes succeeded (tokens %v); want 1", key, len(completed), completed)
		}
		rec := mustLookup(t, ts.Client, key)
		last := tokens[len(tokens)-1]
		if rec.GetState() != idemv1.State_STATE_COMPLETED || rec.GetToken() != last || completed[0] != last || int(rec.GetAttempt()) != len(tokens) {
			t.Errorf("%s: final record %s token %d attempt %d, completed by %d; want COMPLETED by the last token %d after %d attempts",
				key, rec.GetState(), rec.GetToken(), rec.GetAttempt(), completed[0], last, len(tokens))
		}
		if len(tokens) < 2 {
			t.Errorf("%s: no takeover happened (%d acquisitions)", key, len(tokens))
		}
		t.Logf("%s: %d acquisitions", key, len(tokens))
	}
}
