package client_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
)

// rpcCounts counts the RPCs a server received, by method name, and the
// items of each batch.
type rpcCounts struct {
	mu    sync.Mutex
	calls map[string]int
	items map[string][]int
}

func (r *rpcCounts) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := path.Base(info.FullMethod)
		n := -1
		switch req := req.(type) {
		case *idemv1.BatchClaimRequest:
			n = len(req.GetRequests())
		case *idemv1.BatchCompleteRequest:
			n = len(req.GetRequests())
		case *idemv1.BatchFailRequest:
			n = len(req.GetRequests())
		case *idemv1.BatchHeartbeatRequest:
			n = len(req.GetRequests())
		case *idemv1.BatchLookupRequest:
			n = len(req.GetRequests())
		}
		r.mu.Lock()
		if r.calls == nil {
			r.calls, r.items = map[string]int{}, map[string][]int{}
		}
		r.calls[method]++
		if n >= 0 {
			r.items[method] = append(r.items[method], n)
		}
		r.mu.Unlock()
		return handler(ctx, req)
	}
}

func (r *rpcCounts) count(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[method]
}

func (r *rpcCounts) batchSizes(method string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.items[method])
}

// setupWith is setup with a server configuration and client options of the
// test's own.
func setupWith(t *testing.T, cfg server.Config, opts []client.Option, interceptors ...grpc.UnaryServerInterceptor) *client.Client {
	t.Helper()
	srv := testserver.StartWith(t, testserver.Options{
		Config:        cfg,
		ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(interceptors...)},
	})
	c, err := client.New(srv.Addr, append([]client.Option{client.WithInsecure(), client.WithRetry(fastRetry)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func wantReason(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || client.Reason(err) != reason {
		t.Errorf("%s: %v; want %s/%s", what, err, code, reason)
	}
}

func TestBatchCallsAnswerEachItem(t *testing.T) {
	t.Parallel()
	c := setup(t)
	ctx := t.Context()
	const ns = "batch"
	if _, err := c.Do(ctx, client.Job{Namespace: ns, Key: "done"}, value("R2")); err != nil {
		t.Fatal(err)
	}
	held, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: "held", LeaseTTL: 30 * time.Second, Claimant: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	f1, f2 := client.Fingerprint([]byte("payload-1")), client.Fingerprint([]byte("payload-2"))
	if _, err := c.Do(ctx, client.Job{Namespace: ns, Key: "printed", Fingerprint: f1}, value("R4")); err != nil {
		t.Fatal(err)
	}

	claims, err := c.BatchClaim(ctx, []client.ClaimRequest{
		{Namespace: ns, Key: "new", Claimant: "batch"},
		{Namespace: ns, Key: "done", Claimant: "batch"},
		{Namespace: ns, Key: "held", Claimant: "batch"},
		{Namespace: ns, Key: "printed", Fingerprint: f2, Claimant: "batch"},
		{Namespace: ns, Key: "new", Claimant: "other"},
		{Namespace: "Bad Namespace", Key: "k"},
		{Namespace: ns, Key: "waits", Wait: time.Second},
	})
	if err != nil || len(claims) != 7 {
		t.Fatalf("BatchClaim = %d items, %v; want 7 items", len(claims), err)
	}
	if it := claims[0]; it.Err != nil || it.Value.Outcome != client.OutcomeAcquired || it.Value.Record.Attempt != 1 {
		t.Errorf("new key: %+v, %v; want ACQUIRED attempt 1", it.Value, it.Err)
	}
	if it := claims[1]; it.Err != nil || it.Value.Outcome != client.OutcomeCompleted || string(it.Value.Record.Result) != "R2" {
		t.Errorf("completed key: %+v, %v; want COMPLETED with R2", it.Value, it.Err)
	}
	var busy *client.InProgressError
	if it := claims[2]; !errors.As(it.Err, &busy) || busy.RetryAfter <= 0 || busy.RetryAfter > 30*time.Second || it.Value.Outcome != client.OutcomeInProgress {
		t.Errorf("held key: %+v, %v; want an *InProgressError with 0 < RetryAfter <= 30s", it.Value, it.Err)
	}
	if it := claims[3]; !errors.Is(it.Err, client.ErrFingerprintMismatch) {
		t.Errorf("other fingerprint: %v; want ErrFingerprintMismatch", it.Err)
	}
	wantReason(t, "other fingerprint", claims[3].Err, codes.FailedPrecondition, "FINGERPRINT_MISMATCH")
	if it := claims[4]; !errors.As(it.Err, &busy) {
		t.Errorf("the new key's second item: %v; want an *InProgressError (the first item holds it)", it.Err)
	}
	wantReason(t, "bad namespace", claims[5].Err, codes.InvalidArgument, "INVALID_NAMESPACE")
	wantReason(t, "a wait", claims[6].Err, codes.InvalidArgument, "INVALID_WAIT")

	token := claims[0].Value.Record.Token
	beats, err := c.BatchHeartbeat(ctx, []client.HeartbeatRequest{
		{Namespace: ns, Key: "new", Token: token, LeaseTTL: time.Minute},
		{Namespace: ns, Key: "held", Token: held.Record.Token + 100},
		{Namespace: ns, Key: "missing", Token: 1},
	})
	if err != nil || len(beats) != 3 {
		t.Fatalf("BatchHeartbeat = %d items, %v", len(beats), err)
	}
	if it := beats[0]; it.Err != nil || time.Until(it.Value.LeaseExpiresAt) < 50*time.Second {
		t.Errorf("heartbeat: %+v, %v; want the lease extended to a minute", it.Value, it.Err)
	}
	if !errors.Is(beats[1].Err, client.ErrLeaseLost) {
		t.Errorf("heartbeat with another token: %v; want ErrLeaseLost", beats[1].Err)
	}
	if !errors.Is(beats[2].Err, client.ErrNotFound) {
		t.Errorf("heartbeat of a missing key: %v; want ErrNotFound", beats[2].Err)
	}

	completes, err := c.BatchComplete(ctx, []client.CompleteRequest{
		{Namespace: ns, Key: "new", Token: token, Result: []byte("R1")},
		{Namespace: ns, Key: "new", Token: token, Result: []byte("R1")},
		{Namespace: ns, Key: "new", Token: token, Result: []byte("other")},
		{Namespace: ns, Key: "done", Token: 1, Result: []byte("R2")},
	})
	if err != nil || len(completes) != 4 {
		t.Fatalf("BatchComplete = %d items, %v", len(completes), err)
	}
	for i := range 2 {
		if it := completes[i]; it.Err != nil || it.Value.State != client.StateCompleted || string(it.Value.Result) != "R1" {
			t.Errorf("Complete item %d: %+v, %v; want COMPLETED R1 (the second repeats the first)", i, it.Value, it.Err)
		}
	}
	if !errors.Is(completes[2].Err, client.ErrAlreadyTerminal) {
		t.Errorf("Complete with another result: %v; want ErrAlreadyTerminal", completes[2].Err)
	}
	if completes[3].Err != nil {
		t.Errorf("repeated Complete of the completed key: %v; want the stored record", completes[3].Err)
	}

	fails, err := c.BatchFail(ctx, []client.FailRequest{
		{Namespace: ns, Key: "held", Token: held.Record.Token, Error: "boom", Retryable: true},
		{Namespace: ns, Key: "new", Token: token, Error: "late"},
	})
	if err != nil || len(fails) != 2 {
		t.Fatalf("BatchFail = %d items, %v", len(fails), err)
	}
	if it := fails[0]; it.Err != nil || it.Value.State != client.StateReleased || it.Value.Error != "boom" {
		t.Errorf("Fail: %+v, %v; want RELEASED with boom", it.Value, it.Err)
	}
	if !errors.Is(fails[1].Err, client.ErrAlreadyTerminal) {
		t.Errorf("Fail of a completed key: %v; want ErrAlreadyTerminal", fails[1].Err)
	}

	looked, err := c.BatchLookup(ctx, []client.LookupRequest{{Namespace: ns, Key: "new"}, {Namespace: ns, Key: "missing"}, {Namespace: ns, Key: "held"}})
	if err != nil || len(looked) != 3 {
		t.Fatalf("BatchLookup = %d items, %v", len(looked), err)
	}
	if it := looked[0]; it.Err != nil || it.Value.State != client.StateCompleted || string(it.Value.Result) != "R1" {
		t.Errorf("Lookup: %+v, %v; want COMPLETED R1", it.Value, it.Err)
	}
	if !errors.Is(looked[1].Err, client.ErrNotFound) {
		t.Errorf("Lookup of a missing key: %v; want ErrNotFound", looked[1].Err)
	}
	if it := looked[2]; it.Err != nil || it.Value.State != client.StateReleased {
		t.Errorf("Lookup: %+v, %v; want RELEASED", it.Value, it.Err)
	}
}

func TestBatchCallsRefusedAsAWhole(t *testing.T) {
	t.Parallel()
	c := setupWith(t, server.Config{BatchMaxItems: 3}, nil)
	ctx := t.Context()
	items, err := c.BatchClaim(ctx, nil)
	if items != nil {
		t.Errorf("an empty BatchClaim answered %d items", len(items))
	}
	wantReason(t, "empty BatchClaim", err, codes.InvalidArgument, "INVALID_BATCH_SIZE")
	reqs := make([]client.LookupRequest, 4)
	for i := range reqs {
		reqs[i] = client.LookupRequest{Namespace: "whole", Key: fmt.Sprint(i)}
	}
	_, err = c.BatchLookup(ctx, reqs)
	wantReason(t, "BatchLookup of 4 with a limit of 3", err, codes.InvalidArgument, "INVALID_BATCH_SIZE")
	claims := make([]client.ClaimRequest, 4)
	for i := range claims {
		claims[i] = client.ClaimRequest{Namespace: "whole", Key: fmt.Sprint(i)}
	}
	_, err = c.BatchClaim(ctx, claims)
	wantReason(t, "BatchClaim of 4 with a limit of 3", err, codes.InvalidArgument, "INVALID_BATCH_SIZE")
	if _, err := c.Lookup(ctx, client.LookupRequest{Namespace: "whole", Key: "0"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("after the refused BatchClaim: %v; want ErrNotFound (nothing claimed)", err)
	}
}

// jobFn is a DoBatch function made of one function per job index.
func jobFn(fns ...func(context.Context, client.Attempt) ([]byte, error)) func(context.Context, int, client.Attempt) ([]byte, error) {
	return func(ctx context.Context, i int, a client.Attempt) ([]byte, error) { return fns[i](ctx, a) }
}

func fails(err error) func(context.Context, client.Attempt) ([]byte, error) {
	return func(context.Context, client.Attempt) ([]byte, error) { return nil, err }
}

func TestDoBatchMixedOutcomes(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := setup(t, counts.interceptor())
	ctx := t.Context()
	const ns = "dobatch"
	job := func(key string) client.Job { return client.Job{Namespace: ns, Key: key} }
	if _, err := c.Do(ctx, job("done"), value("stored")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, job("dead"), fails(client.Permanent(errors.New("declined")))); err == nil {
		t.Fatal("Do of dead: want fn's error")
	}
	if _, err := c.Claim(ctx, client.ClaimRequest{Namespace: ns, Key: "held", LeaseTTL: 30 * time.Second, Claimant: "holder"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, client.Job{Namespace: ns, Key: "printed", Fingerprint: client.Fingerprint([]byte("a"))}, value("x")); err != nil {
		t.Fatal(err)
	}
	before := counts.count("BatchClaim")

	jobs := []client.Job{job("ok"), job("permanent"), job("retryable"), job("done"), job("held"), job("dead"),
		{Namespace: ns, Key: "printed", Fingerprint: client.Fingerprint([]byte("b"))}}
	var runs [7]atomic.Int64
	fn := func(ctx context.Context, i int, a client.Attempt) ([]byte, error) {
		runs[i].Add(1)
		if a.Number != 1 || a.Takeover || a.Token == 0 {
			t.Errorf("job %d ran with %+v; want attempt 1 with a token", i, a)
		}
		switch i {
		case 0:
			return []byte("v0"), nil
		case 1:
			return nil, client.Permanent(errors.New("card declined"))
		case 2:
			return nil, errors.New("try later")
		}
		t.Errorf("fn ran for job %d, which was not acquired", i)
		return nil, nil
	}
	items, err := c.DoBatch(ctx, jobs, fn)
	if err != nil || len(items) != len(jobs) {
		t.Fatalf("DoBatch = %d items, %v", len(items), err)
	}
	if it := items[0]; it.Err != nil || string(it.Value.Value) != "v0" || it.Value.Replayed || it.Value.Record.State != client.StateCompleted {
		t.Errorf("ok: %+v, %v; want v0, fresh, COMPLETED", it.Value, it.Err)
	}
	if it := items[1]; it.Err == nil || it.Err.Error() != "card declined" || it.Value.Record.State != client.StateFailed {
		t.Errorf("permanent: %+v, %v; want fn's error, FAILED", it.Value, it.Err)
	}
	if it := items[2]; it.Err == nil || it.Err.Error() != "try later" || it.Value.Record.State != client.StateReleased {
		t.Errorf("retryable: %+v, %v; want fn's error, RELEASED", it.Value, it.Err)
	}
	if it := items[3]; it.Err != nil || string(it.Value.Value) != "stored" || !it.Value.Replayed {
		t.Errorf("done: %+v, %v; want the stored value, replayed", it.Value, it.Err)
	}
	var busy *client.InProgressError
	if it := items[4]; !errors.As(it.Err, &busy) || it.Value.Record.Claimant != "holder" {
		t.Errorf("held: %+v, %v; want an *InProgressError with the holder's record", it.Value, it.Err)
	}
	var failed *client.JobFailedError
	if it := items[5]; !errors.As(it.Err, &failed) || failed.Message != "declined" {
		t.Errorf("dead: %v; want a *JobFailedError with the stored text", it.Err)
	}
	if it := items[6]; !errors.Is(it.Err, client.ErrFingerprintMismatch) {
		t.Errorf("printed: %v; want ErrFingerprintMismatch", it.Err)
	}
	for i, want := range []int64{1, 1, 1, 0, 0, 0, 0} {
		if n := runs[i].Load(); n != want {
			t.Errorf("fn ran %d times for job %d; want %d", n, i, want)
		}
	}
	if n := counts.count("BatchClaim") - before; n != 1 {
		t.Errorf("DoBatch sent %d BatchClaims; want 1", n)
	}
	if counts.count("BatchComplete") != 1 || counts.count("BatchFail") != 1 {
		t.Errorf("BatchComplete %d, BatchFail %d; want one of each", counts.count("BatchComplete"), counts.count("BatchFail"))
	}

	// The next delivery: the value replays, the permanent failure stays,
	// and the released job runs again.
	items, err = c.DoBatch(ctx, jobs[:3], jobFn(value("v0-again"), value("never"), value("v2")))
	if err != nil {
		t.Fatal(err)
	}
	if it := items[0]; it.Err != nil || string(it.Value.Value) != "v0" || !it.Value.Replayed {
		t.Errorf("ok again: %+v, %v; want v0 replayed", it.Value, it.Err)
	}
	if !errors.As(items[1].Err, &failed) || failed.Message != "card declined" {
		t.Errorf("permanent again: %v; want a *JobFailedError", items[1].Err)
	}
	if it := items[2]; it.Err != nil || string(it.Value.Value) != "v2" || it.Value.Record.Attempt != 2 {
		t.Errorf("retryable again: %+v, %v; want v2 at attempt 2", it.Value, it.Err)
	}

	if items, err := c.DoBatch(ctx, nil, fn); err != nil || len(items) != 0 {
		t.Errorf("DoBatch of no jobs = %v, %v; want nothing", items, err)
	}
	if _, err := c.DoBatch(ctx, jobs, fn, client.WithWait(time.Second)); err == nil {
		t.Error("DoBatch with WithWait: want an error")
	}
}

func TestDoBatchSameKeyTwice(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var runs atomic.Int64
	job := client.Job{Namespace: "twice", Key: "k"}
	items, err := c.DoBatch(t.Context(), []client.Job{job, job}, func(context.Context, int, client.Attempt) ([]byte, error) {
		runs.Add(1)
		return []byte("R"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var busy *client.InProgressError
	if items[0].Err != nil || string(items[0].Value.Value) != "R" || !errors.As(items[1].Err, &busy) || runs.Load() != 1 {
		t.Errorf("DoBatch of one key twice = [%+v %v] [%v], %d runs; want R, then *InProgressError, 1 run", items[0].Value, items[0].Err, items[1].Err, runs.Load())
	}
}

func TestDoBatchConcurrency(t *testing.T) {
	t.Parallel()
	c := setup(t)
	jobs := make([]client.Job, 6)
	for i := range jobs {
		jobs[i] = client.Job{Namespace: "concurrency", Key: fmt.Sprint(i)}
	}
	for _, tc := range []struct {
		opts []client.DoOption
		want int64
	}{{nil, 6}, {[]client.DoOption{client.WithConcurrency(2)}, 2}, {[]client.DoOption{client.WithConcurrency(1)}, 1}} {
		var running, most atomic.Int64
		var mu sync.Mutex
		var order []int
		for i := range jobs {
			jobs[i].Key = fmt.Sprintf("%d-%d", tc.want, i)
		}
		all := make(chan struct{})
		var started atomic.Int64
		items, err := c.DoBatch(t.Context(), jobs, func(_ context.Context, i int, _ client.Attempt) ([]byte, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if started.Add(1) == tc.want {
				close(all)
			}
			select { // hold the slot until as many as may run have started
			case <-all:
			case <-time.After(2 * time.Second):
			}
			time.Sleep(20 * time.Millisecond)
			return []byte("ok"), nil
		}, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		for i, it := range items {
			if it.Err != nil {
				t.Errorf("concurrency %d: job %d: %v", tc.want, i, it.Err)
			}
		}
		if m := most.Load(); m != tc.want {
			t.Errorf("at most %d fns ran at once; want %d", m, tc.want)
		}
		if tc.want == 1 && !slices.Equal(order, []int{0, 1, 2, 3, 4, 5}) {
			t.Errorf("WithConcurrency(1) ran the jobs in the order %v; want the order of jobs", order)
		}
	}
}

// TestDoBatchHeartbeatsKeepTheBatch runs a batch for three leases: one
// BatchHeartbeat for all its jobs keeps every lease, and no other worker
// can take a job over meanwhile.
func TestDoBatchHeartbeatsKeepTheBatch(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := setup(t, counts.interceptor())
	jobs := []client.Job{
		{Namespace: "beats", Key: "a", LeaseTTL: time.Second},
		{Namespace: "beats", Key: "b", LeaseTTL: time.Second},
		{Namespace: "beats", Key: "c", LeaseTTL: 2 * time.Second},
	}
	var taken atomic.Int64
	items, err := c.DoBatch(t.Context(), jobs, func(ctx context.Context, i int, _ client.Attempt) ([]byte, error) {
		for range 6 {
			if !sleepCtx(ctx, 500*time.Millisecond) {
				return nil, context.Cause(ctx)
			}
			_, err := c.Claim(ctx, client.ClaimRequest{Namespace: jobs[i].Namespace, Key: jobs[i].Key, Claimant: "successor"})
			var busy *client.InProgressError
			if !errors.As(err, &busy) {
				taken.Add(1)
				t.Errorf("a successor's Claim of %s mid-job: %v; want IN_PROGRESS", jobs[i].Key, err)
			}
		}
		return []byte("kept-" + jobs[i].Key), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if it.Err != nil || string(it.Value.Value) != "kept-"+jobs[i].Key || it.Value.Record.Attempt != 1 {
			t.Errorf("job %d: %+v, %v; want its value at attempt 1", i, it.Value, it.Err)
		}
	}
	sizes := counts.batchSizes("BatchHeartbeat")
	if len(sizes) < 6 || slices.ContainsFunc(sizes, func(n int) bool { return n != 3 }) {
		t.Errorf("BatchHeartbeat sizes = %v; want at least 6 beats (every third of the 1 s lease for 3 s), each of all 3 jobs", sizes)
	}
	if n := counts.count("Heartbeat"); n != 0 {
		t.Errorf("%d unary Heartbeats; want none", n)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// TestDoBatchRetriesOnlyUnansweredItems answers one item of the first
// BatchComplete UNAVAILABLE after the server stored it: the retry carries
// that item alone, and its repeat is confirmed.
func TestDoBatchRetriesOnlyUnansweredItems(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := setup(t, counts.interceptor(), onMethod(idemv1.IdempotencyService_BatchComplete_FullMethodName, func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if n == 1 && err == nil {
			resp.(*idemv1.BatchCompleteResponse).GetResults()[1].Result = &idemv1.BatchCompleteResult_Error{Error: status.New(codes.Unavailable, "injected item fault").Proto()}
		}
		return resp, err
	}))
	jobs := []client.Job{{Namespace: "items", Key: "a"}, {Namespace: "items", Key: "b"}, {Namespace: "items", Key: "c"}}
	items, err := c.DoBatch(t.Context(), jobs, func(_ context.Context, i int, _ client.Attempt) ([]byte, error) {
		return []byte(jobs[i].Key), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if it.Err != nil || string(it.Value.Value) != jobs[i].Key || it.Value.Record.State != client.StateCompleted {
			t.Errorf("job %d: %+v, %v; want COMPLETED with its key", i, it.Value, it.Err)
		}
	}
	if got := counts.batchSizes("BatchComplete"); !slices.Equal(got, []int{3, 1}) {
		t.Errorf("BatchComplete sizes = %v; want [3 1]: only the unanswered item is sent again", got)
	}
}

// TestDoBatchHalvesARefusedBatch: a server that takes 2 items per batch
// gets a delivery of 5 halved until it takes each part.
func TestDoBatchHalvesARefusedBatch(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := setupWith(t, server.Config{BatchMaxItems: 2}, nil, counts.interceptor())
	jobs := make([]client.Job, 5)
	for i := range jobs {
		jobs[i] = client.Job{Namespace: "halves", Key: fmt.Sprint(i)}
	}
	items, err := c.DoBatch(t.Context(), jobs, func(_ context.Context, i int, _ client.Attempt) ([]byte, error) {
		return []byte(jobs[i].Key), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if it.Err != nil || string(it.Value.Value) != jobs[i].Key {
			t.Errorf("job %d: %+v, %v", i, it.Value, it.Err)
		}
	}
	// 5 is refused, 2 taken, 3 refused, 1 and 2 taken.
	if got := counts.batchSizes("BatchClaim"); !slices.Equal(got, []int{5, 2, 3, 1, 2}) {
		t.Errorf("BatchClaim sizes = %v; want [5 2 3 1 2]", got)
	}
}

// TestDoBatchLeaseLostOnComplete runs without heartbeats: a successor takes
// job 0 over after its lease ran out, so its Complete answers LEASE_LOST;
// job 1, whose lease ran out too but which nobody took, is still recorded.
func TestDoBatchLeaseLostOnComplete(t *testing.T) {
	t.Parallel()
	c := setup(t)
	jobs := []client.Job{{Namespace: "lost", Key: "a", LeaseTTL: time.Second}, {Namespace: "lost", Key: "b", LeaseTTL: time.Second}}
	var successor client.ClaimResult
	items, err := c.DoBatch(t.Context(), jobs, func(ctx context.Context, i int, _ client.Attempt) ([]byte, error) {
		time.Sleep(1500 * time.Millisecond)
		if i == 0 {
			var err error
			if successor, err = c.Claim(ctx, client.ClaimRequest{Namespace: "lost", Key: "a", Claimant: "successor"}); err != nil || successor.Outcome != client.OutcomeAcquired {
				t.Errorf("the successor's Claim: %+v, %v; want ACQUIRED", successor, err)
			}
		}
		return []byte("late-" + jobs[i].Key), nil
	}, client.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	if it := items[0]; !errors.Is(it.Err, client.ErrLeaseLost) || errors.Is(it.Err, client.ErrCompletionUnknown) || string(it.Value.Value) != "late-a" {
		t.Errorf("job 0: %+v, %v; want ErrLeaseLost with fn's value", it.Value, it.Err)
	}
	if it := items[1]; it.Err != nil || it.Value.Record.State != client.StateCompleted {
		t.Errorf("job 1: %+v, %v; want COMPLETED", it.Value, it.Err)
	}
	if rec := mustLookup(t, c, jobs[0]); rec.State != client.StateProcessing || rec.Token != successor.Record.Token {
		t.Errorf("job 0's record = %v token %d; want PROCESSING under the successor's token %d", rec.State, rec.Token, successor.Record.Token)
	}
}

// TestDoBatchLeaseLostOnHeartbeat: a job whose heartbeat answers LEASE_LOST
// has its fn's context cancelled with it, and its outcome is not recorded;
// the other job of the batch goes on.
func TestDoBatchLeaseLostOnHeartbeat(t *testing.T) {
	t.Parallel()
	c := setup(t, onMethod(idemv1.IdempotencyService_BatchHeartbeat_FullMethodName, func(ctx context.Context, req any, _ int, handler grpc.UnaryHandler) (any, error) {
		// Job 0's heartbeat carries another token: LEASE_LOST for it alone.
		breq := req.(*idemv1.BatchHeartbeatRequest)
		for _, r := range breq.GetRequests() {
			if r.GetKey() == "a" {
				r.Token += 1000
			}
		}
		return handler(ctx, req)
	}))
	jobs := []client.Job{{Namespace: "beatlost", Key: "a", LeaseTTL: time.Second}, {Namespace: "beatlost", Key: "b", LeaseTTL: time.Second}}
	var cause error
	items, err := c.DoBatch(t.Context(), jobs, func(ctx context.Context, i int, _ client.Attempt) ([]byte, error) {
		if i == 1 {
			time.Sleep(time.Second)
			return []byte("b"), nil
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(5 * time.Second):
		}
		return []byte("a-late"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, client.ErrLeaseLost) || !errors.Is(items[0].Err, client.ErrLeaseLost) || string(items[0].Value.Value) != "a-late" {
		t.Errorf("job 0: cancelled with %v, returned %+v, %v; want ErrLeaseLost", cause, items[0].Value, items[0].Err)
	}
	if rec := mustLookup(t, c, jobs[0]); rec.State != client.StateProcessing {
		t.Errorf("job 0's record = %v; want PROCESSING (nothing recorded after the lease was lost)", rec.State)
	}
	if it := items[1]; it.Err != nil || it.Value.Record.State != client.StateCompleted {
		t.Errorf("job 1: %+v, %v; want COMPLETED", it.Value, it.Err)
	}
}

// TestDoBatchCompletionUnknown: Completes that keep failing are retried
// past MaxAttempts until the leases run out, and then each job's item says
// its completion is unknown.
func TestDoBatchCompletionUnknown(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	c := setup(t, onMethod(idemv1.IdempotencyService_BatchComplete_FullMethodName, func(context.Context, any, int, grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		return nil, errInjected
	}))
	jobs := []client.Job{{Namespace: "unknown", Key: "a", LeaseTTL: time.Second}, {Namespace: "unknown", Key: "b", LeaseTTL: time.Second}}
	claimed := time.Now()
	items, err := c.DoBatch(t.Context(), jobs, func(_ context.Context, i int, _ client.Attempt) ([]byte, error) {
		return []byte("charged-" + jobs[i].Key), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		var unknown *client.CompletionUnknownError
		if !errors.As(it.Err, &unknown) || string(unknown.Value) != "charged-"+jobs[i].Key || status.Code(unknown.Err) != codes.Unavailable {
			t.Errorf("job %d: %v; want a *CompletionUnknownError with fn's value", i, it.Err)
		}
	}
	if n := calls.Load(); n <= int64(fastRetry.MaxAttempts) {
		t.Errorf("BatchComplete was tried %d times; want more than MaxAttempts (%d)", n, fastRetry.MaxAttempts)
	}
	if took := time.Since(claimed); took < time.Second {
		t.Errorf("DoBatch gave up after %v, before the lease of 1s ran out", took)
	}
}

func TestDoBatchPanicRecordsAndRepanics(t *testing.T) {
	t.Parallel()
	c := setup(t)
	jobs := []client.Job{{Namespace: "panic", Key: "a"}, {Namespace: "panic", Key: "b"}}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want the panic's value", r)
			}
		}()
		_, _ = c.DoBatch(t.Context(), jobs, func(_ context.Context, i int, _ client.Attempt) ([]byte, error) {
			if i == 1 {
				panic("boom")
			}
			return []byte("a"), nil
		})
		t.Error("DoBatch returned; want it to panic")
	}()
	if rec := mustLookup(t, c, jobs[0]); rec.State != client.StateCompleted {
		t.Errorf("job 0 = %v; want COMPLETED", rec.State)
	}
	if rec := mustLookup(t, c, jobs[1]); rec.State != client.StateReleased || rec.Error != "panic: boom" {
		t.Errorf("job 1 = %v %q; want RELEASED with the panic", rec.State, rec.Error)
	}
}

// TestDoBatchRidesOutARestartOfIdemd stops idemd after the side effects of
// a batch and starts it again while its BatchComplete is due: every job is
// recorded once, with one effect each, on both stores.
func TestDoBatchRidesOutARestartOfIdemd(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			d := startRestartable(t, store)
			c, err := client.New(d.addr, client.WithInsecure())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			if _, err := c.Do(ctx, client.Job{Namespace: "restart", Key: "warm-up"}, value("ok")); err != nil {
				t.Fatalf("Do before the restart: %v", err)
			}
			jobs := make([]client.Job, 3)
			for i := range jobs {
				jobs[i] = client.Job{Namespace: "restart", Key: fmt.Sprint("batch-", i), LeaseTTL: 30 * time.Second}
			}
			var effects [3]atomic.Int64
			stopped := make(chan struct{})
			restarted := make(chan error, 1)
			items, err := c.DoBatch(ctx, jobs, func(_ context.Context, i int, _ client.Attempt) ([]byte, error) {
				effects[i].Add(1)
				if i == 0 {
					if err := d.stop(); err != nil {
						return nil, err
					}
					close(stopped)
					go func() {
						time.Sleep(1500 * time.Millisecond) // the downtime under test
						restarted <- d.start()
					}()
				}
				<-stopped
				return []byte("charged-" + jobs[i].Key), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if rerr := <-restarted; rerr != nil {
				t.Fatalf("restarting idemd: %v", rerr)
			}
			for i, it := range items {
				if it.Err != nil || string(it.Value.Value) != "charged-"+jobs[i].Key || it.Value.Record.State != client.StateCompleted {
					t.Errorf("job %d: %+v, %v; want its value, COMPLETED", i, it.Value, it.Err)
				}
				if n := effects[i].Load(); n != 1 {
					t.Errorf("job %d's effect ran %d times; want 1", i, n)
				}
			}
			again, err := c.DoBatch(ctx, jobs, func(context.Context, int, client.Attempt) ([]byte, error) {
				t.Error("fn ran again after the restart")
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, it := range again {
				if it.Err != nil || !it.Value.Replayed {
					t.Errorf("the next delivery of job %d: %+v, %v; want a replay", i, it.Value, it.Err)
				}
			}
			if t.Failed() {
				t.Logf("idemd's log:\n%s", d.logText())
			}
		})
	}
}

// TestDoBatchSendsAnItemTooLargeForABatchUnary: a server whose batch byte
// limit is below its result limit refuses a BatchComplete of even one such
// result; DoBatch halves, then sends that Complete as the unary call.
// TestDoBatchHalvesABatchGRPCRefuses: a batch over the server's gRPC
// receive limit (its --batch-max-bytes plus 16 KiB) is refused by grpc-go
// before idem reads it, RESOURCE_EXHAUSTED without an ErrorInfo; DoBatch
// halves it as it halves one idem refuses.
func TestDoBatchHalvesABatchGRPCRefuses(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := setupWith(t, server.Config{BatchMaxBytes: 64 << 10}, nil, counts.interceptor())
	result := make([]byte, 40<<10)
	jobs := make([]client.Job, 4)
	for i := range jobs {
		jobs[i] = client.Job{Namespace: "grpc-limit", Key: fmt.Sprint(i)}
	}
	items, err := c.DoBatch(t.Context(), jobs, func(context.Context, int, client.Attempt) ([]byte, error) { return result, nil })
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if it.Err != nil || it.Value.Record.State != client.StateCompleted {
			t.Errorf("job %d: %v, %v; want COMPLETED", i, it.Value.Record.State, it.Err)
		}
	}
	// The batches of 4 and 2 never reach idem's handlers.
	if got := counts.batchSizes("BatchComplete"); !slices.Equal(got, []int{1, 1, 1, 1}) {
		t.Errorf("BatchComplete sizes idem saw = %v; want [1 1 1 1]", got)
	}
}

func TestDoBatchSendsAnItemTooLargeForABatchUnary(t *testing.T) {
	t.Parallel()
	var counts rpcCounts
	c := setupWith(t, server.Config{BatchMaxBytes: 1024}, nil, counts.interceptor())
	big := make([]byte, 2048)
	jobs := []client.Job{{Namespace: "large", Key: "a"}, {Namespace: "large", Key: "b"}}
	items, err := c.DoBatch(t.Context(), jobs, func(context.Context, int, client.Attempt) ([]byte, error) { return big, nil })
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if it.Err != nil || it.Value.Record.State != client.StateCompleted || len(it.Value.Record.Result) != len(big) {
			t.Errorf("job %d: %v, %v; want COMPLETED with the 2 KiB result", i, it.Value.Record.State, it.Err)
		}
	}
	if got := counts.batchSizes("BatchComplete"); !slices.Equal(got, []int{2, 1, 1}) || counts.count("Complete") != 2 {
		t.Errorf("BatchComplete sizes %v and %d unary Completes; want [2 1 1] and 2", got, counts.count("Complete"))
	}

	// The coalescer does the same for one caller's Complete.
	cc := setupWith(t, server.Config{BatchMaxBytes: 1024}, []client.Option{client.WithCoalescing()})
	res, err := cc.Do(t.Context(), client.Job{Namespace: "large", Key: "coalesced"}, func(context.Context, client.Attempt) ([]byte, error) { return big, nil })
	if err != nil || res.Record.State != client.StateCompleted {
		t.Errorf("coalesced Do of a 2 KiB result: %v, %v; want COMPLETED", res.Record.State, err)
	}
}
