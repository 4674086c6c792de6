package sqlite

import (
	"math/bits"
	"sync/atomic"
)

// firstReads decides whether a Claim reads its record on a read connection
// before it queues for the writer (RecordClaim). That read answers the
// Claims of live keys (IN_PROGRESS while the holder works, a replay once it
// is done) without waiting for a write transaction, but for a new key it
// finds nothing and is wasted, and with every key new that waste is a
// large share of idemd's CPU (docs/BENCHMARKS.md). So it remembers, for the
// last 64 Claims, whether the read answered them or would have (the writer
// tells for the Claims that skipped it), and a Claim reads first while at
// least a quarter of those were answered so. A Claim
// that skips the read is still answered correctly, by the writer; and one
// Claim in 16 reads first whatever the history says, so a store that starts
// out with new keys notices when they start to repeat even if the writer's
// word were lost.
type firstReads struct {
	answered atomic.Uint64 // bit i: the Claim i before the last was answered by a read
	claims   atomic.Uint64
	always   bool // every Claim reads first: for the tests of that path
}

// firstReadsMin is how many of the last 64 Claims must have been answerable
// by the first read for the next Claim to make it.
const firstReadsMin = 16

// firstReadsProbe: one Claim in this many reads first regardless.
const firstReadsProbe = 16

// worth reports whether the next Claim should read first.
func (f *firstReads) worth() bool {
	if f.always || f.claims.Add(1)%firstReadsProbe == 0 {
		return true
	}
	return bits.OnesCount64(f.answered.Load()) >= firstReadsMin
}

// note records whether a Claim was, or would have been, answered by the
// first read.
func (f *firstReads) note(answered bool) {
	var bit uint64
	if answered {
		bit = 1
	}
	for {
		old := f.answered.Load()
		if f.answered.CompareAndSwap(old, old<<1|bit) {
			return
		}
	}
}
