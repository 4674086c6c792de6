package store

import (
	"bytes"
	"time"
)

// ReportClaim answers a Claim of the existing record rec at time now (the
// store's clock) when the answer writes nothing: a fingerprint mismatch
// (ErrFingerprintMismatch), a replay of a COMPLETED or FAILED record, another
// worker's live lease (IN_PROGRESS with RetryAfter), or the same claimant
// asking again (ACQUIRED with its own token). It returns nil and no error
// when the Claim should acquire the record: it is RELEASED or EXPIRED, or its
// lease ran out. A record held for resolution (Hold) whose lease ran out
// is never acquired: OutcomeUnresolved (see HoldsLapsed). Every store decides these cases the same way, here.
func ReportClaim(rec *Record, p *ClaimParams, now time.Time) (*ClaimResult, error) {
	if len(rec.Fingerprint) > 0 && len(p.Fingerprint) > 0 && !bytes.Equal(rec.Fingerprint, p.Fingerprint) {
		return nil, ErrFingerprintMismatch
	}
	switch rec.State {
	case StateCompleted:
		return &ClaimResult{Outcome: OutcomeCompleted, Record: rec}, nil
	case StateFailed:
		return &ClaimResult{Outcome: OutcomeFailed, Record: rec}, nil
	case StateUnresolved:
		return &ClaimResult{Outcome: OutcomeUnresolved, Record: rec}, nil
	case StateProcessing:
		if rec.LeaseExpiresAt.After(now) {
			if p.Claimant != "" && rec.Claimant == p.Claimant {
				// The same attempt asking again (its response was lost).
				return &ClaimResult{Outcome: OutcomeAcquired, Record: rec}, nil
			}
			return &ClaimResult{Outcome: OutcomeInProgress, Record: rec, RetryAfter: rec.LeaseExpiresAt.Sub(now)}, nil
		}
		if rec.Hold {
			// Held for resolution: never taken over. rec is still
			// PROCESSING; the store makes it UNRESOLVED (HoldsLapsed).
			return &ClaimResult{Outcome: OutcomeUnresolved, Record: rec}, nil
		}
	}
	return nil, nil
}

// HoldsLapsed reports whether res, an answer of ReportClaim, found a held
// record whose lease ran out and that is still PROCESSING: the store must
// make it UNRESOLVED (only if it still is so under its lock) before it
// answers.
func HoldsLapsed(res *ClaimResult) bool {
	return res != nil && res.Outcome == OutcomeUnresolved && res.Record.State == StateProcessing
}

// Acquired is the answer to a Claim that wrote rec: a new record, or a
// takeover when an earlier attempt had held it.
func Acquired(rec *Record) *ClaimResult {
	return &ClaimResult{Outcome: OutcomeAcquired, Record: rec, Takeover: rec.Attempt > 1}
}
