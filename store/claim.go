package store

import (
	"bytes"
	"time"
)

// ClaimAction is what a Claim does about the record it found: the rule of
// DESIGN §1, decided once here for every store.
type ClaimAction int

// The actions of a Claim on an existing record.
const (
	// ClaimAnswer: the Claim is answered from the record and writes nothing:
	// a replay of a COMPLETED or FAILED record, an UNRESOLVED one, another
	// worker's live lease (IN_PROGRESS), the same claimant asking again
	// (ACQUIRED with its own token), or a fingerprint mismatch.
	ClaimAnswer ClaimAction = iota + 1
	// ClaimAcquire: the Claim takes the record over: it is RELEASED or
	// EXPIRED, or its lease ran out and it is not held for resolution.
	ClaimAcquire
	// ClaimMakeUnresolved: the record is held for resolution (Hold) and its
	// lease ran out while it is still PROCESSING, or it has a STARTED step
	// and its policy holds unfinished steps (HoldUnfinished) while it is
	// open to a takeover. The Claim makes it UNRESOLVED, if it still is so
	// under the store's lock, and answers OutcomeUnresolved; it never takes
	// it over.
	ClaimMakeUnresolved
)

// ClaimDecision is DecideClaim's verdict on one Claim.
type ClaimDecision struct {
	Action ClaimAction
	// Answer, or Err, is the Claim's answer when Action is ClaimAnswer.
	Answer *ClaimResult
	Err    error
}

// DecideClaim decides a Claim of the existing record rec at time now (the
// store's clock). A store runs it on the record as its statement or its
// transaction saw it, and does what the decision names; a decorator runs it
// on an earlier Claim's answer (ClaimResult.Now) to answer a Claim of the
// same key as if it ran right after.
func DecideClaim(rec *Record, p *ClaimParams, now time.Time) ClaimDecision {
	if len(rec.Fingerprint) > 0 && len(p.Fingerprint) > 0 && !bytes.Equal(rec.Fingerprint, p.Fingerprint) {
		return ClaimDecision{Action: ClaimAnswer, Err: ErrFingerprintMismatch}
	}
	answer := func(res *ClaimResult) ClaimDecision { return ClaimDecision{Action: ClaimAnswer, Answer: res} }
	switch rec.State {
	case StateCompleted:
		return answer(&ClaimResult{Outcome: OutcomeCompleted, Record: rec, Now: now})
	case StateFailed:
		return answer(&ClaimResult{Outcome: OutcomeFailed, Record: rec, Now: now})
	case StateUnresolved:
		return answer(Unresolved(rec, now))
	case StateProcessing:
		if rec.LeaseExpiresAt.After(now) {
			if p.Claimant != "" && rec.Claimant == p.Claimant {
				// The same attempt asking again (its response was lost).
				return answer(&ClaimResult{Outcome: OutcomeAcquired, Record: rec, Now: now})
			}
			return answer(&ClaimResult{Outcome: OutcomeInProgress, Record: rec, RetryAfter: rec.LeaseExpiresAt.Sub(now), Now: now})
		}
		if rec.Hold || rec.holdsUnfinished() {
			return ClaimDecision{Action: ClaimMakeUnresolved}
		}
	case StateExpired, StateReleased:
		if rec.holdsUnfinished() {
			return ClaimDecision{Action: ClaimMakeUnresolved}
		}
	}
	return ClaimDecision{Action: ClaimAcquire}
}

// Acquired is the answer to a Claim that wrote rec at now: a new record, or
// a takeover when an earlier attempt had held it.
func Acquired(rec *Record, now time.Time) *ClaimResult {
	return &ClaimResult{Outcome: OutcomeAcquired, Record: rec, Takeover: rec.Attempt > 1, Now: now}
}

// Unresolved is the answer to a Claim of rec, an UNRESOLVED record, at now:
// one that was so already, or that this Claim made so (ClaimMakeUnresolved).
func Unresolved(rec *Record, now time.Time) *ClaimResult {
	return &ClaimResult{Outcome: OutcomeUnresolved, Record: rec, Now: now}
}
