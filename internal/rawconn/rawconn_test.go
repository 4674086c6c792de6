//go:build linux

package rawconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
)

// pair returns a wrapped server side and a plain client side of one TCP
// connection on loopback.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- wrap(c) // Wrap itself, under the race detector, would not
	}()
	client, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	t.Cleanup(func() { server.Close(); client.Close() })
	c, ok := server.(*Conn)
	if !ok {
		t.Fatalf("Accept gave a %T; want a *Conn", server)
	}
	return c, client
}

// TestRoundTrip: what one side writes the other reads, both ways, and a
// write far larger than the socket's buffers waits for room until all of it
// is written.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	server, client := pair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	var got []byte
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		got, err = io.ReadAll(io.LimitReader(client, int64(len(big))))
		if err != nil {
			t.Error(err)
		}
	})
	n, err := server.Write(big)
	if err != nil || n != len(big) {
		t.Fatalf("Write: %d, %v; want %d", n, err, len(big))
	}
	wg.Wait()
	if !bytes.Equal(got, big) {
		t.Fatalf("the client read %d bytes, not the %d written", len(got), len(big))
	}

	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err = io.ReadAtLeast(server, buf, 5)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}
	if n, err := server.Read(nil); n != 0 || err != nil {
		t.Fatalf("an empty Read: %d, %v; want 0, nil", n, err)
	}
}

// TestEOF: a read after the peer closed is io.EOF.
func TestEOF(t *testing.T) {
	t.Parallel()
	server, client := pair(t)
	client.Close()
	if n, err := server.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed: %d, %v; want io.EOF", n, err)
	}
}

// TestDeadlines: a read or write past its deadline is a timeout, as the net
// package's is, and the connection still works once the deadline is lifted.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	server, client := pair(t)
	if err := server.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := server.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline: %v; want a timeout", err)
	}
	if err := server.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, err := server.Read(make([]byte, 8)); n != 1 || err != nil {
		t.Fatalf("Read once the deadline is lifted: %d, %v", n, err)
	}

	// Nobody reads: the write fills the socket's buffers and times out,
	// having written part of it.
	huge := make([]byte, 64<<20)
	if err := server.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := server.Write(huge)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n <= 0 || n >= 64<<20 {
		t.Fatalf("Write past its deadline: %d, %v; want part written and a timeout", n, err)
	}
}

// TestCloseWhileReading: Close makes a waiting Read return net.ErrClosed.
func TestCloseWhileReading(t *testing.T) {
	t.Parallel()
	server, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := server.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	server.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read on a closed connection: %v; want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read did not return after Close")
	}
}

// countingPool is a buffer pool that counts the buffers out.
type countingPool struct {
	mem.BufferPool
	out atomic.Int64
}

func (p *countingPool) Get(n int) *[]byte { p.out.Add(1); return p.BufferPool.Get(n) }
func (p *countingPool) Put(b *[]byte)     { p.out.Add(-1); p.BufferPool.Put(b) }

// TestReadOnReady: grpc-go's read takes its buffer only once there is
// something to read, and gives it back when the read ends without data.
func TestReadOnReady(t *testing.T) {
	t.Parallel()
	server, client := pair(t)
	pool := &countingPool{BufferPool: mem.DefaultBufferPool()}
	type result struct {
		buf *[]byte
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		buf, n, err := server.ReadOnReady(32<<10, pool)
		done <- result{buf, n, err}
	}()
	time.Sleep(20 * time.Millisecond)
	if out := pool.out.Load(); out != 0 {
		t.Fatalf("%d buffers out while nothing was sent; want none", out)
	}
	if _, err := client.Write([]byte("frame")); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.buf == nil || string((*r.buf)[:r.n]) != "frame" {
		t.Fatalf("ReadOnReady: %d bytes, %v", r.n, r.err)
	}
	pool.Put(r.buf)

	client.Close()
	if buf, n, err := server.ReadOnReady(32<<10, pool); buf != nil || n != 0 || err != io.EOF {
		t.Fatalf("ReadOnReady after the peer closed: %v, %d, %v; want no buffer and io.EOF", buf, n, err)
	}
	if out := pool.out.Load(); out != 0 {
		t.Fatalf("%d buffers still out; want every one back", out)
	}
}

// TestConcurrentReadsAndWrites: a reader and a writer on each side at once,
// as a gRPC transport runs them.
func TestConcurrentReadsAndWrites(t *testing.T) {
	t.Parallel()
	server, client := pair(t)
	const n = 2000
	msg := []byte("0123456789")
	var wg sync.WaitGroup
	for _, side := range []net.Conn{server, client} {
		wg.Go(func() {
			for range n {
				if _, err := side.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() {
			if _, err := io.ReadFull(side, make([]byte, n*len(msg))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// TestWrapOthers: Wrap leaves a connection other than a TCPConn as it is.
func TestWrapOthers(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if wrap(a) != a {
		t.Fatal("Wrap changed a net.Pipe connection")
	}
}

// TestListener: the listener's connections have raw reads and writes,
// except under the race detector (Wrap).
func TestListener(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		if c, err := net.Dial("tcp", lis.Addr().String()); err == nil {
			defer c.Close()
			_, _ = c.Write([]byte("x"))
		}
	}()
	c, err := Listener{lis}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, raw := c.(*Conn); raw == raceEnabled {
		t.Fatalf("Accept gave a %T with the race detector %v", c, raceEnabled)
	}
	if n, err := c.Read(make([]byte, 8)); n != 1 || err != nil {
		t.Fatalf("Read: %d, %v", n, err)
	}
}

// TestSetEnabled: after SetEnabled(false) Wrap gives connections back as the
// net package made them, and SetEnabled(true) brings raw ones back.
func TestSetEnabled(t *testing.T) {
	server, client := pair(t)
	defer server.Close()
	defer client.Close()
	plain := server.TCPConn
	SetEnabled(false)
	defer SetEnabled(true)
	if got := Wrap(plain); got != net.Conn(plain) {
		t.Fatalf("Wrap after SetEnabled(false) gave a %T", got)
	}
	SetEnabled(true)
	if _, raw := Wrap(plain).(*Conn); raw == raceEnabled {
		t.Fatalf("Wrap after SetEnabled(true) gave raw %v with the race detector %v", raw, raceEnabled)
	}
}
