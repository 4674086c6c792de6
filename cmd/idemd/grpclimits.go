package main

import (
	"fmt"
	"time"

	"github.com/idemhq/idem/server/middleware"
)

// connFlags are serve's bounds on what one client connection can make idemd
// hold (middleware.ConnLimits has the why of each).
type connFlags struct {
	GRPCMaxHeaderBytes        int           `name:"grpc-max-header-bytes" default:"16384" env:"IDEM_GRPC_MAX_HEADER_BYTES" help:"Largest metadata (HTTP/2 header list) one call may send, in bytes (1 KiB to 1 MiB); a bigger one is refused before authentication."`
	GRPCMaxConcurrentStreams  int           `name:"grpc-max-concurrent-streams" default:"100" env:"IDEM_GRPC_MAX_CONCURRENT_STREAMS" help:"Calls in flight on one client connection (1 to 10000)."`
	GRPCHandshakeTimeout      time.Duration `name:"grpc-handshake-timeout" default:"10s" env:"IDEM_GRPC_HANDSHAKE_TIMEOUT" help:"Time a new connection has for its TLS handshake and HTTP/2 preface."`
	GRPCMaxConnectionIdle     time.Duration `name:"grpc-max-connection-idle" default:"5m" env:"IDEM_GRPC_MAX_CONNECTION_IDLE" help:"A connection with no call in flight for this long, or that never sent one, is closed (GOAWAY)."`
	GRPCMaxConnectionAge      time.Duration `name:"grpc-max-connection-age" default:"30m" env:"IDEM_GRPC_MAX_CONNECTION_AGE" help:"A connection is closed (GOAWAY) this long (±10%) after it opened, so clients spread over replicas again."`
	GRPCMaxConnectionAgeGrace time.Duration `name:"grpc-max-connection-age-grace" default:"1m" env:"IDEM_GRPC_MAX_CONNECTION_AGE_GRACE" help:"Time the calls in flight on a connection closed for its age have to finish."`
	GRPCKeepaliveTime         time.Duration `name:"grpc-keepalive-time" default:"1m" env:"IDEM_GRPC_KEEPALIVE_TIME" help:"idemd pings a connection that has sent nothing for this long, and closes it when --grpc-keepalive-timeout passes without an answer."`
	GRPCKeepaliveTimeout      time.Duration `name:"grpc-keepalive-timeout" default:"20s" env:"IDEM_GRPC_KEEPALIVE_TIMEOUT" help:"How long idemd waits for the answer to its keepalive ping before it closes the connection."`
	GRPCKeepaliveMinTime      time.Duration `name:"grpc-keepalive-min-time" default:"10s" env:"IDEM_GRPC_KEEPALIVE_MIN_TIME" help:"Shortest interval at which a client may send keepalive pings; one that pings more often is disconnected."`
}

// validate checks the bounds; every duration must be positive.
func (f *connFlags) validate() error {
	if f.GRPCMaxHeaderBytes < 1<<10 || f.GRPCMaxHeaderBytes > 1<<20 {
		return fmt.Errorf("--grpc-max-header-bytes is %d; it must be between %d and %d", f.GRPCMaxHeaderBytes, 1<<10, 1<<20)
	}
	if f.GRPCMaxConcurrentStreams < 1 || f.GRPCMaxConcurrentStreams > 10000 {
		return fmt.Errorf("--grpc-max-concurrent-streams is %d; it must be between 1 and 10000", f.GRPCMaxConcurrentStreams)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"grpc-handshake-timeout", f.GRPCHandshakeTimeout},
		{"grpc-max-connection-idle", f.GRPCMaxConnectionIdle},
		{"grpc-max-connection-age", f.GRPCMaxConnectionAge},
		{"grpc-max-connection-age-grace", f.GRPCMaxConnectionAgeGrace},
		{"grpc-keepalive-time", f.GRPCKeepaliveTime},
		{"grpc-keepalive-timeout", f.GRPCKeepaliveTimeout},
		{"grpc-keepalive-min-time", f.GRPCKeepaliveMinTime},
	} {
		if d.v <= 0 {
			return fmt.Errorf("--%s is %s; it must be positive", d.name, d.v)
		}
	}
	return nil
}

// limits are the flags as middleware.ConnLimits.
func (f *connFlags) limits() middleware.ConnLimits {
	return middleware.ConnLimits{
		MaxHeaderBytes:        uint32(f.GRPCMaxHeaderBytes),
		MaxConcurrentStreams:  uint32(f.GRPCMaxConcurrentStreams),
		HandshakeTimeout:      f.GRPCHandshakeTimeout,
		MaxConnectionIdle:     f.GRPCMaxConnectionIdle,
		MaxConnectionAge:      f.GRPCMaxConnectionAge,
		MaxConnectionAgeGrace: f.GRPCMaxConnectionAgeGrace,
		KeepaliveTime:         f.GRPCKeepaliveTime,
		KeepaliveTimeout:      f.GRPCKeepaliveTimeout,
		KeepaliveMinTime:      f.GRPCKeepaliveMinTime,
	}
}
