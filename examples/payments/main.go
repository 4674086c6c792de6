// Command payments shows exactly-once side effects over a real at-least-once
// queue. A producer publishes payment jobs to a NATS JetStream stream, some
// of them twice; K worker processes consume them with explicit acks and a
// short AckWait, charge a fake payment provider through idem's client.Do, and
// ack only after Complete. Workers kill themselves with SIGKILL at random
// points (before the charge, between the charge and Complete, between
// Complete and the ack) and are restarted. At the end a report accounts for
// every delivery and every charge.
//
//	payments [flags]          run the example and print the report
//	payments worker [flags]   one worker process (started by the former)
//
// It uses the NATS server at IDEM_NATS_URL, or starts an embedded one. It
// uses the idemd at -idem-addr, or starts -idemd on a fresh schema of
// -database-url (IDEM_DATABASE_URL, default the local Postgres).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(workerMain(os.Args[2:]))
	}
	os.Exit(driverMain(os.Args[1:]))
}

func driverMain(args []string) int {
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	cfg := Config{Log: os.Stderr}
	fs.IntVar(&cfg.Jobs, "jobs", 1000, "payments to publish (N)")
	fs.IntVar(&cfg.Workers, "workers", 6, "worker processes at a time (K)")
	fs.Float64Var(&cfg.DuplicateRate, "duplicates", 0.1, "fraction of jobs the producer publishes twice")
	fs.IntVar(&cfg.Kills, "kills", 30, "worker processes that kill themselves at a random crash point")
	fs.BoolVar(&cfg.ProviderKeys, "provider-key", true, "send the payment provider its own idempotency key (the two-layer design); false shows what idem alone guarantees")
	fs.DurationVar(&cfg.Lease, "lease", 2*time.Second, "idem's lease on a job (heartbeats every third of it)")
	fs.DurationVar(&cfg.AckWait, "ack-wait", time.Second, "JetStream AckWait of the consumer")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the duplicates and the crash points")
	fs.StringVar(&cfg.IdemAddr, "idem-addr", os.Getenv("IDEM_ADDR"), "address of a running idemd (env IDEM_ADDR); empty starts -idemd")
	idemd := fs.String("idemd", "bin/idemd", "idemd binary to start when -idem-addr is empty (make build writes bin/idemd)")
	databaseURL := fs.String("database-url", envOr("IDEM_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"PostgreSQL for the idemd it starts (env IDEM_DATABASE_URL); it gets a fresh schema, dropped at the end")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Seed = *seed
	cfg.NatsURL = os.Getenv("IDEM_NATS_URL")
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		return 1
	}
	cfg.WorkerCommand = []string{self}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if cfg.IdemAddr == "" {
		addr, stopIdemd, err := startIdemd(ctx, *idemd, *databaseURL, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "payments:", err)
			return 1
		}
		defer stopIdemd()
		cfg.IdemAddr = addr
	}
	fmt.Fprintf(os.Stderr, "payments: seed %d, idemd at %s\n", cfg.Seed, cfg.IdemAddr)
	report, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		return 1
	}
	fmt.Print(report)
	if report.Check() != nil {
		return 1
	}
	return 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
