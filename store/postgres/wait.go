package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
)

// Waking waiting Claims across replicas (store.Watcher). A waiting Claim
// flags its row (RecordMarkWaited); the statements that end a lease send
// pg_notify for flagged rows, so the notification leaves at their commit.
// One connection per Store LISTENs while a Claim of the process waits, and
// wakes them all when it listens again after a loss. Behind a transaction
// pooler it connects past it (Options.ListenURL), or the store polls.

// notifyChannel is the channel the notifications go on.
const notifyChannel = "idem_records"

// Listener timing.
const (
	// listenerLinger is how long the listener stays connected after the
	// last wait, so that a trickle of waits does not connect for each.
	listenerLinger = 30 * time.Second
	// listenerPing is how long the listener waits for a notification
	// before it checks that a silent connection still answers.
	listenerPing = 15 * time.Second
	// listenerRetryMax bounds the pause between attempts to reconnect.
	listenerRetryMax = 2 * time.Second
)

// WakePollInterval is how often a store that polls (behind a transaction
// pooler without a listen URL) looks at the records its Claims wait on.
const WakePollInterval = 250 * time.Millisecond

// pollSQL reads, for each watched record, a version that changes with every
// write (NULL when it is gone) and whether a live lease holds it.
const pollSQL = `SELECT w.tenant, w.namespace, w.key,
		r.state || '/' || r.token || '/' || (extract(epoch FROM r.updated_at) * 1000000)::bigint,
		coalesce(r.state = 'processing' AND (r.lease_expires_at > now() OR r.hold), false)
	FROM unnest($1::text[], $2::text[], $3::text[]) AS w(tenant, namespace, key)
	LEFT JOIN idem_records r ON r.tenant = w.tenant AND r.namespace = w.namespace AND r.key = w.key`

// wakeCol is the RETURNING column that notifies a changed row's waiting
// Claims when its waiters flag is set; "" when the statement wakes nobody.
func wakeCol(table string, wakes bool) string {
	if !wakes {
		return ""
	}
	return `,
		CASE WHEN ` + table + `.waiters THEN pg_notify('` + notifyChannel + `',
			json_build_array(` + table + `.tenant, ` + table + `.namespace, ` + table + `.key)::text) END AS woke`
}

// markWaitedSQL sets the waiters flag of the row held with token $4. It
// tests no state, so its generic plan is a primary-key lookup.
const markWaitedSQL = `UPDATE idem_records SET waiters = true
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND token = $4 AND NOT waiters`

// RecordWatch implements store.Watcher; the first watch starts the listener.
func (s *Store) RecordWatch(id store.RecordID) *store.Watch {
	return s.watches.Watch(id)
}

// RecordMarkWaited implements store.Watcher.
func (s *Store) RecordMarkWaited(ctx context.Context, id store.RecordID, token int64) error {
	if err := id.CheckText(); err != nil {
		return err
	}
	_, err := detached(ctx, s, func(ctx context.Context, d driver) (struct{}, error) {
		return struct{}{}, d.markWaited(ctx, id, token)
	})
	return err
}

// markWaited runs markWaitedSQL.
func (d driver) markWaited(ctx context.Context, id store.RecordID, token int64) error {
	_, err := d.q.Exec(ctx, markWaitedSQL, id.Tenant, id.Namespace, id.Key, token)
	return interpretError(err)
}

// listener is the Store's LISTEN connection and its life.
type listener struct {
	pool    *pgxpool.Pool
	watches *store.Watches
	config  *pgx.ConnConfig // what LISTEN connects with; nil: the pool's
	poll    bool            // poll (pollSQL) instead of LISTENing

	mu      sync.Mutex
	cancel  context.CancelFunc // stops the running listener; nil when none runs
	linger  *time.Timer        // stops it once nobody has waited for listenerLinger
	stopped bool               // Close ran

	// listens counts the connections that listened, polls the looks, for tests.
	listens, polls atomic.Int64
}

// start runs the listener unless it runs: the Watches' OnFirst, which must
// not block.
func (l *listener) start() {
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

// idle stops the listener listenerLinger from now unless a Claim waits
// again by then: the Watches' OnLast.
func (l *listener) idle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.linger != nil {
		l.linger.Stop()
	}
	l.linger = time.AfterFunc(listenerLinger, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.watches.Active() || l.cancel == nil {
			return
		}
		l.cancel()
		l.cancel = nil
	})
}

// close stops the listener for good.
func (l *listener) close() {
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
func (l *listener) run(ctx context.Context) {
	if l.poll {
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

// session connects, listens, wakes every waiting Claim (what was sent while
// nobody listened is lost) and hands notifications out until the connection
// fails or ctx ends, reporting whether it listened.
func (l *listener) session(ctx context.Context) (listened bool) {
	cfg := l.config
	if cfg == nil {
		cfg = l.pool.Config().ConnConfig
	}
	cfg = cfg.Copy()
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(connectCtx, cfg)
	if err == nil {
		_, err = conn.Exec(connectCtx, "LISTEN "+notifyChannel)
	}
	cancel()
	if conn != nil {
		defer conn.Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		return false
	}
	l.listens.Add(1)
	l.watches.WakeAll()
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
		var id []string
		if json.Unmarshal([]byte(n.Payload), &id) == nil && len(id) == 3 {
			l.watches.Wake(store.RecordID{Tenant: id[0], Namespace: id[1], Key: id[2]})
		}
	}
}

// pollLoop looks at the watched records every WakePollInterval until ctx
// ends, and wakes the watches of those that changed since it last looked,
// or, at its first look, that no live lease holds. A failed look is tried
// at the next tick: waiting Claims also look again on their own.
func (l *listener) pollLoop(ctx context.Context) {
	seen := map[store.RecordID]string{}
	tick := time.NewTicker(WakePollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ids := l.watches.IDs()
		if len(ids) == 0 {
			clear(seen)
			continue
		}
		next, err := l.look(ctx, ids)
		if err != nil {
			continue
		}
		l.polls.Add(1)
		for id, v := range next {
			if prev, ok := seen[id]; ok && prev != v.version || !ok && !v.held {
				l.watches.Wake(id)
			}
		}
		seen = make(map[store.RecordID]string, len(next))
		for id, v := range next {
			seen[id] = v.version
		}
	}
}

// looked is what pollSQL read of one watched record.
type looked struct {
	version string // "" when the record is gone
	held    bool
}

// look runs pollSQL for ids.
func (l *listener) look(ctx context.Context, ids []store.RecordID) (map[store.RecordID]looked, error) {
	qctx, cancel := context.WithTimeout(ctx, statementDeadline)
	defer cancel()
	rows, err := l.pool.Query(qctx, pollSQL, idArrays(ids)...)
	if err != nil {
		return nil, err
	}
	out := make(map[store.RecordID]looked, len(ids))
	for rows.Next() {
		var id store.RecordID
		var version *string
		var held bool
		if err := rows.Scan(&id.Tenant, &id.Namespace, &id.Key, &version, &held); err != nil {
			rows.Close()
			return nil, err
		}
		v := looked{held: held}
		if version != nil {
			v.version = *version
		}
		out[id] = v
	}
	return out, rows.Err()
}
