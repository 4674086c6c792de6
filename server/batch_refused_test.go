package server_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// TestBatchTerminatedMidStatementIsUnavailable: a BatchClaim whose
// takeover statement is cut while it waits for a row lock (its backend
// terminated, SQLSTATE 57P01) answers the item it carried UNAVAILABLE /
// STORE_UNAVAILABLE and takes nothing over, while the items the batch's
// first statement settled keep their answers; the same batch succeeds once
// the database answers.
func TestBatchTerminatedMidStatementIsUnavailable(t *testing.T) {
	t.Parallel()
	d := newOwnDatabase(t)
	st := postgres.New(d.pool)
	t.Cleanup(st.Close)
	ts := testserver.StartWith(t, testserver.Options{DBOptions: []testdb.Option{testdb.MaxConns(1)},
		Store: func(*postgres.Store) store.Store { return st }})
	mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "locked", Claimant: "stalled"})
	if _, err := d.pool.Exec(testContext(t), `UPDATE idem_records SET lease_expires_at = now() - interval '1 second' WHERE key = 'locked'`); err != nil {
		t.Fatal(err)
	}

	// A transaction of the test's holds the lapsed record's row, so the
	// statement that takes it over waits inside Postgres.
	locker, err := pgx.Connect(d.ctx, d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	tx, err := locker.Begin(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(d.ctx, "SELECT 1 FROM idem_records WHERE key = 'locked' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	reqs := []*idemv1.ClaimRequest{{Namespace: ns, Key: "locked", Claimant: "taker"}}
	for i := range 20 {
		reqs = append(reqs, &idemv1.ClaimRequest{Namespace: ns, Key: fmt.Sprintf("beside-%02d", i), Claimant: "taker"})
	}
	var resp *idemv1.BatchClaimResponse
	var callErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, callErr = ts.Client.BatchClaim(testContext(t), &idemv1.BatchClaimRequest{Requests: reqs})
	}()
	var waiting int64
	for deadline := time.Now().Add(20 * time.Second); waiting == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no backend of idem's waited for the row lock")
		}
		err := d.admin.QueryRow(d.ctx, `SELECT pid FROM pg_stat_activity
			WHERE usename = $1 AND $2::int = ANY(pg_blocking_pids(pid))`, d.name, int64(locker.PgConn().PID())).Scan(&waiting)
		if errors.Is(err, pgx.ErrNoRows) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	d.exec(t, "SELECT pg_terminate_backend($1::int)", waiting)
	<-done
	if callErr != nil {
		t.Fatalf("BatchClaim: %v; want each item answered", callErr)
	}
	for i, r := range resp.GetResults() {
		if i == 0 {
			wantItem(t, "BatchClaim", i, r, codes.Unavailable, "STORE_UNAVAILABLE")
			continue
		}
		wantItem(t, "BatchClaim", i, r, codes.OK, "")
	}
	if err := tx.Rollback(d.ctx); err != nil {
		t.Fatal(err)
	}
	locked, err := ts.Client.Lookup(testContext(t), &idemv1.LookupRequest{Namespace: ns, Key: "locked"})
	if err != nil || locked.GetRecord().GetClaimant() != "stalled" {
		t.Fatalf("Lookup of the record whose takeover was cut: %v, %v; want it still the stalled holder's", locked, err)
	}

	resp, err = ts.Client.BatchClaim(testContext(t), &idemv1.BatchClaimRequest{Requests: reqs})
	if err != nil {
		t.Fatalf("BatchClaim after the cut: %v", err)
	}
	for i, r := range resp.GetResults() {
		wantItem(t, "BatchClaim", i, r, codes.OK, "")
		if r.GetResponse().GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
			t.Fatalf("item %d after the cut: %s; want ACQUIRED", i, r.GetResponse().GetOutcome())
		}
	}
}
