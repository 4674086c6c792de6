package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemhq/idem/store"
)

// Timelines (store.Timeline). Each exception's entry is written in the
// writer's transaction of the call that makes it, right after its change
// (note); the statements of a Claim that creates a record and of a
// Complete are not among them, and are unchanged. The purge deletes a
// record's entries with it (sweepPurge).

// noteSQL writes one timeline entry.
const noteSQL = `INSERT INTO idem_timeline (tenant, namespace, key, at, kind, token, state, previous_token, previous_state,
		claimant, previous_claimant, error, actor_tenant, actor_operator, actor_resolver, reason, fingerprint, expires_at)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)`

// note writes e under the key of id at now. expires is when it goes once
// its key has no record; NULL while the record's purge deletes it.
func note(tx *writeTx, id store.RecordID, now time.Time, e store.TimelineEntry, expires sql.NullInt64) error {
	fp := e.Fingerprint
	if fp == nil {
		fp = []byte{}
	}
	_, err := tx.Exec(noteSQL, id.Tenant, id.Namespace, id.Key, now.UnixMicro(), string(e.Kind), e.Token, string(e.State),
		e.PreviousToken, string(e.PreviousState), e.Claimant, e.PreviousClaimant, e.Error,
		e.Actor.Tenant, e.Actor.Operator, e.Actor.Resolver, e.Reason, fp, expires)
	return err
}

// noted is note for what ends with the record: no expires_at.
func noted(tx *writeTx, id store.RecordID, now time.Time, e store.TimelineEntry) error {
	return note(tx, id, now, e, sql.NullInt64{})
}

// mismatchSeenSQL finds the entry of a fingerprint ?5 refused under token
// ?4, so that a Claim refused again writes none.
const mismatchSeenSQL = `SELECT count(*) FROM idem_timeline
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 AND kind = 'fingerprint_mismatch' AND token = ?4 AND fingerprint = ?5`

// noteMismatch keeps the Claim p, refused for its fingerprint by rec, on
// rec's timeline, once per token and fingerprint. It expires with the
// record's retention, as the Postgres store's does.
func noteMismatch(tx *writeTx, p *store.ClaimParams, rec *store.Record, now time.Time) error {
	var seen int
	if err := tx.QueryRow(mismatchSeenSQL, p.Tenant, p.Namespace, p.Key, rec.Token, p.Fingerprint).Scan(&seen); err != nil || seen > 0 {
		return err
	}
	return note(tx, p.RecordID, now, store.TimelineEntry{Kind: store.EntryFingerprintMismatch, Token: rec.Token, State: rec.State,
		Claimant: p.Claimant, Fingerprint: p.Fingerprint}, sql.NullInt64{Int64: now.Add(rec.Retention).UnixMicro(), Valid: true})
}

// heldEntry is the entry of rec's lease held: it is UNRESOLVED.
func heldEntry(rec *store.Record) store.TimelineEntry {
	return store.TimelineEntry{Kind: store.EntryHeld, Token: rec.Token, State: store.StateUnresolved,
		PreviousState: store.StateProcessing, Claimant: rec.Claimant}
}

// timelineSQL reads the latest ?4 entries of a key, oldest first.
const timelineSQL = `SELECT at, kind, token, state, previous_token, previous_state, claimant, previous_claimant,
	error, actor_tenant, actor_operator, actor_resolver, reason, fingerprint
FROM (SELECT * FROM idem_timeline WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 ORDER BY seq DESC LIMIT ?4)
ORDER BY seq`

// RecordTimeline implements store.Timeline.
func (s *Store) RecordTimeline(ctx context.Context, p *store.TimelineParams) ([]store.TimelineEntry, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return readRows(ctx, s, timelineSQL, func(rows *sql.Rows) (store.TimelineEntry, error) {
		var e store.TimelineEntry
		var at int64
		var kind, state, previous string
		err := rows.Scan(&at, &kind, &e.Token, &state, &e.PreviousToken, &previous, &e.Claimant, &e.PreviousClaimant,
			&e.Error, &e.Actor.Tenant, &e.Actor.Operator, &e.Actor.Resolver, &e.Reason, &e.Fingerprint)
		e.At, e.Kind, e.State, e.PreviousState = fromMicros(at), store.EntryKind(kind), store.State(state), store.State(previous)
		if len(e.Fingerprint) == 0 {
			e.Fingerprint = nil
		}
		return e, err
	}, p.Tenant, p.Namespace, p.Key, max(p.Limit, 0))
}

// listHeldSQL pages through one tenant's UNRESOLVED records. An UNRESOLVED
// record is the only one that is not PROCESSING and has no expires_at, so
// the purge's partial index finds them all.
const listHeldSQL = `SELECT ` + recordStepCols + ` FROM idem_records INDEXED BY idem_records_purge_due
	WHERE state <> 'processing' AND expires_at IS NULL AND state = 'unresolved'
		AND tenant = ?1 AND (namespace, key) > (?2, ?3)
	ORDER BY namespace, key
	LIMIT ?4`

// RecordListHeld implements store.Timeline.
func (s *Store) RecordListHeld(ctx context.Context, p *store.ListHeldParams) ([]*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return listWithSteps(ctx, s, listHeldSQL, p.Tenant, p.After.Namespace, p.After.Key, max(p.Limit, 0))
}

// RecordWatchHeld implements store.Timeline: every write is in this
// process, whose writer wakes the tenant's held watches once it commits a
// record made UNRESOLVED (writeTx.HeldAfterCommit).
func (s *Store) RecordWatchHeld(tenant string) *store.Watch {
	return s.held.Watch(store.RecordID{Tenant: tenant})
}
