package middleware

import (
	"errors"
	"net"
	"os"
	"time"

	"golang.org/x/net/netutil"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// ConnLimits bound what one client connection can make the server hold, and
// for how long. Without them grpc-go accepts 16 MiB of metadata per call,
// any number of calls in flight per connection, and keeps a connection that
// never sends a call open forever; and it decodes a call's whole header
// block before idem's authentication sees it, so even a caller without
// credentials could make idemd hold gigabytes. Zero fields take their
// defaults.
type ConnLimits struct {
	// MaxHeaderBytes bounds the metadata of one call (the HTTP/2 header
	// list, uncompressed, as HTTP/2 counts it: names, values and 32 bytes
	// per field). A call over it is refused before it is authenticated or
	// reaches a handler: a stream reset, or the connection closed when the
	// excess is large. It defaults to 16 KiB; a bearer token, a deadline and
	// tracing headers take well under 1 KiB.
	MaxHeaderBytes uint32
	// MaxConcurrentStreams bounds the calls in flight on one connection;
	// a client opens more connections or waits. It defaults to 100.
	MaxConcurrentStreams uint32
	// HandshakeTimeout bounds the TLS handshake and the HTTP/2 preface of a
	// new connection. It defaults to 10 seconds.
	HandshakeTimeout time.Duration
	// MaxConnectionIdle closes a connection (GOAWAY, then closed) that has
	// had no call in flight for this long, including one that never sent a
	// call after its preface. A client that does not answer the GOAWAY's
	// ping is cut off 5 seconds later. It defaults to 5 minutes.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge closes a connection this long (±10%) after it
	// opened, so that clients spread over replicas again; calls in flight
	// get MaxConnectionAgeGrace to finish. They default to 30 minutes and
	// 1 minute.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// KeepaliveTime is how long a connection may stay without any frame
	// before the server pings it; KeepaliveTimeout is how long it waits for
	// the answer before closing it. They default to 1 minute and 20 seconds.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the shortest interval at which a client may send
	// keepalive pings; one that pings more often is disconnected (GOAWAY
	// "too_many_pings"). Pings are allowed while no call is in flight. It
	// defaults to 10 seconds.
	KeepaliveMinTime time.Duration
}

// DefaultConnLimits returns the limits zero fields take.
func DefaultConnLimits() ConnLimits {
	return ConnLimits{
		MaxHeaderBytes:        16 << 10,
		MaxConcurrentStreams:  100,
		HandshakeTimeout:      10 * time.Second,
		MaxConnectionIdle:     5 * time.Minute,
		MaxConnectionAge:      30 * time.Minute,
		MaxConnectionAgeGrace: time.Minute,
		KeepaliveTime:         time.Minute,
		KeepaliveTimeout:      20 * time.Second,
		KeepaliveMinTime:      10 * time.Second,
	}
}

func (l ConnLimits) withDefaults() ConnLimits {
	d := DefaultConnLimits()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = d.MaxConcurrentStreams
	}
	set(&l.HandshakeTimeout, d.HandshakeTimeout)
	set(&l.MaxConnectionIdle, d.MaxConnectionIdle)
	set(&l.MaxConnectionAge, d.MaxConnectionAge)
	set(&l.MaxConnectionAgeGrace, d.MaxConnectionAgeGrace)
	set(&l.KeepaliveTime, d.KeepaliveTime)
	set(&l.KeepaliveTimeout, d.KeepaliveTimeout)
	set(&l.KeepaliveMinTime, d.KeepaliveMinTime)
	return l
}

// ServerOptions are the gRPC server options that enforce l.
func (l ConnLimits) ServerOptions() []grpc.ServerOption {
	l = l.withDefaults()
	return []grpc.ServerOption{
		grpc.MaxHeaderListSize(l.MaxHeaderBytes),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     l.MaxConnectionIdle,
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
			Time:                  l.KeepaliveTime,
			Timeout:               l.KeepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
	}
}

// LimitListener bounds the connections of an HTTP listener: at most max
// open at once (a new one waits to be accepted until another closes), and
// a write that makes no progress for writeTimeout fails, which closes the
// connection. http.Server's WriteTimeout would not do: it bounds a whole
// request and its answer from the request's headers on, so it would cut a
// Claim that waits (ClaimRequest.wait) longer; and without a bound a
// client that stops reading holds its connection for as long as it lives.
func LimitListener(lis net.Listener, max int, writeTimeout time.Duration) net.Listener {
	return netutil.LimitListener(writeTimeoutListener{Listener: lis, timeout: writeTimeout}, max)
}

// writeTimeoutListener gives its connections a write timeout.
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
