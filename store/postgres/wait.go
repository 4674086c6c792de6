package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres/notifier"
)

// Waking waiting Claims across replicas (store.Watcher). A waiting Claim
// flags its row (RecordMarkWaited); the statements that end a lease send
// pg_notify for flagged rows, so the notification leaves at their commit.
// One connection per Store LISTENs while a Claim of the process waits, and
// wakes them all when it listens again after a loss. Behind a transaction
// pooler it connects past it (Options.ListenURL), or the store polls.

// WakePollInterval is how often a store that polls (behind a transaction
// pooler without a listen URL) looks at the records its Claims wait on.
const WakePollInterval = notifier.PollInterval

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
		CASE WHEN ` + table + `.waiters THEN pg_notify('` + notifier.Channel + `',
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

// poll runs pollSQL for ids: the Poll of a store that cannot LISTEN.
func (s *Store) poll(ctx context.Context, ids []store.RecordID) (map[store.RecordID]notifier.Version, error) {
	qctx, cancel := context.WithTimeout(ctx, statementDeadline)
	defer cancel()
	rows, err := s.pool.Query(qctx, pollSQL, idArrays(ids)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[store.RecordID]notifier.Version, len(ids))
	for rows.Next() {
		var id store.RecordID
		var version *string
		var v notifier.Version
		if err := rows.Scan(&id.Tenant, &id.Namespace, &id.Key, &version, &v.Held); err != nil {
			return nil, err
		}
		if version != nil {
			v.Version = *version
		}
		out[id] = v
	}
	return out, rows.Err()
}
