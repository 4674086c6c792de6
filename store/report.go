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
// lease ran out. Every store decides these cases the same way, here.
func ReportClaim(rec *Record, p *ClaimParams, now time.Time) (*ClaimResult, error) {
	if len(rec.Fingerprint) > 0 && len(p.Fingerprint) > 0 && !bytes.Equal(rec.Fingerprint, p.Fingerprint) {
		return nil, ErrFingerprintMismatch
	}
	switch rec.State {
	case StateCompleted:
		return &ClaimResult{Outcome: OutcomeCompleted, Record: rec}, nil
	case StateFailed:
		return &ClaimResult{Outcome: OutcomeFailed, Record: rec}, nil
	case StateProcessing:
		if rec.LeaseExpiresAt.After(now) {
			if p.Claimant != "" && rec.Claimant == p.Claimant {
				// The same attempt asking again (its response was lost).
				return &ClaimResult{Outcome: OutcomeAcquired, Record: rec}, nil
			}
			return &ClaimResult{Outcome: OutcomeInProgress, Record: rec, RetryAfter: rec.LeaseExpiresAt.Sub(now)}, nil
		}
	}
	return nil, nil
}

// Acquired is the answer to a Claim that wrote rec: a new record, or a
// takeover when an earlier attempt had held it.
func Acquired(rec *Record) *ClaimResult {
	return &ClaimResult{Outcome: OutcomeAcquired, Record: rec, Takeover: rec.Attempt > 1}
}
