package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// claimAtOnce starts n goroutines that claim id together and returns how many
// got each outcome. An error from any of them fails the test.
func claimAtOnce(t *testing.T, b *bundle, id store.RecordID, n int) map[store.Outcome]int {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[store.Outcome]int{}
		errs     []error
		tokens   = map[int64]bool{}
		start    = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Distinct claimants: re-entrancy must not turn a second claimant
			// into a second ACQUIRED.
			res, err := b.store.RecordClaim(b.ctx, claimParams(id, fmt.Sprintf("worker-%d", i)))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			outcomes[res.Outcome]++
			if res.Outcome == store.OutcomeAcquired {
				tokens[res.Record.Token] = true
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d claims of %q failed, first: %v", len(errs), n, id.Key, errs[0])
	}
	return outcomes
}

func requireOneAcquired(t *testing.T, key string, outcomes map[store.Outcome]int, n int) {
	t.Helper()
	if outcomes[store.OutcomeAcquired] != 1 || outcomes[store.OutcomeInProgress] != n-1 {
		t.Fatalf("%q: %d concurrent claims gave %v; want exactly 1 acquired and %d in_progress", key, n, outcomes, n-1)
	}
}

func testClaimConcurrentNewKey(t *testing.T, h Harness) {
	b := setup(t, h, 16)

	// More claimants than connections: most wait for the pool, and some
	// race the insert itself.
	for i := range 5 {
		key := fmt.Sprintf("64-way-%d", i)
		requireOneAcquired(t, key, claimAtOnce(t, b, recordID(key), 64), 64)
	}
	for i := range 200 {
		key := fmt.Sprintf("16-way-%d", i)
		requireOneAcquired(t, key, claimAtOnce(t, b, recordID(key), 16), 16)
	}
}

// testClaimConcurrentManyKeys: a few hundred keys claimed all at once, each
// by a few goroutines, so that Claims of different keys overlap as well as
// Claims of one key. Each key is acquired once, and no two keys share a token.
func testClaimConcurrentManyKeys(t *testing.T, h Harness) {
	b := setup(t, h, 16)
	const (
		keys     = 300
		claimers = 4
	)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = make([]map[store.Outcome]int, keys)
		tokens   = map[int64]string{}
		errs     []error
		start    = make(chan struct{})
	)
	for k := range keys {
		outcomes[k] = map[store.Outcome]int{}
		for c := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				id := recordID(fmt.Sprintf("many-%d", k))
				res, err := b.store.RecordClaim(b.ctx, claimParams(id, fmt.Sprintf("worker-%d", c)))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id.Key, err))
					return
				}
				outcomes[k][res.Outcome]++
				if res.Outcome == store.OutcomeAcquired {
					if other, ok := tokens[res.Record.Token]; ok {
						errs = append(errs, fmt.Errorf("%s and %s were both handed token %d", other, id.Key, res.Record.Token))
					}
					tokens[res.Record.Token] = id.Key
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d claims failed, first: %v", len(errs), keys*claimers, errs[0])
	}
	for k := range keys {
		requireOneAcquired(t, fmt.Sprintf("many-%d", k), outcomes[k], claimers)
	}
	if counts := b.countStates(t); counts[store.StateProcessing] != keys || len(counts) != 1 {
		t.Fatalf("CountByState %v, want %d processing records and nothing else", counts, keys)
	}
}

// testClaimConcurrentTakeover: N concurrent Claims of a record that may be
// taken over give one takeover, whatever made it available.
func testClaimConcurrentTakeover(t *testing.T, h Harness) {
	prepare := map[string]func(t *testing.T, b *bundle, id store.RecordID, token int64){
		"lapsed": func(t *testing.T, b *bundle, id store.RecordID, token int64) {
			b.lapse(t, id)
		},
		"released": func(t *testing.T, b *bundle, id store.RecordID, token int64) {
			b.fail(t, id, token, "retry", true)
		},
		"expired": func(t *testing.T, b *bundle, id store.RecordID, token int64) {
			b.expire(t, id)
		},
	}
	for name, leave := range prepare {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h, 8)
			for i := range 20 {
				id := recordID(fmt.Sprintf("k%d", i))
				held := b.acquire(t, id, "first")
				leave(t, b, id, held.Token)
				requireOneAcquired(t, id.Key, claimAtOnce(t, b, id, 64), 64)
				if rec := b.get(t, id); rec.Attempt != 2 || rec.Token <= held.Token {
					t.Fatalf("%q: attempt %d token %d, want 2, > %d", id.Key, rec.Attempt, rec.Token, held.Token)
				}
			}
		})
	}
}

// testSameJobProcessedTwiceConcurrently is the article's scenario: a queue
// delivers the same job to several workers at once. Each worker claims,
// performs the side effect only when it acquired the record, and completes;
// the others wait for the result. The side effect happens once per job and
// every worker ends with the same result.
func testSameJobProcessedTwiceConcurrently(t *testing.T, h Harness) {
	b := setup(t, h, 16)
	const (
		jobs       = 50
		deliveries = 4
	)
	var wg sync.WaitGroup
	sideEffects := make([]atomic.Int32, jobs)
	results := make([][]string, jobs)
	errs := make(chan error, jobs*deliveries)
	var mu sync.Mutex

	for j := range jobs {
		id := recordID(fmt.Sprintf("job-%d", j))
		for d := range deliveries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				result, err := processJob(b, id, fmt.Sprintf("delivery-%d", d), func() string {
					n := sideEffects[j].Add(1)
					time.Sleep(2 * time.Millisecond) // the side effect takes a while
					return fmt.Sprintf("charged once (effect #%d)", n)
				})
				if err != nil {
					errs <- fmt.Errorf("job %d delivery %d: %w", j, d, err)
					return
				}
				mu.Lock()
				results[j] = append(results[j], result)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for j := range jobs {
		if n := sideEffects[j].Load(); n != 1 {
			t.Fatalf("job %d: the side effect ran %d times, want once", j, n)
		}
		for _, r := range results[j] {
			if r != results[j][0] {
				t.Fatalf("job %d: deliveries saw different results %q", j, results[j])
			}
		}
	}
}

// processJob is a worker's handler in the style of the Go SDK's Do helper.
func processJob(b *bundle, id store.RecordID, claimant string, effect func() string) (string, error) {
	for range 2000 {
		res, err := b.store.RecordClaim(b.ctx, claimParams(id, claimant))
		if err != nil {
			return "", err
		}
		switch res.Outcome {
		case store.OutcomeAcquired:
			result := effect()
			rec, err := b.store.RecordComplete(b.ctx, &store.CompleteParams{RecordID: id, Token: res.Record.Token, Result: []byte(result)})
			if err != nil {
				return "", err
			}
			return string(rec.Result), nil
		case store.OutcomeCompleted:
			return string(res.Record.Result), nil
		case store.OutcomeInProgress:
			time.Sleep(min(res.RetryAfter, time.Millisecond))
		default:
			return "", fmt.Errorf("unexpected outcome %v", res.Outcome)
		}
	}
	return "", fmt.Errorf("still in progress after 2000 claims")
}
