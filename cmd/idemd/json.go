package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"

	"github.com/idemhq/idem/console"
	"github.com/idemhq/idem/server"
)

// jsonFlags are serve's flags for the HTTP/JSON API.
type jsonFlags struct {
	JSONListen         string        `name:"json-listen" default:"127.0.0.1:7072" env:"IDEM_JSON_LISTEN" help:"Address serving the API over HTTP/1.1 and HTTP/2 (h2c without TLS): Connect (JSON) and gRPC-Web for every RPC, and the REST routes (/v1/namespaces/…), with the same TLS, authentication and tenants as the gRPC listener; empty turns it off."`
	JSONReadTimeout    time.Duration `name:"json-read-timeout" default:"10s" env:"IDEM_JSON_READ_TIMEOUT" help:"Time a request on --json-listen has to send its headers and body; a slower one is cut off."`
	JSONIdleTimeout    time.Duration `name:"json-idle-timeout" default:"2m" env:"IDEM_JSON_IDLE_TIMEOUT" help:"A connection on --json-listen with no request in flight for this long is closed."`
	JSONWriteTimeout   time.Duration `name:"json-write-timeout" default:"10s" env:"IDEM_JSON_WRITE_TIMEOUT" help:"A connection on --json-listen whose client reads nothing of an answer for this long is closed."`
	JSONMaxConnections int           `name:"json-max-connections" default:"1024" env:"IDEM_JSON_MAX_CONNECTIONS" help:"Most connections --json-listen holds open at once (1 to 1000000); a new one waits to be accepted until another closes."`
	Console            bool          `default:"true" negatable:"" env:"IDEM_CONSOLE" help:"Serve the operator console, a web app that lists records and resolves held ones through the AdminService, at /console/ on --json-listen. A token signs in to it and reaches what it reaches through the API."`
}

// validate applies the gRPC listener's protected-mode rule to the JSON
// listener: no address off this machine without authentication; and checks
// its bounds.
func (f *jsonFlags) validate(sec *securityFlags) error {
	if f.JSONReadTimeout <= 0 {
		return fmt.Errorf("--json-read-timeout is %s; it must be positive", f.JSONReadTimeout)
	}
	if f.JSONIdleTimeout <= 0 {
		return fmt.Errorf("--json-idle-timeout is %s; it must be positive", f.JSONIdleTimeout)
	}
	if f.JSONWriteTimeout <= 0 {
		return fmt.Errorf("--json-write-timeout is %s; it must be positive", f.JSONWriteTimeout)
	}
	if f.JSONMaxConnections < 1 || f.JSONMaxConnections > 1_000_000 {
		return fmt.Errorf("--json-max-connections is %d; it must be between 1 and 1000000", f.JSONMaxConnections)
	}
	if f.JSONListen == "" {
		return nil
	}
	if err := sec.validate(f.JSONListen); err != nil {
		return fmt.Errorf("--json-listen: %w", err)
	}
	return nil
}

// jsonAPI is the HTTP/JSON API's listener and servers.
type jsonAPI struct {
	flags *jsonFlags
	lis   net.Listener
	srv   *http.Server
	// grpc serves the API's calls in process (server.NewJSONHandler), apart
	// from the gRPC listener's server, so that each drains on its own.
	grpc    *grpc.Server
	logger  *slog.Logger
	console bool // serving the console
	tls     bool // serving TLS
}

// withConsole serves the console under console.Path and everything else
// with api; the root, where a browser pointed at the listener lands,
// redirects to the console. It matches the path itself rather than with an
// http.ServeMux, which would clean and redirect the API's REST paths (a key
// may hold "//" or "..").
func withConsole(consoleHandler, api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, console.Path) || r.URL.Path == strings.TrimSuffix(console.Path, "/"):
			consoleHandler.ServeHTTP(w, r)
		case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			http.Redirect(w, r, console.Path, http.StatusFound)
		default:
			api.ServeHTTP(w, r)
		}
	})
}

// consoleURL is the console's address for the log, "" when it is off.
func (j *jsonAPI) consoleURL() string {
	if j == nil || !j.console {
		return ""
	}
	scheme := "http"
	if j.tls {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(j.addr())
	if err != nil {
		return ""
	}
	switch host {
	case "", "0.0.0.0", "::":
		// Every interface: this machine's loopback address reaches it.
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + console.Path
}

// listenJSON opens the JSON listener, nil when --json-listen is empty. It
// runs before serving starts, so that a port in use fails idemd's start.
func (f *jsonFlags) listenJSON() (*jsonAPI, error) {
	if f.JSONListen == "" {
		return nil, nil
	}
	lis, err := listen(f.JSONListen, "--json-listen", "IDEM_JSON_LISTEN")
	if err != nil {
		return nil, err
	}
	return &jsonAPI{flags: f, lis: lis}, nil
}

// serve starts serving the API of svc on the listener, with TLS (and
// client certificates) when --tls-cert is set, and the console unless
// consoleOpts is nil. Errors after the start are logged.
func (j *jsonAPI) serve(svc *server.Service, sec *securityFlags, consoleOpts *console.Options, logger *slog.Logger) error {
	if j == nil {
		return nil
	}
	// Without the TLS credentials of the gRPC listener: a server that only
	// ServeHTTP feeds gets the connection's TLS from the http.Server.
	j.grpc, _ = server.NewGRPCServer(svc, logger)
	j.logger = logger
	handler, err := server.NewJSONHandler(svc, j.grpc, logger)
	if err != nil {
		j.lis.Close()
		return err
	}
	if consoleOpts != nil {
		handler = withConsole(console.Handler(*consoleOpts), handler)
		j.console = true
	}
	if sec.Config != "" && sec.TLSCert == "" && !isLoopback(j.lis.Addr().String()) {
		logger.Warn("bearer tokens cross the network in plaintext on --json-listen: pass --tls-cert and --tls-key, or terminate TLS in front of idemd")
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if sec.TLSCert != "" {
		protocols.SetHTTP2(true)
	} else {
		// HTTP/2 with prior knowledge (h2c), which Connect clients and
		// gRPC-Web proxies may speak without TLS.
		protocols.SetUnencryptedHTTP2(true)
	}
	j.srv = &http.Server{
		Handler: handler,
		// The whole request, headers and body, within the read timeout: a
		// client that trickles its body is cut off, not waited for.
		ReadTimeout:    j.flags.JSONReadTimeout,
		IdleTimeout:    j.flags.JSONIdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		Protocols:      &protocols,
	}
	if sec.TLSCert != "" {
		cfg, err := sec.tlsConfig()
		if err != nil {
			j.lis.Close()
			return err
		}
		j.srv.TLSConfig = cfg
		j.tls = true
	}
	lis := netutil.LimitListener(writeTimeoutListener{Listener: j.lis, timeout: j.flags.JSONWriteTimeout}, j.flags.JSONMaxConnections)
	go func() {
		var err error
		if j.srv.TLSConfig != nil {
			err = j.srv.ServeTLS(lis, "", "") // the certificate is in TLSConfig
		} else {
			err = j.srv.Serve(lis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP/JSON listener stopped", "error", err)
		}
	}()
	return nil
}

// addr is the listener's address, "" when it is off.
func (j *jsonAPI) addr() string {
	if j == nil {
		return ""
	}
	return listenAddr(j.flags.JSONListen, j.lis)
}

// shutdown stops accepting connections and waits for the calls in flight
// until ctx ends, then closes the connections and stops the API's gRPC
// server. Its calls run until they answer: only once none is left is the
// gRPC server stopped, whose stop would cut them.
func (j *jsonAPI) shutdown(ctx context.Context) {
	if j == nil || j.srv == nil {
		return
	}
	if err := j.srv.Shutdown(ctx); err != nil {
		j.logger.Warn("shutdown timeout passed: cutting off the remaining HTTP/JSON calls")
		_ = j.srv.Close()
	}
	j.grpc.Stop()
}

// writeTimeoutListener gives its connections a write timeout: a write that
// makes no progress for timeout fails, and the server closes the
// connection. http.Server's WriteTimeout would not do: it bounds a whole
// request and its answer from the request's headers on, so it would cut a
// Claim that waits (ClaimRequest.wait) longer; and without a bound a client
// that stops reading holds its connection, one of --json-max-connections,
// for as long as it lives.
type writeTimeoutListener struct {
	net.Listener
	timeout time.Duration
}

func (l writeTimeoutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeTimeoutConn{Conn: c, timeout: l.timeout}, nil
}

type writeTimeoutConn struct {
	net.Conn
	timeout time.Duration
}

// Write writes b with a deadline that moves on whenever some of b is
// written: a client that reads, however slowly, is not cut off.
func (c *writeTimeoutConn) Write(b []byte) (int, error) {
	var written int
	for {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
			return written, err
		}
		n, err := c.Conn.Write(b[written:])
		written += n
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
	}
}
