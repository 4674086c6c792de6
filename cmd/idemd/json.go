package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/idemhq/idem/server"
)

// jsonFlags are serve's flags for the HTTP/JSON API.
type jsonFlags struct {
	JSONListen string `name:"json-listen" default:"127.0.0.1:7072" env:"IDEM_JSON_LISTEN" help:"Address serving the API over HTTP: Connect (JSON) and gRPC-Web for every RPC, and the REST routes (/v1/namespaces/…), with the same TLS, authentication and tenants as the gRPC listener; empty turns it off."`
}

// validate applies the gRPC listener's protected-mode rule to the JSON
// listener: no address off this machine without authentication.
func (f *jsonFlags) validate(sec *securityFlags) error {
	if f.JSONListen == "" {
		return nil
	}
	if err := sec.validate(f.JSONListen); err != nil {
		return fmt.Errorf("--json-listen: %w", err)
	}
	return nil
}

// jsonAPI is the HTTP/JSON API's listener and server.
type jsonAPI struct {
	flag string // --json-listen as given, for the log
	lis  net.Listener
	srv  *http.Server
}

// listenJSON opens the JSON listener, nil when --json-listen is empty. It
// runs before serving starts, so that a port in use fails idemd's start.
func (f *jsonFlags) listenJSON() (*jsonAPI, error) {
	if f.JSONListen == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", f.JSONListen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (--json-listen): %w", f.JSONListen, err)
	}
	return &jsonAPI{flag: f.JSONListen, lis: lis}, nil
}

// serve starts serving the API of grpcServer (and svc) on the listener, with
// TLS (and client certificates) when --tls-cert is set. Errors after the
// start are logged.
func (j *jsonAPI) serve(svc *server.Service, grpcServer *grpc.Server, sec *securityFlags, logger *slog.Logger) error {
	if j == nil {
		return nil
	}
	handler, err := server.NewJSONHandler(svc, grpcServer)
	if err != nil {
		j.lis.Close()
		return err
	}
	lis := j.lis
	if sec.Config != "" && sec.TLSCert == "" && !isLoopback(lis.Addr().String()) {
		logger.Warn("bearer tokens cross the network in plaintext on --json-listen: pass --tls-cert and --tls-key, or terminate TLS in front of idemd")
	}
	j.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if sec.TLSCert != "" {
		cfg, err := sec.tlsConfig()
		if err != nil {
			j.lis.Close()
			return err
		}
		j.srv.TLSConfig = cfg
	}
	go func() {
		var err error
		if j.srv.TLSConfig != nil {
			err = j.srv.ServeTLS(lis, "", "") // the certificate is in TLSConfig; ServeTLS adds HTTP/2
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
	return listenAddr(j.flag, j.lis)
}

// shutdown stops accepting calls and waits for those in flight until ctx
// ends, then closes the connections.
func (j *jsonAPI) shutdown(ctx context.Context) {
	if j == nil || j.srv == nil {
		return
	}
	if err := j.srv.Shutdown(ctx); err != nil {
		_ = j.srv.Close()
	}
}
