package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Report is what a run shows: what the queue did, what idem absorbed, what
// the workers' crashes cost, and what the payment provider saw.
type Report struct {
	Jobs                int // distinct payments (N)
	Published           int // messages published
	DuplicatesPublished int // jobs published twice
	Workers             int // worker processes at a time (K)
	ProviderKeys        bool

	Deliveries   int // messages handed to a worker's handler
	Redeliveries int // … of which JetStream had delivered before
	Replayed     int // deliveries of a completed job: idem replayed the receipt
	InProgress   int // deliveries while another worker held the job: redelivered later
	Acquired     int // acquisitions (fn ran)
	Takeovers    int // … of a job an earlier attempt held (attempt > 1)
	Acked        int

	Kills           map[string]int // worker processes killed, by crash point
	WorkerProcesses int            // processes started in all
	UnexpectedExits []string       // processes that died other than by a planned kill or our stop

	ChargesReceived int // charge requests the provider received
	ChargesApplied  int // charges that moved money
	ProviderReplays int // requests the provider answered from its own idempotency records

	// Every received charge is from the attempt that completed the job, or
	// from an attempt that charged and could not complete:
	ExtraByKill      int      // … killed between the charge and Complete
	ExtraByLeaseLost int      // … that lost its lease after the charge
	ExtraByUnknown   int      // … whose charge or Complete was not confirmed
	Unexplained      []string // charges none of these explains
	MultiCompleted   []string // jobs whose completing attempt charged more than once, or never

	OverCharged  []string // jobs charged other than once (with provider keys)
	NotCompleted []string // jobs idem does not have as COMPLETED
	// Errors the workers logged and left to a redelivery (a failed charge
	// request, an ack that was not confirmed, …). They cost a delivery, not
	// correctness, so Check does not count them: the invariants do.
	Errors []string

	Elapsed time.Duration
}

type chargeKey struct {
	order string
	token int64
}

func buildReport(cfg Config, published, duplicates int, evs []event, received []receivedCharge, applied map[string]int, final map[string]int64, notCompleted []string, exits []workerExit) *Report {
	r := &Report{
		Jobs: cfg.Jobs, Published: published, DuplicatesPublished: duplicates, Workers: cfg.Workers,
		ProviderKeys: cfg.ProviderKeys, Kills: map[string]int{}, NotCompleted: notCompleted,
		WorkerProcesses: len(exits),
	}

	crashed := map[chargeKey]string{} // (order, token) of a crash → point
	lostAfterCharge := map[chargeKey]bool{}
	unknown := map[chargeKey]bool{}
	for _, ev := range evs {
		k := chargeKey{ev.Key, ev.Token}
		switch ev.Ev {
		case "delivery":
			r.Deliveries++
			if ev.Delivered > 1 {
				r.Redeliveries++
			}
		case "replayed":
			r.Replayed++
		case "in_progress":
			r.InProgress++
		case "acquired":
			r.Acquired++
			if ev.Attempt > 1 {
				r.Takeovers++
			}
		case "acked":
			r.Acked++
		case "crash":
			r.Kills[ev.Point]++
			crashed[k] = ev.Point
		case "lease_lost":
			if ev.Charged {
				lostAfterCharge[k] = true
			}
		case "completion_unknown":
			unknown[k] = true
		case "charge_failed":
			unknown[k] = true
			r.Errors = append(r.Errors, fmt.Sprintf("%s %s: %s", ev.Ev, ev.Key, ev.Err))
		case "error", "bad_message", "ack_failed", "failed":
			r.Errors = append(r.Errors, fmt.Sprintf("%s %s: %s", ev.Ev, ev.Key, ev.Err))
		}
	}

	kills := 0
	for _, n := range r.Kills {
		kills += n
	}
	killedProcs := 0
	for _, e := range exits {
		switch {
		case e.Stopped && e.Err == "":
		case e.Killed && e.CrashPoint != "":
			killedProcs++
		default:
			r.UnexpectedExits = append(r.UnexpectedExits, fmt.Sprintf("%s: killed=%v crash point %q: %s", e.Name, e.Killed, e.CrashPoint, e.Err))
		}
	}
	if killedProcs != kills {
		r.UnexpectedExits = append(r.UnexpectedExits, fmt.Sprintf("%d processes died of SIGKILL but %d crashes were logged", killedProcs, kills))
	}

	completingCharges := map[string]int{}
	for _, c := range received {
		r.ChargesReceived++
		if c.Applied {
			r.ChargesApplied++
		} else {
			r.ProviderReplays++
		}
		k := chargeKey{c.OrderID, c.Token}
		switch {
		case final[c.OrderID] == c.Token:
			completingCharges[c.OrderID]++
		case crashed[k] == crashAfterCharge:
			r.ExtraByKill++
		case lostAfterCharge[k]:
			r.ExtraByLeaseLost++
		case unknown[k]:
			r.ExtraByUnknown++
		default:
			r.Unexplained = append(r.Unexplained, fmt.Sprintf("order %s charged by token %d", c.OrderID, c.Token))
		}
	}
	for order := range final {
		if completingCharges[order] != 1 {
			r.MultiCompleted = append(r.MultiCompleted, fmt.Sprintf("%s: %d charges from its completing attempt", order, completingCharges[order]))
		}
	}
	for order := range final {
		if r.ProviderKeys && applied[order] != 1 {
			r.OverCharged = append(r.OverCharged, fmt.Sprintf("%s charged %d times", order, applied[order]))
		}
	}
	sort.Strings(r.MultiCompleted)
	sort.Strings(r.OverCharged)
	return r
}

// Extra is how many charges the provider received beyond one per job.
func (r *Report) Extra() int { return r.ChargesReceived - r.Jobs }

// Check returns an error listing every invariant the run broke.
func (r *Report) Check() error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(r.NotCompleted) > 0 {
		fail("%d jobs are not COMPLETED in idem: %s", len(r.NotCompleted), first(r.NotCompleted))
	}
	if len(r.UnexpectedExits) > 0 {
		fail("unexpected worker exits: %s", first(r.UnexpectedExits))
	}
	if len(r.MultiCompleted) > 0 {
		fail("completing attempts that did not charge exactly once: %s", first(r.MultiCompleted))
	}
	if len(r.Unexplained) > 0 {
		fail("%d charges no crash or lost lease explains: %s", len(r.Unexplained), first(r.Unexplained))
	}
	if explained := r.ExtraByKill + r.ExtraByLeaseLost + r.ExtraByUnknown; r.Extra() != explained {
		fail("%d extra charges received, %d explained", r.Extra(), explained)
	}
	if r.ProviderKeys {
		if r.ChargesApplied != r.Jobs || len(r.OverCharged) > 0 {
			fail("with the provider's idempotency key %d charges were applied for %d jobs: %s", r.ChargesApplied, r.Jobs, first(r.OverCharged))
		}
	} else if r.ChargesApplied != r.ChargesReceived {
		fail("without the provider's idempotency key every charge received must be applied: %d received, %d applied", r.ChargesReceived, r.ChargesApplied)
	}
	return errors.Join(errs...)
}

func first(list []string) string {
	if len(list) > 5 {
		return strings.Join(list[:5], "; ") + fmt.Sprintf("; and %d more", len(list)-5)
	}
	return strings.Join(list, "; ")
}

func (r *Report) String() string {
	var b strings.Builder
	line := func(label string, format string, args ...any) {
		fmt.Fprintf(&b, "  %-34s %s\n", label, fmt.Sprintf(format, args...))
	}
	kills := r.Kills[crashBeforeCharge] + r.Kills[crashAfterCharge] + r.Kills[crashAfterComplete]
	onOff := map[bool]string{true: "on", false: "off"}

	fmt.Fprintf(&b, "exactly-once payments over NATS JetStream: %d workers, provider idempotency key %s, %s\n",
		r.Workers, onOff[r.ProviderKeys], r.Elapsed.Round(time.Millisecond))
	line("jobs", "%d", r.Jobs)
	line("messages published", "%d (%d jobs published twice)", r.Published, r.DuplicatesPublished)
	line("deliveries", "%d", r.Deliveries)
	line("  redeliveries", "%d", r.Redeliveries)
	line("  duplicates absorbed by idem", "%d (%d replayed the stored receipt, %d found the job in progress and were redelivered)", r.Replayed+r.InProgress, r.Replayed, r.InProgress)
	line("acquisitions (fn ran)", "%d", r.Acquired)
	line("  takeovers", "%d (a later attempt took over a job whose worker died or released it)", r.Takeovers)
	line("workers killed (SIGKILL)", "%d of %d processes: %d before the charge, %d between charge and Complete, %d between Complete and ack",
		kills, r.WorkerProcesses, r.Kills[crashBeforeCharge], r.Kills[crashAfterCharge], r.Kills[crashAfterComplete])
	if len(r.Errors) > 0 {
		line("worker errors (left to redelivery)", "%d: %s", len(r.Errors), first(r.Errors))
	}
	line("charges received by the provider", "%d", r.ChargesReceived)
	line("charges applied", "%d", r.ChargesApplied)
	if r.ProviderKeys {
		line("  answered from provider's records", "%d", r.ProviderReplays)
	}
	explained := r.ExtraByKill + r.ExtraByLeaseLost + r.ExtraByUnknown
	line("charges beyond one per job", "%d: %d accounted for (%d by a kill between charge and Complete, %d by a lease lost after the charge, %d by an unconfirmed charge or Complete)",
		r.Extra(), explained, r.ExtraByKill, r.ExtraByLeaseLost, r.ExtraByUnknown)
	switch err := r.Check(); {
	case err != nil:
		fmt.Fprintf(&b, "FAIL: %v\n", err)
	case r.ProviderKeys:
		fmt.Fprintf(&b, "OK: every one of the %d payments was charged exactly once (idem and the provider's key absorbed %d extra attempts)\n", r.Jobs, r.Extra())
	case r.Extra() == 0:
		fmt.Fprintf(&b, "OK: every one of the %d payments was charged exactly once: no worker died between a charge and its Complete\n", r.Jobs)
	default:
		fmt.Fprintf(&b, "OK: without the provider's key, %d payments were charged %d times, and each of the %d extra charges is a worker that died (or lost its lease) between its charge and its Complete: the gap that only the provider's own idempotency key closes\n", r.Jobs, r.ChargesApplied, r.Extra())
	}
	return b.String()
}
