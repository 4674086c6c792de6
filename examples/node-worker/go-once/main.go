// Command go-once handles one delivery of one job through the Go SDK's
// client.Do, with the same flags, side effect and output as the Node worker
// (bin/worker.js), so that the Node tests can race a Go worker against a
// Node worker on one key. It prints one JSON line:
//
//	{"worker":"go","key":"order-1","outcome":"ran","token":"7","attempt":1,"value":"{...}"}
//
// outcome is ran, replayed, in_progress, failed, lease_lost or error.
//
//	go run ./examples/node-worker/go-once -addr 127.0.0.1:7070 -key order-1 -payload '{"amount_cents":500}' -effect-file /tmp/charges
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/idemhq/idem/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "idemd's gRPC address")
	token := flag.String("token", os.Getenv("IDEM_TOKEN"), "bearer token of your tenant (default $IDEM_TOKEN; none when unset)")
	namespace := flag.String("namespace", "node_worker", "the job's namespace")
	key := flag.String("key", "", "the job's idempotency key (required)")
	payload := flag.String("payload", "{}", "the job's payload, JSON text; fingerprinted with client.FingerprintJSON")
	lease := flag.Duration("lease", 2*time.Second, "the lease")
	work := flag.Duration("work", 100*time.Millisecond, "how long the work takes before the side effect")
	effectFile := flag.String("effect-file", "", "file the side effect appends a line to")
	flag.Parse()
	if *key == "" {
		fmt.Fprintln(os.Stderr, "go-once: -key is required")
		os.Exit(2)
	}
	out := map[string]any{"worker": "go", "key": *key}
	handle(out, *addr, *token, *namespace, *key, *payload, *lease, *work, *effectFile)
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	if out["outcome"] == "error" {
		os.Exit(1)
	}
}

// handle runs the job through client.Do and fills in out.
func handle(out map[string]any, addr, token, namespace, key, payload string, lease, work time.Duration, effectFile string) {
	fingerprint, err := client.FingerprintJSON(json.RawMessage(payload))
	if err != nil {
		out["outcome"], out["error"] = "error", err.Error()
		return
	}
	opts := []client.Option{client.WithInsecure()}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	c, err := client.New(addr, opts...)
	if err != nil {
		out["outcome"], out["error"] = "error", err.Error()
		return
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job := client.Job{Namespace: namespace, Key: key, Fingerprint: fingerprint, LeaseTTL: lease}
	res, err := c.Do(ctx, job, func(ctx context.Context, a client.Attempt) ([]byte, error) {
		select {
		case <-time.After(work):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if effectFile != "" {
			f, err := os.OpenFile(effectFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return nil, err
			}
			_, err = fmt.Fprintf(f, "go %s %d\n", key, a.Token)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
		}
		return json.Marshal(map[string]any{"charged_by": "go", "token": strconv.FormatInt(a.Token, 10), "payload": json.RawMessage(payload)})
	})
	var busy *client.InProgressError
	var failed *client.JobFailedError
	switch {
	case errors.As(err, &busy):
		out["outcome"], out["retry_after_ms"] = "in_progress", busy.RetryAfter.Milliseconds()
	case errors.As(err, &failed):
		out["outcome"], out["error"] = "failed", failed.Message
	case errors.Is(err, client.ErrLeaseLost):
		out["outcome"], out["reason"] = "lease_lost", client.Reason(err)
	case err != nil:
		out["outcome"], out["error"], out["reason"] = "error", err.Error(), client.Reason(err)
	case res.Replayed:
		out["outcome"] = "replayed"
	default:
		out["outcome"] = "ran"
	}
	if err == nil {
		out["token"] = strconv.FormatInt(res.Record.Token, 10)
		out["attempt"] = res.Record.Attempt
		out["value"] = string(res.Value)
	}
}
