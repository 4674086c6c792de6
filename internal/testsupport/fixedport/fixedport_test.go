package fixedport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/idemhq/idem/internal/testsupport/fixedport"
)

func TestAddrIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	low := fixedport.EphemeralLow()
	for range 20 {
		addr, err := fixedport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		host, portText, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, err := strconv.Atoi(portText)
		if err != nil || host != "127.0.0.1" || port < 1024 || port >= low {
			t.Fatalf("Addr() = %s; want 127.0.0.1 and a port from 1024 below the ephemeral range's %d", addr, low)
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("Addr() = %s, which does not bind: %v", addr, err)
		}
		lis.Close()
	}
}
