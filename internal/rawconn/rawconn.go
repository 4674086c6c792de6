//go:build linux

// Package rawconn gives TCP connections whose reads and writes are raw
// system calls, which the Go scheduler does not hear of.
//
// A read or write of a non-blocking socket never blocks, but the net
// package makes it as it makes any system call, through the runtime's
// entersyscall and exitsyscall. When a process is idle between calls, as
// idemd is with one call in flight, the first such call after each idle
// spell wakes the runtime's monitor thread (sysmon) from its deep sleep,
// and the monitor then polls every 20 µs until every P is idle again; a
// write that outlasts two of its polls also has its P taken and handed to
// another thread, which wakes to find nothing to do. On a 2-vCPU VM at one
// call in flight the monitor took a third of idemd's CPU
// (docs/BENCHMARKS.md). A raw read or write does none of that: the
// goroutine keeps its P through it, as through any short computation, and
// waits for the socket in the runtime's netpoller exactly as the net
// package does (syscall.RawConn).
//
// What the monitor no longer sees: with the monitor asleep, a goroutine
// that computes for more than 10 ms without blocking is not preempted
// until the next timer or ordinary system call wakes the monitor. idemd's
// handlers block on the network and the database within microseconds; a
// process with long computations between its reads would want the monitor
// awake.
package rawconn

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"google.golang.org/grpc/mem"
)

// Conn is a TCP connection with raw reads and writes. Everything else
// (deadlines, addresses, Close, keep-alives) is the TCPConn's own.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

	// One read and one write at a time, each with its state in these
	// fields and its callback made once, so that a read or write
	// allocates nothing.
	rmu     sync.Mutex
	rbuf    []byte
	rpool   mem.BufferPool // ReadOnReady's, with rsize
	rsize   int
	rready  *[]byte
	rn      int
	rerrno  syscall.Errno
	readFn  func(fd uintptr) bool
	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool
}

// Wrap returns c with raw reads and writes when c is a *net.TCPConn, and
// c itself otherwise or after SetEnabled(false).
//
// Under the race detector Wrap returns c as it is: the net package's reads
// and writes tell the detector that what one goroutine wrote before a
// write happened before what another does after the read, as between a
// client and a server in one test process, and raw system calls would not.
func Wrap(c net.Conn) net.Conn {
	if raceEnabled || off.Load() {
		return c
	}
	return wrap(c)
}

func wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	conn := &Conn{TCPConn: tc, rc: rc}
	conn.readFn = conn.read
	conn.writeFn = conn.write
	return conn
}

// read is one raw read into rbuf, or into a buffer of rsize from rpool
// when rpool is set; false when the socket has nothing to read yet.
func (c *Conn) read(fd uintptr) bool {
	buf := c.rbuf
	if c.rpool != nil {
		c.rready = c.rpool.Get(c.rsize)
		buf = *c.rready
	}
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)))
		if e == syscall.EINTR {
			continue
		}
		if (e != 0 || r == 0) && c.rpool != nil {
			c.rpool.Put(c.rready)
			c.rready = nil
		}
		if e == syscall.EAGAIN {
			return false
		}
		c.rn, c.rerrno = int(r), e
		return true
	}
}

// write writes all of wbuf from wn on; false when the socket has no room.
func (c *Conn) write(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		rest := c.wbuf[c.wn:]
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
		switch e {
		case 0:
			c.wn += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werrno = e
			return true
		}
	}
	return true
}

// Read reads as net.Conn's Read does: at least one byte, io.EOF at the end
// of the stream, a timeout past the read deadline.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerrno = b, 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerrno
	c.rbuf = nil
	return c.result(n, err, errno)
}

// ReadOnReady is grpc-go's read that takes a buffer from pool only once the
// socket has something to read, so that an idle connection holds none
// (google.golang.org/grpc/internal/transport/readyreader.Reader); grpc-go
// does that itself for a bare *net.TCPConn.
func (c *Conn) ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rpool, c.rsize, c.rready, c.rn, c.rerrno = pool, bufSize, nil, 0, 0
	err := c.rc.Read(c.readFn)
	buf, n, errno := c.rready, c.rn, c.rerrno
	c.rpool, c.rready = nil, nil
	n, err = c.result(n, err, errno)
	if err != nil && buf != nil {
		pool.Put(buf)
		buf = nil
	}
	return buf, n, err
}

func (c *Conn) result(n int, err error, errno syscall.Errno) (int, error) {
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b, waiting for room in the socket as net.Conn's Write
// does, or until the write deadline.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wn, c.werrno = b, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werrno
	c.wbuf = nil
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

func (c *Conn) opError(op string, err error) error {
	if _, ok := err.(*net.OpError); ok {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Listener accepts connections with raw reads and writes.
type Listener struct {
	net.Listener
}

// Accept waits for the next connection and wraps it.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}
