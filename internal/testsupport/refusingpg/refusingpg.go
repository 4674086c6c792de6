// Package refusingpg is a loopback listener that speaks just enough of the
// PostgreSQL protocol to refuse every connection the way a real server does:
// it reads the startup message and answers with a FATAL error of a chosen
// SQLSTATE. pgx then fails the connection with the same *pgconn.ConnectError
// wrapping a *pgconn.PgError that a real refusal produces, for the refusals a
// test cannot make a real server give (a wrong password where the server
// trusts every local connection, a crash or a start-up in progress).
package refusingpg

import (
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Start listens on a free loopback port until t ends, refusing every
// connection with SQLSTATE code and message, and returns a database URL that
// points there.
func Start(t testing.TB, code, message string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("refusingpg: listen: %v", err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go refuse(conn, code, message)
		}
	}()
	return fmt.Sprintf("postgres://idem@%s/idem?sslmode=disable&connect_timeout=5", lis.Addr())
}

// refuse answers conn's startup with the error and closes it. An SSL or
// GSS encryption request is declined first, as a server without them does.
func refuse(conn net.Conn, code, message string) {
	defer conn.Close()
	backend := pgproto3.NewBackend(conn, conn)
	for {
		msg, err := backend.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := msg.(*pgproto3.StartupMessage); ok {
			break
		}
		// An SSLRequest or GSSEncRequest: no.
		if _, err := conn.Write([]byte("N")); err != nil {
			return
		}
	}
	backend.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: message})
	_ = backend.Flush()
}
