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
// returning the rows its statement wrote or read, and for Claims and token
// calls a many-row twin, whose calls are sorted by primary key with
// distinct keys:
//
//	claim, claimMany; writeMany    claims; takeovers, holds   driver_claim.go
//	tokenCallOne, tokenCallMany    token calls                driver_tokencall.go
//	getRecord, getMany             reads                      record.go
//	listRecords, deleteRecord, recordStats, resolve, sweepExpire, sweepPurge
//	                               the operator's, the sweeper's   admin.go
//	markWaited                     a waiting Claim's mark     wait.go
//
// What a row means for its call is decided above it by the rules of
// package store (claim.go). Errors leave through
// interpretError.
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

// idArrays are the tenants, namespaces and keys of ids: the first arrays of
// a many-row statement.
func idArrays(ids []store.RecordID) []any {
	return []any{column(ids, func(id store.RecordID) string { return id.Tenant }),
		column(ids, func(id store.RecordID) string { return id.Namespace }),
		column(ids, func(id store.RecordID) string { return id.Key })}
}

// column is f of each call: an array of a many-row statement.
func column[C, T any](calls []C, f func(C) T) []T {
	out := make([]T, len(calls))
	for i, c := range calls {
		out[i] = f(c)
	}
	return out
}
