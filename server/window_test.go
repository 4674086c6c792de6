package server_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server"
)

// TestLargestResultsThroughFixedWindows: the server's flow-control windows
// are fixed (no bandwidth estimate), so the largest request must fit them:
// Completes with results of exactly MaxResultBytes, several at once on one
// connection, are stored, and their replays bring them back whole, at the
// default limit and at a limit above the stream window's floor.
func TestLargestResultsThroughFixedWindows(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{limits.DefaultMaxResultBytes, 1 << 20} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			t.Parallel()
			ts := testserver.StartWith(t, testserver.Options{Config: server.Config{MaxResultBytes: limit}})
			ctx := testContext(t)
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					key := fmt.Sprint("large-", i)
					result := bytes.Repeat([]byte{byte('a' + i)}, limit)
					claim, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: key, LeaseTtl: dur(time.Minute)})
					if err != nil {
						t.Errorf("Claim %s: %v", key, err)
						return
					}
					if _, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: key, Token: claim.GetRecord().GetToken(), Result: result}); err != nil {
						t.Errorf("Complete %s with %d bytes: %v", key, limit, err)
						return
					}
					replay, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: key, LeaseTtl: dur(time.Minute)})
					if err != nil || !bytes.Equal(replay.GetRecord().GetResult(), result) {
						t.Errorf("replay of %s: %d bytes, %v; want the %d stored", key, len(replay.GetRecord().GetResult()), err, limit)
					}
				})
			}
			wg.Wait()
		})
	}
}
