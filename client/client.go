// Package client is the Go SDK for idem, the idempotency-key coordination
// service. It offers two levels:
//
//   - Do runs a job's side effect at most once per idempotency key across
//     every worker: it claims the key, runs your function while heartbeating
//     the lease, and records the result or the failure. Duplicate deliveries
//     get the stored result back without running the function.
//   - DoBatch is Do for a delivery of several jobs: one BatchClaim, one
//     BatchHeartbeat per beat and one BatchComplete and BatchFail for all
//     of them, each job's outcome what Do would return for it.
//   - Attempt.Step records each effect of a job with several (charge, then
//     send the receipt) as a step, so that a successor reuses a finished
//     step's result instead of making its effect again.
//   - RunResolver decides held (UNRESOLVED) records with a function that
//     asks the downstream system whether the effect happened.
//   - Claim, Complete, Fail, Heartbeat and Lookup mirror the RPCs one to one
//     with Go types, for workers that need to drive the protocol themselves,
//     as do StartStep, CompleteStep, Resolve and LookupHistory;
//     BatchClaim, BatchComplete, BatchFail, BatchHeartbeat and BatchLookup
//     send many of them in one RPC and answer each on its own.
//
// WithCoalescing makes a Client gather its concurrent Claims, Completes and
// Fails into the batch RPCs, each caller still getting its own answer.
//
// Errors the server sends are decoded from their google.rpc.ErrorInfo reason,
// never from message text, into values that work with errors.Is and
// errors.As: ErrLeaseLost, ErrFingerprintMismatch, ErrNotFound,
// ErrAlreadyTerminal, ErrResolvedByOperator, ErrStepAlreadyFinished,
// ErrNotUnresolved, *InProgressError,
// *JobFailedError and *CompletionUnknownError. Reason returns the raw reason of any error.
//
// # The shape of the API
//
// A Client wraps the generated gRPC clients; it does not embed them. Each
// method name therefore means one thing: c.Claim is the typed call, and there
// is no second Claim with the generated signature behind it. Every typed
// call takes a context, one request struct of its own (ClaimRequest, …,
// LookupRequest) and, as the generated methods do, trailing grpc.CallOptions
// that reach the RPC unchanged (grpc.Header, grpc.WaitForReady, …).
//
// *Client does not implement idemv1.IdempotencyServiceClient. Both
// generated clients are one method away, on the Client's connection and
// credentials: IdempotencyService and AdminService. Use them for an RPC
// that has no typed call yet, or to work with the protobuf messages
// directly; their errors are plain gRPC statuses (Reason still reads them).
//
// A Client is safe for concurrent use; create one per process and share it.
package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
)

// Client talks to one idem service. It is thin: every typed call is one RPC,
// and Do adds the retries and the lease handling around them. It is safe for
// concurrent use.
type Client struct {
	service  idemv1.IdempotencyServiceClient
	admin    idemv1.AdminServiceClient
	resolver idemv1.ResolverServiceClient
	conn     *grpc.ClientConn
	retry    RetryPolicy

	// The coalescers of WithCoalescing; nil without it.
	claims    *coalescer[*idemv1.ClaimRequest, ClaimResult]
	completes *coalescer[*idemv1.CompleteRequest, Record]
	fails     *coalescer[*idemv1.FailRequest, Record]
}

// Option configures New.
type Option func(*options)

type options struct {
	token     string
	tlsConfig *tls.Config
	insecure  bool
	dialOpts  []grpc.DialOption
	retry     RetryPolicy
	coalesce  bool
}

// WithToken sends token as "authorization: Bearer <token>" metadata on every
// RPC. By default no token is sent. A token is never sent in plaintext to
// another machine: New refuses WithToken together with WithInsecure unless the
// target is a loopback address (127.0.0.0/8, ::1, "localhost") or a Unix
// socket.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS connects over TLS with cfg (nil means the system's root CAs and
// the target's host name). TLS with the system's roots is the default; the
// last of WithTLS and WithInsecure wins.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) { o.tlsConfig, o.insecure = cfg, false }
}

// WithInsecure connects in plaintext, for a server on the same machine or
// behind a sidecar that terminates TLS. The default is TLS; the last of
// WithTLS and WithInsecure wins.
func WithInsecure() Option {
	return func(o *options) { o.tlsConfig, o.insecure = nil, true }
}

// WithDialOptions appends gRPC dial options (interceptors, keepalive, a
// custom dialer, …) after the ones New derives from the other options, so
// that they win: grpc.WithConnectParams replaces New's reconnect backoff.
// None are added by default.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithRetry sets how Do retries RPCs that fail with a transient error and how
// fast Do polls with WithWait. Zero fields of p take their defaults (see
// RetryPolicy). The typed calls never retry.
func WithRetry(p RetryPolicy) Option { return func(o *options) { o.retry = p } }

// responseWindow is the flow-control window of each call's stream and of
// the connection: a response with a result of limits.ResultBytesCeiling
// and room to spare, about the most the estimate would grow to.
const responseWindow = limits.ResultBytesCeiling + 64<<10

// maxAnswerBytes is the largest answer the client reads: any the server can
// send. A unary answer holds one record, with a result of at most
// limits.ResultBytesCeiling (no server takes more) and its other fields;
// but a batch answer holds one record per item, up to the server's
// --batch-max-items (500 by default), and a ListRecords page up to 1000,
// which at the defaults is already more than gRPC sends in one message
// (grpc-go's limit, 2 GiB less a byte). gRPC's default of 4 MiB refused
// the answer of a Complete the server had stored, and every later read of
// that record.
const maxAnswerBytes = math.MaxInt32

// New returns a Client for target, a gRPC target such as "idem.internal:7070"
// or "dns:///idem.internal:7070". It does not connect: the connection is made
// on the first RPC, and re-made as needed. Close it when done.
//
// A connection that breaks (idemd restarting, say) is redialled after a
// short backoff, not gRPC's default of up to two minutes: from 100ms,
// growing 1.6× to at most 1s, each ±20% at random so that many clients do not
// redial together. A dial attempt may take up to 20s.
func New(target string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	creds := insecure.NewCredentials()
	if !o.insecure {
		cfg := o.tlsConfig
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(cfg)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithConnectParams(reconnect),
		// Fixed flow-control windows: grpc-go's default grows the window
		// by estimating the bandwidth-delay product, with a PING after
		// every response it receives, which costs the server a read and a
		// write per call. A stream's window holds a response with the
		// largest result a server accepts.
		grpc.WithInitialWindowSize(responseWindow), grpc.WithInitialConnWindowSize(responseWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxAnswerBytes))}
	if o.token != "" {
		if o.insecure && !IsLoopback(target) {
			return nil, fmt.Errorf("idem: refusing to send the token in plaintext to %q: use WithTLS, or a loopback target", target)
		}
		// gRPC itself enforces RequireTransportSecurity, so a dial option
		// that swaps in plaintext credentials cannot leak the token either.
		dial = append(dial, grpc.WithPerRPCCredentials(bearerToken{token: o.token, requireTLS: !o.insecure}))
	}
	conn, err := grpc.NewClient(target, append(dial, o.dialOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("idem: client for %q: %w", target, err)
	}
	c := &Client{
		service:  idemv1.NewIdempotencyServiceClient(conn),
		admin:    idemv1.NewAdminServiceClient(conn),
		resolver: idemv1.NewResolverServiceClient(conn),
		conn:     conn,
		retry:    o.retry.withDefaults(),
	}
	if o.coalesce {
		c.claims = newCoalescer(c.claimKind())
		c.completes = newCoalescer(c.completeKind())
		c.fails = newCoalescer(c.failKind())
	}
	return c, nil
}

// Close closes the connection. Calls in flight fail with codes.Canceled.
func (c *Client) Close() error { return c.conn.Close() }

// IdempotencyService returns the generated IdempotencyService client on the
// Client's connection, with the same credentials. It is for RPCs without a
// typed call yet and for code that works with the protobuf messages: its
// errors are plain gRPC statuses, not decoded as the typed calls' are;
// Reason works on them.
func (c *Client) IdempotencyService() idemv1.IdempotencyServiceClient { return c.service }

// AdminService returns the generated AdminService client (ListRecords,
// DeleteRecord, Stats, …) on the Client's connection, with the same
// credentials. It is for operators' tools: its errors are plain gRPC
// statuses, not decoded as the typed calls' are; Reason works on them. When
// idemd runs with tenants, only tenants with admin: true may call it.
func (c *Client) AdminService() idemv1.AdminServiceClient { return c.admin }

// ResolverService returns the generated ResolverService client on the
// Client's connection, for WatchHeld and ListHeld; RunResolver and Resolve
// are the typed ways to decide held records.
func (c *Client) ResolverService() idemv1.ResolverServiceClient { return c.resolver }

// reconnect is how the channel redials a server that went away. gRPC's
// default backoff grows to two minutes, and an RPC made while the channel
// waits it out fails at once: a worker whose Complete meets a restart of
// idemd would give up on a server that is back. A redial of a loopback or
// LAN address that is refused costs little, so redial often.
var reconnect = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	// Without it, WithConnectParams would give a dial only as long as the
	// backoff delay: too short for a TLS handshake on a slow network.
	MinConnectTimeout: 20 * time.Second,
}

type bearerToken struct {
	token      string
	requireTLS bool
}

func (b bearerToken) GetRequestMetadata(_ context.Context, _ ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearerToken) RequireTransportSecurity() bool { return b.requireTLS }
