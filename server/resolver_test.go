package server_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/sqlite"
)

// The tokens of the timeline and resolver tests' tenants: acme, whose
// workers' token is plain and whose person, alice, has a named token, and
// which may use pay.* and mail; globex, another team; ops, the operators,
// with bob's named token and a shared one.
const (
	acmeToken      = "idem_timeline-test-acme-workers"
	aliceToken     = "idem_timeline-test-acme-alice"
	globexToken    = "idem_timeline-test-globex"
	bobToken       = "idem_timeline-test-ops-bob"
	opsSharedToken = "idem_timeline-test-ops-shared"
)

// timelineFile is the tenants of the timeline tests; every namespace of
// acme and globex holds a lease that runs out for resolution.
func timelineFile() *config.File {
	hold := []config.Policy{{Namespaces: []string{"*"}, OnLeaseExpiry: config.OnLeaseExpiryHold}}
	return &config.File{Tenants: []config.Tenant{
		{Name: "acme", Tokens: []string{config.HashToken(acmeToken)},
			NamedTokens: []config.NamedToken{{Name: "alice@example.com", Token: config.HashToken(aliceToken)}},
			Namespaces:  []string{"pay.*", "mail"}, Admin: true, Policies: hold},
		{Name: "globex", Tokens: []string{config.HashToken(globexToken)}, Policies: hold},
		{Name: "ops", Tokens: []string{config.HashToken(opsSharedToken)},
			NamedTokens: []config.NamedToken{{Name: "bob@ops", Token: config.HashToken(bobToken)}}, Operator: true},
	}}
}

// tlStore is a store of one kind, with backdoors that make a lease or a
// retention run out.
type tlStore struct {
	store.Store
	lapse, ageOut func(t *testing.T, id store.RecordID)
}

// onEachStore runs test on a fresh store of each kind.
func onEachStore(t *testing.T, test func(t *testing.T, st *tlStore)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		pg := postgres.New(db.Pool)
		t.Cleanup(pg.Close)
		set := func(column string) func(t *testing.T, id store.RecordID) {
			return func(t *testing.T, id store.RecordID) {
				t.Helper()
				tag, err := db.Pool.Exec(testContext(t), `UPDATE idem_records SET `+column+` = now() - interval '1 second'
					WHERE tenant = $1 AND namespace = $2 AND key = $3`, id.Tenant, id.Namespace, id.Key)
				if err != nil || tag.RowsAffected() != 1 {
					t.Fatalf("set %s of %v: %v, %d rows", column, id, err, tag.RowsAffected())
				}
			}
		}
		test(t, &tlStore{Store: pg, lapse: set("lease_expires_at"), ageOut: set("expires_at")})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "idem.db")
		lite, err := sqlite.Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lite.Close() })
		raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = raw.Close() })
		set := func(column string) func(t *testing.T, id store.RecordID) {
			return func(t *testing.T, id store.RecordID) {
				t.Helper()
				res, err := raw.ExecContext(testContext(t), `UPDATE idem_records SET `+column+` = ?4
					WHERE tenant = ?1 AND namespace = ?2 AND key = ?3`, id.Tenant, id.Namespace, id.Key, time.Now().Add(-time.Second).UnixMicro())
				if err != nil {
					t.Fatalf("set %s of %v: %v", column, id, err)
				}
				if n, _ := res.RowsAffected(); n != 1 {
					t.Fatalf("set %s of %v: %d rows", column, id, n)
				}
			}
		}
		test(t, &tlStore{Store: lite, lapse: set("lease_expires_at"), ageOut: set("expires_at")})
	})
}

// tlServer is a server of timelineFile's tenants over a store.
type tlServer struct {
	st    *tlStore
	srv   *server.Server
	c     idemv1.IdempotencyServiceClient
	admin idemv1.AdminServiceClient
	res   idemv1.ResolverServiceClient
}

// startTL starts a server over st, logging to logger (nil discards), and
// stops it in t.Cleanup.
func startTL(t *testing.T, st *tlStore, logger *slog.Logger, cfg server.Config) *tlServer {
	t.Helper()
	tenants, err := services.NewTenants(timelineFile())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tenants = tenants
	srv, err := server.New(server.Options{Store: st, Config: cfg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &tlServer{st: st, srv: srv, c: idemv1.NewIdempotencyServiceClient(conn), admin: idemv1.NewAdminServiceClient(conn),
		res: idemv1.NewResolverServiceClient(conn)}
}

// acquire claims ns/key for the tenant of token as claimant and requires
// ACQUIRED.
func (s *tlServer) acquire(t *testing.T, token, ns, key, claimant string) *idemv1.Record {
	t.Helper()
	resp, err := s.c.Claim(asTenant(testContext(t), token), &idemv1.ClaimRequest{Namespace: ns, Key: key, Claimant: claimant})
	if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim %s/%s as %s: %v, %v; want ACQUIRED", ns, key, claimant, resp.GetOutcome(), err)
	}
	return resp.GetRecord()
}

// hold claims tenant's ns/key as claimant w1, lets its lease run out and
// claims it again, which makes it UNRESOLVED; it returns the held record.
func (s *tlServer) hold(t *testing.T, token, tenant, ns, key string) *idemv1.Record {
	t.Helper()
	s.acquire(t, token, ns, key, "w1")
	s.st.lapse(t, store.RecordID{Tenant: tenant, Namespace: ns, Key: key})
	resp, err := s.c.Claim(asTenant(testContext(t), token), &idemv1.ClaimRequest{Namespace: ns, Key: key, Claimant: "w2"})
	if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_UNRESOLVED {
		t.Fatalf("Claim of %s/%s after its lease ran out: %v, %v; want UNRESOLVED", ns, key, resp.GetOutcome(), err)
	}
	return resp.GetRecord()
}

// entryOf is the part of a timeline entry the tests compare: all but its
// time, which must be set.
func entryOf(t *testing.T, e *idemv1.TimelineEntry) *idemv1.TimelineEntry {
	t.Helper()
	if e.GetAt() == nil {
		t.Errorf("entry %s has no time", e.GetKind())
	}
	c := proto.Clone(e).(*idemv1.TimelineEntry)
	c.At = nil
	return c
}

// requireHistory fails unless got is want, entry by entry, times aside.
func requireHistory(t *testing.T, what string, got []*idemv1.TimelineEntry, want ...*idemv1.TimelineEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d:\n got: %v\nwant: %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if g := entryOf(t, got[i]); !proto.Equal(g, want[i]) {
			t.Errorf("%s: entry %d\n got: %v\nwant: %v", what, i, g, want[i])
		}
	}
}

// lookupHistory is the timeline of acme's ns/key, by Lookup.
func (s *tlServer) lookupHistory(t *testing.T, ns, key string) []*idemv1.TimelineEntry {
	t.Helper()
	resp, err := s.c.Lookup(asTenant(testContext(t), acmeToken), &idemv1.LookupRequest{Namespace: ns, Key: key, IncludeHistory: true})
	if err != nil {
		t.Fatalf("Lookup %s/%s with its history: %v", ns, key, err)
	}
	return resp.GetHistory()
}

// TestTimelineThroughTheAPI: each kind of exception is on the record's
// timeline with its fields, through Lookup and the operator's GetRecord,
// on both stores; a job without exceptions has none; a deleted record's
// timeline is read by GetRecord, and ends with who deleted it and why.
func TestTimelineThroughTheAPI(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, st *tlStore) {
		s := startTL(t, st, nil, server.Config{})
		acme := asTenant(testContext(t), acmeToken)
		processing, unresolved := idemv1.State_STATE_PROCESSING, idemv1.State_STATE_UNRESOLVED

		// The ordinary path: nothing.
		rec := s.acquire(t, acmeToken, "pay.card", "ordinary", "w1")
		if _, err := s.c.Complete(acme, &idemv1.CompleteRequest{Namespace: "pay.card", Key: "ordinary", Token: rec.GetToken(), Result: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		requireHistory(t, "a Claim and its Complete", s.lookupHistory(t, "pay.card", "ordinary"))
		if resp, err := s.c.Lookup(acme, &idemv1.LookupRequest{Namespace: "pay.card", Key: "ordinary"}); err != nil || resp.GetHistory() != nil {
			t.Fatalf("Lookup without include_history: %v, %v; want no history", resp.GetHistory(), err)
		}

		// A lease held, a takeover after its release by a resolver, a
		// refused fingerprint, a permanent Fail.
		held := s.hold(t, acmeToken, "acme", "pay.card", "k")
		if _, err := s.res.Resolve(acme, &idemv1.ResolveRequest{Namespace: "pay.card", Key: "k", Token: held.GetToken(),
			Resolution: &idemv1.ResolveRequest_Released{Released: &idemv1.ResolveReleased{}},
			Resolver:   "stripe-reconciler", Reason: "no charge ch_* for this key"}); err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		again := s.acquire(t, acmeToken, "pay.card", "k", "w3")
		if _, err := s.c.Claim(acme, &idemv1.ClaimRequest{Namespace: "pay.card", Key: "k", Claimant: "w4", Fingerprint: []byte("other")}); err != nil {
			t.Fatal(err) // the record has no fingerprint: none is refused
		}
		if _, err := s.c.Fail(acme, &idemv1.FailRequest{Namespace: "pay.card", Key: "k", Token: again.GetToken(), Error: "card declined"}); err != nil {
			t.Fatal(err)
		}
		want := []*idemv1.TimelineEntry{
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_HELD, Token: held.GetToken(), State: unresolved, PreviousState: processing, Claimant: "w1"},
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_RESOLVED, Token: held.GetToken(), State: idemv1.State_STATE_RELEASED, PreviousState: unresolved,
				Actor: &idemv1.Actor{Tenant: "acme", Resolver: "stripe-reconciler"}, Reason: "no charge ch_* for this key"},
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_TAKEN_OVER, Token: again.GetToken(), State: processing,
				PreviousToken: held.GetToken(), PreviousState: idemv1.State_STATE_RELEASED, Claimant: "w3", PreviousClaimant: "w1"},
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_FAILED, Token: again.GetToken(), State: idemv1.State_STATE_FAILED, Claimant: "w3", Error: "card declined"},
		}
		requireHistory(t, "held, released by a resolver, taken over, failed", s.lookupHistory(t, "pay.card", "k"), want...)

		// Its retention passes and the sweeper purges it: its timeline goes
		// with it.
		st.ageOut(t, store.RecordID{Tenant: "acme", Namespace: "pay.card", Key: "k"})
		if n, err := st.SweepPurge(testContext(t), 100); err != nil || n != 1 {
			t.Fatalf("SweepPurge = %d, %v; want 1", n, err)
		}
		_, err := s.admin.GetRecord(asTenant(testContext(t), bobToken), &idemv1.GetRecordRequest{Tenant: "acme", Namespace: "pay.card", Key: "k", IncludeHistory: true})
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")

		// A lapsed lease taken over, a retryable Fail, a refused
		// fingerprint; then a person resolves a held one.
		first, err := s.c.Claim(acme, &idemv1.ClaimRequest{Namespace: "mail", Key: "m", Claimant: "w1", Fingerprint: []byte("fp-1")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.c.Claim(acme, &idemv1.ClaimRequest{Namespace: "mail", Key: "m", Claimant: "w9", Fingerprint: []byte("fp-2")})
		requireStatus(t, err, codes.FailedPrecondition, "FINGERPRINT_MISMATCH")
		if _, err := s.c.Fail(acme, &idemv1.FailRequest{Namespace: "mail", Key: "m", Token: first.GetRecord().GetToken(), Error: "smtp busy", Retryable: true}); err != nil {
			t.Fatal(err)
		}
		second := s.hold(t, acmeToken, "acme", "mail", "m")
		alice := asTenant(testContext(t), aliceToken)
		if _, err := s.admin.ResolveRecord(alice, &idemv1.ResolveRecordRequest{Namespace: "mail", Key: "m",
			Resolution: &idemv1.ResolveRecordRequest_Failed{Failed: &idemv1.ResolveFailed{Error: "bounced"}}, Reason: "the mail server says it bounced"}); err != nil {
			t.Fatal(err)
		}
		mailHistory := []*idemv1.TimelineEntry{
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_FINGERPRINT_MISMATCH, Token: first.GetRecord().GetToken(), State: processing,
				Claimant: "w9", Fingerprint: []byte("fp-2")},
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_RELEASED, Token: first.GetRecord().GetToken(), State: idemv1.State_STATE_RELEASED,
				Claimant: "w1", Error: "smtp busy"},
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_TAKEN_OVER, Token: second.GetToken(), State: processing,
				PreviousToken: first.GetRecord().GetToken(), PreviousState: idemv1.State_STATE_RELEASED, Claimant: "w1", PreviousClaimant: "w1"},
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_HELD, Token: second.GetToken(), State: unresolved, PreviousState: processing, Claimant: "w1"},
			{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_RESOLVED, Token: second.GetToken(), State: idemv1.State_STATE_FAILED, PreviousState: unresolved,
				Error: "bounced", Actor: &idemv1.Actor{Tenant: "acme", Operator: "alice@example.com"}, Reason: "the mail server says it bounced"},
		}
		requireHistory(t, "mail/m by Lookup", s.lookupHistory(t, "mail", "m"), mailHistory...)

		// An operator reads it by id, then deletes it with a reason, and
		// reads what is left: the timeline, with no record.
		bob := asTenant(testContext(t), bobToken)
		got, err := s.admin.GetRecord(bob, &idemv1.GetRecordRequest{Tenant: "acme", Namespace: "mail", Key: "m", IncludeHistory: true})
		if err != nil {
			t.Fatalf("GetRecord of acme's record by an operator: %v", err)
		}
		if r := got.GetRecord(); r.GetTenant() != "acme" || r.GetKey() != "m" || r.GetState() != idemv1.State_STATE_FAILED {
			t.Fatalf("GetRecord = %v; want acme's FAILED mail/m", r)
		}
		requireHistory(t, "mail/m by GetRecord", got.GetHistory(), mailHistory...)
		if _, err := s.admin.DeleteRecord(bob, &idemv1.DeleteRecordRequest{Tenant: "acme", Namespace: "mail", Key: "m", Reason: "poison message"}); err != nil {
			t.Fatal(err)
		}
		_, err = s.c.Lookup(acme, &idemv1.LookupRequest{Namespace: "mail", Key: "m", IncludeHistory: true})
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")
		gone, err := s.admin.GetRecord(bob, &idemv1.GetRecordRequest{Tenant: "acme", Namespace: "mail", Key: "m", IncludeHistory: true})
		if err != nil || gone.GetRecord() != nil {
			t.Fatalf("GetRecord of a deleted record with its history: %v, %v; want its timeline and no record", gone.GetRecord(), err)
		}
		requireHistory(t, "mail/m deleted", gone.GetHistory(), append(mailHistory,
			&idemv1.TimelineEntry{Kind: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_DELETED, Token: second.GetToken(),
				PreviousState: idemv1.State_STATE_FAILED, Actor: &idemv1.Actor{Tenant: "ops", Operator: "bob@ops"}, Reason: "poison message"})...)
		_, err = s.admin.GetRecord(bob, &idemv1.GetRecordRequest{Tenant: "acme", Namespace: "mail", Key: "m"})
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")
		_, err = s.admin.GetRecord(bob, &idemv1.GetRecordRequest{Tenant: "acme", Namespace: "mail", Key: "never", IncludeHistory: true})
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")

		// GetRecord is an admin's call on its own tenant, an operator's on
		// any; another tenant's records are not a plain tenant's.
		_, err = s.admin.GetRecord(alice, &idemv1.GetRecordRequest{Tenant: "globex", Namespace: "mail", Key: "m"})
		requireStatus(t, err, codes.PermissionDenied, "NOT_OPERATOR")
		_, err = s.admin.GetRecord(asTenant(testContext(t), globexToken), &idemv1.GetRecordRequest{Namespace: "mail", Key: "m"})
		requireStatus(t, err, codes.PermissionDenied, "NOT_ADMIN")
		own, err := s.admin.GetRecord(alice, &idemv1.GetRecordRequest{Namespace: "pay.card", Key: "ordinary"})
		if err != nil || own.GetRecord().GetTenant() != "acme" || own.GetHistory() != nil {
			t.Fatalf("GetRecord of its own record: %v, %v", own, err)
		}
		_, err = s.admin.GetRecord(alice, &idemv1.GetRecordRequest{Namespace: "jobs", Key: "k"})
		requireStatus(t, err, codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")
	})
}

// heldStream is a WatchHeld stream's events, read in a goroutine.
type heldStream struct {
	events chan *idemv1.WatchHeldResponse
	done   chan error // the stream's end
	cancel context.CancelFunc
}

// watchHeld opens a WatchHeld stream with token's credentials.
func (s *tlServer) watchHeld(t *testing.T, token string, namespaces ...string) *heldStream {
	t.Helper()
	ctx, cancel := context.WithCancel(asTenant(testContext(t), token))
	t.Cleanup(cancel)
	stream, err := s.res.WatchHeld(ctx, &idemv1.WatchHeldRequest{Namespaces: namespaces})
	if err != nil {
		t.Fatalf("WatchHeld: %v", err)
	}
	h := &heldStream{events: make(chan *idemv1.WatchHeldResponse, 100), done: make(chan error, 1), cancel: cancel}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				h.done <- err
				return
			}
			h.events <- ev
		}
	}()
	return h
}

// next is the stream's next event.
func (h *heldStream) next(t *testing.T) *idemv1.WatchHeldResponse {
	t.Helper()
	select {
	case ev := <-h.events:
		return ev
	case err := <-h.done:
		t.Fatalf("the stream ended: %v", err)
	case <-testContext(t).Done():
		t.Fatal("no event")
	}
	return nil
}

// requireHeld fails unless the stream's next event is the held record
// ns/key with token.
func (h *heldStream) requireHeld(t *testing.T, ns, key string, token int64) {
	t.Helper()
	ev := h.next(t)
	if r := ev.GetHeld(); r == nil || r.GetNamespace() != ns || r.GetKey() != key || r.GetToken() != token || r.GetState() != idemv1.State_STATE_UNRESOLVED {
		t.Fatalf("event %v; want %s/%s held with token %d", ev, ns, key, token)
	}
}

// requireSynced fails unless the stream's next event is synced.
func (h *heldStream) requireSynced(t *testing.T) {
	t.Helper()
	if ev := h.next(t); !ev.GetSynced() {
		t.Fatalf("event %v; want synced", ev)
	}
}

// requireLeft fails unless the stream's next event is ns/key leaving.
func (h *heldStream) requireLeft(t *testing.T, ns, key string, token int64) {
	t.Helper()
	ev := h.next(t)
	if l := ev.GetLeft(); l == nil || l.GetNamespace() != ns || l.GetKey() != key || l.GetToken() != token {
		t.Fatalf("event %v; want %s/%s left (token %d)", ev, ns, key, token)
	}
}

// TestWatchHeldDeliversTheTenantsHeldRecords: a stream sends the caller's
// tenant's held records of the namespaces asked for, those held at its start
// and then, once synced, each as it becomes held (by a Claim or the
// sweeper) or stops being held (resolved, its holder's late Complete), and
// never another tenant's or another namespace's.
func TestWatchHeldDeliversTheTenantsHeldRecords(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, st *tlStore) {
		// The relist catches what the store does not announce: a holder's
		// late Complete.
		s := startTL(t, st, nil, server.Config{HeldRelist: 200 * time.Millisecond})
		acme := asTenant(testContext(t), acmeToken)
		before := s.hold(t, acmeToken, "acme", "pay.card", "before")
		s.hold(t, acmeToken, "acme", "mail", "other-namespace")
		s.hold(t, globexToken, "globex", "pay.card", "other-tenant")

		all := s.watchHeld(t, acmeToken)
		all.requireHeld(t, "mail", "other-namespace", mustToken(t, s, "mail", "other-namespace"))
		all.requireHeld(t, "pay.card", "before", before.GetToken())
		all.requireSynced(t)
		card := s.watchHeld(t, aliceToken, "pay.card")
		card.requireHeld(t, "pay.card", "before", before.GetToken())
		card.requireSynced(t)

		// Held by a Claim, then by the sweeper.
		byClaim := s.hold(t, acmeToken, "acme", "pay.card", "by-claim")
		all.requireHeld(t, "pay.card", "by-claim", byClaim.GetToken())
		card.requireHeld(t, "pay.card", "by-claim", byClaim.GetToken())
		swept := s.acquire(t, acmeToken, "pay.card", "by-sweeper", "w1")
		st.lapse(t, store.RecordID{Tenant: "acme", Namespace: "pay.card", Key: "by-sweeper"})
		if n, err := st.SweepExpire(testContext(t), 100); err != nil || n != 1 {
			t.Fatalf("SweepExpire = %d, %v", n, err)
		}
		all.requireHeld(t, "pay.card", "by-sweeper", swept.GetToken())
		card.requireHeld(t, "pay.card", "by-sweeper", swept.GetToken())
		// Another tenant's and another namespace's do not come.
		s.hold(t, globexToken, "globex", "pay.card", "other-tenant-2")
		s.hold(t, acmeToken, "acme", "mail", "other-namespace-2")
		all.requireHeld(t, "mail", "other-namespace-2", mustToken(t, s, "mail", "other-namespace-2"))

		// Resolved: it leaves.
		if _, err := s.res.Resolve(acme, &idemv1.ResolveRequest{Namespace: "pay.card", Key: "by-claim", Token: byClaim.GetToken(),
			Resolution: &idemv1.ResolveRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("ch_1")}}, Resolver: "r"}); err != nil {
			t.Fatal(err)
		}
		all.requireLeft(t, "pay.card", "by-claim", byClaim.GetToken())
		card.requireLeft(t, "pay.card", "by-claim", byClaim.GetToken())
		// The holder's late Complete: it leaves at the next relist.
		if _, err := s.c.Complete(acme, &idemv1.CompleteRequest{Namespace: "pay.card", Key: "before", Token: before.GetToken()}); err != nil {
			t.Fatal(err)
		}
		all.requireLeft(t, "pay.card", "before", before.GetToken())
		card.requireLeft(t, "pay.card", "before", before.GetToken())
		select {
		case ev := <-card.events:
			t.Fatalf("the pay.card stream got %v; it asked for nothing else", ev)
		default:
		}

		// A namespace outside the allow-list is refused; so is a bad one.
		_, err := recvFirst(s.res.WatchHeld(acme, &idemv1.WatchHeldRequest{Namespaces: []string{"jobs"}}))
		requireStatus(t, err, codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")
		_, err = recvFirst(s.res.WatchHeld(acme, &idemv1.WatchHeldRequest{Namespaces: []string{"Bad NS"}}))
		requireStatus(t, err, codes.InvalidArgument, "INVALID_NAMESPACE")
		_, err = recvFirst(s.res.WatchHeld(testContext(t), &idemv1.WatchHeldRequest{}))
		requireStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	})
}

// mustToken is the token acme's ns/key holds.
func mustToken(t *testing.T, s *tlServer, ns, key string) int64 {
	t.Helper()
	resp, err := s.c.Lookup(asTenant(testContext(t), acmeToken), &idemv1.LookupRequest{Namespace: ns, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRecord().GetToken()
}

// recvFirst is the first message of a stream, or its error.
func recvFirst(stream grpc.ServerStreamingClient[idemv1.WatchHeldResponse], err error) (*idemv1.WatchHeldResponse, error) {
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

// TestWatchHeldAcrossARestart: a server that stops ends its streams (a
// drain does not wait for them), and a new server on the same database
// answers a fresh stream with every record held now, so that a client that
// connects again misses nothing.
func TestWatchHeldAcrossARestart(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, st *tlStore) {
		s := startTL(t, st, nil, server.Config{})
		a := s.hold(t, acmeToken, "acme", "pay.card", "a")
		stream := s.watchHeld(t, acmeToken)
		stream.requireHeld(t, "pay.card", "a", a.GetToken())
		stream.requireSynced(t)

		ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown with a stream open: %v; want it to end the stream, not wait for it", err)
		}
		select {
		case err := <-stream.done:
			if st, _ := status.FromError(err); st.Code() != codes.Unavailable {
				t.Fatalf("the stream ended with %v; want UNAVAILABLE", err)
			}
		case <-testContext(t).Done():
			t.Fatal("the stream did not end")
		}

		// Held while no server ran (the store directly), then a new server.
		id := store.RecordID{Tenant: "acme", Namespace: "pay.card", Key: "b"}
		if _, err := st.RecordClaim(testContext(t), &store.ClaimParams{RecordID: id, LeaseTTL: time.Minute, Retention: time.Hour, Hold: true}); err != nil {
			t.Fatal(err)
		}
		st.lapse(t, id)
		if n, err := st.SweepExpire(testContext(t), 100); err != nil || n != 1 {
			t.Fatalf("SweepExpire = %d, %v", n, err)
		}
		restarted := startTL(t, st, nil, server.Config{})
		again := restarted.watchHeld(t, acmeToken)
		again.requireHeld(t, "pay.card", "a", a.GetToken())
		again.requireHeld(t, "pay.card", "b", mustToken(t, restarted, "pay.card", "b"))
		again.requireSynced(t)
	})
}

// TestResolversRacing: two resolvers deciding one held record at once,
// differently: one wins, the other gets NOT_UNRESOLVED, and the timeline
// names the winner alone. Deciding the same, both are told it is done (the
// repeat of a resolution), and the timeline still has one resolution.
func TestResolversRacing(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, st *tlStore) {
		s := startTL(t, st, nil, server.Config{})
		acme := asTenant(testContext(t), acmeToken)
		for i := range 5 {
			key := "race-" + string(rune('a'+i))
			held := s.hold(t, acmeToken, "acme", "pay.card", key)
			decide := func(resolver string, how *idemv1.ResolveRequest) error {
				how.Namespace, how.Key, how.Token, how.Resolver = "pay.card", key, held.GetToken(), resolver
				_, err := s.res.Resolve(acme, how)
				return err
			}
			errs := make(chan error, 2)
			start := make(chan struct{})
			go func() {
				<-start
				errs <- decide("charges", &idemv1.ResolveRequest{Resolution: &idemv1.ResolveRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("ch_1")}}})
			}()
			go func() {
				<-start
				errs <- decide("ledger", &idemv1.ResolveRequest{Resolution: &idemv1.ResolveRequest_Released{Released: &idemv1.ResolveReleased{}}})
			}()
			close(start)
			var won, lost int
			for range 2 {
				if err := <-errs; err != nil {
					requireStatus(t, err, codes.FailedPrecondition, "NOT_UNRESOLVED")
					lost++
				} else {
					won++
				}
			}
			if won != 1 || lost != 1 {
				t.Fatalf("%s: %d won, %d lost; want one each", key, won, lost)
			}
			history := s.lookupHistory(t, "pay.card", key)
			var resolved []*idemv1.TimelineEntry
			for _, e := range history {
				if e.GetKind() == idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_RESOLVED {
					resolved = append(resolved, e)
				}
			}
			rec := lookupAs(t, s.c, "pay.card", key, acmeToken)
			winner := map[idemv1.State]string{idemv1.State_STATE_COMPLETED: "charges", idemv1.State_STATE_RELEASED: "ledger"}[rec.GetState()]
			if len(resolved) != 1 || resolved[0].GetActor().GetResolver() != winner || resolved[0].GetState() != rec.GetState() {
				t.Fatalf("%s: resolutions on the timeline %v; want one by %s, to %s", key, resolved, winner, rec.GetState())
			}
		}

		// The same decision twice: the second is told it is done.
		held := s.hold(t, acmeToken, "acme", "pay.card", "same")
		for _, resolver := range []string{"charges", "charges-replica"} {
			if _, err := s.res.Resolve(acme, &idemv1.ResolveRequest{Namespace: "pay.card", Key: "same", Token: held.GetToken(), Resolver: resolver,
				Resolution: &idemv1.ResolveRequest_Failed{Failed: &idemv1.ResolveFailed{Error: "declined"}}}); err != nil {
				t.Fatalf("%s: %v", resolver, err)
			}
		}
		if n := len(s.lookupHistory(t, "pay.card", "same")); n != 2 {
			t.Fatalf("%d entries; want the hold and one resolution", n)
		}
	})
}

// lookupAs is the record of ns/key of token's tenant.
func lookupAs(t *testing.T, c idemv1.IdempotencyServiceClient, ns, key, token string) *idemv1.Record {
	t.Helper()
	resp, err := c.Lookup(asTenant(testContext(t), token), &idemv1.LookupRequest{Namespace: ns, Key: key})
	if err != nil {
		t.Fatalf("Lookup %s/%s: %v", ns, key, err)
	}
	return resp.GetRecord()
}

// TestResolveRefusals: a resolver names itself and the lease it decides,
// within the caller's tenant and allow-list; a reason is optional and
// bounded. A refused call changes nothing.
func TestResolveRefusals(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, st *tlStore) {
		s := startTL(t, st, nil, server.Config{})
		acme := asTenant(testContext(t), acmeToken)
		held := s.hold(t, acmeToken, "acme", "pay.card", "k")
		release := &idemv1.ResolveRequest_Released{Released: &idemv1.ResolveReleased{}}
		req := func(change func(r *idemv1.ResolveRequest)) *idemv1.ResolveRequest {
			r := &idemv1.ResolveRequest{Namespace: "pay.card", Key: "k", Token: held.GetToken(), Resolution: release, Resolver: "r"}
			change(r)
			return r
		}
		for _, c := range []struct {
			name   string
			ctx    context.Context
			req    *idemv1.ResolveRequest
			code   codes.Code
			reason string
		}{
			{"no token", acme, req(func(r *idemv1.ResolveRequest) { r.Token = 0 }), codes.InvalidArgument, "INVALID_TOKEN"},
			{"no resolver", acme, req(func(r *idemv1.ResolveRequest) { r.Resolver = "" }), codes.InvalidArgument, "INVALID_RESOLVER"},
			{"a resolver too long", acme, req(func(r *idemv1.ResolveRequest) { r.Resolver = string(make([]byte, 129)) }), codes.InvalidArgument, "INVALID_RESOLVER"},
			{"a resolver with a newline", acme, req(func(r *idemv1.ResolveRequest) { r.Resolver = "a\nb" }), codes.InvalidArgument, "INVALID_RESOLVER"},
			{"a reason too long", acme, req(func(r *idemv1.ResolveRequest) { r.Reason = string(make([]byte, 1025)) }), codes.InvalidArgument, "INVALID_REASON"},
			{"no resolution", acme, req(func(r *idemv1.ResolveRequest) { r.Resolution = nil }), codes.InvalidArgument, "INVALID_RESOLUTION"},
			{"a namespace outside the allow-list", acme, req(func(r *idemv1.ResolveRequest) { r.Namespace = "jobs" }), codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED"},
			{"another tenant's record", asTenant(testContext(t), globexToken), req(func(*idemv1.ResolveRequest) {}), codes.NotFound, "NOT_FOUND"},
			{"another lease", acme, req(func(r *idemv1.ResolveRequest) { r.Token++ }), codes.Aborted, "LEASE_LOST"},
			{"no credentials", testContext(t), req(func(*idemv1.ResolveRequest) {}), codes.Unauthenticated, "UNAUTHENTICATED"},
		} {
			_, err := s.res.Resolve(c.ctx, c.req)
			if ok, why := checkStatus(err, c.code, c.reason); !ok {
				t.Errorf("%s: %s; want %s / %s", c.name, why, c.code, c.reason)
			}
		}
		if rec := lookupAs(t, s.c, "pay.card", "k", acmeToken); rec.GetState() != idemv1.State_STATE_UNRESOLVED {
			t.Fatalf("after refused resolutions: %s; want UNRESOLVED", rec.GetState())
		}
		// Without a reason, and as a worker's plain token: accepted.
		resp, err := s.res.Resolve(acme, req(func(*idemv1.ResolveRequest) {}))
		if err != nil || resp.GetRecord().GetState() != idemv1.State_STATE_RELEASED {
			t.Fatalf("Resolve without a reason: %v, %v", resp, err)
		}
		_, err = s.res.Resolve(acme, req(func(*idemv1.ResolveRequest) {}))
		requireStatus(t, err, codes.FailedPrecondition, "NOT_UNRESOLVED")
		_, err = s.res.Resolve(acme, req(func(r *idemv1.ResolveRequest) { r.Key = "never" }))
		requireStatus(t, err, codes.NotFound, "NOT_FOUND")

		// ResolveRecord takes a reason and a token too, bounded alike.
		alice := asTenant(testContext(t), aliceToken)
		other := s.hold(t, acmeToken, "acme", "pay.card", "k2")
		_, err = s.admin.ResolveRecord(alice, &idemv1.ResolveRecordRequest{Namespace: "pay.card", Key: "k2", Token: other.GetToken() + 1,
			Resolution: &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}})
		requireStatus(t, err, codes.Aborted, "LEASE_LOST")
		_, err = s.admin.ResolveRecord(alice, &idemv1.ResolveRecordRequest{Namespace: "pay.card", Key: "k2", Reason: string(make([]byte, 1025)),
			Resolution: &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}})
		requireStatus(t, err, codes.InvalidArgument, "INVALID_REASON")
		_, err = s.admin.DeleteRecord(alice, &idemv1.DeleteRecordRequest{Namespace: "pay.card", Key: "k2", Reason: "bad\x00reason"})
		requireStatus(t, err, codes.InvalidArgument, "INVALID_REASON")
	})
}

// TestListHeldPolls: the polling fallback pages through the tenant's held
// records of the namespaces asked for, and nobody else's.
func TestListHeldPolls(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, st *tlStore) {
		s := startTL(t, st, nil, server.Config{})
		for _, key := range []string{"c", "a", "b"} {
			s.hold(t, acmeToken, "acme", "pay.card", key)
		}
		s.hold(t, acmeToken, "acme", "mail", "m")
		s.hold(t, globexToken, "globex", "pay.card", "x")
		s.acquire(t, acmeToken, "pay.card", "live", "w")
		acme := asTenant(testContext(t), acmeToken)
		var got []string
		for token := ""; ; {
			page, err := s.res.ListHeld(acme, &idemv1.ListHeldRequest{PageSize: 2, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.GetRecords() {
				got = append(got, r.GetNamespace()+"/"+r.GetKey())
			}
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		if want := "[mail/m pay.card/a pay.card/b pay.card/c]"; fmt.Sprint(got) != want {
			t.Fatalf("ListHeld = %v; want %s", got, want)
		}
		page, err := s.res.ListHeld(acme, &idemv1.ListHeldRequest{Namespaces: []string{"mail"}})
		if err != nil || len(page.GetRecords()) != 1 || page.GetRecords()[0].GetKey() != "m" {
			t.Fatalf("ListHeld of mail = %v, %v", page, err)
		}
		_, err = s.res.ListHeld(acme, &idemv1.ListHeldRequest{PageSize: 1001})
		requireStatus(t, err, codes.InvalidArgument, "INVALID_PAGE_SIZE")
		_, err = s.res.ListHeld(acme, &idemv1.ListHeldRequest{Namespaces: []string{"jobs"}})
		requireStatus(t, err, codes.PermissionDenied, "NAMESPACE_NOT_ALLOWED")
	})
}

// TestResolutionAuditLines: a resolution leaves one info line with the
// record's tenant, namespace, key and token, the decision, who (the person
// a named token names, or the resolver) and the reason; a deletion's line
// names who and why, but neither key nor token, as before; and a person's
// every call line names them.
func TestResolutionAuditLines(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, st *tlStore) {
		var logs syncBuffer
		s := startTL(t, st, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), server.Config{})
		a := s.hold(t, acmeToken, "acme", "pay.card", "by-alice")
		b := s.hold(t, acmeToken, "acme", "pay.card", "by-resolver")
		alice := asTenant(testContext(t), aliceToken)
		if _, err := s.admin.ResolveRecord(alice, &idemv1.ResolveRecordRequest{Namespace: "pay.card", Key: "by-alice",
			Resolution: &idemv1.ResolveRecordRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("RESULT-NOT-LOGGED")}},
			Reason:     "refund issued by hand"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.res.Resolve(asTenant(testContext(t), acmeToken), &idemv1.ResolveRequest{Namespace: "pay.card", Key: "by-resolver",
			Token: b.GetToken(), Resolver: "stripe-reconciler", Reason: "no charge",
			Resolution: &idemv1.ResolveRequest_Released{Released: &idemv1.ResolveReleased{}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.admin.DeleteRecord(asTenant(testContext(t), bobToken), &idemv1.DeleteRecordRequest{Tenant: "acme",
			Namespace: "pay.card", Key: "by-alice", Reason: "test data"}); err != nil {
			t.Fatal(err)
		}
		var audit []string
		var aliceCalls int
		for _, l := range logs.lines(t) {
			switch l["msg"] {
			case "record resolved", "record deleted by an operator":
				if l["level"] != "INFO" {
					t.Errorf("%v at %v; want INFO", l["msg"], l["level"])
				}
				decision := l["decision"]
				if decision == nil {
					decision = l["state"]
				}
				audit = append(audit, fmt.Sprintf("%v: %v %v/%v token %v %v who=%v by=%v reason=%q",
					l["msg"], l["tenant"], l["namespace"], l["key"], l["token"], decision, l["who"], l["by_tenant"], l["reason"]))
			case "finished call":
				if l["who"] == "alice@example.com" && l["tenant"] == "acme" {
					aliceCalls++
				}
			}
		}
		want := []string{
			fmt.Sprintf("record resolved: acme pay.card/by-alice token %d completed who=alice@example.com by=acme reason=%q", a.GetToken(), "refund issued by hand"),
			fmt.Sprintf("record resolved: acme pay.card/by-resolver token %d released who=resolver stripe-reconciler by=acme reason=%q", b.GetToken(), "no charge"),
			fmt.Sprintf("record deleted by an operator: acme pay.card/<nil> token <nil> completed who=bob@ops by=ops reason=%q", "test data"),
		}
		if fmt.Sprint(audit) != fmt.Sprint(want) {
			t.Errorf("audit lines\n got: %q\nwant: %q", audit, want)
		}
		if aliceCalls != 1 {
			t.Errorf("%d call lines name alice; want her one call", aliceCalls)
		}
		if strings.Contains(logs.String(), "RESULT-NOT-LOGGED") || strings.Contains(logs.String(), aliceToken) {
			t.Error("the logs hold a result or a token")
		}
	})
}

// TestCrossTenantLineOncePerSession: an operator's console refreshing a
// page repeats the same call across tenants; its line is written at info
// the first time each token reaches a tenant (or all of them) in this
// idemd, and at debug after.
func TestCrossTenantLineOncePerSession(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, st *tlStore) {
		var logs syncBuffer
		s := startTL(t, st, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), server.Config{})
		bob, shared := asTenant(testContext(t), bobToken), asTenant(testContext(t), opsSharedToken)
		for range 3 { // a page refreshed
			if _, err := s.admin.ListRecords(bob, &idemv1.ListRecordsRequest{AllTenants: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.admin.Stats(bob, &idemv1.StatsRequest{AllTenants: true}); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if _, err := s.admin.ListRecords(bob, &idemv1.ListRecordsRequest{Tenant: "acme"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.admin.ListRecords(shared, &idemv1.ListRecordsRequest{AllTenants: true}); err != nil {
				t.Fatal(err)
			}
		}
		var info, debug []string
		for _, l := range logs.lines(t) {
			if l["msg"] != "operator call across tenants" {
				continue
			}
			target := fmt.Sprint(l["tenant"])
			if l["all_tenants"] == true {
				target = "*"
			}
			line := fmt.Sprintf("%v %v %v %s", l["operator"], l["who"], l["method"], target)
			switch l["level"] {
			case "INFO":
				info = append(info, line)
			case "DEBUG":
				debug = append(debug, line)
			}
		}
		if want := "[ops bob@ops ListRecords * ops bob@ops ListRecords acme ops <nil> ListRecords *]"; fmt.Sprint(info) != want {
			t.Errorf("info lines %v; want %s", info, want)
		}
		if len(debug) != 7 {
			t.Errorf("%d debug lines %v; want the other 7 calls", len(debug), debug)
		}
		// The console shows who is signed in by the name Stats gives.
		for ctx, want := range map[context.Context]string{bob: "bob@ops", shared: ""} {
			if stats, err := s.admin.Stats(ctx, &idemv1.StatsRequest{AllTenants: true}); err != nil || stats.GetCallerName() != want {
				t.Errorf("Stats' caller name %q, %v; want %q", stats.GetCallerName(), err, want)
			}
		}
	})
}
