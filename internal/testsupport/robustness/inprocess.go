package robustness

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlite"
)

// ServeInProcess serves the real gRPC service on a loopback port over a
// SQLite store in t's temporary directory, with wrap applied to the store
// (nil: none), and returns its address. It stops when t ends. The checker's
// own tests use it with a store broken on purpose.
func ServeInProcess(t testing.TB, wrap func(store.Store) store.Store) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatalf("open SQLite: %v", err)
	}
	var s store.Store = st
	if wrap != nil {
		s = wrap(st)
	}
	srv, err := server.New(server.Options{Store: s})
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		_ = st.Close()
	})
	return lis.Addr().String()
}
