package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// smallResultLimit is the MaxResultBytes of the validation tests' server.
const smallResultLimit = 1024

// startCounted starts a test server whose store logs every call.
func startCounted(t *testing.T) (*testserver.Server, *callLog) {
	t.Helper()
	calls := &callLog{}
	ts := testserver.StartWith(t, testserver.Options{
		Config: server.Config{MaxResultBytes: smallResultLimit},
		Store: func(pg *postgres.Store) store.Store {
			return &hookStore{Store: pg, hook: calls.hook}
		},
	})
	return ts, calls
}

// invalidCase is one bad request: the RPC it is sent to, the field it gets
// wrong, the reason, and what the message must say (the field and the bound).
type invalidCase struct {
	name   string
	call   func(ctx context.Context, c idemv1.IdempotencyServiceClient) error
	field  string
	reason string
	msg    []string
}

// idCases are the bad namespaces and keys every RPC must refuse.
var idCases = []struct {
	name, namespace, key, field, reason string
	msg                                 []string
}{
	{"namespace empty", "", "k", "namespace", "INVALID_NAMESPACE", []string{"namespace is empty", "^[a-z0-9][a-z0-9_.-]{0,63}$"}},
	{"namespace uppercase", "Payments", "k", "namespace", "INVALID_NAMESPACE", []string{`namespace "Payments"`, "1 to 64 characters"}},
	{"namespace 65 chars", strings.Repeat("a", 65), "k", "namespace", "INVALID_NAMESPACE", []string{"namespace", "1 to 64 characters"}},
	{"namespace starts with _", "_payments", "k", "namespace", "INVALID_NAMESPACE", []string{"namespace", "starting with a letter or digit"}},
	{"namespace starts with -", "-payments", "k", "namespace", "INVALID_NAMESPACE", []string{"namespace", "starting with a letter or digit"}},
	{"namespace with a space", "pay ments", "k", "namespace", "INVALID_NAMESPACE", []string{"namespace", "a-z, 0-9"}},
	{"key empty", ns, "", "key", "INVALID_KEY", []string{"key is empty", "1 to 256 bytes"}},
	{"key 257 bytes", ns, strings.Repeat("k", 257), "key", "INVALID_KEY", []string{"key is 257 bytes", "the limit is 256"}},
	{"key 257 bytes of multibyte runes", ns, strings.Repeat("é", 128) + "k", "key", "INVALID_KEY", []string{"key is 257 bytes", "the limit is 256"}},
	{"key with BEL", ns, "order\a42", "key", "INVALID_KEY", []string{"key has a control character", "U+0007"}},
	{"key with newline", ns, "order\n42", "key", "INVALID_KEY", []string{"key has a control character", "U+000A"}},
	{"key with DEL", ns, "order\x7f", "key", "INVALID_KEY", []string{"key has a control character", "U+007F"}},
	{"key with C1 control", ns, "order\u0085", "key", "INVALID_KEY", []string{"key has a control character", "U+0085"}},
}

func invalidCases() []invalidCase {
	var cases []invalidCase
	for _, id := range idCases {
		cases = append(cases,
			invalidCase{"Claim/" + id.name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
				_, err := c.Claim(ctx, &idemv1.ClaimRequest{Namespace: id.namespace, Key: id.key})
				return err
			}, id.field, id.reason, id.msg},
			invalidCase{"Complete/" + id.name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
				_, err := c.Complete(ctx, &idemv1.CompleteRequest{Namespace: id.namespace, Key: id.key, Token: 1})
				return err
			}, id.field, id.reason, id.msg},
			invalidCase{"Fail/" + id.name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
				_, err := c.Fail(ctx, &idemv1.FailRequest{Namespace: id.namespace, Key: id.key, Token: 1})
				return err
			}, id.field, id.reason, id.msg},
			invalidCase{"Heartbeat/" + id.name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
				_, err := c.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: id.namespace, Key: id.key, Token: 1})
				return err
			}, id.field, id.reason, id.msg},
			invalidCase{"Lookup/" + id.name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
				_, err := c.Lookup(ctx, &idemv1.LookupRequest{Namespace: id.namespace, Key: id.key})
				return err
			}, id.field, id.reason, id.msg},
		)
	}

	claim := func(name string, mutate func(*idemv1.ClaimRequest), field, reason string, msg ...string) invalidCase {
		return invalidCase{"Claim/" + name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
			req := &idemv1.ClaimRequest{Namespace: ns, Key: "k"}
			mutate(req)
			_, err := c.Claim(ctx, req)
			return err
		}, field, reason, msg}
	}
	heartbeat := func(name string, mutate func(*idemv1.HeartbeatRequest), field, reason string, msg ...string) invalidCase {
		return invalidCase{"Heartbeat/" + name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
			req := &idemv1.HeartbeatRequest{Namespace: ns, Key: "k", Token: 1}
			mutate(req)
			_, err := c.Heartbeat(ctx, req)
			return err
		}, field, reason, msg}
	}
	complete := func(name string, mutate func(*idemv1.CompleteRequest), field, reason string, msg ...string) invalidCase {
		return invalidCase{"Complete/" + name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
			req := &idemv1.CompleteRequest{Namespace: ns, Key: "k", Token: 1}
			mutate(req)
			_, err := c.Complete(ctx, req)
			return err
		}, field, reason, msg}
	}
	fail := func(name string, mutate func(*idemv1.FailRequest), field, reason string, msg ...string) invalidCase {
		return invalidCase{"Fail/" + name, func(ctx context.Context, c idemv1.IdempotencyServiceClient) error {
			req := &idemv1.FailRequest{Namespace: ns, Key: "k", Token: 1}
			mutate(req)
			_, err := c.Fail(ctx, req)
			return err
		}, field, reason, msg}
	}
	badDuration := &durationpb.Duration{Seconds: 5, Nanos: -1} // signs differ

	cases = append(cases,
		claim("fingerprint 65 bytes", func(r *idemv1.ClaimRequest) { r.Fingerprint = make([]byte, 65) },
			"fingerprint", "INVALID_FINGERPRINT", "fingerprint is 65 bytes", "the limit is 64"),
		claim("claimant 129 bytes", func(r *idemv1.ClaimRequest) { r.Claimant = strings.Repeat("c", 129) },
			"claimant", "INVALID_CLAIMANT", "claimant is 129 bytes", "the limit is 128"),
		claim("lease_ttl 999ms", func(r *idemv1.ClaimRequest) { r.LeaseTtl = dur(999 * time.Millisecond) },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is 999ms", "between 1s and 24h0m0s"),
		claim("lease_ttl 24h1s", func(r *idemv1.ClaimRequest) { r.LeaseTtl = dur(24*time.Hour + time.Second) },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is 24h0m1s", "between 1s and 24h0m0s"),
		claim("lease_ttl negative", func(r *idemv1.ClaimRequest) { r.LeaseTtl = dur(-time.Minute) },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is -1m0s", "between 1s and 24h0m0s"),
		claim("lease_ttl zero", func(r *idemv1.ClaimRequest) { r.LeaseTtl = dur(0) },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is 0s", "between 1s and 24h0m0s"),
		claim("lease_ttl malformed", func(r *idemv1.ClaimRequest) { r.LeaseTtl = badDuration },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is not a valid duration"),
		claim("retention 59s", func(r *idemv1.ClaimRequest) { r.Retention = dur(59 * time.Second) },
			"retention", "INVALID_RETENTION", "retention is 59s", "between 1m0s and 2160h0m0s"),
		claim("retention 91 days", func(r *idemv1.ClaimRequest) { r.Retention = dur(91 * 24 * time.Hour) },
			"retention", "INVALID_RETENTION", "retention is 2184h0m0s", "between 1m0s and 2160h0m0s"),
		claim("retention negative", func(r *idemv1.ClaimRequest) { r.Retention = dur(-time.Hour) },
			"retention", "INVALID_RETENTION", "retention is -1h0m0s", "between 1m0s and 2160h0m0s"),
		claim("retention malformed", func(r *idemv1.ClaimRequest) { r.Retention = badDuration },
			"retention", "INVALID_RETENTION", "retention is not a valid duration"),

		complete("token 0", func(r *idemv1.CompleteRequest) { r.Token = 0 },
			"token", "INVALID_TOKEN", "token is 0", "> 0"),
		complete("token negative", func(r *idemv1.CompleteRequest) { r.Token = -7 },
			"token", "INVALID_TOKEN", "token is -7", "> 0"),
		complete(fmt.Sprintf("result %d bytes", smallResultLimit+1), func(r *idemv1.CompleteRequest) { r.Result = make([]byte, smallResultLimit+1) },
			"result", "INVALID_RESULT", fmt.Sprintf("result is %d bytes", smallResultLimit+1), fmt.Sprintf("the limit is %d", smallResultLimit)),

		fail("token 0", func(r *idemv1.FailRequest) { r.Token = 0 },
			"token", "INVALID_TOKEN", "token is 0", "> 0"),
		fail("token negative", func(r *idemv1.FailRequest) { r.Token = -1 },
			"token", "INVALID_TOKEN", "token is -1", "> 0"),
		fail("error 4097 bytes", func(r *idemv1.FailRequest) { r.Error = strings.Repeat("e", 4097) },
			"error", "INVALID_ERROR", "error is 4097 bytes", "the limit is 4096"),
		fail("error 4097 bytes retryable", func(r *idemv1.FailRequest) { r.Error = strings.Repeat("e", 4097); r.Retryable = true },
			"error", "INVALID_ERROR", "error is 4097 bytes", "the limit is 4096"),

		heartbeat("token 0", func(r *idemv1.HeartbeatRequest) { r.Token = 0 },
			"token", "INVALID_TOKEN", "token is 0", "> 0"),
		heartbeat("token negative", func(r *idemv1.HeartbeatRequest) { r.Token = -1 },
			"token", "INVALID_TOKEN", "token is -1", "> 0"),
		heartbeat("lease_ttl 999ms", func(r *idemv1.HeartbeatRequest) { r.LeaseTtl = dur(999 * time.Millisecond) },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is 999ms", "between 1s and 24h0m0s"),
		heartbeat("lease_ttl 24h1s", func(r *idemv1.HeartbeatRequest) { r.LeaseTtl = dur(24*time.Hour + time.Second) },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is 24h0m1s", "between 1s and 24h0m0s"),
		heartbeat("lease_ttl negative", func(r *idemv1.HeartbeatRequest) { r.LeaseTtl = dur(-time.Second) },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is -1s", "between 1s and 24h0m0s"),
		heartbeat("lease_ttl malformed", func(r *idemv1.HeartbeatRequest) { r.LeaseTtl = badDuration },
			"lease_ttl", "INVALID_LEASE_TTL", "lease_ttl is not a valid duration"),
	)
	return cases
}

// TestInvalidArguments sends bad input to every RPC: INVALID_ARGUMENT with an
// INVALID_<FIELD> reason and a message that names the field and the bound,
// and the store is never called.
func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	ts, calls := startCounted(t)

	t.Run("cases", func(t *testing.T) {
		for _, tc := range invalidCases() {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				st := requireStatus(t, tc.call(testContext(t), ts.Client), codes.InvalidArgument, tc.reason)
				for _, want := range tc.msg {
					if !strings.Contains(st.Message(), want) {
						t.Errorf("message %q does not contain %q", st.Message(), want)
					}
				}
				if got := errorInfo(st).GetMetadata()["field"]; got != tc.field {
					t.Errorf("ErrorInfo metadata field = %q; want %q", got, tc.field)
				}
			})
		}
	})

	if n := calls.len(); n != 0 {
		t.Errorf("the store was called %d times for invalid requests: %s", n, calls)
	}
	if n := countRows(t, ts.DB.Pool, ""); n != 0 {
		t.Errorf("%d records written by invalid requests", n)
	}
}

// TestBoundsAreInclusive: the values at the bounds are accepted.
func TestBoundsAreInclusive(t *testing.T) {
	t.Parallel()
	ts, _ := startCounted(t)
	ctx := testContext(t)
	key := strings.Repeat("é", 128)                        // 256 bytes
	namespace := "a" + strings.Repeat("z9_.-", 12) + "abc" // 64 characters
	resp, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{
		Namespace: namespace, Key: key,
		Fingerprint: make([]byte, 64), Claimant: strings.Repeat("c", 128),
		LeaseTtl: dur(time.Second), Retention: dur(90 * 24 * time.Hour),
	})
	if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim at the bounds: %v, %v", resp.GetOutcome(), err)
	}
	token := resp.GetRecord().GetToken()
	if _, err := ts.Client.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: namespace, Key: key, Token: token, LeaseTtl: dur(24 * time.Hour)}); err != nil {
		t.Fatalf("Heartbeat of 24h: %v", err)
	}
	done, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: namespace, Key: key, Token: token, Result: make([]byte, smallResultLimit)})
	if err != nil {
		t.Fatalf("Complete with a result of exactly MaxResultBytes: %v", err)
	}
	wantSpan(t, "expires_at - completed_at", done.GetRecord().GetExpiresAt(), done.GetRecord().GetCompletedAt(), 90*24*time.Hour)

	resp, err = ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "0", Key: "x", LeaseTtl: dur(24 * time.Hour), Retention: dur(time.Minute)})
	if err != nil {
		t.Fatalf("Claim with the other bounds: %v", err)
	}
	if _, err := ts.Client.Fail(ctx, &idemv1.FailRequest{Namespace: "0", Key: "x", Token: resp.GetRecord().GetToken(), Error: strings.Repeat("e", 4096)}); err != nil {
		t.Fatalf("Fail with an error of 4096 bytes: %v", err)
	}
}

// TestOversizedResult: a result above MaxResultBytes is INVALID_RESULT, and
// one past the transport's message limit (the larger of MaxResultBytes and
// BatchMaxBytes, plus headroom) is refused by gRPC (RESOURCE_EXHAUSTED)
// before it reaches the handler; nothing is written either way.
func TestOversizedResult(t *testing.T) {
	t.Parallel()
	ts, calls := startCounted(t)
	_, err := ts.Client.Complete(testContext(t), &idemv1.CompleteRequest{Namespace: ns, Key: "k", Token: 1, Result: make([]byte, 32<<10)})
	requireStatus(t, err, codes.InvalidArgument, "INVALID_RESULT")
	_, err = ts.Client.Complete(testContext(t), &idemv1.CompleteRequest{Namespace: ns, Key: "k", Token: 1, Result: make([]byte, services.DefaultBatchMaxBytes+32<<10)})
	requireStatus(t, err, codes.ResourceExhausted, "")
	if n := calls.len(); n != 0 {
		t.Errorf("store called: %s", calls)
	}
}

// rawCodec sends and receives bytes as they are, to put a message on the wire
// that the generated client refuses to encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestInvalidUTF8Key: a key that is not UTF-8 is an error and writes nothing.
// protobuf refuses it before the handler runs: the generated client will not
// encode it, and the server will not decode it (grpc-go answers INTERNAL for
// a request it cannot decode).
func TestInvalidUTF8Key(t *testing.T) {
	t.Parallel()
	ts, calls := startCounted(t)
	ctx := testContext(t)
	key := "order-\xff\xfe"

	_, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: ns, Key: key})
	if err == nil {
		t.Fatal("Claim with an invalid UTF-8 key succeeded")
	}
	t.Logf("generated client: %s: %s", status.Code(err), status.Convert(err).Message())

	for _, method := range []string{"Claim", "Complete", "Fail", "Heartbeat", "Lookup"} {
		var msg []byte
		msg = protowire.AppendTag(msg, 1, protowire.BytesType)
		msg = protowire.AppendString(msg, ns)
		msg = protowire.AppendTag(msg, 2, protowire.BytesType)
		msg = protowire.AppendString(msg, key)
		if method != "Claim" && method != "Lookup" {
			msg = protowire.AppendTag(msg, 3, protowire.VarintType)
			msg = protowire.AppendVarint(msg, 1)
		}
		var out []byte
		err := ts.Conn.Invoke(ctx, "/idem.v1.IdempotencyService/"+method, &msg, &out, grpc.ForceCodec(rawCodec{}))
		if err == nil {
			t.Errorf("%s with an invalid UTF-8 key on the wire succeeded", method)
			continue
		}
		if c := status.Code(err); c != codes.Internal && c != codes.InvalidArgument {
			t.Errorf("%s: %s: %v; want INTERNAL (undecodable) or INVALID_ARGUMENT", method, c, err)
		}
		t.Logf("%s on the wire: %s: %s", method, status.Code(err), status.Convert(err).Message())
	}
	if n := calls.len(); n != 0 {
		t.Errorf("store called: %s", calls)
	}
	if n := countRows(t, ts.DB.Pool, ""); n != 0 {
		t.Errorf("%d records written", n)
	}
}
