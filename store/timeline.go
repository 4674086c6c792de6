package store

import (
	"context"
	"time"
)

// Timeline is the part of a Store that keeps the exceptions in a record's
// life and hands held records to resolvers (DESIGN §1, "Timeline"). The
// ordinary path writes no entry: a Claim that creates a record, a Complete,
// a Heartbeat and a Claim answered from the record cost what they cost
// without timelines. The statements that make an exception write its entry
// in the same transaction: a takeover, a Fail, a lease held, a resolution,
// a deletion, and a refused fingerprint.
type Timeline interface {
	// RecordTimeline returns the entries kept under params' key, oldest
	// first: the latest params.Limit when there are more. A key without
	// entries has none (no error), whether or not it has a record.
	RecordTimeline(ctx context.Context, params *TimelineParams) ([]TimelineEntry, error)
	// RecordListHeld returns at most params.Limit UNRESOLVED records of one
	// tenant with their steps, ordered by namespace then key, starting
	// after params.After.
	RecordListHeld(ctx context.Context, params *ListHeldParams) ([]*Record, error)
	// RecordWatchHeld starts watching for records of tenant that become
	// UNRESOLVED, in this process or any other on the same database, and
	// for UNRESOLVED ones that RecordResolve or RecordDelete ends. Its C
	// receives when one may have, or when such a change may have gone
	// unannounced; the watcher then lists them again (RecordListHeld). The
	// holder's late Complete, Fail or Heartbeat of an UNRESOLVED record is
	// not announced (its statements are the ordinary path's): a watcher
	// that must see those lists again now and then. It reads and writes
	// nothing. Close it when done.
	RecordWatchHeld(tenant string) *Watch
}

// EntryKind is what a timeline entry records. Its values are what the
// stores keep.
type EntryKind string

// The kinds of timeline entries.
const (
	// EntryTakenOver: a Claim acquired the record from an earlier attempt
	// (its lease ran out, or it was EXPIRED or RELEASED).
	EntryTakenOver EntryKind = "taken_over"
	// EntryFailed: the holder's Fail with retryable=false.
	EntryFailed EntryKind = "failed"
	// EntryReleased: the holder's Fail with retryable=true.
	EntryReleased EntryKind = "released"
	// EntryHeld: the lease ran out under a hold policy; the record is
	// UNRESOLVED.
	EntryHeld EntryKind = "held"
	// EntryResolved: RecordResolve moved the UNRESOLVED record on.
	EntryResolved EntryKind = "resolved"
	// EntryDeleted: RecordDelete deleted the record.
	EntryDeleted EntryKind = "deleted"
	// EntryFingerprintMismatch: a Claim was refused with
	// ErrFingerprintMismatch. A store keeps one per token and refused
	// fingerprint.
	EntryFingerprintMismatch EntryKind = "fingerprint_mismatch"
)

// Actor is who made a call that an entry records.
type Actor struct {
	// Tenant is the caller's tenant.
	Tenant string
	// Operator is the name idemd's config gives the caller's token; "" for
	// none.
	Operator string
	// Resolver is the name a resolver gave; "" for a person's call.
	Resolver string
}

// TimelineEntry is one exception in the life of a record's key. Which
// fields are set depends on Kind (proto idem.v1.TimelineEntry says which).
type TimelineEntry struct {
	Kind EntryKind
	// At is when it happened, by the store's clock, in UTC.
	At time.Time
	// Token is the record's token then; the new one for a takeover.
	Token int64
	// State is the state it left the record in; "" for a deletion.
	State State
	// PreviousToken and PreviousClaimant are a takeover's: the lease taken
	// over.
	PreviousToken    int64
	PreviousClaimant string
	// PreviousState is the state before: a takeover's, a hold's, a
	// resolution's (UNRESOLVED), a deletion's.
	PreviousState State
	// Claimant is the new holder's (a takeover), the holder's (a Fail, a
	// hold) or the refused Claim's (a fingerprint mismatch).
	Claimant string
	// Error is a Fail's error, or a resolution's as FAILED.
	Error string
	// Actor and Reason are a resolution's and a deletion's.
	Actor  Actor
	Reason string
	// Fingerprint is the refused Claim's.
	Fingerprint []byte
}

// TimelineParams are the inputs of RecordTimeline.
type TimelineParams struct {
	RecordID
	// Limit bounds the entries returned: the latest ones.
	Limit int
}

// ListHeldParams are the inputs of RecordListHeld.
type ListHeldParams struct {
	Tenant string
	// After, when its Namespace or Key is set, starts the listing after
	// that (namespace, key). Its Tenant is ignored.
	After RecordID
	// Limit bounds how many records come back.
	Limit int
}

// DeleteParams are the inputs of RecordDelete.
type DeleteParams struct {
	RecordID
	// Actor and Reason are kept on the key's timeline with the deletion.
	Actor  Actor
	Reason string
}
