package services

import (
	"context"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Waiting Claims (ClaimRequest.wait). A Claim whose answer would be
// IN_PROGRESS and that asked to wait holds no database connection while it
// waits: it sleeps until the store says the record changed (store.Watcher:
// a notification from any replica), the holder's lease runs out, or its wait
// does, and then asks again with the same Claim. Asking again is what
// decides the answer, so the rules of DESIGN §1 hold as for any Claim: of
// several waiting Claims that find the record RELEASED, one acquires it and
// the others get IN_PROGRESS and wait on.

// waitMargin is how long before the call's deadline a wait ends, so that the
// last look at the record and the answer still arrive in time: a tenth of the
// time left, at most maxWaitMargin.
func waitMargin(left time.Duration) time.Duration {
	return min(left/10, maxWaitMargin)
}

const maxWaitMargin = 250 * time.Millisecond

// waitEnd is when a Claim that asked to wait for wait, at now, stops: at
// wait's end, or earlier when the call's deadline comes first (byDeadline).
func waitEnd(ctx context.Context, now time.Time, wait time.Duration) (end time.Time, byDeadline bool) {
	end = now.Add(wait)
	if d, ok := ctx.Deadline(); ok {
		if early := d.Add(-waitMargin(d.Sub(now))); early.Before(end) {
			return early, true
		}
	}
	return end, false
}

// waiters counts the Claims waiting now, in all and per tenant, against
// their caps.
type waiters struct {
	max, maxPerTenant int

	mu       sync.Mutex
	total    int
	byTenant map[string]int
	refused  int64 // Claims that asked to wait and found a cap reached
}

// enter takes a place for one of tenant's Claims, and reports false when a
// cap is reached.
func (w *waiters) enter(tenant string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.total >= w.max || w.byTenant[tenant] >= w.maxPerTenant {
		w.refused++
		return false
	}
	if w.byTenant == nil {
		w.byTenant = map[string]int{}
	}
	w.total++
	w.byTenant[tenant]++
	return true
}

// leave gives back the place enter took.
func (w *waiters) leave(tenant string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total--
	if w.byTenant[tenant]--; w.byTenant[tenant] == 0 {
		delete(w.byTenant, tenant)
	}
}

// Waiting returns how many Claims wait now, and how many that asked to
// wait answered at once because a cap was reached, since the start.
func (s *Service) Waiting() (waiting int, refused int64) {
	s.waiters.mu.Lock()
	defer s.waiters.mu.Unlock()
	return s.waiters.total, s.waiters.refused
}

// EndWaits answers every waiting Claim now with its last answer
// (IN_PROGRESS), and makes the Claims that come later answer at once, as
// without a wait. server.Shutdown calls it first, so that waits
// of up to a minute do not hold up the drain of in-flight calls.
func (s *Service) EndWaits() {
	s.endWaitsOnce.Do(func() { close(s.endWaits) })
}

// waitClaim waits, for at most wait, until the Claim p, answered res
// (IN_PROGRESS), gets another answer; it returns the last answer. Over the
// caps it returns res at once.
func (s *Service) waitClaim(ctx context.Context, p *store.ClaimParams, res *store.ClaimResult, wait time.Duration) (*store.ClaimResult, error) {
	end, byDeadline := waitEnd(ctx, time.Now(), wait)
	select {
	case <-s.endWaits:
		return res, nil
	default:
	}
	if !time.Now().Before(end) {
		return res, nil
	}
	if !s.waiters.enter(p.Tenant) {
		return res, nil
	}
	defer s.waiters.leave(p.Tenant)

	watch := s.store.RecordWatch(p.RecordID)
	defer watch.Close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var marked int64 // the token whose lease the record is marked as waited on
	for {
		if res.Outcome != store.OutcomeInProgress {
			return res, nil
		}
		var err error
		if res.Record.Token != marked {
			// Mark first, then look again: a change committed before the
			// mark shows in the second look, and one after it is announced.
			if err := s.store.RecordMarkWaited(ctx, p.RecordID, res.Record.Token); err != nil {
				return nil, err
			}
			marked = res.Record.Token
			if res, err = s.store.RecordClaim(ctx, p); err != nil {
				return nil, err
			}
			continue
		}
		left := time.Until(end)
		if left <= 0 {
			return res, nil
		}
		// The holder's lease running out is announced by nobody (the
		// sweeper may be seconds away), so look again when it does.
		timer.Reset(min(left, max(res.RetryAfter, time.Millisecond)))
		select {
		case <-watch.C:
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.endWaits:
			return res, nil
		}
		if byDeadline && !time.Now().Before(end) {
			// No time to look again before the caller gives up: the last
			// answer stands (the caller asks again if it wants to).
			return res, nil
		}
		if res, err = s.store.RecordClaim(ctx, p); err != nil {
			return nil, err
		}
	}
}
