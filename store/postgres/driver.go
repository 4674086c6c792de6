package postgres

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
)

// The driver is the store's SQL and nothing else: one method per operation,
// with typed parameters, returning the rows its statement wrote or read.
// It knows neither the rules of DESIGN §1 beyond what a statement must
// decide under its row lock, nor how calls are gathered into batches:
//
//	claimNew, claimIfAbsent, claimOne, claimMany  claim rows  driver_claim.go
//	readClaim, getMany                  records as read     replay.go, getmany.go
//	tokenCallOne, tokenCallMany         token-call rows     driver_tokencall.go
//	holdLapsed, resolve                 a held or resolved record   hold.go
//	getRecord, listRecords, deleteRecord, recordStats, countByState  admin.go, record.go
//	sweepExpire, sweepPurge             counts              sweep.go
//	markWaited                          nothing             wait.go
//
// Each is one statement. Claims and token calls have two, for one call and
// for many: a lone call is the most common statement at low load, and for
// one row the one-row statement costs Postgres much less than the many-row
// one (docs/BENCHMARKS.md, "Defaults chosen by measurement"). A lone call
// tries a plainer statement first that settles the common case: a Claim
// creates its record (claimNew), or creates it or reads it (claimIfAbsent)
// when its key was lately seen with one, leaving takeovers to claimOne; a
// token call of the holder updates its record (tokenHeldSQL),
// leaving to tokenCallOne's one-row statement to tell why a call does not
// apply. The many-row operations take their calls sorted by primary key
// with distinct keys, and lock rows in that order.
//
// Errors leave the driver through interpretError: nothing above it sees a
// pgx type.
type driver struct {
	q querier
}

// querier is what the driver's statements run on: the pool, one of its
// connections, or, in tests, a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// findID is the index of the call of calls, sorted by primary key, that id
// addresses, or -1.
func findID[T any](calls []T, id store.RecordID, idOf func(T) store.RecordID) int {
	i, ok := slices.BinarySearchFunc(calls, id, func(c T, id store.RecordID) int { return coalesce.CompareIDs(idOf(c), id) })
	if !ok {
		return -1
	}
	return i
}
