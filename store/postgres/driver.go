package postgres

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/store"
)

// The driver is the store's SQL and nothing else: one method per operation,
// with typed parameters, returning the rows its statement wrote or read,
// and for Claims and token calls a many-row twin that takes its calls
// sorted by primary key with distinct keys and locks rows in that order:
//
//	claim, claimMany; writeMany    claim rows; takeovers, holds   driver_claim.go
//	tokenCallOne, tokenCallMany    token-call rows                driver_tokencall.go
//	resolve                        a resolved record              hold.go
//	getRecord, getMany, listRecords, deleteRecord, recordStats    admin.go, record.go, getmany.go
//	sweepExpire, sweepPurge        counts                         sweep.go
//	markWaited                     nothing                        wait.go
//
// What a row means for its call is decided above the driver by the rules
// of package store (claim.go, tokencall.go). Errors leave the driver
// through interpretError: nothing above it sees a pgx type.
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

// compareIDs orders record ids by their primary key columns, byte-wise:
// the order in which the many-row statements lock rows, so that two of
// them sharing keys wait for each other rather than deadlock.
func compareIDs(a, b store.RecordID) int {
	if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// distinctByID splits the calls whose errs are nil into batch, the
// indexes of each key's first call sorted by primary key (a many-row
// statement's calls), and rest, the indexes of the calls of a key already
// in batch, in the order of calls.
func distinctByID[T any](calls []T, errs []error, idOf func(T) store.RecordID) (batch, rest []int) {
	seen := make(map[store.RecordID]bool, len(calls))
	for i, c := range calls {
		switch id := idOf(c); {
		case errs[i] != nil:
		case seen[id]:
			rest = append(rest, i)
		default:
			seen[id] = true
			batch = append(batch, i)
		}
	}
	slices.SortFunc(batch, func(a, b int) int { return compareIDs(idOf(calls[a]), idOf(calls[b])) })
	return batch, rest
}

// findID is the index of the call of calls, sorted by primary key, that id
// addresses, or -1.
func findID[T any](calls []T, id store.RecordID, idOf func(T) store.RecordID) int {
	i, ok := slices.BinarySearchFunc(calls, id, func(c T, id store.RecordID) int { return compareIDs(idOf(c), id) })
	if !ok {
		return -1
	}
	return i
}
