package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/client"
)

// namespace is the idem namespace of the payment jobs.
const namespace = "payments"

// Crash points: where a worker may kill itself with SIGKILL.
const (
	crashBeforeCharge  = "before_charge"  // acquired the job, charged nothing
	crashAfterCharge   = "after_charge"   // charged, not yet Complete
	crashAfterComplete = "after_complete" // Complete done, message not yet acked
)

var crashPoints = []string{crashBeforeCharge, crashAfterCharge, crashAfterComplete}

// paymentJob is a message on the stream.
type paymentJob struct {
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
	Customer    string `json:"customer"`
}

// workerConfig is a worker process's flags.
type workerConfig struct {
	natsURL, stream, consumer string
	idemAddr                  string
	providerURL               string
	providerKey               bool
	lease, ackWait            time.Duration
	events                    string
	crashPoint                string
	crashAfter                int
}

// workerMain is the worker process: `payments worker -nats … -idem … `. It
// consumes payment jobs from the JetStream consumer one at a time, charges
// each through client.Do, and acks a message only once idem says the job is
// done. It returns the exit code.
func workerMain(args []string) int {
	var cfg workerConfig
	fs := flag.NewFlagSet("payments worker", flag.ContinueOnError)
	fs.StringVar(&cfg.natsURL, "nats", "", "NATS URL")
	fs.StringVar(&cfg.stream, "stream", "", "JetStream stream")
	fs.StringVar(&cfg.consumer, "consumer", "", "durable pull consumer")
	fs.StringVar(&cfg.idemAddr, "idem", "", "idemd's gRPC address")
	fs.StringVar(&cfg.providerURL, "provider", "", "payment provider's URL")
	fs.BoolVar(&cfg.providerKey, "provider-key", true, "send the provider its own idempotency key")
	fs.DurationVar(&cfg.lease, "lease", 2*time.Second, "idem lease")
	fs.DurationVar(&cfg.ackWait, "ack-wait", time.Second, "the consumer's AckWait (for the in-progress acks)")
	fs.StringVar(&cfg.events, "events", "", "file to append this process's events to (JSON lines)")
	fs.StringVar(&cfg.crashPoint, "crash-point", "", "kill this process with SIGKILL at this point: "+fmt.Sprint(crashPoints))
	fs.IntVar(&cfg.crashAfter, "crash-after", 1, "… the n-th time it reaches it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ev, err := openEvents(cfg.events)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	w := &worker{cfg: cfg, ev: ev, reached: map[string]int{}}
	if err := w.run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

type worker struct {
	cfg      workerConfig
	ev       *events
	idem     *client.Client
	provider *providerClient
	reached  map[string]int // crash point → times reached
}

func (w *worker) run() error {
	// SIGTERM stops fetching; the message in hand is finished first.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	nc, err := nats.Connect(w.cfg.natsURL, nats.Name("payments-worker"))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", w.cfg.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	setup, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(setup, w.cfg.stream, w.cfg.consumer)
	if err != nil {
		return fmt.Errorf("consumer %s/%s: %w", w.cfg.stream, w.cfg.consumer, err)
	}
	w.idem, err = client.New(w.cfg.idemAddr, client.WithInsecure())
	if err != nil {
		return err
	}
	defer w.idem.Close()
	w.provider = &providerClient{url: w.cfg.providerURL, sendKey: w.cfg.providerKey, http: &http.Client{Timeout: 10 * time.Second}}

	for ctx.Err() == nil {
		// One message at a time: a process that dies holds at most one
		// unacked message (JetStream redelivers it after AckWait), and
		// nothing waits in a local buffer while its AckWait runs out.
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintln(os.Stderr, "worker: fetch:", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for msg := range batch.Messages() {
			w.handle(msg)
		}
	}
	return nil
}

// handle processes one delivery. It never returns an error: whatever goes
// wrong, the message is left to JetStream to redeliver (Nak), and only a job
// idem calls done is acked.
func (w *worker) handle(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term() // not a JetStream message
		return
	}
	var job paymentJob
	if err := json.Unmarshal(msg.Data(), &job); err != nil || job.OrderID == "" {
		w.ev.log(event{Ev: "bad_message", Seq: meta.Sequence.Stream})
		_ = msg.Term()
		return
	}
	w.ev.log(event{Ev: "delivery", Key: job.OrderID, Seq: meta.Sequence.Stream, Delivered: meta.NumDelivered})

	// The fingerprint of the payload: a second message that reuses the key
	// for another payment would fail with FINGERPRINT_MISMATCH.
	fingerprint, err := client.FingerprintJSON(json.RawMessage(msg.Data()))
	if err != nil {
		w.ev.log(event{Ev: "bad_message", Key: job.OrderID, Err: err.Error()})
		_ = msg.Term()
		return
	}

	// While the job runs, tell JetStream it is in progress so that a live
	// worker's message is not redelivered; a dead worker stops telling it.
	stopProgress := keepInProgress(msg, w.cfg.ackWait/3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	res, err := w.idem.Do(ctx, client.Job{Namespace: namespace, Key: job.OrderID, Fingerprint: fingerprint, LeaseTTL: w.cfg.lease},
		w.charge(job))
	cancel()
	stopProgress()

	var busy *client.InProgressError
	var failed *client.JobFailedError
	switch {
	case err == nil && res.Replayed:
		// A duplicate delivery: idem replays the receipt, nothing is charged.
		w.ev.log(event{Ev: "replayed", Key: job.OrderID, Token: res.Record.Token})
		w.ack(msg, job.OrderID)
	case err == nil:
		w.ev.log(event{Ev: "completed", Key: job.OrderID, Token: res.Record.Token})
		w.crashPoint(crashAfterComplete, job.OrderID, res.Record.Token)
		w.ack(msg, job.OrderID)
	case errors.As(err, &busy):
		// Another worker holds the job (or a killed one whose lease has not
		// run out yet): redeliver once its lease would have run out.
		w.ev.log(event{Ev: "in_progress", Key: job.OrderID})
		_ = msg.NakWithDelay(min(max(busy.RetryAfter, 50*time.Millisecond), w.cfg.lease))
	case errors.As(err, &failed):
		w.ev.log(event{Ev: "failed", Key: job.OrderID, Err: failed.Message})
		w.ack(msg, job.OrderID)
	case errors.Is(err, client.ErrFingerprintMismatch):
		// The producer reused an order id for another payment: a bug that no
		// redelivery fixes. Take the message out of the queue.
		w.ev.log(event{Ev: "error", Key: job.OrderID, Err: err.Error()})
		_ = msg.Term()
	case errors.Is(err, client.ErrLeaseLost):
		// A successor took over. If fn returned, the charge went out; the
		// report accounts for it. The successor, or a redelivery, finishes.
		w.ev.log(event{Ev: "lease_lost", Key: job.OrderID, Token: res.Record.Token, Charged: res.Value != nil})
		_ = msg.Nak()
	case errors.Is(err, client.ErrCompletionUnknown):
		w.ev.log(event{Ev: "completion_unknown", Key: job.OrderID, Token: res.Record.Token, Charged: true, Err: err.Error()})
		_ = msg.Nak()
	default:
		w.ev.log(event{Ev: "error", Key: job.OrderID, Err: err.Error()})
		_ = msg.NakWithDelay(200 * time.Millisecond)
	}
}

// charge is the handler the worker passes to client.Do for job: it charges
// the provider and returns the charge, which idem stores as the job's result
// and replays to later deliveries. handler_test.go runs it through
// idemtest.CheckHandler's deliveries.
func (w *worker) charge(job paymentJob) func(ctx context.Context, a client.Attempt) ([]byte, error) {
	return func(ctx context.Context, a client.Attempt) ([]byte, error) {
		w.ev.log(event{Ev: "acquired", Key: job.OrderID, Token: a.Token, Attempt: a.Number})
		w.crashPoint(crashBeforeCharge, job.OrderID, a.Token)
		// Once sent, the charge is not abandoned halfway when the lease
		// is lost: whether it happened must be known.
		chargeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		ch, err := w.provider.charge(chargeCtx, chargeRequest{OrderID: job.OrderID, AmountCents: job.AmountCents, Token: a.Token})
		if err != nil {
			// The provider may have charged before the answer was lost;
			// the job is released and retried (the provider's key, when
			// sent, absorbs the retry).
			w.ev.log(event{Ev: "charge_failed", Key: job.OrderID, Token: a.Token, Err: err.Error()})
			return nil, err
		}
		w.ev.log(event{Ev: "charged", Key: job.OrderID, Token: a.Token, Charge: ch.ID, ProviderReplayed: ch.Replayed})
		w.crashPoint(crashAfterCharge, job.OrderID, a.Token)
		return json.Marshal(ch)
	}
}

// ack acks msg and waits for JetStream to confirm it. An ack that is lost
// only means one more delivery, which idem answers with the receipt.
func (w *worker) ack(msg jetstream.Msg, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		w.ev.log(event{Ev: "ack_failed", Key: key, Err: err.Error()})
		return
	}
	w.ev.log(event{Ev: "acked", Key: key})
}

// crashPoint kills this process with SIGKILL if point is the configured
// crash point and this is the configured time it is reached. The crash is
// logged first, so that the report can account for it.
func (w *worker) crashPoint(point, key string, token int64) {
	if point != w.cfg.crashPoint {
		return
	}
	w.reached[point]++
	if w.reached[point] != w.cfg.crashAfter {
		return
	}
	w.ev.log(event{Ev: "crash", Point: point, Key: key, Token: token})
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		_ = p.Kill() // SIGKILL: no deferred call, no flush, no goodbye
	}
	time.Sleep(5 * time.Second) // the signal is on its way
	os.Exit(137)                // it never came: the driver reports an unexpected exit
}

// keepInProgress sends JetStream "in progress" acks every interval until the
// returned function is called, which waits for the sender to stop.
func keepInProgress(msg jetstream.Msg, interval time.Duration) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// event is one line of a worker's event log.
type event struct {
	Ev               string `json:"ev"`
	Key              string `json:"key,omitempty"`
	Seq              uint64 `json:"seq,omitempty"`
	Delivered        uint64 `json:"delivered,omitempty"`
	Token            int64  `json:"token,omitempty"`
	Attempt          int    `json:"attempt,omitempty"`
	Charge           string `json:"charge,omitempty"`
	ProviderReplayed bool   `json:"provider_replayed,omitempty"`
	Charged          bool   `json:"charged,omitempty"`
	Point            string `json:"point,omitempty"`
	Err              string `json:"err,omitempty"`
}

// events appends JSON lines to a file, one write per line and no buffer, so
// that a SIGKILL loses nothing that was logged.
type events struct {
	mu sync.Mutex
	f  *os.File
}

func openEvents(path string) (*events, error) {
	if path == "" {
		return &events{}, nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return &events{f: f}, nil
}

func (e *events) log(ev event) {
	if e.f == nil {
		return
	}
	b, _ := json.Marshal(ev)
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.f.Write(append(b, '\n'))
}
