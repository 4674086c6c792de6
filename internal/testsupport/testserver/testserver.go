// Package testserver starts a real idem server for tests (server.New): the
// real services and interceptors on a loopback TCP port, and the HTTP/JSON
// API on another when asked, over a fresh Postgres schema from testdb. It
// stops in t.Cleanup.
package testserver

import (
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// Server is a running test server.
type Server struct {
	// Addr is the loopback host:port the server listens on.
	Addr string
	// DB is the server's schema.
	DB *testdb.DB
	// Store is the store the server runs on.
	Store *postgres.Store
	// Conn is a plaintext client connection to Addr.
	Conn *grpc.ClientConn
	// Client is the generated client on Conn.
	Client idemv1.IdempotencyServiceClient
	// Admin is the generated AdminService client on Conn.
	Admin idemv1.AdminServiceClient
	// Server is the server itself.
	Server *server.Server
	// JSONURL is the base URL (http://127.0.0.1:port) of the HTTP/JSON API,
	// when Options.JSON asked for it.
	JSONURL string
}

// Options change the test server.
type Options struct {
	// Config is the service's configuration; zero fields take defaults.
	Config server.Config
	// Store, when set, replaces the Postgres store the service runs on (for
	// wrapping it, e.g. to count or fail calls). It receives the real store.
	Store func(*postgres.Store) store.Store
	// ServerOptions are appended to the gRPC server's options.
	ServerOptions []grpc.ServerOption
	// DBOptions are passed to testdb.New.
	DBOptions []testdb.Option
	// Logger receives the server's logs; discarded when nil.
	Logger *slog.Logger
	// ClientCreds are Conn's transport credentials; plaintext when nil. Set
	// them when ServerOptions serve TLS.
	ClientCreds credentials.TransportCredentials
	// DialOptions are appended to Conn's options (per-RPC credentials, …).
	DialOptions []grpc.DialOption
	// JSON also serves the HTTP/JSON API on a loopback port of its own,
	// plaintext, at JSONURL.
	JSON bool
}

// Start starts a server with default options.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith starts a server with opts.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	db := testdb.New(t, opts.DBOptions...)
	pgStore := postgres.New(db.Pool)
	t.Cleanup(pgStore.Close)
	var st store.Store = pgStore
	if opts.Store != nil {
		st = opts.Store(pgStore)
	}
	serverOpts := server.Options{Store: st, Config: opts.Config, Logger: opts.Logger, GRPCOptions: opts.ServerOptions}
	if opts.JSON {
		serverOpts.JSON = &server.JSONOptions{}
	}
	srv, err := server.New(serverOpts)
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	t.Cleanup(srv.Stop)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go func() { _ = srv.Serve(lis) }()
	var jsonURL string
	if opts.JSON {
		jsonLis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		go func() { _ = srv.ServeJSON(jsonLis) }()
		jsonURL = "http://" + jsonLis.Addr().String()
	}

	creds := opts.ClientCreds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts.DialOptions...)...)
	if err != nil {
		t.Fatalf("dial test server: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &Server{
		JSONURL: jsonURL,
		Addr:    lis.Addr().String(),
		DB:      db,
		Store:   pgStore,
		Conn:    conn,
		Client:  idemv1.NewIdempotencyServiceClient(conn),
		Admin:   idemv1.NewAdminServiceClient(conn),
		Server:  srv,
	}
}
