package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

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

// jsonOptions are the HTTP/JSON API's options for server.New, nil when
// --json-listen is empty: TLS (and client certificates) when --tls-cert is
// set, the listener's timeouts and connections, and the console unless
// consoleOpts is nil.
func (f *jsonFlags) jsonOptions(sec *securityFlags, consoleOpts *console.Options) (*server.JSONOptions, error) {
	if f.JSONListen == "" {
		return nil, nil
	}
	opts := &server.JSONOptions{ReadTimeout: f.JSONReadTimeout, IdleTimeout: f.JSONIdleTimeout,
		WriteTimeout: f.JSONWriteTimeout, MaxConnections: f.JSONMaxConnections}
	if consoleOpts != nil {
		opts.Wrap = func(api http.Handler) http.Handler { return withConsole(console.Handler(*consoleOpts), api) }
	}
	if sec.TLSCert != "" {
		var err error
		if opts.TLS, err = sec.tlsConfig(); err != nil {
			return nil, err
		}
	}
	return opts, nil
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

// consoleURL is the console's address for the log, "" when it is off: the
// JSON listener's, with this machine's loopback address for every
// interface.
func (f *jsonFlags) consoleURL(lis net.Listener, tls bool) string {
	if lis == nil || !f.Console {
		return ""
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(listenAddr(f.JSONListen, lis))
	if err != nil {
		return ""
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + console.Path
}
