// Command go-worker shows the idem Go SDK at work. It plays an at-least-once
// queue that delivers a stream of payment jobs to a pool of workers, some
// jobs more than once and some copies at the same time, and the workers
// charge through client.Do. At the end it checks that every charge, the
// side effect, happened exactly once.
//
//	go run ./examples/go-worker -addr 127.0.0.1:7070
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/idemhq/idem/client"
)

type order struct {
	ID          string `json:"id"`
	AmountCents int    `json:"amount_cents"`
}

// ledger is the fake side effect: how often each order was charged.
type ledger struct {
	mu      sync.Mutex
	charges map[string]int
}

func (l *ledger) charge(ctx context.Context, o order, a client.Attempt) ([]byte, error) {
	select { // the payment provider takes a while
	case <-time.After(time.Duration(20+rand.IntN(30)) * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.mu.Lock()
	l.charges[o.ID]++
	l.mu.Unlock()
	return json.Marshal(map[string]any{"charge": "ch_" + o.ID, "token": a.Token})
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "idemd's gRPC address")
	useTLS := flag.Bool("tls", false, "connect with TLS (plaintext is for a local idemd)")
	token := flag.String("token", os.Getenv("IDEM_TOKEN"), "bearer token (env IDEM_TOKEN); none by default")
	jobs := flag.Int("jobs", 20, "how many distinct jobs")
	workers := flag.Int("workers", 8, "how many concurrent workers")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	opts := []client.Option{client.WithInsecure()}
	if *useTLS {
		opts = []client.Option{client.WithTLS(nil)}
	}
	if *token != "" {
		opts = append(opts, client.WithToken(*token))
	}
	c, err := client.New(*addr, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Keys are new on every run, so that a second run charges again instead
	// of replaying the first run's receipts.
	run := fmt.Sprintf("%08x", rand.Uint32())
	var deliveries []order
	for i := range *jobs {
		o := order{ID: fmt.Sprintf("%s-%03d", run, i), AmountCents: 100 * (i + 1)}
		for range 1 + i%3 { // once, twice or three times
			deliveries = append(deliveries, o)
		}
	}
	// Shuffle only every other pair, so that many duplicates stay adjacent
	// and reach two workers at the same time.
	for i := 0; i+3 < len(deliveries); i += 4 {
		deliveries[i], deliveries[i+3] = deliveries[i+3], deliveries[i]
	}

	var (
		books                              = ledger{charges: map[string]int{}}
		mu                                 sync.Mutex
		ran, replayed, redelivered, failed int
		pending                            sync.WaitGroup
	)
	queue := make(chan order, len(deliveries))
	for _, o := range deliveries {
		pending.Add(1)
		queue <- o
	}
	handle := func(o order) {
		fingerprint, err := client.FingerprintJSON(o)
		if err != nil {
			log.Fatal(err)
		}
		job := client.Job{Namespace: "example_payment", Key: o.ID, Fingerprint: fingerprint, LeaseTTL: 10 * time.Second}
		res, err := c.Do(ctx, job, func(ctx context.Context, a client.Attempt) ([]byte, error) {
			return books.charge(ctx, o, a)
		})
		mu.Lock()
		defer mu.Unlock()
		var busy *client.InProgressError
		switch {
		case errors.As(err, &busy):
			// Another worker has it: "nack", and the queue redelivers after
			// a visibility timeout. The job stays pending.
			redelivered++
			time.AfterFunc(50*time.Millisecond, func() { queue <- o })
			return
		case err != nil:
			failed++
			log.Printf("%s: %v", o.ID, err)
		case res.Replayed:
			replayed++
		default:
			ran++
		}
		pending.Done()
	}
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for o := range queue {
				handle(o)
			}
		})
	}
	pending.Wait()
	close(queue)
	wg.Wait()

	fmt.Printf("%d jobs, %d deliveries: fn ran %d times, %d duplicates replayed the stored receipt, %d redelivered while in progress, %d failed\n",
		*jobs, len(deliveries), ran, replayed, redelivered, failed)
	ok := failed == 0 && len(books.charges) == *jobs
	for id, n := range books.charges {
		if n != 1 {
			fmt.Printf("order %s was charged %d times\n", id, n)
			ok = false
		}
	}
	if !ok {
		fmt.Println("FAIL: some side effect did not run exactly once")
		os.Exit(1)
	}
	fmt.Printf("OK: each of the %d side effects ran exactly once\n", *jobs)
}
