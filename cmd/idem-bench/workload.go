package main

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// Scenarios.
const (
	scenarioUnique = "unique" // every job a new key
	scenarioHot    = "hot"    // every worker over hotKeys keys
	scenarioReplay = "replay" // replayShare of the Claims hit completed keys
	// scenarioBatch is a consumer that receives --batch-size new messages
	// at once and claims and completes them together: one BatchClaim and
	// one BatchComplete on the service targets, a Claim and a Complete per
	// message on the others (batchTarget).
	scenarioBatch = "batch"
)

const (
	// hotKeys is how many keys the hot scenario's workers share.
	hotKeys = 10
	// replayShare is the share of the replay scenario's Claims that ask for
	// a key completed before.
	replayShare = 0.8
	// replayMemory bounds how many completed keys each worker remembers for
	// the replay scenario.
	replayMemory = 4096
)

// outcome is how a job ended, whatever the target.
type outcome int

const (
	outcomeAcquired   outcome = iota // claimed, then completed
	outcomeInProgress                // another worker held the key (service only)
	outcomeReplayed                  // the key was completed before (service only)
	outcomeDuplicate                 // the key existed: sql and redis cannot tell in progress from completed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"acquired", "in_progress", "replayed", "duplicate"}

// workload chooses the keys of one target's jobs in one scenario. Each target
// has its own, so that every target sees the same mix of outcomes; a workload
// lives across the rounds of its scenario, so the replay scenario's completed
// keys and the hot scenario's generations carry over from round to round.
type workload struct {
	scenario string
	prefix   string
	// hotGen is each hot key's generation: the key is prefix-h<slot>-<gen>,
	// and the worker that completes a generation starts the next one, so the
	// workers keep meeting a key that is held (IN_PROGRESS), just completed
	// (replay) or new (ACQUIRED), rather than replaying forever.
	hotGen  [hotKeys]atomic.Int64
	workers []workerKeys
	// batchSize is the messages of one delivery in the batch scenario; 0
	// in the others, whose jobs are one message each.
	batchSize int
}

// workerKeys is one worker's state; only that worker touches it.
type workerKeys struct {
	id   string
	rng  *rand.Rand
	seq  int64
	done []string // completed keys, for replays; a ring of replayMemory
	next int      // where the ring writes next
	// The key of the job in flight, for finished.
	hotSlot int
	hotGen  int64
	fresh   bool
}

func newWorkload(scenario, prefix string, workers int) *workload {
	w := &workload{scenario: scenario, prefix: prefix, workers: make([]workerKeys, workers)}
	for i := range w.workers {
		w.workers[i] = workerKeys{
			id:  strconv.Itoa(i),
			rng: rand.New(rand.NewPCG(uint64(i)+1, 0x1de4)),
		}
	}
	return w
}

// key returns the key of worker i's next job.
func (w *workload) key(i int) string {
	k := &w.workers[i]
	switch w.scenario {
	case scenarioHot:
		k.hotSlot = k.rng.IntN(hotKeys)
		k.hotGen = w.hotGen[k.hotSlot].Load()
		return w.prefix + "-h" + strconv.Itoa(k.hotSlot) + "-" + strconv.FormatInt(k.hotGen, 10)
	case scenarioReplay:
		if len(k.done) > 0 && k.rng.Float64() < replayShare {
			k.fresh = false
			return k.done[k.rng.IntN(len(k.done))]
		}
		k.fresh = true
	}
	k.seq++
	return w.prefix + "-w" + k.id + "-" + strconv.FormatInt(k.seq, 10)
}

// finished tells the workload how worker i's job on key ended.
func (w *workload) finished(i int, key string, o outcome) {
	k := &w.workers[i]
	switch w.scenario {
	case scenarioHot:
		if o == outcomeAcquired {
			w.hotGen[k.hotSlot].CompareAndSwap(k.hotGen, k.hotGen+1)
		}
	case scenarioReplay:
		if o == outcomeAcquired && k.fresh {
			if len(k.done) < replayMemory {
				k.done = append(k.done, key)
			} else {
				k.done[k.next] = key
				k.next = (k.next + 1) % replayMemory
			}
		}
	}
}
