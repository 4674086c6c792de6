package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/client"
)

// Config is one run of the example.
type Config struct {
	// Jobs is how many payments the producer publishes (N).
	Jobs int
	// Workers is how many worker processes consume them at once (K).
	Workers int
	// DuplicateRate is the fraction of jobs the producer publishes twice.
	DuplicateRate float64
	// Kills is how many worker processes kill themselves (SIGKILL) at a
	// random crash point; each is restarted.
	Kills int
	// ProviderKeys makes workers send the payment provider its own
	// idempotency key: the second layer of the two-layer design.
	ProviderKeys bool
	// Lease is idem's lease on a job; AckWait the consumer's.
	Lease, AckWait time.Duration
	// Seed seeds the choice of duplicates, crash points and amounts.
	Seed uint64
	// IdemAddr is idemd's gRPC address (plaintext, on this machine).
	IdemAddr string
	// NatsURL is the NATS server to use; empty starts an embedded one.
	NatsURL string
	// WorkerCommand runs a worker: the arguments of workerMain are appended.
	WorkerCommand []string
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Log receives progress lines and the workers' stderr.
	Log io.Writer
}

// Run runs the example: it publishes the jobs, runs the workers with their
// crashes until every message is acked, stops them, and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, "payments: "+format+"\n", args...) }
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))

	dir, err := os.MkdirTemp("", "idem-payments-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	// The queue.
	natsURL := cfg.NatsURL
	if natsURL == "" {
		ns, err := startEmbeddedNATS(filepath.Join(dir, "jetstream"))
		if err != nil {
			return nil, err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		}()
		natsURL = ns.ClientURL()
		logf("embedded NATS with JetStream at %s", natsURL)
	}
	nc, err := nats.Connect(natsURL, nats.Name("payments-driver"))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	run := fmt.Sprintf("%08x", rng.Uint32())
	streamName, subject := "PAYMENTS_"+run, "payments."+run+".charge"
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{subject}})
	if err != nil {
		return nil, fmt.Errorf("create stream: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), streamName) }()
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:   "workers",
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   cfg.AckWait,
		// MaxDeliver unlimited: a job is never dropped, however often its
		// workers die.
		MaxDeliver: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer: %w", err)
	}

	// The payment provider.
	prov, err := startProvider()
	if err != nil {
		return nil, err
	}
	defer prov.close()

	// The workers.
	eventsDir := filepath.Join(dir, "events")
	if err := os.Mkdir(eventsDir, 0o755); err != nil {
		return nil, err
	}
	// The supervisor draws its crash plans from an RNG of its own: its
	// goroutines run while the producer draws from rng.
	sup := &supervisor{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed+1, cfg.Seed^0x6a09e667f3bcc909)), killsLeft: cfg.Kills, logf: logf, args: []string{
		"-nats", natsURL, "-stream", streamName, "-consumer", "workers",
		"-idem", cfg.IdemAddr, "-provider", prov.url, "-provider-key=" + strconv.FormatBool(cfg.ProviderKeys),
		"-lease", cfg.Lease.String(), "-ack-wait", cfg.AckWait.String(),
	}, eventsDir: eventsDir}
	sup.start()
	defer sup.stop()

	// The producer: every job once, some twice, in a shuffled order.
	jobs := make([]paymentJob, cfg.Jobs)
	for i := range jobs {
		jobs[i] = paymentJob{OrderID: fmt.Sprintf("%s-%05d", run, i), AmountCents: 100 + rng.IntN(99_900), Customer: fmt.Sprintf("cus_%03d", rng.IntN(500))}
	}
	msgs := append([]paymentJob(nil), jobs...)
	duplicates := 0
	for _, j := range jobs {
		if rng.Float64() < cfg.DuplicateRate {
			msgs = append(msgs, j)
			duplicates++
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	for _, m := range msgs {
		body, _ := json.Marshal(m)
		if _, err := js.Publish(ctx, subject, body); err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
	}
	logf("published %d messages: %d jobs, %d of them twice", len(msgs), len(jobs), duplicates)

	// Wait until JetStream has every message acked.
	for {
		info, err := cons.Info(ctx)
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream >= uint64(len(msgs)) {
			break
		}
		if ctx.Err() != nil {
			var errs []string
			for _, e := range sup.exits() {
				if e.Err != "" {
					errs = append(errs, "worker "+e.Name+": "+e.Err)
				}
			}
			if evs, err := readEvents(eventsDir); err == nil {
				for _, ev := range evs {
					if ev.Err != "" {
						errs = append(errs, ev.Ev+" "+ev.Key+": "+ev.Err)
					}
				}
			}
			pending, ackPending := uint64(0), 0
			if info != nil {
				pending, ackPending = info.NumPending, info.NumAckPending
			}
			return nil, fmt.Errorf("the queue did not drain within %s: %d messages pending, %d unacked; worker errors: %s", cfg.Timeout, pending, ackPending, first(errs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	sup.stop()
	logf("every message acked after %s", time.Since(start).Round(time.Millisecond))

	// idem's view: every job must be COMPLETED; its token names the attempt
	// whose charge counts.
	idem, err := client.New(cfg.IdemAddr, client.WithInsecure())
	if err != nil {
		return nil, err
	}
	defer idem.Close()
	final := map[string]int64{}
	var notCompleted []string
	for _, j := range jobs {
		rec, err := idem.Lookup(ctx, client.LookupRequest{Namespace: namespace, Key: j.OrderID})
		if err != nil || rec.State != client.StateCompleted {
			notCompleted = append(notCompleted, fmt.Sprintf("%s (%v, %v)", j.OrderID, rec.State, err))
			continue
		}
		final[j.OrderID] = rec.Token
	}

	evs, err := readEvents(eventsDir)
	if err != nil {
		return nil, err
	}
	received, applied := prov.snapshot()
	r := buildReport(cfg, len(msgs), duplicates, evs, received, applied, final, notCompleted, sup.exits())
	r.Elapsed = time.Since(start)
	return r, nil
}

func startEmbeddedNATS(storeDir string) (*natsserver.Server, error) {
	ns, err := natsserver.NewServer(&natsserver.Options{
		Host:      "127.0.0.1",
		Port:      -1, // any free port
		JetStream: true,
		StoreDir:  storeDir,
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded NATS did not start within 10s")
	}
	return ns, nil
}

// supervisor keeps cfg.Workers worker processes running: when one dies it
// starts another, until stop. It decides which processes will crash, and
// where, from the seeded RNG.
type supervisor struct {
	cfg       Config
	args      []string
	eventsDir string
	logf      func(string, ...any)

	mu        sync.Mutex
	rng       *rand.Rand
	killsLeft int
	planned   int // crash plans handed out, for the round-robin of points
	procs     map[*exec.Cmd]bool
	stopping  bool
	exitLog   []workerExit

	wg sync.WaitGroup
}

// workerExit is how one worker process ended.
type workerExit struct {
	Name       string
	CrashPoint string // "" when it had no crash planned
	Killed     bool   // ended by SIGKILL
	Stopped    bool   // ended by our SIGTERM at the end of the run
	Err        string
}

func (s *supervisor) start() {
	s.procs = map[*exec.Cmd]bool{}
	for slot := range s.cfg.Workers {
		s.wg.Go(func() { s.keep(slot) })
	}
}

// keep runs the worker of one slot again and again until stop.
func (s *supervisor) keep(slot int) {
	for gen := 0; ; gen++ {
		name := fmt.Sprintf("w%d.%d", slot, gen)
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		args := append(append([]string(nil), s.args...), "-events", filepath.Join(s.eventsDir, name+".jsonl"))
		point := ""
		if s.killsLeft > 0 {
			s.killsLeft--
			// The first three crashes cover the three points; then at random.
			point = crashPoints[s.planned%len(crashPoints)]
			if s.planned >= len(crashPoints) {
				point = crashPoints[s.rng.IntN(len(crashPoints))]
			}
			s.planned++
			args = append(args, "-crash-point", point, "-crash-after", strconv.Itoa(1+s.rng.IntN(4)))
		}
		cmd := exec.Command(s.cfg.WorkerCommand[0], append(append(append([]string(nil), s.cfg.WorkerCommand[1:]...), "worker"), args...)...)
		cmd.Stdout, cmd.Stderr = s.cfg.Log, s.cfg.Log
		if err := cmd.Start(); err != nil {
			s.exitLog = append(s.exitLog, workerExit{Name: name, CrashPoint: point, Err: err.Error()})
			s.mu.Unlock()
			return
		}
		s.procs[cmd] = true
		s.mu.Unlock()

		err := cmd.Wait()

		s.mu.Lock()
		delete(s.procs, cmd)
		exit := workerExit{Name: name, CrashPoint: point, Stopped: s.stopping}
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				exit.Killed = true
			} else {
				exit.Err = err.Error()
			}
		} else if err != nil {
			exit.Err = err.Error()
		}
		s.exitLog = append(s.exitLog, exit)
		s.mu.Unlock()
	}
}

// stop ends every worker (SIGTERM, then SIGKILL after 10 s) and waits for
// the slots to return. It may be called more than once.
func (s *supervisor) stop() {
	s.mu.Lock()
	s.stopping = true
	procs := make([]*exec.Cmd, 0, len(s.procs))
	for cmd := range s.procs {
		procs = append(procs, cmd)
	}
	s.mu.Unlock()
	for _, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
	}
	s.wg.Wait()
}

func (s *supervisor) exits() []workerExit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]workerExit(nil), s.exitLog...)
}

// readEvents reads every worker's event log.
func readEvents(dir string) ([]event, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var evs []event
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			evs = append(evs, ev)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return evs, nil
}
