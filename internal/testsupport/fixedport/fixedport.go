// Package fixedport picks loopback ports for a server that is stopped and
// started again on the same address, as the tests that restart idemd do.
//
// A port the system handed out for port 0 lies in its ephemeral range, the
// range it also picks the local port of every outgoing connection from.
// While the server is down, any connection on the machine may take that
// port (a client that reconnects to the server itself among them: TCP's
// simultaneous open connects it to itself), and the server's next start
// fails with "address already in use". A port below the range is taken
// only by a socket that names it.
package fixedport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// defaultLow is where Linux's ephemeral range starts by default, for a
// system that does not say.
const defaultLow = 32768

// Free returns a loopback port below the ephemeral range that nothing
// listens on. It is free when Free returns: the caller binds it a moment
// later, and should try another if that bind fails.
func Free() (int, error) {
	low := EphemeralLow()
	if low <= 2048 {
		return 0, fmt.Errorf("the ephemeral port range starts at %d: no room below it for a fixed port", low)
	}
	var err error
	for range 100 {
		port := 1024 + rand.IntN(low-1024)
		var lis net.Listener
		if lis, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			_ = lis.Close()
			return port, nil
		}
	}
	return 0, errors.Join(errors.New("no free loopback port below the ephemeral range"), err)
}

// Addr is Free as a host:port on 127.0.0.1.
func Addr() (string, error) {
	port, err := Free()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// EphemeralLow is the first port of the system's ephemeral range (Linux
// says; elsewhere 32768, which is also below macOS's and Windows' ranges).
func EphemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultLow
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return defaultLow
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return defaultLow
	}
	return n
}
