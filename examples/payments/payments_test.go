package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// TestMain lets the test binary be the worker process too: the driver execs
// os.Args[0] with "worker" first, so the workers run the code under test,
// built with the same flags (-race included).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(workerMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// run runs the example against a fresh in-process idem server and the NATS
// at IDEM_NATS_URL, or an embedded one.
func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	srv := testserver.Start(t)
	cfg.IdemAddr = srv.Addr
	cfg.NatsURL = os.Getenv("IDEM_NATS_URL")
	cfg.WorkerCommand = []string{os.Args[0]}
	cfg.Seed = uint64(time.Now().UnixNano())
	cfg.Timeout = 3 * time.Minute
	cfg.Log = testWriter{t}
	t.Logf("seed %d", cfg.Seed)
	report, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", report)
	return report
}

// TestExactlyOnceWithProviderKeys is the two-layer design: idem decides which
// worker may charge, and the provider's own idempotency key absorbs the
// retry of a charge whose worker died before Complete. Every payment is
// charged exactly once, whatever the crashes.
func TestExactlyOnceWithProviderKeys(t *testing.T) {
	t.Parallel()
	r := run(t, Config{Jobs: 200, Workers: 4, DuplicateRate: 0.1, Kills: 9, ProviderKeys: true, Lease: 2 * time.Second, AckWait: time.Second})
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if r.ChargesApplied != r.Jobs {
		t.Fatalf("%d charges applied for %d jobs", r.ChargesApplied, r.Jobs)
	}
	checkChaos(t, r)
}

// TestExtraChargesWithoutProviderKeysAreAccounted turns the provider's key
// off: then a worker killed between the charge and Complete leaves a charge
// that the next attempt repeats. Every extra charge must be such a kill (or a
// lease lost after the charge), and nothing else.
func TestExtraChargesWithoutProviderKeysAreAccounted(t *testing.T) {
	t.Parallel()
	r := run(t, Config{Jobs: 100, Workers: 3, DuplicateRate: 0.1, Kills: 6, ProviderKeys: false, Lease: 2 * time.Second, AckWait: time.Second})
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if r.ChargesApplied != r.Jobs+r.ExtraByKill+r.ExtraByLeaseLost+r.ExtraByUnknown {
		t.Fatalf("%d charges applied for %d jobs; %d kills between charge and Complete, %d leases lost after the charge",
			r.ChargesApplied, r.Jobs, r.ExtraByKill, r.ExtraByLeaseLost)
	}
	if r.Kills[crashAfterCharge] > 0 && r.ExtraByKill != r.Kills[crashAfterCharge] {
		t.Fatalf("%d kills between charge and Complete, but %d extra charges from them", r.Kills[crashAfterCharge], r.ExtraByKill)
	}
	checkChaos(t, r)
}

// checkChaos makes sure the run exercised what it claims to: the queue
// redelivered, idem absorbed duplicates, and workers died at every point.
func checkChaos(t *testing.T, r *Report) {
	t.Helper()
	for _, p := range crashPoints {
		if r.Kills[p] == 0 {
			t.Errorf("no worker was killed at %s", p)
		}
	}
	if r.Redeliveries == 0 || r.Replayed == 0 || r.Takeovers == 0 {
		t.Errorf("a run with kills and duplicates had %d redeliveries, %d replays, %d takeovers", r.Redeliveries, r.Replayed, r.Takeovers)
	}
	if !strings.HasPrefix(r.String(), "exactly-once payments") {
		t.Errorf("report:\n%s", r)
	}
}

// testWriter sends the driver's log and the workers' stderr to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
