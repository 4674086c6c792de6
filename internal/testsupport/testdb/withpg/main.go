// Command withpg runs a command with IDEM_TEST_DATABASE_URL set to the
// PostgreSQL the Go tests would use (see package testdb): the one named by
// IDEM_TEST_DATABASE_URL, the local one, or the shared throwaway cluster,
// which it keeps in use until the command exits. `make test-node` and `make
// test-python` run the Node and Python workers' tests under it, so they too
// need no Postgres running.
//
//	go run ./internal/testsupport/testdb/withpg npm test
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/idemhq/idem/internal/testsupport/testdb"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: withpg COMMAND [ARG...]")
		os.Exit(2)
	}
	url, err := testdb.Acquire()
	if err != nil {
		fmt.Fprintln(os.Stderr, "withpg:", err)
		os.Exit(1)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), testdb.EnvDatabaseURL+"="+url)
	// withpg outlives the command, so that the cluster stays in use until the
	// command is done: Ctrl-C reaches the command from the terminal, and
	// SIGTERM is passed on to it.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "withpg:", err)
		os.Exit(1)
	}
	go func() {
		for sig := range signals {
			if sig == syscall.SIGTERM {
				_ = cmd.Process.Signal(sig)
			}
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "withpg:", err)
		os.Exit(1)
	}
}
