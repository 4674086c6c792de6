package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/middleware"
)

// rawConn is an HTTP/2 client that sends what a well-behaved gRPC client
// never would: oversized header blocks, or nothing at all after its preface.
type rawConn struct {
	t    testing.TB
	conn net.Conn
	wmu  sync.Mutex
	fr   *http2.Framer

	mu     sync.Mutex
	resets map[uint32]http2.ErrCode // RST_STREAM per stream
	status map[uint32]string        // grpc-status of responses: a handler answered
	goAway bool
	pinged chan struct{} // closed at the first PING ack
	closed chan struct{} // closed when the server closed the connection
}

// dialRaw opens a connection and sends the client preface and SETTINGS.
// The reader answers nothing: not the server's SETTINGS, not its PINGs.
func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r := &rawConn{
		t: t, conn: conn, fr: http2.NewFramer(conn, conn),
		resets: map[uint32]http2.ErrCode{}, status: map[uint32]string{},
		pinged: make(chan struct{}), closed: make(chan struct{}),
	}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatalf("preface: %v", err)
	}
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatalf("settings: %v", err)
	}
	go r.read()
	return r
}

func (r *rawConn) read() {
	defer close(r.closed)
	pinged := false
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			return
		}
		r.mu.Lock()
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			r.resets[f.StreamID] = f.ErrCode
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" || f.StreamEnded() {
				for _, hf := range f.Fields {
					if hf.Name == "grpc-status" {
						r.status[f.StreamID] = hf.Value
					}
				}
			}
		case *http2.GoAwayFrame:
			r.goAway = true
		case *http2.PingFrame:
			if f.IsAck() && !pinged {
				pinged = true
				close(r.pinged)
			}
		}
		r.mu.Unlock()
	}
}

// call opens stream id as a Lookup whose metadata holds a header of size
// bytes, and sends no message: a handler that got it would wait for one,
// holding the metadata. It returns false once the server closed the
// connection under it.
func (r *rawConn) call(id uint32, size int) bool {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/idem.v1.IdempotencyService/Lookup"},
		{Name: ":authority", Value: "idem"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(hf)
	}
	// Fields of 4 KiB at most: one longer than the whole limit would close
	// the connection whatever the total.
	for i := 0; size > 0; i++ {
		n := min(size, 4<<10)
		size -= n
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-flood-%d", i), Value: strings.Repeat("x", n)})
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	b := block.Bytes()
	const frame = 16 << 10
	first := b[:min(frame, len(b))]
	b = b[len(first):]
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(b) == 0}); err != nil {
		return false
	}
	for len(b) > 0 {
		chunk := b[:min(frame, len(b))]
		b = b[len(chunk):]
		if err := r.fr.WriteContinuation(id, len(b) == 0, chunk); err != nil {
			return false
		}
	}
	return true
}

// sync sends a PING and waits for its ack or for the connection to close:
// the server reads frames in order, so either way it has dealt with every
// header block sent before.
func (r *rawConn) sync() {
	r.wmu.Lock()
	_ = r.fr.WritePing(false, [8]byte{1})
	r.wmu.Unlock()
	select {
	case <-r.pinged:
	case <-r.closed:
	case <-time.After(60 * time.Second):
		r.t.Fatalf("no PING ack and no close within 60s")
	}
}

// countCalls is a server option that counts the calls that reached the
// interceptor chain, before authentication.
func countCalls(n *atomic.Int64) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		n.Add(1)
		return h(ctx, req)
	})
}

// TestOversizedMetadataIsRefused: a call whose metadata is over
// MaxHeaderBytes never reaches a handler or an interceptor. A client that
// ignores the server's SETTINGS gets its stream reset (a little over) or its
// connection closed (far over); grpc-go's client refuses to send it
// (INTERNAL); a call under the limit goes through on the same server.
func TestOversizedMetadataIsRefused(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	ts := testserver.StartWith(t, testserver.Options{ServerOptions: []grpc.ServerOption{countCalls(&calls)}})
	limit := int(middleware.DefaultConnLimits().MaxHeaderBytes)

	little := dialRaw(t, ts.Addr)
	little.call(1, limit+1024)
	little.sync()
	little.mu.Lock()
	code, reset := little.resets[1]
	answered := little.status[1]
	little.mu.Unlock()
	if !reset || code != http2.ErrCodeFrameSize || answered != "" {
		t.Errorf("header list of %d bytes: reset %v (code %v), grpc-status %q; want the stream reset with FRAME_SIZE_ERROR", limit+1024, reset, code, answered)
	}

	far := dialRaw(t, ts.Addr)
	far.call(1, 4<<20)
	select {
	case <-far.closed:
	case <-time.After(60 * time.Second):
		t.Fatal("header list of 4 MiB: the connection is still open after 60s")
	}
	far.mu.Lock()
	if len(far.status) != 0 {
		t.Errorf("header list of 4 MiB: answered %v; want no answer", far.status)
	}
	far.mu.Unlock()

	ctx := metadata.AppendToOutgoingContext(testContext(t), "x-flood", strings.Repeat("x", 2*limit))
	_, err := ts.Client.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: "k"})
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "header list size") {
		t.Errorf("grpc-go client with %d bytes of metadata: %v; want INTERNAL about the header list size", 2*limit, err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d oversized calls reached the interceptors; want none", n)
	}

	ctx = metadata.AppendToOutgoingContext(testContext(t), "x-small", strings.Repeat("x", limit/2))
	_, err = ts.Client.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: "k"})
	requireStatus(t, err, codes.NotFound, "NOT_FOUND")
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls reached the interceptors after one within the limit; want 1", n)
	}
}

// liveHeap is the heap in use after a full collection: what the process
// holds, not what it has yet to collect.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestHeaderFloodHoldsNoMemory: 8 connections each opening 8 calls with
// 1 MiB of metadata and never sending their message (what grpc-go's 16 MiB
// default let an unauthenticated client do to make idemd hold gigabytes)
// leave the server's live heap about where it was. Not parallel: it
// measures the heap of the whole test process.
func TestHeaderFloodHoldsNoMemory(t *testing.T) {
	ts := testserver.Start(t)
	const conns, streams, size = 8, 8, 1 << 20
	before := liveHeap()

	var raws []*rawConn
	for range conns {
		raws = append(raws, dialRaw(t, ts.Addr))
	}
	var wg sync.WaitGroup
	for _, r := range raws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range streams {
				if !r.call(uint32(2*i+1), size) {
					return // the server closed the connection
				}
			}
		}()
	}
	wg.Wait()
	for _, r := range raws {
		r.sync()
	}
	after := liveHeap()
	sent := uint64(conns * streams * size)
	// Generous: a fraction of what the flood sent, far above what a
	// server that refuses it keeps (~0), far below what one that holds it
	// keeps (all of it).
	if after > before && after-before > sent/4 {
		t.Fatalf("live heap grew by %d MiB while %d MiB of metadata waited in %d calls; want under %d MiB",
			(after-before)>>20, sent>>20, conns*streams, sent/4>>20)
	}
	t.Logf("live heap %d MiB before, %d MiB after %d MiB of metadata", before>>20, after>>20, sent>>20)
	for _, r := range raws {
		r.mu.Lock()
		if len(r.status) != 0 {
			t.Errorf("flood calls answered: %v", r.status)
		}
		r.mu.Unlock()
	}
}

// TestSilentConnectionIsClosed: a connection that completes its preface and
// then says nothing, not even answering pings, is closed once it has been
// idle for MaxConnectionIdle (and the GOAWAY's ping went unanswered for 5s).
func TestSilentConnectionIsClosed(t *testing.T) {
	t.Parallel()
	ts := testserver.StartWith(t, testserver.Options{Config: server.Config{ConnLimits: middleware.ConnLimits{MaxConnectionIdle: 100 * time.Millisecond}}})
	r := dialRaw(t, ts.Addr)
	select {
	case <-r.closed:
	case <-time.After(60 * time.Second):
		t.Fatal("a silent connection is still open after 60s; MaxConnectionIdle is 100ms")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.goAway {
		t.Error("the server closed the silent connection without a GOAWAY")
	}
	var buf [1]byte
	_ = r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.conn.Read(buf[:]); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after the server let go: %v; want the connection closed", err)
	}
}
