package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// A Claim's statements, under the write lock: the insert adds the row only
// when the key has none (and then returns none); the takeover and the hold
// follow a read of the row. The fingerprint is written at creation only.
const (
	insertSQL = `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, claimant, fingerprint,
		lease_expires_at, retention_us, created_at, updated_at, policy, hold)
	VALUES (?1, ?2, ?3, 'processing', ?4, 1, ?5, ifnull(?6, x''), ?7 + ?8, ?9, ?7, ?7, ?10, ?11)
	ON CONFLICT (tenant, namespace, key) DO NOTHING
	RETURNING ` + recordCols

	takeoverSQL = `UPDATE idem_records SET state = 'processing', token = ?4, attempt = attempt + 1, claimant = ?5,
		lease_expires_at = ?6 + ?7, retention_us = ?8, policy = ?9, hold = ?10, result = NULL, error = NULL,
		completed_at = NULL, expires_at = NULL, updated_at = ?6
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3
	RETURNING ` + recordCols

	// holdSQL makes a held record whose lease ran out UNRESOLVED, for the
	// Claim that found it so (store.ClaimMakeUnresolved), under the write
	// lock. An UNRESOLVED record waits for a resolution however long: one
	// that was EXPIRED or RELEASED loses its expires_at.
	holdSQL = `UPDATE idem_records SET state = 'unresolved', expires_at = NULL, updated_at = ?4
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3
	RETURNING ` + recordCols
)

// RecordClaim implements store.Store. The Claim runs in the writer's next
// batch (writer.go): the insert first, since most Claims are of a new key;
// when the key exists, the row is read and decided on (store.DecideClaim)
// under the same write lock, so nothing changes in between.
func (s *Store) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	var (
		res     *store.ClaimResult
		refusal error
	)
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) (err error) {
		res, refusal, err = claimIn(tx, p, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, refusal
}

// claimIn runs the Claim p in the writer's transaction tx at now: its
// answer, or the refusal that is its answer, or the error of a statement.
func claimIn(tx *writeTx, p *store.ClaimParams, now time.Time) (res *store.ClaimResult, refusal, err error) {
	token, err := tx.peekToken()
	if err != nil {
		return nil, nil, err
	}
	rec, err := scanRecord(tx.QueryRow(insertSQL, p.Tenant, p.Namespace, p.Key, token,
		p.Claimant, p.Fingerprint, now.UnixMicro(), p.LeaseTTL.Microseconds(), p.Retention.Microseconds(), p.Policy, p.Hold))
	switch {
	case err == nil:
		tx.takeToken(token)
		return store.Acquired(rec, now), nil, nil
	case !errors.Is(err, sql.ErrNoRows):
		return nil, nil, err
	}
	// The token was not used: it is still the next one to draw.
	rec, steps, err := scanRecordSteps(tx.QueryRow(getSQL, p.Tenant, p.Namespace, p.Key))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			// Not the key: internal errors are logged, keys never.
			return nil, nil, fmt.Errorf("sqlite: tenant %s, namespace %s: the insert ran into a row that is not there", p.Tenant, p.Namespace)
		}
		return nil, nil, err
	}
	if err := readSteps(tx, rec, steps); err != nil {
		return nil, nil, err
	}
	// The writes below change no step: the record keeps those read.
	read := rec
	keepSteps := func(written *store.Record) *store.Record {
		written.Steps, written.HoldUnfinished = read.Steps, read.HoldUnfinished
		return written
	}
	switch d := store.DecideClaim(rec, p, now); d.Action {
	case store.ClaimAnswer:
		if errors.Is(d.Err, store.ErrFingerprintMismatch) {
			if err := noteMismatch(tx, p, rec, now); err != nil {
				return nil, nil, err
			}
		}
		return d.Answer, d.Err, nil
	case store.ClaimMakeUnresolved:
		if rec, err = scanRecord(tx.QueryRow(holdSQL, p.Tenant, p.Namespace, p.Key, now.UnixMicro())); err != nil {
			return nil, nil, err
		}
		if err := noted(tx, p.RecordID, now, heldEntry(rec)); err != nil {
			return nil, nil, err
		}
		tx.WakeAfterCommit(p.RecordID) // a Claim waiting on the lease sees it ended
		tx.HeldAfterCommit(p.Tenant)
		return store.Unresolved(keepSteps(rec), now), nil, nil
	}
	prev := rec
	// A takeover. The counter never goes back, whatever is purged or
	// deleted, so the token is greater than all earlier ones (writer.go).
	if token, err = tx.drawToken(); err != nil {
		return nil, nil, err
	}
	written, err := scanRecord(tx.QueryRow(takeoverSQL, p.Tenant, p.Namespace, p.Key, token,
		p.Claimant, now.UnixMicro(), p.LeaseTTL.Microseconds(), p.Retention.Microseconds(), p.Policy, p.Hold))
	if err != nil {
		return nil, nil, err
	}
	if err := noted(tx, p.RecordID, now, store.TimelineEntry{Kind: store.EntryTakenOver, Token: written.Token, State: written.State,
		PreviousToken: prev.Token, PreviousState: prev.State, Claimant: written.Claimant, PreviousClaimant: prev.Claimant}); err != nil {
		return nil, nil, err
	}
	return store.Acquired(keepSteps(written), now), nil, nil
}

// RecordClaimMany implements store.Store: the calls run at once, each as
// RecordClaim, and the writer commits them together.
func (s *Store) RecordClaimMany(ctx context.Context, ps []*store.ClaimParams) ([]*store.ClaimResult, []error) {
	res, errs := make([]*store.ClaimResult, len(ps)), make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { res[i], errs[i] = s.RecordClaim(ctx, p) })
	}
	wg.Wait()
	return res, errs
}
