package robustness

import (
	"context"
	"slices"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// The batch half of the workload: BatchClaim, BatchComplete, BatchFail,
// BatchHeartbeat and BatchLookup, each item recorded as a call of its own
// over the RPC's interval (see Check for why that is sound when a key is in
// one batch twice).

// DefaultBatchShare is the share of its calls the scenarios' workload sends
// as items of batch RPCs.
const DefaultBatchShare = 1.0 / 3

// itemAnswer is one item's answer in a batch response: its response's
// record (and a Claim's outcome and retry_after), or its own error.
type itemAnswer struct {
	rec        *idemv1.Record
	outcome    idemv1.Outcome
	retryAfter time.Duration
	err        error
}

// batchResult is what each Batch*Result is: a response of type R or an error.
type batchResult[R any] interface {
	GetResponse() R
	GetError() *spb.Status
}

// itemAnswers turns a batch response's results into each item's answer.
func itemAnswers[R interface {
	comparable
	GetRecord() *idemv1.Record
}, T batchResult[R]](results []T) []itemAnswer {
	out := make([]itemAnswer, len(results))
	var none R
	for i, r := range results {
		switch resp, st := r.GetResponse(), r.GetError(); {
		case st != nil && st.GetCode() == int32(codes.OK):
			out[i].err = status.Error(codes.Unknown, "robustness: a batch item's error carries code OK")
		case st != nil:
			out[i].err = status.ErrorProto(st)
		case resp == none:
			out[i].err = status.Error(codes.Unknown, "robustness: a batch result holds neither a response nor an error")
		default:
			out[i].rec = resp.GetRecord()
		}
	}
	return out
}

// doBatch makes one batch RPC of the items ins and records each item as a
// call of its own, with the RPC's start and end: the server applies each
// item at some moment within the RPC. When the RPC fails as a whole (a
// transport error, or an error of the request), every item's answer is
// lost, as a unary call's is.
func (c *caller) doBatch(ctx context.Context, kind OpKind, ins []Input, call func(ctx context.Context, cl idemv1.IdempotencyServiceClient) ([]itemAnswer, error)) ([]Output, []itemAnswer) {
	c.calls += len(ins)
	c.batched += len(ins)
	var answers []itemAnswer
	var err error
	start, end, sent := c.send(ctx, func(ctx context.Context, cl idemv1.IdempotencyServiceClient) {
		answers, err = call(ctx, cl)
	})
	if err == nil && len(answers) != len(ins) {
		err = status.Errorf(codes.Unknown, "robustness: %d results for %d requests", len(answers), len(ins))
	}
	if err != nil && classify(err).Code != CodeMaybe {
		// NOT_FOUND, LEASE_LOST or ALREADY_TERMINAL of the whole request
		// would be an item's answer given to every item: the service never
		// sends it, so it is listed, and nothing is assumed of the items.
		err = status.Errorf(codes.Unknown, "robustness: Batch%s failed as a whole with %v", kind, err)
	}
	if err != nil {
		answers = make([]itemAnswer, len(ins))
		for i := range answers {
			answers[i].err = err
		}
	}
	if sent {
		c.stats.batchSent(kind)
	}
	batch := c.hist.nextBatch()
	outs := make([]Output, len(ins))
	for i, in := range ins {
		a := answers[i]
		outs[i] = c.record(batch, in, start, end, sent, a.rec, a.outcome, a.err)
	}
	return outs, answers
}

// claimItem is one Claim of a BatchClaim.
type claimItem struct {
	key, claimant string
}

// tokenItem is one Complete, Fail or Heartbeat of a batch.
type tokenItem struct {
	key   string
	token int64
	// value is Complete's result or Fail's error.
	value     string
	retryable bool
}

func (c *caller) batchClaim(ctx context.Context, items []claimItem, ttl time.Duration) ([]Output, []time.Duration) {
	ins := make([]Input, len(items))
	reqs := make([]*idemv1.ClaimRequest, len(items))
	for i, it := range items {
		ins[i] = Input{Kind: OpClaim, Key: it.key, Claimant: it.claimant, TTL: ttl}
		reqs[i] = &idemv1.ClaimRequest{Namespace: Namespace, Key: it.key, Claimant: it.claimant, LeaseTtl: durationpb.New(ttl)}
	}
	outs, answers := c.doBatch(ctx, OpClaim, ins, func(ctx context.Context, cl idemv1.IdempotencyServiceClient) ([]itemAnswer, error) {
		resp, err := cl.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: reqs})
		if err != nil {
			return nil, err
		}
		answers := itemAnswers[*idemv1.ClaimResponse](resp.GetResults())
		for i, r := range resp.GetResults() {
			answers[i].outcome = r.GetResponse().GetOutcome()
			answers[i].retryAfter = r.GetResponse().GetRetryAfter().AsDuration()
		}
		return answers, nil
	})
	retryAfter := make([]time.Duration, len(items))
	for i, a := range answers {
		retryAfter[i] = a.retryAfter
	}
	return outs, retryAfter
}

func (c *caller) batchComplete(ctx context.Context, items []tokenItem) []Output {
	ins := make([]Input, len(items))
	reqs := make([]*idemv1.CompleteRequest, len(items))
	for i, it := range items {
		ins[i] = Input{Kind: OpComplete, Key: it.key, Token: it.token, Value: it.value}
		reqs[i] = &idemv1.CompleteRequest{Namespace: Namespace, Key: it.key, Token: it.token, Result: []byte(it.value)}
	}
	outs, _ := c.doBatch(ctx, OpComplete, ins, func(ctx context.Context, cl idemv1.IdempotencyServiceClient) ([]itemAnswer, error) {
		resp, err := cl.BatchComplete(ctx, &idemv1.BatchCompleteRequest{Requests: reqs})
		if err != nil {
			return nil, err
		}
		return itemAnswers[*idemv1.CompleteResponse](resp.GetResults()), nil
	})
	return outs
}

func (c *caller) batchFail(ctx context.Context, items []tokenItem) []Output {
	ins := make([]Input, len(items))
	reqs := make([]*idemv1.FailRequest, len(items))
	for i, it := range items {
		ins[i] = Input{Kind: OpFail, Key: it.key, Token: it.token, Value: it.value, Retryable: it.retryable}
		reqs[i] = &idemv1.FailRequest{Namespace: Namespace, Key: it.key, Token: it.token, Error: it.value, Retryable: it.retryable}
	}
	outs, _ := c.doBatch(ctx, OpFail, ins, func(ctx context.Context, cl idemv1.IdempotencyServiceClient) ([]itemAnswer, error) {
		resp, err := cl.BatchFail(ctx, &idemv1.BatchFailRequest{Requests: reqs})
		if err != nil {
			return nil, err
		}
		return itemAnswers[*idemv1.FailResponse](resp.GetResults()), nil
	})
	return outs
}

func (c *caller) batchHeartbeat(ctx context.Context, items []tokenItem, ttl time.Duration) []Output {
	ins := make([]Input, len(items))
	reqs := make([]*idemv1.HeartbeatRequest, len(items))
	for i, it := range items {
		ins[i] = Input{Kind: OpHeartbeat, Key: it.key, Token: it.token, TTL: ttl}
		reqs[i] = &idemv1.HeartbeatRequest{Namespace: Namespace, Key: it.key, Token: it.token, LeaseTtl: durationpb.New(ttl)}
	}
	outs, _ := c.doBatch(ctx, OpHeartbeat, ins, func(ctx context.Context, cl idemv1.IdempotencyServiceClient) ([]itemAnswer, error) {
		resp, err := cl.BatchHeartbeat(ctx, &idemv1.BatchHeartbeatRequest{Requests: reqs})
		if err != nil {
			return nil, err
		}
		return itemAnswers[*idemv1.HeartbeatResponse](resp.GetResults()), nil
	})
	return outs
}

func (c *caller) batchLookup(ctx context.Context, keys []string) []Output {
	ins := make([]Input, len(keys))
	reqs := make([]*idemv1.LookupRequest, len(keys))
	for i, k := range keys {
		ins[i] = Input{Kind: OpLookup, Key: k}
		reqs[i] = &idemv1.LookupRequest{Namespace: Namespace, Key: k}
	}
	outs, _ := c.doBatch(ctx, OpLookup, ins, func(ctx context.Context, cl idemv1.IdempotencyServiceClient) ([]itemAnswer, error) {
		resp, err := cl.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: reqs})
		if err != nil {
			return nil, err
		}
		return itemAnswers[*idemv1.LookupResponse](resp.GetResults()), nil
	})
	return outs
}

// retryItems sends every item in one batch, then again, a bounded number of
// times, a batch of those whose answer was lost, as a consumer would. call
// sends the items at idx and returns their answers in that order.
func retryItems(ctx context.Context, n int, call func(idx []int) []Output) []Output {
	outs := make([]Output, n)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for try := 0; ; try++ {
		for j, o := range call(idx) {
			outs[idx[j]] = o
		}
		var lost []int
		for i, o := range outs {
			if o.Code == CodeMaybe {
				lost = append(lost, i)
			}
		}
		if len(lost) == 0 || try == 2 || ctx.Err() != nil {
			return outs
		}
		sleep(ctx, 100*time.Millisecond)
		idx = lost
	}
}

func pickAt[T any](s []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = s[i]
	}
	return out
}

// twice puts a copy of one of the items, changed by change, somewhere after
// it: the same key twice in one batch.
func twice[T any](wk *worker, items []T, change func(*T)) []T {
	i := wk.rng.IntN(len(items))
	d := items[i]
	change(&d)
	at := i + 1 + wk.rng.IntN(len(items)-i)
	items = append(items[:at], append([]T{d}, items[at:]...)...)
	return items
}

// heldJob is a job the worker holds.
type heldJob struct {
	key          string
	token, lease int64
}

// batchJob is a job on several keys at once, as a consumer holding a
// delivery of many jobs makes it: one BatchClaim for all of them, then
// BatchHeartbeat, BatchComplete and BatchFail for the ones it acquired.
// Now and then a key is in a batch twice.
func (wk *worker) batchJob(ctx context.Context) {
	rng := wk.rng
	ttl := wk.w.LeaseTTL
	if wk.w.Profile == Mixed && rng.IntN(10) == 0 {
		keys := wk.ks.pickN(rng, 2+rng.IntN(4))
		if rng.IntN(4) == 0 {
			keys = twice(wk, keys, func(*string) {})
		}
		wk.batchLookup(ctx, keys)
		return
	}
	// A delivery of 2 to 5 jobs, but never most of the live keys: a worker
	// holding them all would leave the others nothing but IN_PROGRESS.
	n := 2 + rng.IntN(max(1, min(4, wk.w.Keys/2-1)))
	var items []claimItem
	for _, k := range wk.ks.pickN(rng, n) {
		items = append(items, claimItem{k, newClaimant()})
	}
	if rng.IntN(4) == 0 {
		// The same claimant again (re-entrant: the same token), or a
		// rival's Claim behind it (IN_PROGRESS).
		items = twice(wk, items, func(it *claimItem) {
			if rng.IntN(2) == 0 {
				it.claimant = newClaimant()
			}
		})
	}
	retryAfter := make([]time.Duration, len(items))
	claim := func(idx []int) []Output {
		outs, ra := wk.batchClaim(ctx, pickAt(items, idx), ttl)
		for j, i := range idx {
			retryAfter[i] = ra[j]
		}
		return outs
	}
	outs := retryItems(ctx, len(items), claim)
	var jobs []heldJob
	var waiting []int
	answered := false
	take := func(i int, out Output) {
		for j := range jobs {
			if jobs[j].key == items[i].key {
				if out.Rec.Token > jobs[j].token {
					jobs[j] = heldJob{items[i].key, out.Rec.Token, out.Rec.Lease}
				}
				return
			}
		}
		jobs = append(jobs, heldJob{items[i].key, out.Rec.Token, out.Rec.Lease})
	}
	for i, out := range outs {
		if out.Code != CodeOK {
			continue
		}
		answered = true
		switch out.Outcome {
		case OutcomeAcquired:
			take(i, out)
		case OutcomeInProgress:
			waiting = append(waiting, i)
		case OutcomeCompleted, OutcomeFailed:
			wk.ks.retire(items[i].key)
		}
	}
	if !answered {
		// The service or its database is away: give it a moment.
		sleep(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond)
		return
	}
	if wk.w.Profile == LeaseRace && len(jobs) == 0 && len(waiting) > 0 {
		// Wake just before the first holder's lease runs out and ask for
		// every key still held, every few milliseconds.
		wake := retryAfter[waiting[0]]
		for _, i := range waiting {
			wake = min(wake, retryAfter[i])
		}
		sleep(ctx, wake-time.Duration(rng.IntN(30))*time.Millisecond)
		for try := 0; try < 20 && ctx.Err() == nil && len(waiting) > 0; try++ {
			outs, _ := wk.batchClaim(ctx, pickAt(items, waiting), ttl)
			var still []int
			for j, out := range outs {
				i := waiting[j]
				switch {
				case out.Code == CodeOK && out.Outcome == OutcomeAcquired:
					take(i, out)
				case out.Code == CodeOK && out.Outcome == OutcomeInProgress:
					still = append(still, i)
				}
			}
			// A key acquired under one claimant is no longer waited for
			// under the other.
			waiting = waiting[:0]
			for _, i := range still {
				if !slices.ContainsFunc(jobs, func(j heldJob) bool { return j.key == items[i].key }) {
					waiting = append(waiting, i)
				}
			}
			if len(waiting) > 0 {
				sleep(ctx, 5*time.Millisecond)
			}
		}
	}
	if len(jobs) == 0 {
		if wk.w.Profile == Mixed {
			sleep(ctx, time.Duration(10+rng.IntN(90))*time.Millisecond)
		}
		return
	}
	for _, j := range jobs {
		wk.remember(j.key, j.token)
	}
	if wk.w.Profile == LeaseRace {
		wk.batchRaceTheLease(ctx, jobs)
		return
	}
	switch r := rng.Float64(); {
	case r < 0.2:
		if wk.batchHeartbeatAll(ctx, jobs) {
			sleep(ctx, time.Duration(rng.IntN(int(ttl/time.Millisecond)))*time.Millisecond)
		}
	case r < 0.35:
		// A consumer that paused past its leases: its Completes race the
		// takeovers.
		sleep(ctx, ttl+time.Duration(rng.IntN(400)-100)*time.Millisecond)
	case r < 0.45:
		sleep(ctx, time.Duration(rng.IntN(int(ttl/2/time.Millisecond)))*time.Millisecond)
		wk.batchHeartbeatAll(ctx, jobs)
	}
	wk.batchFinish(ctx, jobs)
}

// batchHeartbeatAll extends every job's lease in one BatchHeartbeat (a job
// twice, now and then) and reports whether any answer was a success.
func (wk *worker) batchHeartbeatAll(ctx context.Context, jobs []heldJob) bool {
	items := make([]tokenItem, len(jobs))
	for i, j := range jobs {
		items[i] = tokenItem{key: j.key, token: j.token}
	}
	if wk.rng.IntN(4) == 0 {
		items = twice(wk, items, func(*tokenItem) {})
	}
	outs := retryItems(ctx, len(items), func(idx []int) []Output {
		return wk.batchHeartbeat(ctx, pickAt(items, idx), wk.w.LeaseTTL)
	})
	for _, o := range outs {
		if o.Code == CodeOK {
			return true
		}
	}
	return false
}

// giveUp remembers a job the worker released or abandoned.
func (wk *worker) giveUp(j heldJob) {
	if len(wk.gaveUp) == 16 {
		wk.gaveUp = wk.gaveUp[1:]
	}
	wk.gaveUp = append(wk.gaveUp, heldToken{j.key, j.token})
}

// batchFinish Completes most jobs and Fails some, retryably or for good, in
// one BatchComplete and one BatchFail; the rest it abandons, as a consumer
// that died would. A Complete with a token held earlier rides along now and
// then (LEASE_LOST, most of the time: a job given up and delivered again),
// and an item is sent twice: with its
// own value (a repeat: the stored record) or another (ALREADY_TERMINAL).
func (wk *worker) batchFinish(ctx context.Context, jobs []heldJob) {
	rng := wk.rng
	var completes, fails []tokenItem
	for _, j := range jobs {
		switch r := rng.Float64(); {
		case r < 0.6:
			completes = append(completes, tokenItem{key: j.key, token: j.token, value: wk.value("done")})
		case r < 0.8:
			fails = append(fails, tokenItem{key: j.key, token: j.token, value: wk.value("again"), retryable: true})
			wk.giveUp(j)
		case r < 0.88:
			fails = append(fails, tokenItem{key: j.key, token: j.token, value: wk.value("broken")})
		default:
			wk.giveUp(j)
		}
	}
	// A job delivered again after the consumer gave it up, or a token from
	// further back.
	switch {
	case len(wk.gaveUp) > 0 && rng.IntN(2) == 0:
		i := rng.IntN(len(wk.gaveUp))
		h := wk.gaveUp[i]
		wk.gaveUp = slices.Delete(wk.gaveUp, i, i+1)
		completes = append(completes, tokenItem{key: h.key, token: h.token, value: wk.value("stale")})
	case len(wk.old) > 0 && rng.IntN(4) == 0:
		h := wk.old[rng.IntN(len(wk.old))]
		completes = append(completes, tokenItem{key: h.key, token: h.token, value: wk.value("stale")})
	}
	again := func(it *tokenItem) {
		if rng.IntN(2) == 0 {
			it.value = wk.value("other")
		}
	}
	if len(completes) > 0 && rng.IntN(4) == 0 {
		completes = twice(wk, completes, again)
	}
	if len(fails) > 0 && rng.IntN(4) == 0 {
		fails = twice(wk, fails, again)
	}
	complete := func() {
		if len(completes) == 0 {
			return
		}
		outs := retryItems(ctx, len(completes), func(idx []int) []Output {
			return wk.batchComplete(ctx, pickAt(completes, idx))
		})
		for i, o := range outs {
			if o.Code == CodeOK && o.Rec.Value == completes[i].value {
				wk.acked(completes[i].key, completes[i].value)
			}
		}
	}
	fail := func() {
		if len(fails) == 0 {
			return
		}
		retryItems(ctx, len(fails), func(idx []int) []Output {
			return wk.batchFail(ctx, pickAt(fails, idx))
		})
	}
	if rng.IntN(2) == 0 {
		complete()
		fail()
	} else {
		fail()
		complete()
	}
}

// batchRaceTheLease is LeaseRace's holder with several jobs: it finishes
// them, or asks for more time, within ±60 ms of the first lease's end.
func (wk *worker) batchRaceTheLease(ctx context.Context, jobs []heldJob) {
	rng := wk.rng
	ttl := wk.w.LeaseTTL
	first := jobs[0].lease
	for _, j := range jobs {
		first = min(first, j.lease)
	}
	sleep(ctx, time.Until(time.Unix(0, first))+time.Duration(rng.IntN(120)-60)*time.Millisecond)
	if rng.IntN(4) == 0 {
		items := make([]tokenItem, len(jobs))
		for i, j := range jobs {
			items[i] = tokenItem{key: j.key, token: j.token}
		}
		var kept []heldJob
		for i, o := range wk.batchHeartbeat(ctx, items, ttl) {
			if o.Code == CodeOK {
				kept = append(kept, jobs[i])
			}
		}
		if len(kept) == 0 {
			return
		}
		jobs = kept
		sleep(ctx, ttl+time.Duration(rng.IntN(120)-60)*time.Millisecond)
	}
	completes := make([]tokenItem, len(jobs))
	for i, j := range jobs {
		completes[i] = tokenItem{key: j.key, token: j.token, value: wk.value("done")}
	}
	outs := retryItems(ctx, len(completes), func(idx []int) []Output {
		return wk.batchComplete(ctx, pickAt(completes, idx))
	})
	for i, o := range outs {
		if o.Code == CodeOK && o.Rec.Value == completes[i].value {
			wk.acked(completes[i].key, completes[i].value)
		}
	}
}
