//go:build unix

package postgres_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testsupport/storetest"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// TestStoreThroughPgBouncer runs the conformance suite through a real
// PgBouncer, in transaction mode and in session mode, and checks in each
// that a waiting Claim's watch wakes: in transaction mode through the
// listener's direct connection (Options.ListenURL), and without one by
// polling; in session mode through LISTEN on a connection of the pooler's.
// Each test's store logs in, through PgBouncer, as a role of its own whose
// search_path and statement_timeout are set on the role (ALTER ROLE …
// SET), as production behind a transaction pooler must. The conformance
// suite never waits, so it does not run again for polling.
func TestStoreThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name   string
		pooler postgres.Pooler
		feeds  []bool // with a listen URL, or not
	}{
		{"transaction", postgres.TransactionPooler, []bool{true, false}},
		{"session", postgres.SessionPooler, []bool{false}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			bouncer, err := testdb.StartPgBouncer(testdb.BaseURL(t), mode.name)
			if err != nil {
				t.Fatalf("start PgBouncer (pool_mode=%s): %v", mode.name, err)
			}
			t.Cleanup(bouncer.Close)
			for i, listen := range mode.feeds {
				h := bouncerHarness{bouncer: bouncer, pooler: mode.pooler, listen: listen}
				if i == 0 {
					storetest.Run(t, h)
				}
				name := "WaitingClaimWakes"
				switch {
				case mode.pooler == postgres.TransactionPooler && listen:
					name += "/ListenURL"
				case mode.pooler == postgres.TransactionPooler:
					name += "/Polling"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					testWakeThroughPooler(t, h)
				})
			}
		})
	}
}

// testWakeThroughPooler: a Complete made elsewhere wakes the watch of a
// store behind the pooler, and the watch of a record nobody changed stays
// asleep.
func testWakeThroughPooler(t *testing.T, h bouncerHarness) {
	waiting := h.New(t, 2).(*harnessStore)
	other := postgres.New(waiting.db.Pool)
	ctx := t.Context()
	claim := func(key string) *store.Record {
		t.Helper()
		res, err := other.RecordClaim(ctx, claimParams(recordID(key), "holder"))
		if err != nil || res.Outcome != store.OutcomeAcquired {
			t.Fatalf("claim %s: %+v, %v", key, res, err)
		}
		return res.Record
	}
	rec, idle := claim("changed"), claim("idle")
	watch, idleWatch := waiting.RecordWatch(recordID("changed")), waiting.RecordWatch(recordID("idle"))
	defer watch.Close()
	defer idleWatch.Close()
	for _, r := range []*store.Record{rec, idle} {
		if err := waiting.RecordMarkWaited(ctx, recordID(r.Key), r.Token); err != nil {
			t.Fatal(err)
		}
	}
	// Once the store listens (it wakes every watch then) or has looked once,
	// the wakes so far are spent.
	deadline := time.Now().Add(10 * time.Second)
	for waiting.Listens() == 0 && waiting.Polls() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the store neither listened nor polled within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * postgres.WakePollInterval)
	for _, w := range []*store.Watch{watch, idleWatch} {
		select {
		case <-w.C:
		default:
		}
	}
	if _, err := other.RecordComplete(ctx, &store.CompleteParams{RecordID: recordID("changed"), Token: rec.Token, Result: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch.C:
	case <-time.After(10 * time.Second):
		t.Fatalf("a Complete elsewhere did not wake the watch within 10s (listens %d, polls %d)", waiting.Listens(), waiting.Polls())
	}
	select {
	case <-idleWatch.C:
		t.Fatal("the watch of a record nobody changed woke")
	case <-time.After(3 * postgres.WakePollInterval):
	}
}

// bouncerHarness is harness with the store under test behind PgBouncer;
// the backdoors run on the test schema's direct pool.
type bouncerHarness struct {
	harness
	bouncer *testdb.PgBouncer
	pooler  postgres.Pooler
	listen  bool
}

func (h bouncerHarness) New(t *testing.T, conns int) store.Store {
	db := testdb.New(t, testdb.MaxConns(2))
	role, password := db.LoginRole(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	base, err := url.Parse(testdb.BaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// A session pool holds a server connection per client connection, the
	// listener's among them.
	poolSize := 4
	if h.pooler == postgres.SessionPooler {
		poolSize++
	}
	if err := h.bouncer.AddDatabase(role, strings.TrimPrefix(base.Path, "/"), role, password, poolSize); err != nil {
		t.Fatal(err)
	}
	pool, err := postgres.ConnectWith(ctx, h.bouncer.URL(role)+"&pool_max_conns=4", h.pooler)
	if err != nil {
		t.Fatalf("connect through PgBouncer: %v; PgBouncer's log: %s", err, h.bouncer.Log(role))
	}
	t.Cleanup(pool.Close)
	opts := postgres.Options{Pooler: h.pooler}
	if h.listen {
		opts.ListenURL = db.URL
	}
	st, err := postgres.NewWith(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return &harnessStore{Store: st, db: db, pool: pool}
}

// TestConnectThroughTransactionPooler: through PgBouncer, in transaction
// mode and in session mode, a store connected as if directly does not
// start, refused its startup parameters; with TransactionPooler it sends
// none, prepares no named statement, and gets statement_timeout from the
// role.
func TestConnectThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	bouncer, err := testdb.StartPgBouncer(testdb.BaseURL(t), "transaction")
	if err != nil {
		t.Fatalf("start PgBouncer: %v", err)
	}
	t.Cleanup(bouncer.Close)
	st := bouncerHarness{bouncer: bouncer, pooler: postgres.TransactionPooler}.New(t, 2).(*harnessStore)
	u := bouncer.URL(st.db.Schema)
	ctx := t.Context()

	refused := func(what, u string) {
		t.Helper()
		if pool, err := postgres.Connect(ctx, u); err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") {
			if err == nil {
				pool.Close()
			}
			t.Fatalf("Connect through PgBouncer in %s mode as if directly: %v, want PgBouncer's refusal of a startup parameter", what, err)
		}
	}
	refused("transaction", u)
	// Session mode refuses them alike.
	sessions, err := testdb.StartPgBouncer(testdb.BaseURL(t), "session")
	if err != nil {
		t.Fatalf("start PgBouncer: %v", err)
	}
	t.Cleanup(sessions.Close)
	sst := bouncerHarness{bouncer: sessions, pooler: postgres.SessionPooler}.New(t, 2).(*harnessStore)
	refused("session", sessions.URL(sst.db.Schema))
	pool, err := postgres.ConnectWith(ctx, u, postgres.TransactionPooler)
	if err != nil {
		t.Fatalf("ConnectWith(TransactionPooler) through PgBouncer: %v", err)
	}
	cfg := pool.Config().ConnConfig
	pool.Close()
	if mode := cfg.DefaultQueryExecMode; mode != pgx.QueryExecModeCacheDescribe {
		t.Errorf("query exec mode %v, want cache_describe (no named prepared statements)", mode)
	}
	if len(cfg.RuntimeParams) != 0 {
		t.Errorf("startup parameters %v, want none", cfg.RuntimeParams)
	}

	b, err := postgres.OpenBackendWith(ctx, u, nil, postgres.Options{Pooler: postgres.TransactionPooler})
	if err != nil {
		t.Fatalf("OpenBackendWith through PgBouncer: %v", err)
	}
	defer b.Close()
	if got, err := b.StatementTimeoutSetting(ctx); err != nil || got != "10s" {
		t.Fatalf("statement_timeout through PgBouncer: %q, %v; want the role's 10s", got, err)
	}
}

// TestConnectSessionPooler: with SessionPooler the settings are SET on each
// connection instead of sent at startup.
func TestConnectSessionPooler(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	pool, err := postgres.ConnectWith(t.Context(), db.URL, postgres.SessionPooler)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, ok := pool.Config().ConnConfig.RuntimeParams["statement_timeout"]; ok {
		t.Errorf("startup parameters %v, want no statement_timeout", pool.Config().ConnConfig.RuntimeParams)
	}
	var timeout, planMode string
	if err := pool.QueryRow(t.Context(), "SELECT current_setting('statement_timeout'), current_setting('plan_cache_mode')").Scan(&timeout, &planMode); err != nil {
		t.Fatal(err)
	}
	if timeout != "10s" || planMode != "force_generic_plan" {
		t.Fatalf("statement_timeout %q, plan_cache_mode %q; want 10s and force_generic_plan", timeout, planMode)
	}
}
