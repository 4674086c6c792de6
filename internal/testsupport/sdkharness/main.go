// Command sdkharness runs a real idemd for the SDKs' scenario suites
// (clients/scenarios): on PostgreSQL behind a fault proxy, or on SQLite in a
// temporary directory, with the tenants and policies the scenarios name. It
// prints one JSON line saying how to reach idemd, serves control endpoints
// that restart idemd or cut it off its store, and cleans everything up when
// its stdin closes or it is told to stop.
//
//	go build -o /tmp/sdkharness ./internal/testsupport/sdkharness
//	/tmp/sdkharness --store postgres [--idemd-bin PATH] [--max-result-bytes N]
//
// clients/scenarios/README.md describes the line and the endpoints.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var opts options
	flag.StringVar(&opts.store, "store", "", "the store idemd runs on: postgres or sqlite")
	flag.StringVar(&opts.idemdBin, "idemd-bin", "", "an idemd binary to run; by default the harness builds ./cmd/idemd of the module it is run in")
	flag.IntVar(&opts.maxResultBytes, "max-result-bytes", 0, "idemd's --max-result-bytes; idemd's default when 0")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: sdkharness --store postgres|sqlite [--idemd-bin PATH] [--max-result-bytes N]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sdkharness: unexpected argument %q\n", flag.Arg(0))
		flag.Usage()
		os.Exit(2)
	}
	if opts.store != storePostgres && opts.store != storeSQLite {
		fmt.Fprintf(os.Stderr, "sdkharness: --store is %q; it must be postgres or sqlite\n", opts.store)
		os.Exit(2)
	}
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "sdkharness:", err)
		os.Exit(1)
	}
}

func run(opts options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h, err := start(ctx, opts, os.Stderr)
	if err != nil {
		return err
	}
	line, err := json.Marshal(h.info())
	if err == nil {
		_, err = fmt.Fprintf(os.Stdout, "%s\n", line)
	}
	if err == nil {
		// The caller holds stdin open for as long as it wants idemd; EOF
		// (the caller closed it, or died) ends the harness.
		eof := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(eof)
		}()
		select {
		case <-eof:
		case <-ctx.Done():
		}
	}
	return errors.Join(err, h.close())
}
