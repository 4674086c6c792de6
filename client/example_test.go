package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/idemhq/idem/client"
)

// These examples need a running idemd, so they have no Output comment.

func ExampleNew() {
	// A production client: TLS (the default) with the system's roots, a
	// bearer token, and the default retry policy.
	c, err := client.New("dns:///idem.internal:7070",
		client.WithTLS(&tls.Config{MinVersion: tls.VersionTLS13}),
		client.WithToken("token-from-your-secret-store"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A local one: plaintext is allowed, with a token too, on loopback.
	local, err := client.New("127.0.0.1:7070", client.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer local.Close()
}

func ExampleClient_Do() {
	c, err := client.New("127.0.0.1:7070", client.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// One queue message: charge order o-1 for 1250 cents.
	payload := map[string]any{"order": "o-1", "amount": 1250, "currency": "EUR"}
	fingerprint, err := client.FingerprintJSON(payload)
	if err != nil {
		log.Fatal(err)
	}
	job := client.Job{
		Namespace:   "process_payment",
		Key:         "o-1",
		Fingerprint: fingerprint,
		LeaseTTL:    30 * time.Second,
	}
	res, err := c.Do(context.Background(), job, func(ctx context.Context, a client.Attempt) ([]byte, error) {
		if a.Takeover {
			// An earlier attempt may have charged already: ask the payment
			// provider before charging again.
			log.Printf("attempt %d of %s: looking for an earlier charge", a.Number, job.Key)
		}
		// Charge the card here, passing a.Token to systems that can fence.
		return []byte(`{"charge":"ch_123"}`), nil
	})
	var busy *client.InProgressError
	switch {
	case errors.As(err, &busy):
		fmt.Println("another worker has it; redeliver in", busy.RetryAfter)
	case errors.Is(err, client.ErrCompletionUnknown):
		fmt.Println("charged, but not recorded: alert a human", err)
	case err != nil:
		fmt.Println("failed:", err) // nack: the queue redelivers
	case res.Replayed:
		fmt.Println("already charged:", string(res.Value)) // ack the duplicate
	default:
		fmt.Println("charged:", string(res.Value)) // ack
	}
}

func ExampleClient_DoBatch() {
	c, err := client.New("127.0.0.1:7070", client.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// One delivery of a queue: three orders to charge.
	orders := []string{"o-1", "o-2", "o-3"}
	jobs := make([]client.Job, len(orders))
	for i, order := range orders {
		jobs[i] = client.Job{Namespace: "process_payment", Key: order, LeaseTTL: 30 * time.Second}
	}
	items, err := c.DoBatch(context.Background(), jobs, func(ctx context.Context, i int, a client.Attempt) ([]byte, error) {
		// Charge orders[i] here, passing a.Token to systems that can fence.
		return []byte(`{"charge":"ch_` + orders[i] + `"}`), nil
	}, client.WithConcurrency(2))
	if err != nil {
		log.Fatal(err) // DoBatch could not start: nack the whole delivery
	}
	for i, it := range items {
		var busy *client.InProgressError
		switch {
		case errors.As(it.Err, &busy):
			fmt.Println(orders[i], "is held by another worker; redeliver in", busy.RetryAfter)
		case errors.Is(it.Err, client.ErrCompletionUnknown):
			fmt.Println(orders[i], "charged, but not recorded: alert a human", it.Err)
		case it.Err != nil:
			fmt.Println(orders[i], "failed:", it.Err) // nack this message
		default:
			fmt.Println(orders[i], "done:", string(it.Value.Value), "replayed:", it.Value.Replayed) // ack
		}
	}
}

func ExampleWithCoalescing() {
	// Many goroutines share one Client: their Claims, Completes and Fails go
	// out together in batch RPCs, each caller getting its own answer.
	c, err := client.New("127.0.0.1:7070", client.WithInsecure(), client.WithCoalescing())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var wg sync.WaitGroup
	for _, order := range []string{"o-1", "o-2", "o-3"} {
		wg.Go(func() {
			_, err := c.Do(context.Background(), client.Job{Namespace: "process_payment", Key: order}, func(ctx context.Context, a client.Attempt) ([]byte, error) {
				return []byte("charged"), nil
			})
			if err != nil {
				fmt.Println(order, err)
			}
		})
	}
	wg.Wait()
}
