//go:build !linux

package rawconn

import "net"

// Wrap returns c: raw reads and writes are Linux's alone here.
func Wrap(c net.Conn) net.Conn { return c }

// Listener accepts connections as its net.Listener does.
type Listener struct {
	net.Listener
}
