package robustness

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one recorded call.
type Op struct {
	Worker int
	// Batch numbers, from 1, the batch RPC the call was an item of; 0 for a
	// unary call. Each item is a call of its own, whose interval is the
	// RPC's.
	Batch int64
	In    Input
	Out   Output
}

// History collects the calls of every worker. It is safe for concurrent use.
type History struct {
	mu      sync.Mutex
	ops     []Op
	batches int64
}

// nextBatch numbers a batch RPC.
func (h *History) nextBatch() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches++
	return h.batches
}

// Add records a call.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the calls recorded so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// model is the record state machine for porcupine, one record per
// partition. It is nondeterministic: a call whose answer was lost leads to
// every state it could have produced, and porcupine carries the set.
var model = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{keyState{}} },
	Step: func(state, input, output any) []any {
		next := step(state.(keyState), input.(Input), output.(Output))
		out := make([]any, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output any) string {
		return describe(input.(Input), output.(Output))
	},
	DescribeState: func(state any) string { return state.(keyState).String() },
}).ToModel()

func describe(in Input, out Output) string {
	var b strings.Builder
	switch in.Kind {
	case OpClaim:
		fmt.Fprintf(&b, "Claim(by %s, ttl %s)", short(in.Claimant), in.TTL)
	case OpComplete:
		fmt.Fprintf(&b, "Complete(tok %d, %q)", in.Token, in.Value)
	case OpFail:
		fmt.Fprintf(&b, "Fail(tok %d, %q, retryable %t)", in.Token, in.Value, in.Retryable)
	case OpHeartbeat:
		fmt.Fprintf(&b, "Heartbeat(tok %d, ttl %s)", in.Token, in.TTL)
	case OpLookup:
		b.WriteString("Lookup()")
	case OpStartStep:
		fmt.Fprintf(&b, "StartStep(tok %d, %s)", in.Token, StepNames[in.Step])
	case OpCompleteStep:
		fmt.Fprintf(&b, "CompleteStep(tok %d, %s, %q)", in.Token, StepNames[in.Step], in.Value)
	}
	b.WriteString(" → ")
	if out.Code != CodeOK {
		b.WriteString(out.Code.String())
		return b.String()
	}
	if in.Kind == OpStartStep || in.Kind == OpCompleteStep {
		b.WriteString(out.Step.String())
		return b.String()
	}
	if in.Kind == OpClaim {
		b.WriteString(out.Outcome.String() + " ")
	}
	r := out.Rec
	fmt.Fprintf(&b, "%s tok %d", r.State, r.Token)
	if r.State == RecProcessing || r.State == RecExpired {
		fmt.Fprintf(&b, " by %s until %s", short(r.Claimant), time.Unix(0, r.Lease).UTC().Format("15:04:05.000"))
	} else {
		fmt.Fprintf(&b, " %q", r.Value)
	}
	if in.Kind == OpClaim || in.Kind == OpLookup {
		for i, st := range r.Steps {
			if st.Phase != StepNone {
				fmt.Fprintf(&b, " %s=%s", StepNames[i], st)
			}
		}
		if r.UnknownSteps {
			b.WriteString(" (a step of another name)")
		}
	}
	return b.String()
}

// Verdict is the result of checking a history.
type Verdict struct {
	// Calls is how many calls were checked; Maybe how many of them had their
	// answer lost (UNAVAILABLE, DEADLINE_EXCEEDED, a transport error).
	// Lookups whose answer was lost change nothing and are left out.
	// BatchItems is how many of the calls were items of a batch RPC.
	Calls, Maybe, BatchItems int
	Keys                     int
	// Illegal lists the keys whose history no order of the calls explains;
	// Undecided those porcupine gave up on within the time it was given.
	Illegal, Undecided []string
	// Visualizations are porcupine's HTML pages of the illegal keys.
	Visualizations []string
	Took           time.Duration
}

// OK reports whether every key's history was found linearizable.
func (v Verdict) OK() bool { return len(v.Illegal) == 0 && len(v.Undecided) == 0 }

func (v Verdict) String() string {
	s := fmt.Sprintf("%d calls (%d maybe applied, %d batch items) on %d keys checked in %s: ", v.Calls, v.Maybe, v.BatchItems, v.Keys, v.Took.Round(time.Millisecond))
	switch {
	case len(v.Illegal) > 0:
		s += fmt.Sprintf("NOT linearizable on %d keys %v", len(v.Illegal), v.Illegal)
		if len(v.Undecided) > 0 {
			s += fmt.Sprintf(", undecided on %d more", len(v.Undecided))
		}
		if len(v.Visualizations) > 0 {
			s += "; see " + strings.Join(v.Visualizations, ", ")
		}
	case len(v.Undecided) > 0:
		s += fmt.Sprintf("undecided on %d keys %v", len(v.Undecided), v.Undecided)
	default:
		s += "linearizable"
	}
	return s
}

// Check checks ops key by key, giving porcupine at most perKey for each.
// When a key is not linearizable and vizDir is not empty, porcupine's
// visualization of that key is written there (at most three of them).
//
// An item of a batch RPC is checked as a call of its own over the RPC's
// interval. Two items of one key in one batch share that interval, so the
// checker may put them in either order, while the server promises the
// order of the request: the check is weaker there than the promise, never
// stricter, and it cannot reject a history the server may produce. An
// order of its own for the two cannot be expressed by intervals without
// claiming to know when within the RPC the first one took effect.
func Check(ops []Op, perKey time.Duration, vizDir, name string) Verdict {
	started := time.Now()
	var v Verdict
	byKey := map[string][]porcupine.Operation{}
	var last int64
	for _, op := range ops {
		if op.In.End != Never && op.In.End > last {
			last = op.In.End
		}
	}
	lanes := 0
	type batchKey struct {
		batch int64
		key   string
	}
	inBatch := map[batchKey]bool{}
	for _, op := range ops {
		if op.Out.Code == CodeMaybe && op.In.Kind == OpLookup {
			continue
		}
		v.Calls++
		client, end := op.Worker, op.In.End
		if op.Batch != 0 {
			v.BatchItems++
			// A second item of the key in the same batch overlaps the first:
			// a lane of its own, for the visualization.
			bk := batchKey{op.Batch, op.In.Key}
			if inBatch[bk] {
				lanes++
				client = -lanes
			}
			inBatch[bk] = true
		}
		if op.Out.Code == CodeMaybe {
			v.Maybe++
			// Open to the end of the history, on a lane of its own so that the
			// visualization does not overlap the worker's later calls.
			end = last + 1
			lanes++
			client = -lanes
		}
		byKey[op.In.Key] = append(byKey[op.In.Key], porcupine.Operation{
			ClientId: client, Input: op.In, Call: op.In.Start, Output: op.Out, Return: end,
		})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	v.Keys = len(keys)
	for _, k := range keys {
		kops := byKey[k]
		renumberClients(kops)
		res, info := porcupine.CheckOperationsVerbose(model, kops, perKey)
		switch res {
		case porcupine.Illegal:
			v.Illegal = append(v.Illegal, k)
			if vizDir != "" && len(v.Visualizations) < 3 {
				path := filepath.Join(vizDir, fmt.Sprintf("%s-%s.html", name, sanitize(k)))
				if err := os.MkdirAll(vizDir, 0o755); err == nil {
					if err := porcupine.VisualizePath(model, info, path); err == nil {
						v.Visualizations = append(v.Visualizations, path)
					}
				}
			}
		case porcupine.Unknown:
			v.Undecided = append(v.Undecided, k)
		}
	}
	v.Took = time.Since(started)
	return v
}

// renumberClients maps the client ids of one key's calls onto 0..n-1, which
// porcupine's visualization wants.
func renumberClients(ops []porcupine.Operation) {
	ids := map[int]int{}
	for i := range ops {
		id, ok := ids[ops[i].ClientId]
		if !ok {
			id = len(ids)
			ids[ops[i].ClientId] = id
		}
		ops[i].ClientId = id
	}
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// KeyHistory lists key's calls in ops one a line, in the order they started,
// with their intervals in milliseconds from the first call's start: what to
// read when the checker finds the key not linearizable and the page of its
// visualization is gone with the test's temporary directory.
func KeyHistory(ops []Op, key string) string {
	var kops []Op
	for _, op := range ops {
		if op.In.Key == key {
			kops = append(kops, op)
		}
	}
	sort.SliceStable(kops, func(i, j int) bool { return kops[i].In.Start < kops[j].In.Start })
	var b strings.Builder
	for _, op := range kops {
		at := func(t int64) string { return fmt.Sprintf("%.3f", float64(t-kops[0].In.Start)/1e6) }
		end := "lost"
		if op.In.End != Never {
			end = at(op.In.End)
		}
		call := "unary"
		if op.Batch != 0 {
			call = fmt.Sprintf("batch %d", op.Batch)
		}
		fmt.Fprintf(&b, "worker %d, %s, [%s, %s] ms: %s\n", op.Worker, call, at(op.In.Start), end, describe(op.In, op.Out))
	}
	return b.String()
}
