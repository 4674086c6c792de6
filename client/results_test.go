package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

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
