// Package postgres is idem's production store: the state machine of DESIGN §1
// as SQL statements over pgx v5. The table's unique primary key is the
// atomic gate; every time comes from the database clock.
//
// Each operation is one statement plus, for Claims, token calls and steps,
// a many-row twin (driver.go lists them, one file per concern: claim.go,
// tokencall.go, steps.go, admin.go); what a row means is decided by the
// rules of package store. Batching concurrent calls is a decorator around
// any store.Store (store/coalesce).
package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres/notifier"
)

var (
	_ store.Store = (*Store)(nil)
)

// Store implements store.Store on PostgreSQL.
type Store struct {
	store.TokenCalls
	store.TokenCallsMany
	pool *pgxpool.Pool

	// The waiting Claims of this process, and the connection that hears
	// the notifications that wake them (wait.go); it also hears of records
	// that become UNRESOLVED, for the held watches (timeline.go).
	watches store.Watches
	held    store.Watches
	listen  *notifier.Listener
}

// New returns a Store that runs its statements on pool. The schema must have
// been migrated with Migrate.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool}
	s.TokenCalls = s.runTokenCall
	s.TokenCallsMany = s.runTokenCallsMany
	s.listen = &notifier.Listener{Watches: &s.watches, Held: &s.held, Config: pool.Config().ConnConfig}
	s.watches.OnFirst, s.watches.OnLast = s.listen.Start, s.listen.Idle
	s.held.OnFirst, s.held.OnLast = s.listen.Start, s.listen.Idle
	return s
}

// Close stops the connection that listens for the notifications of waiting
// Claims, if one runs. The pool is the caller's to close.
func (s *Store) Close() {
	s.listen.Close()
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "SELECT 1")
	return interpretError(err)
}
