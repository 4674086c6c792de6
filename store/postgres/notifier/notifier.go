// Package notifier wakes a process's waiting Claims (store.Watches) when
// PostgreSQL tells of a change to their records: one connection LISTENs on
// Channel while any Claim of the process waits, and wakes them all each
// time it listens again, since what was sent while nobody listened is lost.
// Behind a transaction pooler, where no connection keeps a LISTEN, a Poll
// stands in for it. The same connection hears HeldChannel for the watches
// of records that become UNRESOLVED (store.Timeline.RecordWatchHeld).
package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

// Channel is what the store notifies on, a record's id as a JSON array.
const Channel = "idem_records"

// HeldChannel is what the store notifies on when a record becomes
// UNRESOLVED, its tenant as the payload.
const HeldChannel = "idem_held"

// heldPollTicks is how many PollIntervals a Listener with a Poll lets pass
// between wakes of every held watch, which it cannot hear: each wake makes
// a watcher list its tenant's held records again.
const heldPollTicks = 8

// PollInterval is how often a Listener with a Poll looks.
const PollInterval = 250 * time.Millisecond

// Listener timing.
const (
	listenerLinger   = 30 * time.Second // connected after the last wait, for the next
	listenerPing     = 15 * time.Second // a silent connection is pinged after this
	listenerRetryMax = 2 * time.Second  // the longest pause before connecting again
)

// Poll reads what a poll needs of the records of ids.
type Poll func(ctx context.Context, ids []store.RecordID) (map[store.RecordID]Version, error)

// Version is what a Poll read of one record: a version that changes with
// every write ("" when it is gone), and whether a live lease holds it.
type Version struct {
	Version string
	Held    bool
}

// Listener is one connection's LISTEN for a process's waiting Claims, or
// the poll that stands in for it. Its fields are set before the first
// Start and not changed after.
type Listener struct {
	Watches *store.Watches  // the waiting Claims it wakes
	Held    *store.Watches  // the held watches it wakes, by tenant; may be nil
	Config  *pgx.ConnConfig // what LISTEN connects with
	Poll    Poll            // when set, looked at every PollInterval instead

	mu      sync.Mutex
	cancel  context.CancelFunc // stops the running listener; nil when none runs
	linger  *time.Timer        // stops it once nobody has waited for listenerLinger
	stopped bool               // Close ran

	listens, polls atomic.Int64 // the connections that listened, the looks
}

// Listens is how many connections started listening.
func (l *Listener) Listens() int64 { return l.listens.Load() }

// Polls is how many times the Poll looked.
func (l *Listener) Polls() int64 { return l.polls.Load() }

// Start runs the listener unless it runs: the OnFirst of Watches and
// Held, which must not block.
func (l *Listener) Start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.linger != nil {
		l.linger.Stop()
		l.linger = nil
	}
	if l.cancel != nil || l.stopped {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(ctx)
}

// Idle stops the listener listenerLinger from now unless a Claim waits or
// a held watch opens again by then: the OnLast of Watches and Held.
func (l *Listener) Idle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.linger != nil {
		l.linger.Stop()
	}
	l.linger = time.AfterFunc(listenerLinger, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.active() || l.cancel == nil {
			return
		}
		l.cancel()
		l.cancel = nil
	})
}

// active reports whether any watch of either kind is open.
func (l *Listener) active() bool {
	return l.Watches.Active() || l.Held != nil && l.Held.Active()
}

// wakeAll wakes every watch of either kind: what was sent while nobody
// listened is lost.
func (l *Listener) wakeAll() {
	l.Watches.WakeAll()
	if l.Held != nil {
		l.Held.WakeAll()
	}
}

// Close stops the listener for good.
func (l *Listener) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.linger != nil {
		l.linger.Stop()
	}
	if l.cancel != nil {
		l.cancel()
		l.cancel = nil
	}
}

// run listens until ctx ends, connecting again after every loss; or polls.
func (l *Listener) run(ctx context.Context) {
	if l.Poll != nil {
		l.pollLoop(ctx)
		return
	}
	pause := 50 * time.Millisecond
	for ctx.Err() == nil {
		if l.session(ctx) {
			pause = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, listenerRetryMax)
	}
}

// session connects, listens, wakes every waiting Claim and hands
// notifications out until the connection fails or ctx ends, reporting
// whether it listened.
func (l *Listener) session(ctx context.Context) (listened bool) {
	cfg := l.Config.Copy()
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(connectCtx, cfg)
	if err == nil {
		_, err = conn.Exec(connectCtx, "LISTEN "+Channel)
	}
	if err == nil && l.Held != nil {
		_, err = conn.Exec(connectCtx, "LISTEN "+HeldChannel)
	}
	cancel()
	if conn != nil {
		defer conn.Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		return false
	}
	l.listens.Add(1)
	l.wakeAll()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, listenerPing)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return true
		case errors.Is(err, context.DeadlineExceeded):
			pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true
			}
			continue
		case err != nil:
			return true
		}
		if n.Channel == HeldChannel {
			l.Held.Wake(store.RecordID{Tenant: n.Payload})
			continue
		}
		var id []string
		if json.Unmarshal([]byte(n.Payload), &id) == nil && len(id) == 3 {
			l.Watches.Wake(store.RecordID{Tenant: id[0], Namespace: id[1], Key: id[2]})
		}
	}
}

// pollLoop looks at the watched records every PollInterval until ctx ends,
// and wakes those that changed since its last look, or, at its first, that
// no live lease holds; every heldPollTicks it wakes every held watch.
func (l *Listener) pollLoop(ctx context.Context) {
	seen := map[store.RecordID]string{}
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for ticks := 1; ; ticks++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if l.Held != nil && ticks%heldPollTicks == 0 {
			l.Held.WakeAll()
		}
		ids := l.Watches.IDs()
		if len(ids) == 0 {
			clear(seen)
			continue
		}
		next, err := l.Poll(ctx, ids)
		if err != nil {
			continue
		}
		l.polls.Add(1)
		for id, v := range next {
			if prev, ok := seen[id]; ok && prev != v.Version || !ok && !v.Held {
				l.Watches.Wake(id)
			}
		}
		seen = make(map[store.RecordID]string, len(next))
		for id, v := range next {
			seen[id] = v.Version
		}
	}
}
