package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// The two ways a Claim acquires: a new record, or a takeover of a RELEASED or
// EXPIRED record or of a PROCESSING one whose lease ran out. Both run in a
// write transaction under the write lock, with a token that transaction
// drew: the insert adds the row only when the key has none (it returns no
// row otherwise, and changes nothing), the takeover follows a read of the
// row in the same transaction. The fingerprint is written when the record
// is created only.
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
	// Claim that found it so (store.ClaimMakeUnresolved), under the write lock.
	holdSQL = `UPDATE idem_records SET state = 'unresolved', updated_at = ?4
	WHERE tenant = ?1 AND namespace = ?2 AND key = ?3
	RETURNING ` + recordCols
)

// RecordClaim implements store.Store.
func (s *Store) RecordClaim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	// Most Claims of a busy key only report: IN_PROGRESS while the holder
	// works, a replay once it is done. Those are answered from a committed
	// snapshot without queueing for the write lock. The answer holds as of
	// the read, which is after every commit that preceded the call. While
	// the keys are new, that read finds nothing, and Claims skip it
	// (firstread.go).
	readFirst := s.firstReads.worth()
	if readFirst {
		rec, err := getRecord(ctx, s.readStmts[getSQL], p.RecordID)
		switch {
		case err == nil:
			if d := store.DecideClaim(rec, p, now()); d.Action == store.ClaimAnswer {
				s.firstReads.note(true)
				return d.Answer, d.Err
			}
		case errors.Is(err, sql.ErrNoRows):
		default:
			return nil, interpretError(ctx, err)
		}
		s.firstReads.note(false)
	}

	// Otherwise decide again under the write lock: the row may have changed
	// since the read. Most Claims that get here are of a new key, so the
	// insert goes first: when it adds the row, the Claim is done in one
	// statement. When the key exists, it inserts nothing, and the row it
	// ran into is read and decided on as above; under the write lock
	// nothing changes between the two statements. A refusal is decided
	// before anything is written, and is the Claim's answer, not an error
	// of its call (writer.go).
	var (
		res     *store.ClaimResult
		refusal error
	)
	err := s.inWriteTx(ctx, func(tx *writeTx, now time.Time) (err error) {
		// Noted here, in the writer, and not by the caller after the
		// call: a caller whose context ends returns at once while this
		// still runs.
		reported := false // answered without a write: a read would have done
		defer func() {
			if !readFirst && err == nil {
				s.firstReads.note(reported)
			}
		}()
		token, err := tx.peekToken()
		if err != nil {
			return err
		}
		rec, err := scanRecord(tx.QueryRow(insertSQL, p.Tenant, p.Namespace, p.Key, token,
			p.Claimant, p.Fingerprint, now.UnixMicro(), p.LeaseTTL.Microseconds(), p.Retention.Microseconds(), p.Policy, p.Hold))
		switch {
		case err == nil:
			tx.takeToken(token)
			res = store.Acquired(rec)
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		// The token was not used: it is still the next one to draw.
		if rec, err = scanRecord(tx.QueryRow(getSQL, p.Tenant, p.Namespace, p.Key)); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				// Not the key: internal errors are logged, keys never.
				return fmt.Errorf("sqlite: tenant %s, namespace %s: the insert ran into a row that is not there", p.Tenant, p.Namespace)
			}
			return err
		}
		switch d := store.DecideClaim(rec, p, now); d.Action {
		case store.ClaimAnswer:
			res, refusal, reported = d.Answer, d.Err, true
			return nil
		case store.ClaimMakeUnresolved:
			if rec, err = scanRecord(tx.QueryRow(holdSQL, p.Tenant, p.Namespace, p.Key, now.UnixMicro())); err != nil {
				return err
			}
			res = store.Unresolved(rec)
			tx.WakeAfterCommit(p.RecordID) // a Claim waiting on the lease sees it ended
			return nil
		}
		// A takeover. The counter never goes back, whatever is purged or
		// deleted, so the token is greater than all earlier ones
		// (writer.go).
		if token, err = tx.drawToken(); err != nil {
			return err
		}
		if rec, err = scanRecord(tx.QueryRow(takeoverSQL, p.Tenant, p.Namespace, p.Key, token,
			p.Claimant, now.UnixMicro(), p.LeaseTTL.Microseconds(), p.Retention.Microseconds(), p.Policy, p.Hold)); err != nil {
			return err
		}
		res = store.Acquired(rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, refusal
}
