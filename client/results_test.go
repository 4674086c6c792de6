package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server"
)

// largeResultServers are a server on each store that takes results up to
// maxResult, and a client of it with opts.
func largeResultServers(maxResult int, opts ...client.Option) []struct {
	name string
	c    func(t *testing.T) *client.Client
} {
	cfg := server.Config{MaxResultBytes: maxResult}
	return []struct {
		name string
		c    func(t *testing.T) *client.Client
	}{
		{"postgres", func(t *testing.T) *client.Client { return setupWith(t, cfg, opts) }},
		{"sqlite", func(t *testing.T) *client.Client {
			return idemtest.NewServer(t, idemtest.WithConfig(cfg), idemtest.WithClientOptions(append([]client.Option{client.WithRetry(fastRetry)}, opts...)...)).Client
		}},
	}
}

// TestResultsOfEveryAllowedSizeAreRead: a result as large as the server
// takes (4 MiB, and the 16 MiB every server may be set to) is completed by
// Do and read back by a later Do, Claim, Lookup, BatchClaim and
// BatchLookup, on both stores, with and without coalescing.
func TestResultsOfEveryAllowedSizeAreRead(t *testing.T) {
	t.Parallel()
	for _, coalesce := range []bool{false, true} {
		var opts []client.Option
		name := "unary"
		if coalesce {
			opts, name = []client.Option{client.WithCoalescing()}, "coalescing"
		}
		for _, srv := range largeResultServers(limits.ResultBytesCeiling, opts...) {
			t.Run(name+"/"+srv.name, func(t *testing.T) {
				t.Parallel()
				c := srv.c(t)
				for _, size := range []int{4 << 20, limits.ResultBytesCeiling} {
					t.Run(fmt.Sprint(size>>20, "MiB"), func(t *testing.T) {
						want := bytes.Repeat([]byte{'r'}, size)
						job := client.Job{Namespace: "large", Key: fmt.Sprint("result-", size)}
						res, err := c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) { return want, nil })
						if err != nil {
							t.Fatalf("Do: %.300v", err)
						}
						if !bytes.Equal(res.Value, want) || res.Record.State != client.StateCompleted {
							t.Fatalf("Do = %d bytes, %v; want the %d bytes, COMPLETED", len(res.Value), res.Record.State, size)
						}
						again, err := c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) {
							t.Error("fn ran again")
							return nil, nil
						})
						if err != nil || !again.Replayed || !bytes.Equal(again.Value, want) {
							t.Fatalf("Do again = %d bytes, replayed %v, %.300v; want the stored result", len(again.Value), again.Replayed, err)
						}
						claimed, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: job.Namespace, Key: job.Key})
						if err != nil || claimed.Outcome != client.OutcomeCompleted || !bytes.Equal(claimed.Record.Result, want) {
							t.Fatalf("Claim = %v with %d bytes, %.300v; want COMPLETED with the result", claimed.Outcome, len(claimed.Record.Result), err)
						}
						rec, err := c.Lookup(t.Context(), client.LookupRequest{Namespace: job.Namespace, Key: job.Key})
						if err != nil || !bytes.Equal(rec.Result, want) {
							t.Fatalf("Lookup = %d bytes, %.300v; want the result", len(rec.Result), err)
						}
						claims, err := c.BatchClaim(t.Context(), []client.ClaimRequest{{Namespace: job.Namespace, Key: job.Key}})
						if err != nil || claims[0].Err != nil || !bytes.Equal(claims[0].Value.Record.Result, want) {
							t.Fatalf("BatchClaim = %v; want the result", errors.Join(err, itemErr(claims)))
						}
						lookups, err := c.BatchLookup(t.Context(), []client.LookupRequest{{Namespace: job.Namespace, Key: job.Key}})
						if err != nil || lookups[0].Err != nil || !bytes.Equal(lookups[0].Value.Result, want) {
							t.Fatalf("BatchLookup = %v; want the result", errors.Join(err, itemErr(lookups)))
						}
					})
				}
				// A page of both records: more than one result of the
				// largest size in one answer.
				page, err := c.AdminService().ListRecords(t.Context(), &idemv1.ListRecordsRequest{Namespace: "large"})
				if err != nil || len(page.GetRecords()) != 2 {
					t.Fatalf("ListRecords = %d records, %.300v; want both", len(page.GetRecords()), err)
				}
			})
		}
	}
}

func itemErr[T any](items []client.BatchItem[T]) error {
	if len(items) == 0 {
		return nil
	}
	return items[0].Err
}

// answerCap is a client interceptor that, once on, reads BatchClaim
// answers of at most limit bytes and holds the first BatchClaim until
// release is closed, reporting on entered once it holds it. The cap stands
// for any limit an answer may meet on its way after the server did its
// items: the SDK's own, a proxy's, gRPC's 2 GiB.
type answerCap struct {
	on      atomic.Bool
	limit   int
	calls   atomic.Int64
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	refused int
	claimed []int // the items of each BatchClaim sent
}

func (a *answerCap) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != idemv1.IdempotencyService_BatchClaim_FullMethodName || !a.on.Load() {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if a.calls.Add(1) == 1 {
		close(a.entered)
		<-a.release
	}
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.MaxCallRecvMsgSize(a.limit))...)
	a.mu.Lock()
	a.claimed = append(a.claimed, len(req.(*idemv1.BatchClaimRequest).GetRequests()))
	if status.Code(err) == codes.ResourceExhausted {
		a.refused++
	}
	a.mu.Unlock()
	return err
}

// TestCoalescedClaimResentAfterItsAnswerWasLost: a coalesced batch of
// Claims whose answer is too large to be read (replays of large results)
// is halved and sent again; a Claim in it without a claimant, which the
// server had acquired in the answer that was lost, is answered ACQUIRED
// with the same token when sent again, on both stores, and its caller can
// complete the job: no acquisition is left held by nobody.
func TestCoalescedClaimResentAfterItsAnswerWasLost(t *testing.T) {
	t.Parallel()
	const (
		replays    = 3
		resultSize = 3900 << 10
	)
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			limiter := &answerCap{limit: 2*resultSize + 64<<10, entered: make(chan struct{}), release: make(chan struct{})}
			opts := []client.Option{client.WithCoalescing(), client.WithDialOptions(grpc.WithChainUnaryInterceptor(limiter.interceptor))}
			var c *client.Client
			for _, srv := range largeResultServers(4<<20, opts...) {
				if srv.name == store {
					c = srv.c(t)
				}
			}
			ctx := t.Context()
			stored := bytes.Repeat([]byte{'s'}, resultSize)
			for i := range replays {
				if _, err := c.Do(ctx, client.Job{Namespace: "lost", Key: fmt.Sprint("replay-", i)}, func(context.Context, client.Attempt) ([]byte, error) { return stored, nil }); err != nil {
					t.Fatalf("Do replay-%d: %.300v", i, err)
				}
			}
			limiter.on.Store(true)
			first := make(chan error, 1)
			go func() {
				_, err := c.Claim(ctx, client.ClaimRequest{Namespace: "lost", Key: "first"})
				first <- err
			}()
			<-limiter.entered // a batch in flight: the next Claims queue for one batch
			type answer struct {
				res client.ClaimResult
				err error
			}
			replayed := make(chan answer, replays)
			for i := range replays {
				go func() {
					res, err := c.Claim(ctx, client.ClaimRequest{Namespace: "lost", Key: fmt.Sprint("replay-", i)})
					replayed <- answer{res, err}
				}()
			}
			waitQueued(t, c, replays)
			fresh := make(chan answer, 1)
			go func() {
				res, err := c.Claim(ctx, client.ClaimRequest{Namespace: "lost", Key: "new"})
				fresh <- answer{res, err}
			}()
			waitQueued(t, c, replays+1)
			close(limiter.release)
			if err := await(t, "the first Claim", first, time.Minute); err != nil {
				t.Fatalf("first Claim: %v", err)
			}
			for range replays {
				a := await(t, "a replay", replayed, time.Minute)
				if a.err != nil || a.res.Outcome != client.OutcomeCompleted || !bytes.Equal(a.res.Record.Result, stored) {
					t.Errorf("replay: %v with %d bytes, %.300v; want COMPLETED with the stored result", a.res.Outcome, len(a.res.Record.Result), a.err)
				}
			}
			a := await(t, "the new key's Claim", fresh, time.Minute)
			limiter.mu.Lock()
			refused, claimed := limiter.refused, slices.Clone(limiter.claimed)
			limiter.mu.Unlock()
			if refused == 0 || len(claimed) < 3 || claimed[1] != replays+1 {
				t.Fatalf("BatchClaims of %v items, %d answers refused; want the %d queued Claims in one batch, refused and sent again", claimed, refused, replays+1)
			}
			if a.err != nil || a.res.Outcome != client.OutcomeAcquired {
				t.Fatalf("the new key's Claim: %v, %v; want ACQUIRED: the batch that acquired it was this call's", a.res.Outcome, a.err)
			}
			rec, err := c.Lookup(ctx, client.LookupRequest{Namespace: "lost", Key: "new"})
			if err != nil || rec.State != client.StateProcessing || rec.Token != a.res.Record.Token || rec.Attempt != 1 || rec.Claimant != a.res.Record.Claimant {
				t.Fatalf("record %+v, %v; want PROCESSING under the caller's token and claimant, acquired once", rec, err)
			}
			if _, err := c.Complete(ctx, client.CompleteRequest{Namespace: "lost", Key: "new", Token: a.res.Record.Token, Result: []byte("done")}); err != nil {
				t.Fatalf("Complete with the caller's token: %v", err)
			}
		})
	}
}

// TestResultTooLargeIsNamed: a result over the server's limit cannot be
// refused before fn runs (neither its size nor the server's limit is known
// then); Do and DoBatch return it as a *CompletionUnknownError whose
// message names the result's size and the limit to raise, whichever part
// refuses it: the service (over --max-result-bytes), gRPC (over what
// idemd reads at all), or the SDK itself (over the 16 MiB no server takes;
// Do does not send it).
func TestResultTooLargeIsNamed(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := setupWith(t, server.Config{}, nil, counts.interceptor())
	do := map[string]func(job client.Job, fn func(context.Context, client.Attempt) ([]byte, error)) (client.Result, error){
		"Do": func(job client.Job, fn func(context.Context, client.Attempt) ([]byte, error)) (client.Result, error) {
			return c.Do(t.Context(), job, fn)
		},
		"DoBatch": func(job client.Job, fn func(context.Context, client.Attempt) ([]byte, error)) (client.Result, error) {
			items, err := c.DoBatch(t.Context(), []client.Job{job}, func(ctx context.Context, _ int, a client.Attempt) ([]byte, error) { return fn(ctx, a) })
			if err != nil {
				return client.Result{}, err
			}
			return items[0].Value, items[0].Err
		},
	}
	for _, tc := range []struct {
		name   string
		size   int
		want   []string
		reason string
	}{
		{"over --max-result-bytes", 100 << 10, []string{"result is 102400 bytes; the limit is 65536", "--max-result-bytes"}, "INVALID_RESULT"},
		{"over what idemd reads", 5 << 20, []string{"result is 5242880 bytes, more than the server reads", "--max-result-bytes"}, ""},
		{"over every server's limit", limits.ResultBytesCeiling + 1, []string{fmt.Sprintf("result is %d bytes; no server takes more than %d", limits.ResultBytesCeiling+1, limits.ResultBytesCeiling), "--max-result-bytes"}, "INVALID_RESULT"},
	} {
		for _, call := range []string{"Do", "DoBatch"} {
			t.Run(call+"/"+tc.name, func(t *testing.T) {
				job := client.Job{Namespace: "too-large", Key: fmt.Sprint(call, "-", tc.size)}
				before := counts.count("Complete")
				var runs atomic.Int64
				res, err := do[call](job, counted(&runs, func(context.Context, client.Attempt) ([]byte, error) {
					return make([]byte, tc.size), nil
				}))
				var unknown *client.CompletionUnknownError
				if !errors.As(err, &unknown) || len(unknown.Value) != tc.size || runs.Load() != 1 {
					t.Fatalf("%s = %d bytes, %.300v after %d runs; want *CompletionUnknownError with fn's value, one run", call, len(res.Value), err, runs.Load())
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s's error %q does not say %q", call, err, w)
					}
				}
				if client.Reason(err) != tc.reason {
					t.Errorf("%s's error has reason %q; want %q", call, client.Reason(err), tc.reason)
				}
				if rec := mustLookup(t, c, job); rec.State != client.StateProcessing {
					t.Errorf("record %v; want PROCESSING: nothing was stored", rec.State)
				}
				if sent := counts.count("Complete") - before; call == "Do" && tc.size > limits.ResultBytesCeiling && sent != 0 {
					t.Errorf("%d Completes sent; want none: no server takes the result", sent)
				}
			})
		}
	}
}
