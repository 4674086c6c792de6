// Package idemtest runs a real idem server inside a Go test, so that the
// tests of a worker that uses the SDK (package client) need no idemd, no
// Postgres and no network: NewServer starts the same gRPC service idemd serves
// (validation, error mapping, interceptors, the state machine of DESIGN §1) on
// a random loopback port over a SQLite store in the test's temporary
// directory, hands back a connected client, and stops when the test ends.
//
//	func TestChargesOnce(t *testing.T) {
//		srv := idemtest.NewServer(t)
//		w := NewWorker(srv.Client) // your worker, on a *client.Client
//		...
//	}
//
// Each Server has a store of its own, so tests that call NewServer can run
// in parallel. The server runs no sweeper: a lapsed lease is still taken over
// by the next Claim, but nothing marks records EXPIRED or purges them.
//
// CheckHandler is a duplicate-delivery test kit on top of it: it runs a
// worker's handler (the function the worker passes to client.Do) through
// the deliveries a real queue produces, the worker that dies between its
// side effect and Complete and the lease that lapses under a stalled handler
// among them, counts the handler's side effect with a counter the test
// provides, and fails the test, for each case that did not make the effect
// exactly once inside the handler, with the window it ran twice (or was
// lost) in and the remedy.
package idemtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store/sqlite"
)

// Server is an idem server running in the test's process.
type Server struct {
	// Addr is the loopback host:port the server listens on, for clients of
	// your own (client.New(srv.Addr, client.WithInsecure())) or for a worker
	// under test that runs as a separate process.
	Addr string
	// Client is a client connected to Addr in plaintext, ready to use. The
	// server closes it.
	Client *client.Client

	server     *server.Server
	store      *sqlite.Store
	clientOpts []client.Option // the options of Client, after WithInsecure
	removeDir  string          // Start's own directory; NewServer's is the test's
	closeOnce  sync.Once
	closeErr   error
}

// Option changes the server NewServer or Start starts.
type Option func(*options)

type options struct {
	config      server.Config
	tenantsYAML *string
	clientOpts  []client.Option
	logger      *slog.Logger
}

// WithConfig sets the service's configuration: default lease and retention,
// result limit, tenants. Zero fields take idemd's defaults (a 5 minute lease,
// 24 hours of retention, 64 KiB results, one tenant without authentication),
// which is also what the server uses without this option.
func WithConfig(cfg server.Config) Option { return func(o *options) { o.config = cfg } }

// WithTenantsYAML serves the tenants of an idemd config file (the YAML that
// idemd serve --config reads), parsed and checked as idemd checks it, so a
// test runs with the tenants, token hashes, namespace allow-lists, rate
// limits, result limits and policies (on_lease_expiry: hold, leases) of
// production. A file of policies alone serves them, as idemd does, to the
// one tenant without authentication. It takes precedence over the Tenants
// and Policies of WithConfig. Give Server.Client a tenant's token with
// WithClientOptions(client.WithToken(token)); the config holds its hash,
// config.HashToken(token). A config that idemd would refuse fails NewServer
// (and Start) with idemd's message.
//
//	srv := idemtest.NewServer(t,
//		idemtest.WithTenantsYAML(`
//	tenants:
//	  - name: payments
//	    tokens: ["`+config.HashToken("test-token")+`"]
//	    namespaces: ["process_payment"]
//	`),
//		idemtest.WithClientOptions(client.WithToken("test-token")))
func WithTenantsYAML(yaml string) Option {
	return func(o *options) { o.tenantsYAML = &yaml }
}

// WithClientOptions are added to Server.Client's options, after
// client.WithInsecure: a retry policy, or client.WithToken when WithConfig
// sets tenants. None by default.
func WithClientOptions(opts ...client.Option) Option {
	return func(o *options) { o.clientOpts = append(o.clientOpts, opts...) }
}

// WithLogger receives the server's logs, one line per RPC. They are discarded
// by default.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// NewServer starts a server for the test t over a fresh SQLite store in
// t.TempDir(), and stops it when the test and its subtests end. It fails t
// when the server cannot start.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := start(t.TempDir(), false, opts)
	if err != nil {
		t.Fatalf("idemtest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("idemtest: %v", err)
		}
	})
	return s
}

// Start starts a server outside any one test, for a TestMain that shares one
// server across a package's tests, or for an example. Its store lives in a
// new temporary directory that Close removes; call Close when done.
func Start(opts ...Option) (*Server, error) {
	dir, err := os.MkdirTemp("", "idemtest-")
	if err != nil {
		return nil, fmt.Errorf("idemtest: %w", err)
	}
	s, err := start(dir, true, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("idemtest: %w", err)
	}
	return s, nil
}

func start(dir string, removeDir bool, opts []Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.tenantsYAML != nil {
		tenants, policies, err := parseTenants(*o.tenantsYAML, o.config.MaxResultBytes)
		if err != nil {
			return nil, err
		}
		o.config.Tenants, o.config.Policies = tenants, policies
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "idem.db"))
	if err != nil {
		return nil, err
	}
	srv, err := server.New(server.Options{Store: st, Config: o.config, Logger: o.logger})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	go func() { _ = srv.Serve(lis) }()
	addr := lis.Addr().String()
	c, err := client.New(addr, append([]client.Option{client.WithInsecure()}, o.clientOpts...)...)
	if err != nil {
		srv.Stop()
		_ = st.Close()
		return nil, err
	}
	s := &Server{Addr: addr, Client: c, server: srv, store: st, clientOpts: o.clientOpts}
	if removeDir {
		s.removeDir = dir
	}
	return s, nil
}

// parseTenants reads the tenants of a config file as idemd serve does: a
// file with tenants gives each its policies; a file of policies alone is
// served to the one default tenant without authentication.
func parseTenants(yaml string, maxResultBytes int) (*services.Tenants, []config.Policy, error) {
	file, err := config.Parse([]byte(yaml))
	if err != nil {
		return nil, nil, fmt.Errorf("WithTenantsYAML: %w", err)
	}
	if maxResultBytes == 0 {
		maxResultBytes = server.DefaultConfig().MaxResultBytes
	}
	if err := file.CheckMaxResultBytes(maxResultBytes); err != nil {
		return nil, nil, fmt.Errorf("WithTenantsYAML: %w", err)
	}
	if file.UsesClientCerts() {
		return nil, nil, errors.New("WithTenantsYAML: client_cert_subjects need TLS, and the idemtest server serves plaintext; give the tenant tokens")
	}
	if len(file.Tenants) == 0 {
		return nil, file.Policies, nil
	}
	tenants, err := services.NewTenants(file)
	if err != nil {
		return nil, nil, fmt.Errorf("WithTenantsYAML: %w", err)
	}
	return tenants, nil, nil
}

// Close stops the server at once, cutting off calls in flight, and closes
// Client and the store. Calls made afterwards, through Client or any other
// client, fail with UNAVAILABLE, as they would with idemd down. NewServer's
// servers close when their test ends; closing one earlier, to test what a
// worker does when idem is gone, is fine. Closing twice is not an error.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		_ = s.Client.Close() // fails only when the test closed it already
		s.server.Stop()
		errs := []error{s.store.Close()}
		if s.removeDir != "" {
			errs = append(errs, os.RemoveAll(s.removeDir))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
