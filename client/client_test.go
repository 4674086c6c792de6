package client_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// fastRetry keeps the tests' backoff in milliseconds.
var fastRetry = client.RetryPolicy{BaseDelay: 2 * time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxAttempts: 5}

// setup starts a server over a fresh schema, with interceptors innermost in
// its chain, and returns a plaintext client for it.
func setup(t *testing.T, interceptors ...grpc.UnaryServerInterceptor) *client.Client {
	t.Helper()
	srv := testserver.StartWith(t, testserver.Options{
		ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(interceptors...)},
	})
	c, err := client.New(srv.Addr, client.WithInsecure(), client.WithRetry(fastRetry))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var errInjected = status.Error(codes.Unavailable, "injected fault")

// onMethod returns an interceptor that hands the n-th call (from 1) of method
// to f and passes every other call through.
func onMethod(method string, f func(ctx context.Context, req any, n int, handler grpc.UnaryHandler) (any, error)) grpc.UnaryServerInterceptor {
	var calls atomic.Int64
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != method {
			return handler(ctx, req)
		}
		return f(ctx, req, int(calls.Add(1)), handler)
	}
}

// tokenLog records the tokens of the Complete requests the server received.
type tokenLog struct {
	mu     sync.Mutex
	tokens []int64
}

func (l *tokenLog) interceptor() grpc.UnaryServerInterceptor {
	return onMethod(idemv1.IdempotencyService_Complete_FullMethodName, func(ctx context.Context, req any, _ int, handler grpc.UnaryHandler) (any, error) {
		l.mu.Lock()
		l.tokens = append(l.tokens, req.(*idemv1.CompleteRequest).GetToken())
		l.mu.Unlock()
		return handler(ctx, req)
	})
}

func (l *tokenLog) get() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.tokens...)
}

func TestNewRefusesTokenInPlaintext(t *testing.T) {
	t.Parallel()
	if _, err := client.New("idem.example.com:7070", client.WithInsecure(), client.WithToken("s3cret")); err == nil {
		t.Error("New sent a token in plaintext to a remote host; want an error")
	}
	for _, ok := range []struct {
		target string
		opts   []client.Option
	}{
		{"127.0.0.1:7070", []client.Option{client.WithInsecure(), client.WithToken("s3cret")}},
		{"idem.example.com:7070", []client.Option{client.WithToken("s3cret")}}, // TLS by default
		{"idem.example.com:7070", []client.Option{client.WithInsecure(), client.WithTLS(nil), client.WithToken("s3cret")}},
	} {
		c, err := client.New(ok.target, ok.opts...)
		if err != nil {
			t.Errorf("New(%q): %v", ok.target, err)
			continue
		}
		_ = c.Close()
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for target, want := range map[string]bool{
		"127.0.0.1:7070":                 true,
		"127.1.2.3:7070":                 true,
		"[::1]:7070":                     true,
		"::1":                            true,
		"localhost:7070":                 true,
		"LOCALHOST:7070":                 true,
		"localhost":                      true,
		"dns:///localhost:7070":          true,
		"passthrough:///127.0.0.1:1":     true,
		"unix:///run/idem.sock":          true,
		"unix:idem.sock":                 true,
		"unix-abstract:idem":             true,
		"idem.example.com:7070":          false,
		"dns:///idem.example.com:7070":   false,
		"dns://8.8.8.8/localhost.x:7070": false,
		"10.0.0.1:7070":                  false,
		"localhost.example.com:7070":     false,
		"[::2]:7070":                     false,
		"":                               false,
	} {
		if got := client.IsLoopback(target); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", target, got, want)
		}
	}
}

func TestTokenSentAsBearer(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 1)
	srv := testserver.StartWith(t, testserver.Options{ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			got <- md.Get("authorization")
			return handler(ctx, req)
		})}})
	c, err := client.New(srv.Addr, client.WithInsecure(), client.WithToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Lookup(t.Context(), client.LookupRequest{Namespace: "ns", Key: "k"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Lookup: %v, want ErrNotFound", err)
	}
	if auth := <-got; len(auth) != 1 || auth[0] != "Bearer s3cret" {
		t.Errorf("authorization = %q, want [Bearer s3cret]", auth)
	}
}

// TestTypedCallErrors produces every sentinel with a real server call.
func TestTypedCallErrors(t *testing.T) {
	t.Parallel()
	c := setup(t)
	const ns = "typed"
	claim := func(t *testing.T, key, claimant string, fingerprint []byte) client.ClaimResult {
		t.Helper()
		res, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: ns, Key: key, Claimant: claimant, Fingerprint: fingerprint, LeaseTTL: 2 * time.Second})
		if err != nil || res.Outcome != client.OutcomeAcquired {
			t.Fatalf("Claim(%s) = %v, %v; want ACQUIRED", key, res.Outcome, err)
		}
		return res
	}

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		_, err := c.Lookup(t.Context(), client.LookupRequest{Namespace: ns, Key: "missing"})
		if !errors.Is(err, client.ErrNotFound) || status.Code(err) != codes.NotFound || client.Reason(err) != "NOT_FOUND" {
			t.Errorf("Lookup of a missing key: %v (code %v, reason %q); want ErrNotFound", err, status.Code(err), client.Reason(err))
		}
		_, err = c.Complete(t.Context(), client.CompleteRequest{Namespace: ns, Key: "missing", Token: 1})
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("Complete of a missing key: %v; want ErrNotFound", err)
		}
	})

	t.Run("FingerprintMismatch", func(t *testing.T) {
		t.Parallel()
		claim(t, "fp", "a", client.Fingerprint([]byte("one")))
		_, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: ns, Key: "fp", Fingerprint: client.Fingerprint([]byte("two"))})
		if !errors.Is(err, client.ErrFingerprintMismatch) || status.Code(err) != codes.FailedPrecondition {
			t.Errorf("Claim with another fingerprint: %v; want ErrFingerprintMismatch", err)
		}
		if errors.Is(err, client.ErrAlreadyTerminal) || errors.Is(err, client.ErrLeaseLost) {
			t.Errorf("%v matches another sentinel too", err)
		}
	})

	t.Run("InProgress", func(t *testing.T) {
		t.Parallel()
		held := claim(t, "busy", "a", nil)
		res, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: ns, Key: "busy", Claimant: "b"})
		var busy *client.InProgressError
		if !errors.As(err, &busy) {
			t.Fatalf("Claim of a held key: %v; want *InProgressError", err)
		}
		if busy.RetryAfter <= 0 || busy.RetryAfter > 2*time.Second {
			t.Errorf("RetryAfter = %v, want in (0, 2s]", busy.RetryAfter)
		}
		if res.Outcome != client.OutcomeInProgress || res.Record.Token != held.Record.Token || busy.Record.Claimant != "a" {
			t.Errorf("IN_PROGRESS result = %+v, error record %+v; want the holder's record", res, busy.Record)
		}
		// The same claimant asking again is the holder: same token.
		again := claim(t, "busy", "a", nil)
		if again.Record.Token != held.Record.Token {
			t.Errorf("repeated Claim got token %d, want %d", again.Record.Token, held.Record.Token)
		}
	})

	t.Run("LeaseLost", func(t *testing.T) {
		t.Parallel()
		first := claim(t, "lost", "a", nil)
		if _, err := c.Fail(t.Context(), client.FailRequest{Namespace: ns, Key: "lost", Token: first.Record.Token, Error: "try again", Retryable: true}); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		second := claim(t, "lost", "b", nil)
		if second.Record.Token <= first.Record.Token || second.Record.Attempt != 2 {
			t.Fatalf("takeover got token %d attempt %d; want a token > %d, attempt 2", second.Record.Token, second.Record.Attempt, first.Record.Token)
		}
		_, err := c.Complete(t.Context(), client.CompleteRequest{Namespace: ns, Key: "lost", Token: first.Record.Token, Result: []byte("x")})
		if !errors.Is(err, client.ErrLeaseLost) || status.Code(err) != codes.Aborted || client.Reason(err) != "LEASE_LOST" {
			t.Errorf("Complete with a superseded token: %v; want ErrLeaseLost", err)
		}
		_, err = c.Heartbeat(t.Context(), client.HeartbeatRequest{Namespace: ns, Key: "lost", Token: first.Record.Token})
		if !errors.Is(err, client.ErrLeaseLost) {
			t.Errorf("Heartbeat with a superseded token: %v; want ErrLeaseLost", err)
		}
	})

	t.Run("AlreadyTerminal", func(t *testing.T) {
		t.Parallel()
		held := claim(t, "done", "a", nil)
		req := client.CompleteRequest{Namespace: ns, Key: "done", Token: held.Record.Token, Result: []byte("r")}
		done, err := c.Complete(t.Context(), req)
		if err != nil || done.State != client.StateCompleted || !bytes.Equal(done.Result, []byte("r")) {
			t.Fatalf("Complete = %+v, %v", done, err)
		}
		again, err := c.Complete(t.Context(), req) // a retry after a lost response
		if err != nil || !again.UpdatedAt.Equal(done.UpdatedAt) {
			t.Errorf("repeated Complete = %+v, %v; want the stored record", again, err)
		}
		_, err = c.Heartbeat(t.Context(), client.HeartbeatRequest{Namespace: ns, Key: "done", Token: held.Record.Token})
		if !errors.Is(err, client.ErrAlreadyTerminal) || client.Reason(err) != "ALREADY_TERMINAL" {
			t.Errorf("Heartbeat after Complete: %v; want ErrAlreadyTerminal", err)
		}
		_, err = c.Fail(t.Context(), client.FailRequest{Namespace: ns, Key: "done", Token: held.Record.Token, Error: "late"})
		if !errors.Is(err, client.ErrAlreadyTerminal) {
			t.Errorf("Fail after Complete: %v; want ErrAlreadyTerminal", err)
		}
	})

	t.Run("InvalidArgument", func(t *testing.T) {
		t.Parallel()
		_, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: "Not Valid", Key: "k"})
		if status.Code(err) != codes.InvalidArgument || client.Reason(err) != "INVALID_NAMESPACE" {
			t.Errorf("Claim with a bad namespace: %v (reason %q); want INVALID_NAMESPACE", err, client.Reason(err))
		}
		for _, sentinel := range []error{client.ErrLeaseLost, client.ErrFingerprintMismatch, client.ErrNotFound, client.ErrAlreadyTerminal} {
			if errors.Is(err, sentinel) {
				t.Errorf("%v matches %v", err, sentinel)
			}
		}
	})

	t.Run("Replays", func(t *testing.T) {
		t.Parallel()
		ok := claim(t, "replay-ok", "a", nil)
		if _, err := c.Complete(t.Context(), client.CompleteRequest{Namespace: ns, Key: "replay-ok", Token: ok.Record.Token, Result: []byte("42")}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: ns, Key: "replay-ok"})
		if err != nil || res.Outcome != client.OutcomeCompleted || string(res.Record.Result) != "42" || res.Record.CompletedAt.IsZero() {
			t.Errorf("Claim of a completed key = %+v, %v; want COMPLETED with 42", res, err)
		}
		bad := claim(t, "replay-failed", "a", nil)
		if _, err := c.Fail(t.Context(), client.FailRequest{Namespace: ns, Key: "replay-failed", Token: bad.Record.Token, Error: "card declined"}); err != nil {
			t.Fatal(err)
		}
		res, err = c.Claim(t.Context(), client.ClaimRequest{Namespace: ns, Key: "replay-failed"})
		if err != nil || res.Outcome != client.OutcomeFailed || res.Record.Error != "card declined" || res.Record.State != client.StateFailed {
			t.Errorf("Claim of a failed key = %+v, %v; want FAILED with the error", res, err)
		}
		if res.Outcome.String() != "FAILED" || res.Record.State.String() != "FAILED" {
			t.Errorf("String() = %q, %q", res.Outcome, res.Record.State)
		}
	})
}

// TestAdminSharesTheConnection: AdminService reaches the AdminService over
// the same connection and credentials as the typed calls.
func TestAdminSharesTheConnection(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 1)
	srv := testserver.StartWith(t, testserver.Options{ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if info.FullMethod == idemv1.AdminService_Stats_FullMethodName {
				md, _ := metadata.FromIncomingContext(ctx)
				got <- md.Get("authorization")
			}
			return handler(ctx, req)
		})}})
	c, err := client.New(srv.Addr, client.WithInsecure(), client.WithToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Claim(t.Context(), client.ClaimRequest{Namespace: "admin", Key: "k1"}); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	list, err := c.AdminService().ListRecords(t.Context(), &idemv1.ListRecordsRequest{})
	if err != nil {
		t.Fatalf("ListRecords: %v", err)
	}
	if len(list.GetRecords()) != 1 || list.GetRecords()[0].GetKey() != "k1" {
		t.Fatalf("ListRecords = %v; want the one record claimed through the typed client", list.GetRecords())
	}
	if _, err := c.AdminService().Stats(t.Context(), &idemv1.StatsRequest{}); err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if auth := <-got; len(auth) != 1 || auth[0] != "Bearer s3cret" {
		t.Errorf("authorization on an admin call = %q, want [Bearer s3cret]", auth)
	}
	_, err = c.AdminService().DeleteRecord(t.Context(), &idemv1.DeleteRecordRequest{Namespace: "admin", Key: "missing"})
	if client.Reason(err) != "NOT_FOUND" {
		t.Errorf("DeleteRecord of a missing record: %v; want reason NOT_FOUND", err)
	}
}

// callTag is a per-call credential that tags one RPC with x-call metadata.
type callTag string

func (c callTag) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"x-call": string(c)}, nil
}

func (callTag) RequireTransportSecurity() bool { return false }

// TestTypedCallsPassCallOptions: every typed call hands its grpc.CallOptions
// to the RPC, as the generated methods do.
func TestTypedCallsPassCallOptions(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	tags := map[string][]string{} // full method → x-call values received
	c := setup(t, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		tags[info.FullMethod] = append(tags[info.FullMethod], md.Get("x-call")...)
		mu.Unlock()
		return handler(ctx, req)
	})
	ctx := t.Context()
	tag := func(s string) grpc.CallOption { return grpc.PerRPCCredentials(callTag(s)) }

	claim, err := c.Claim(ctx, client.ClaimRequest{Namespace: "opts", Key: "k"}, tag("claim"))
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	token := claim.Record.Token
	if _, err := c.Heartbeat(ctx, client.HeartbeatRequest{Namespace: "opts", Key: "k", Token: token}, tag("heartbeat")); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if _, err := c.Fail(ctx, client.FailRequest{Namespace: "opts", Key: "k", Token: token, Error: "again", Retryable: true}, tag("fail")); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	again, err := c.Claim(ctx, client.ClaimRequest{Namespace: "opts", Key: "k"})
	if err != nil {
		t.Fatalf("second Claim: %v", err)
	}
	if _, err := c.Complete(ctx, client.CompleteRequest{Namespace: "opts", Key: "k", Token: again.Record.Token}, tag("complete")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	var header metadata.MD
	if _, err := c.Lookup(ctx, client.LookupRequest{Namespace: "opts", Key: "k"}, tag("lookup"), grpc.Header(&header)); err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if header == nil {
		t.Error("grpc.Header given to Lookup was not filled in")
	}

	mu.Lock()
	defer mu.Unlock()
	for method, want := range map[string][]string{
		idemv1.IdempotencyService_Claim_FullMethodName:     {"claim"}, // the second Claim had no option
		idemv1.IdempotencyService_Heartbeat_FullMethodName: {"heartbeat"},
		idemv1.IdempotencyService_Fail_FullMethodName:      {"fail"},
		idemv1.IdempotencyService_Complete_FullMethodName:  {"complete"},
		idemv1.IdempotencyService_Lookup_FullMethodName:    {"lookup"},
	} {
		if got := tags[method]; !slices.Equal(got, want) {
			t.Errorf("%s received x-call %q, want %q", method, got, want)
		}
	}
}

// TestIdempotencyServiceIsTheGeneratedClient: IdempotencyService reaches the
// raw RPCs over the same connection and credentials as the typed calls, and
// its errors are gRPC statuses that Reason reads.
func TestIdempotencyServiceIsTheGeneratedClient(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 1)
	srv := testserver.StartWith(t, testserver.Options{ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if info.FullMethod == idemv1.IdempotencyService_Lookup_FullMethodName {
				md, _ := metadata.FromIncomingContext(ctx)
				got <- md.Get("authorization")
			}
			return handler(ctx, req)
		})}})
	c, err := client.New(srv.Addr, client.WithInsecure(), client.WithToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.IdempotencyService().Claim(t.Context(), &idemv1.ClaimRequest{Namespace: "raw", Key: "k1"})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("raw Claim = %v, want ACQUIRED", resp.GetOutcome())
	}
	_, err = c.IdempotencyService().Lookup(t.Context(), &idemv1.LookupRequest{Namespace: "raw", Key: "missing"})
	if status.Code(err) != codes.NotFound || client.Reason(err) != "NOT_FOUND" {
		t.Errorf("raw Lookup of a missing record: %v; want a NotFound status with reason NOT_FOUND", err)
	}
	if auth := <-got; len(auth) != 1 || auth[0] != "Bearer s3cret" {
		t.Errorf("authorization on a raw call = %q, want [Bearer s3cret]", auth)
	}
}
