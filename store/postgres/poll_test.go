package postgres_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store/postgres"
)

// TestPollingWakes: a store behind a transaction pooler without a listen
// URL polls: it never LISTENs; at its first look it wakes the watch of a
// record no live lease holds and leaves that of a held one asleep; and it
// wakes a watch whose record changes (here: is deleted) after that.
func TestPollingWakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, err := postgres.ConnectWith(b.ctx, b.db.URL, postgres.TransactionPooler)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := postgres.NewWith(pool, postgres.Options{Pooler: postgres.TransactionPooler})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

	held, absent := uniqueID(t), uniqueID(t)
	b.acquire(t, held, "holder")
	heldWatch, absentWatch := st.RecordWatch(held), st.RecordWatch(absent)
	defer heldWatch.Close()
	defer absentWatch.Close()
	awaitPolls := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for st.Polls() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d polls within 10s, want %d", st.Polls(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	awaitPolls(2)
	select {
	case <-absentWatch.C:
	default:
		t.Fatal("the first look did not wake the watch of a record that does not exist")
	}
	select {
	case <-heldWatch.C:
		t.Fatal("the watch of a record under a live lease woke, and nothing changed it")
	default:
	}
	if st.Listens() != 0 {
		t.Fatalf("a polling store listened %d times", st.Listens())
	}
	b.exec(t, "DELETE FROM idem_records WHERE tenant = $1 AND namespace = $2 AND key = $3", held.Tenant, held.Namespace, held.Key)
	select {
	case <-heldWatch.C:
	case <-time.After(10 * time.Second):
		t.Fatal("deleting the record did not wake its watch within 10s")
	}
}
