//go:build robustness && unix

package robustness

import (
	"context"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

var (
	soak       = flag.Bool("soak", false, "run the soak (make soak)")
	soakClaims = flag.Int("soak.claims", 1_000_000, "how many Claims the soak makes")
)

// grant is the latest ACQUIRED of one key as the soak's workers saw it.
type grant struct {
	mu       sync.Mutex
	token    int64
	acqEnd   time.Time // when the ACQUIRED answer arrived
	relStart time.Time // when its holder started releasing it; zero while held
}

// TestSoak makes soak.claims contended Claims (64 at a time over 1,000 keys)
// against one idemd; every ACQUIRED is released at once (Fail, retryable),
// so keys go through round after round of release and takeover. It counts
// double grants (a key ACQUIRED while its previous holder had not started to
// release it, or with a token that did not grow), calls per second and
// idemd's resident memory at the start and the end.
func TestSoak(t *testing.T) {
	if !*soak {
		t.Skip("the soak runs with -soak (make soak)")
	}
	const workers, keys = 64, 1000
	d := startIdemd(t, "soak", "--database-url", newDatabase(t, cluster(t), "soak"))
	clients, closeAll, err := Dial([]string{d.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	cl := clients[0]

	grants := make([]grant, keys)
	var claims, calls, acquired, inProgress, errs, doubleGrants, regressions atomic.Int64
	var rssStart atomic.Int64
	warm := int64(*soakClaims / 20)
	started := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(42, uint64(w)))
			for ctx.Err() == nil {
				n := claims.Add(1)
				if n > int64(*soakClaims) {
					return
				}
				if n == warm {
					if rss, err := d.RSS(); err == nil {
						rssStart.Store(rss)
					}
				}
				i := rng.IntN(keys)
				key := fmt.Sprintf("soak-%04d", i)
				start := time.Now()
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := cl.Claim(cctx, &idemv1.ClaimRequest{Namespace: Namespace, Key: key,
					Claimant: newClaimant(), LeaseTtl: durationpb.New(30 * time.Second)})
				ccancel()
				end := time.Now()
				calls.Add(1)
				if err != nil {
					errs.Add(1)
					continue
				}
				if resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
					inProgress.Add(1)
					continue
				}
				acquired.Add(1)
				tok := resp.GetRecord().GetToken()
				g := &grants[i]
				g.mu.Lock()
				if g.token != 0 && start.After(g.acqEnd) {
					if g.relStart.IsZero() || end.Before(g.relStart) {
						doubleGrants.Add(1)
					}
					if tok <= g.token {
						regressions.Add(1)
					}
				}
				// The release starts now: from here on a new grant is legal.
				g.token, g.acqEnd, g.relStart = tok, end, time.Now()
				g.mu.Unlock()
				cctx, ccancel = context.WithTimeout(ctx, 10*time.Second)
				_, err = cl.Fail(cctx, &idemv1.FailRequest{Namespace: Namespace, Key: key, Token: tok, Error: "again", Retryable: true})
				ccancel()
				calls.Add(1)
				if err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(started)
	rssEnd, err := d.RSS()
	if err != nil {
		t.Fatal(err)
	}
	made := min(claims.Load(), int64(*soakClaims))
	r := Report{
		Scenario: "soak", Seconds: took.Seconds(), Calls: int(calls.Load()), Acquired: int(acquired.Load()),
		Injected: fmt.Sprintf("%d Claims, %d at a time over %d keys, each ACQUIRED released at once", made, workers, keys),
		Verdict:  fmt.Sprintf("%d double grants, %d token regressions, %d errors", doubleGrants.Load(), regressions.Load(), errs.Load()),
		Observed: fmt.Sprintf("%.0f calls/s (%.0f Claims/s); %d ACQUIRED, %d not; idemd RSS %.1f MiB after %d Claims, %.1f MiB at the end",
			float64(calls.Load())/took.Seconds(), float64(made)/took.Seconds(), acquired.Load(), inProgress.Load(),
			float64(rssStart.Load())/(1<<20), warm, float64(rssEnd)/(1<<20)),
	}
	reportMu.Lock()
	reports = append(reports, r)
	reportMu.Unlock()
	t.Logf("%s; %s", r.Verdict, r.Observed)
	if doubleGrants.Load() != 0 || regressions.Load() != 0 {
		t.Errorf("double grants: %d, token regressions: %d", doubleGrants.Load(), regressions.Load())
	}
	if made < int64(*soakClaims) {
		t.Errorf("the soak made %d of %d Claims before its deadline", made, *soakClaims)
	}
	if start := rssStart.Load(); start > 0 && rssEnd > 2*start+32<<20 {
		t.Errorf("idemd's RSS grew from %d to %d bytes", start, rssEnd)
	}
}
