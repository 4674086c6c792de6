package server

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

var stateToProto = map[store.State]idemv1.State{
	store.StateProcessing: idemv1.State_STATE_PROCESSING,
	store.StateCompleted:  idemv1.State_STATE_COMPLETED,
	store.StateFailed:     idemv1.State_STATE_FAILED,
	store.StateReleased:   idemv1.State_STATE_RELEASED,
	store.StateExpired:    idemv1.State_STATE_EXPIRED,
	store.StateUnresolved: idemv1.State_STATE_UNRESOLVED,
}

var outcomeToProto = map[store.Outcome]idemv1.Outcome{
	store.OutcomeAcquired:   idemv1.Outcome_OUTCOME_ACQUIRED,
	store.OutcomeInProgress: idemv1.Outcome_OUTCOME_IN_PROGRESS,
	store.OutcomeCompleted:  idemv1.Outcome_OUTCOME_COMPLETED,
	store.OutcomeFailed:     idemv1.Outcome_OUTCOME_FAILED,
	store.OutcomeUnresolved: idemv1.Outcome_OUTCOME_UNRESOLVED,
}

func recordToProto(r *store.Record) *idemv1.Record {
	return &idemv1.Record{
		Namespace:      r.Namespace,
		Key:            r.Key,
		State:          stateToProto[r.State],
		Token:          r.Token,
		Attempt:        r.Attempt,
		Claimant:       r.Claimant,
		Fingerprint:    r.Fingerprint,
		LeaseExpiresAt: timestamp(r.LeaseExpiresAt),
		Result:         r.Result,
		Error:          r.Error,
		CreatedAt:      timestamp(r.CreatedAt),
		UpdatedAt:      timestamp(r.UpdatedAt),
		CompletedAt:    timestamp(r.CompletedAt),
		ExpiresAt:      timestamp(r.ExpiresAt),
		Policy:         r.Policy,
		Hold:           r.Hold,
	}
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
