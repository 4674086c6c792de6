package server_test

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
)

// The steps of a job (StartStep, CompleteStep) through the real transports,
// on both stores: a job's life with its steps, every refusal, the policy
// for started steps, and holders racing on one job's steps across a
// takeover.

// stepServer is the real server over one store, with gRPC and the
// HTTP/JSON API, and a log of the calls that reached the store.
type stepServer struct {
	st      store.Store
	c       idemv1.IdempotencyServiceClient
	admin   idemv1.AdminServiceClient
	jsonURL string
	calls   *callLog
}

func serveSteps(t *testing.T, st store.Store, cfg server.Config) *stepServer {
	t.Helper()
	calls := &callLog{}
	srv, err := server.New(server.Options{Store: &hookStore{Store: st, hook: calls.hook}, Config: cfg, JSON: &server.JSONOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	jsonLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeJSON(jsonLis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &stepServer{st: st, c: idemv1.NewIdempotencyServiceClient(conn), admin: idemv1.NewAdminServiceClient(conn),
		jsonURL: "http://" + jsonLis.Addr().String(), calls: calls}
}

func (s *stepServer) start(t *testing.T, namespace, key string, token int64, step string) (*idemv1.Step, error) {
	t.Helper()
	resp, err := s.c.StartStep(testContext(t), &idemv1.StartStepRequest{Namespace: namespace, Key: key, Token: token, Step: step})
	return resp.GetStep(), err
}

func (s *stepServer) complete(t *testing.T, namespace, key string, token int64, step, result string) (*idemv1.Step, error) {
	t.Helper()
	resp, err := s.c.CompleteStep(testContext(t), &idemv1.CompleteStepRequest{Namespace: namespace, Key: key, Token: token, Step: step, Result: []byte(result)})
	return resp.GetStep(), err
}

func (s *stepServer) mustStart(t *testing.T, namespace, key string, token int64, step string) *idemv1.Step {
	t.Helper()
	got, err := s.start(t, namespace, key, token, step)
	if err != nil {
		t.Fatalf("StartStep %s/%s %s (token %d): %v", namespace, key, step, token, err)
	}
	return got
}

func (s *stepServer) mustComplete(t *testing.T, namespace, key string, token int64, step, result string) *idemv1.Step {
	t.Helper()
	got, err := s.complete(t, namespace, key, token, step, result)
	if err != nil {
		t.Fatalf("CompleteStep %s/%s %s (token %d): %v", namespace, key, step, token, err)
	}
	return got
}

// lapseLease waits until a lease of limits.MinLeaseTTL, from rec's
// acquisition, has run out by the store's clock.
func lapseLease(rec *idemv1.Record) {
	time.Sleep(time.Until(rec.GetLeaseExpiresAt().AsTime()) + 50*time.Millisecond)
}

// wantSteps fails unless steps are, in order, name=result for FINISHED ones
// and name alone for STARTED ones, each written by the token given.
func wantSteps(t *testing.T, what string, steps []*idemv1.Step, want ...string) {
	t.Helper()
	var got []string
	for _, s := range steps {
		desc := s.GetName() + "@" + strconv.FormatInt(s.GetToken(), 10)
		switch s.GetState() {
		case idemv1.StepState_STEP_STATE_FINISHED:
			desc += "=" + string(s.GetResult())
			if s.GetFinishedAt() == nil {
				desc += " (no finished_at)"
			}
		case idemv1.StepState_STEP_STATE_STARTED:
			if s.GetFinishedAt() != nil || len(s.GetResult()) > 0 {
				desc += " (started, with a result or finished_at)"
			}
		default:
			desc += " (" + s.GetState().String() + ")"
		}
		if s.GetStartedAt() == nil {
			desc += " (no started_at)"
		}
		got = append(got, desc)
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("%s: steps %v; want %v", what, got, want)
	}
}

func at(name string, token int64, result ...string) string {
	s := name + "@" + strconv.FormatInt(token, 10)
	if len(result) > 0 {
		s += "=" + result[0]
	}
	return s
}

// TestStepsThroughAJobsLife walks a two-effect job through its life: steps
// started and finished, repeated, shown by every read, handed over by the
// takeover, refused to the fenced holder, finished by the successor,
// replayed with the job's result, and gone with the record.
func TestStepsThroughAJobsLife(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		s := serveSteps(t, st, server.Config{})
		ctx := testContext(t)
		first := mustAcquire(t, s.c, &idemv1.ClaimRequest{Key: "job", Claimant: "w1", LeaseTtl: dur(limits.MinLeaseTTL)})
		t1 := first.GetToken()

		started := s.mustStart(t, ns, "job", t1, "charge")
		if started.GetState() != idemv1.StepState_STEP_STATE_STARTED || started.GetToken() != t1 || started.GetStartedAt() == nil || started.GetFinishedAt() != nil {
			t.Fatalf("StartStep: %v", started)
		}
		if again := s.mustStart(t, ns, "job", t1, "charge"); !proto.Equal(again, started) {
			t.Fatalf("a repeated StartStep: %v; want the stored %v", again, started)
		}
		charged := s.mustComplete(t, ns, "job", t1, "charge", "ch_1")
		if !charged.GetStartedAt().AsTime().Equal(started.GetStartedAt().AsTime()) || charged.GetFinishedAt() == nil {
			t.Fatalf("CompleteStep of a started step: %v; want it started when it was started (%v)", charged, started.GetStartedAt().AsTime())
		}
		s.mustComplete(t, ns, "job", t1, "receipt", "")
		s.mustStart(t, ns, "job", t1, "audit")

		look := mustLookup(t, s.c, "job")
		wantSteps(t, "Lookup", look.GetSteps(), at("charge", t1, "ch_1"), at("receipt", t1, ""), at("audit", t1))
		if busy := mustClaim(t, s.c, &idemv1.ClaimRequest{Key: "job", Claimant: "w2"}); busy.GetOutcome() != idemv1.Outcome_OUTCOME_IN_PROGRESS ||
			!proto.Equal(busy.GetRecord(), look) {
			t.Fatalf("Claim of a held job: %s %v; want IN_PROGRESS with the record as Lookup has it", busy.GetOutcome(), busy.GetRecord())
		}

		// The takeover hands the steps over; the fenced holder records no more.
		lapseLease(first)
		second := mustAcquire(t, s.c, &idemv1.ClaimRequest{Key: "job", Claimant: "w2", LeaseTtl: dur(time.Minute)})
		t2 := second.GetToken()
		wantSteps(t, "the takeover's answer", second.GetSteps(), at("charge", t1, "ch_1"), at("receipt", t1, ""), at("audit", t1))
		before := mustLookup(t, s.c, "job")
		_, err := s.complete(t, ns, "job", t1, "audit", "late")
		requireStatus(t, err, codes.Aborted, "LEASE_LOST")
		_, err = s.start(t, ns, "job", t1, "more")
		requireStatus(t, err, codes.Aborted, "LEASE_LOST")
		if got := mustLookup(t, s.c, "job"); !proto.Equal(got, before) {
			t.Fatalf("the fenced holder's steps changed the record: %v; want %v", got, before)
		}

		// The successor: a finished step repeated is answered as stored,
		// another result or a start is refused, and the step its
		// predecessor started it finishes.
		if rep := s.mustComplete(t, ns, "job", t2, "charge", "ch_1"); !proto.Equal(rep, charged) {
			t.Fatalf("the successor's repeat of a finished step: %v; want the stored %v", rep, charged)
		}
		_, err = s.complete(t, ns, "job", t2, "charge", "ch_2")
		requireStatus(t, err, codes.FailedPrecondition, "STEP_ALREADY_FINISHED")
		_, err = s.start(t, ns, "job", t2, "charge")
		requireStatus(t, err, codes.FailedPrecondition, "STEP_ALREADY_FINISHED")
		audit := s.mustComplete(t, ns, "job", t2, "audit", "ok")
		if audit.GetToken() != t2 || !audit.GetStartedAt().AsTime().Equal(before.GetSteps()[2].GetStartedAt().AsTime()) {
			t.Fatalf("the successor's finish of a started step: %v; want token %d, started when its predecessor started it", audit, t2)
		}

		// Complete: the answer leaves the steps out; every read has them.
		done, err := s.c.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "job", Token: t2, Result: []byte("paid")})
		if err != nil || done.GetRecord().GetState() != idemv1.State_STATE_COMPLETED || len(done.GetRecord().GetSteps()) != 0 {
			t.Fatalf("Complete: %v, %v; want COMPLETED, the steps left out", done, err)
		}
		replay := mustClaim(t, s.c, &idemv1.ClaimRequest{Key: "job", Claimant: "w3"})
		if replay.GetOutcome() != idemv1.Outcome_OUTCOME_COMPLETED || string(replay.GetRecord().GetResult()) != "paid" {
			t.Fatalf("replay: %v", replay)
		}
		wantSteps(t, "the replay", replay.GetRecord().GetSteps(), at("charge", t1, "ch_1"), at("receipt", t1, ""), at("audit", t2, "ok"))
		_, err = s.complete(t, ns, "job", t2, "new", "x")
		requireStatus(t, err, codes.FailedPrecondition, "ALREADY_TERMINAL")
		s.mustComplete(t, ns, "job", t2, "audit", "ok")

		list, err := s.admin.ListRecords(ctx, &idemv1.ListRecordsRequest{Namespace: ns})
		if err != nil || len(list.GetRecords()) != 1 {
			t.Fatalf("ListRecords: %v, %v", list, err)
		}
		wantSteps(t, "ListRecords", list.GetRecords()[0].GetSteps(), at("charge", t1, "ch_1"), at("receipt", t1, ""), at("audit", t2, "ok"))
		gone, err := s.admin.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: ns, Key: "job"})
		if err != nil {
			t.Fatalf("DeleteRecord: %v", err)
		}
		wantSteps(t, "DeleteRecord", gone.GetRecord().GetSteps(), at("charge", t1, "ch_1"), at("receipt", t1, ""), at("audit", t2, "ok"))
		if again := mustAcquire(t, s.c, &idemv1.ClaimRequest{Key: "job"}); again.GetAttempt() != 1 || len(again.GetSteps()) != 0 {
			t.Fatalf("the key claimed again after the delete: attempt %d, steps %v; want a new record without steps", again.GetAttempt(), again.GetSteps())
		}
	})
}

// TestStepsOverJSON records steps over Connect JSON and the REST routes,
// with a step name that must be escaped in a path, and reads them back as
// gRPC does.
func TestStepsOverJSON(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		s := serveSteps(t, st, server.Config{})
		for _, p := range protocols {
			key := "json-" + p.name
			step := "charge/eu: 1%"
			claim := wantOK(t, "Claim", p.call(t, s.jsonURL, "Claim", map[string]any{"namespace": ns, "key": key}, ""))
			token, _ := field(claim, "record", "token").(string)
			start := wantOK(t, "StartStep", p.call(t, s.jsonURL, "StartStep", map[string]any{"namespace": ns, "key": key, "token": token, "step": step}, ""))
			if field(start, "step", "name") != step || field(start, "step", "state") != "STEP_STATE_STARTED" || field(start, "step", "token") != token {
				t.Fatalf("%s StartStep: %v", p.name, start)
			}
			result := base64.StdEncoding.EncodeToString([]byte(`{"id":"ch_1"}`))
			done := wantOK(t, "CompleteStep", p.call(t, s.jsonURL, "CompleteStep",
				map[string]any{"namespace": ns, "key": key, "token": token, "step": step, "result": result}, ""))
			if field(done, "step", "state") != "STEP_STATE_FINISHED" || field(done, "step", "result") != result ||
				field(done, "step", "startedAt") != field(start, "step", "startedAt") || field(done, "step", "finishedAt") == nil {
				t.Fatalf("%s CompleteStep: %v", p.name, done)
			}
			look := wantOK(t, "Lookup", p.call(t, s.jsonURL, "Lookup", map[string]any{"namespace": ns, "key": key}, ""))
			steps, _ := field(look, "record", "steps").([]any)
			if len(steps) != 1 || fmt.Sprint(steps[0]) != fmt.Sprint(done["step"]) {
				t.Fatalf("%s Lookup: steps %v; want [%v]", p.name, steps, done["step"])
			}
			rec := mustLookup(t, s.c, key)
			wantSteps(t, p.name+": gRPC Lookup", rec.GetSteps(), at(step, rec.GetToken(), `{"id":"ch_1"}`))
			// A refusal over HTTP is the gRPC one.
			a := p.call(t, s.jsonURL, "CompleteStep", map[string]any{"namespace": ns, "key": key, "token": token, "step": step, "result": ""}, "")
			checkJSONError(t, a, p.name == "rest", "failed_precondition", "STEP_ALREADY_FINISHED")
		}
		if a := connectCall(t, s.jsonURL, "IdempotencyService", "StartStep", map[string]any{"namespace": ns, "key": "x", "token": "1", "stp": "a"}, ""); a.status != http.StatusBadRequest {
			t.Fatalf("StartStep with a misspelt field: HTTP %d %s; want 400", a.status, a.raw)
		}
	})
}

// TestStepRefusals: each refusal of a step call, with its reason, and
// nothing written: a request refused before the store reaches no store
// method, one the store refuses leaves the record as it was.
func TestStepRefusals(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		s := serveSteps(t, st, server.Config{MaxSteps: 3, MaxStepBytes: 40, MaxResultBytes: 32,
			Policies: []config.Policy{{Namespaces: []string{"held"}, OnLeaseExpiry: config.OnLeaseExpiryHold}}})
		ctx := testContext(t)
		rec := mustAcquire(t, s.c, &idemv1.ClaimRequest{Key: "job"})
		tok := rec.GetToken()

		for _, tc := range []struct {
			name, namespace, key string
			token                int64
			step                 string
			result               []byte
			reason               string
		}{
			{"no step", ns, "job", tok, "", nil, "INVALID_STEP_NAME"},
			{"a step too long", ns, "job", tok, strings.Repeat("s", limits.MaxStepNameBytes+1), nil, "INVALID_STEP_NAME"},
			{"a control character", ns, "job", tok, "charge\n", nil, "INVALID_STEP_NAME"},
			{"a NUL", ns, "job", tok, "char\x00ge", nil, "INVALID_STEP_NAME"},
			{"no token", ns, "job", 0, "charge", nil, "INVALID_TOKEN"},
			{"no key", ns, "", tok, "charge", nil, "INVALID_KEY"},
			{"a bad namespace", "Payments", "job", tok, "charge", nil, "INVALID_NAMESPACE"},
			{"a result too large", ns, "job", tok, "charge", make([]byte, 33), "INVALID_RESULT"},
		} {
			before := s.calls.len()
			_, err := s.c.CompleteStep(ctx, &idemv1.CompleteStepRequest{Namespace: tc.namespace, Key: tc.key, Token: tc.token, Step: tc.step, Result: tc.result})
			refused := requireStatus(t, err, codes.InvalidArgument, tc.reason)
			if tc.reason == "INVALID_STEP_NAME" && errorInfo(refused).GetMetadata()["field"] != "step" {
				t.Errorf("%s: metadata %v; want field step", tc.name, errorInfo(refused).GetMetadata())
			}
			if tc.name == "a NUL" && errorInfo(refused).GetMetadata()["problem"] != "NUL_CHARACTER" {
				t.Errorf("%s: metadata %v; want problem NUL_CHARACTER", tc.name, errorInfo(refused).GetMetadata())
			}
			if s.calls.len() != before {
				t.Errorf("%s: reached the store: %s", tc.name, s.calls)
			}
		}

		unchanged := func(what string, key string, call func() error, code codes.Code, reason string) *status.Status {
			t.Helper()
			var before *idemv1.Record
			if resp, err := s.c.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: key}); err == nil {
				before = resp.GetRecord()
			}
			refused := requireStatus(t, call(), code, reason)
			if resp, err := s.c.Lookup(ctx, &idemv1.LookupRequest{Namespace: ns, Key: key}); (err == nil) != (before != nil) || !proto.Equal(resp.GetRecord(), before) {
				t.Fatalf("%s changed the record: %v; want %v", what, resp.GetRecord(), before)
			}
			return refused
		}
		unchanged("a step of no record", "nobody", func() error { _, err := s.complete(t, ns, "nobody", tok, "charge", "x"); return err },
			codes.NotFound, "NOT_FOUND")
		unchanged("another token", "job", func() error { _, err := s.complete(t, ns, "job", tok+1000, "charge", "x"); return err },
			codes.Aborted, "LEASE_LOST")
		s.mustComplete(t, ns, "job", tok, "a", "0123456789")
		unchanged("another result", "job", func() error { _, err := s.complete(t, ns, "job", tok, "a", "x"); return err },
			codes.FailedPrecondition, "STEP_ALREADY_FINISHED")
		unchanged("a start of a finished step", "job", func() error { _, err := s.start(t, ns, "job", tok, "a"); return err },
			codes.FailedPrecondition, "STEP_ALREADY_FINISHED")
		s.mustStart(t, ns, "job", tok, "b")
		// 11 + 1 bytes so far; a finish of b with 29 bytes makes 41 > 40.
		refusal := unchanged("steps past the bytes", "job", func() error { _, err := s.complete(t, ns, "job", tok, "b", strings.Repeat("x", 29)); return err },
			codes.ResourceExhausted, "STEPS_TOO_LARGE")
		if !strings.Contains(refusal.Message(), "--max-step-bytes") || !strings.Contains(refusal.Message(), "40 bytes") {
			t.Errorf("STEPS_TOO_LARGE message %q; want the bound and its flag", refusal.Message())
		}
		s.mustStart(t, ns, "job", tok, "c")
		refusal = unchanged("a step past the count", "job", func() error { _, err := s.start(t, ns, "job", tok, "d"); return err },
			codes.ResourceExhausted, "TOO_MANY_STEPS")
		if !strings.Contains(refusal.Message(), "--max-steps") || !strings.Contains(refusal.Message(), "3 steps") {
			t.Errorf("TOO_MANY_STEPS message %q; want the bound and its flag", refusal.Message())
		}
		if _, err := s.c.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "job", Token: tok}); err != nil {
			t.Fatal(err)
		}
		unchanged("a new step after Complete", "job", func() error { _, err := s.complete(t, ns, "job", tok, "e", "x"); return err },
			codes.FailedPrecondition, "ALREADY_TERMINAL")

		// The holder of a held record an operator resolved.
		held := mustAcquire(t, s.c, &idemv1.ClaimRequest{Namespace: "held", Key: "k", LeaseTtl: dur(limits.MinLeaseTTL)})
		lapseLease(held)
		if resp := mustClaim(t, s.c, &idemv1.ClaimRequest{Namespace: "held", Key: "k"}); resp.GetOutcome() != idemv1.Outcome_OUTCOME_UNRESOLVED {
			t.Fatalf("Claim of a lapsed held lease: %s", resp.GetOutcome())
		}
		if _, err := s.admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Namespace: "held", Key: "k",
			Resolution: &idemv1.ResolveRecordRequest_Failed{Failed: &idemv1.ResolveFailed{Error: "refunded"}}}); err != nil {
			t.Fatal(err)
		}
		_, err := s.complete(t, "held", "k", held.GetToken(), "charge", "ch_1")
		requireStatus(t, err, codes.FailedPrecondition, "RESOLVED_BY_OPERATOR")
	})
}

// TestStepsHoldUnfinished: on_unfinished_step: hold makes a job with a
// started step UNRESOLVED where a Claim would take it over, until an
// operator releases it; a job whose steps all finished, or under rerun,
// is taken over.
func TestStepsHoldUnfinished(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		s := serveSteps(t, st, server.Config{Policies: []config.Policy{
			{Namespaces: []string{"hold.*"}, OnUnfinishedStep: config.OnUnfinishedStepHold},
			{Namespaces: []string{"rerun.*"}, OnUnfinishedStep: config.OnUnfinishedStepRerun},
		}})
		ctx := testContext(t)
		lapsed := func(namespace, key string, steps func(tok int64)) *idemv1.Record {
			rec := mustAcquire(t, s.c, &idemv1.ClaimRequest{Namespace: namespace, Key: key, LeaseTtl: dur(limits.MinLeaseTTL)})
			steps(rec.GetToken())
			return rec
		}
		startCharge := func(namespace, key string) func(int64) {
			return func(tok int64) { s.mustStart(t, namespace, key, tok, "charge") }
		}
		held := lapsed("hold.pay", "started", startCharge("hold.pay", "started"))
		finished := lapsed("hold.pay", "finished", func(tok int64) {
			s.mustStart(t, "hold.pay", "finished", tok, "charge")
			s.mustComplete(t, "hold.pay", "finished", tok, "charge", "ch_1")
		})
		swept := lapsed("hold.pay", "swept", startCharge("hold.pay", "swept"))
		rerun := lapsed("rerun.pay", "started", startCharge("rerun.pay", "started"))
		lapseLease(rerun)

		resp := mustClaim(t, s.c, &idemv1.ClaimRequest{Namespace: "hold.pay", Key: "started"})
		rec := resp.GetRecord()
		if resp.GetOutcome() != idemv1.Outcome_OUTCOME_UNRESOLVED || rec.GetToken() != held.GetToken() || !rec.GetHoldUnfinished() || rec.GetExpiresAt() != nil {
			t.Fatalf("Claim of a lapsed job with a started step under hold: %s %v", resp.GetOutcome(), rec)
		}
		wantSteps(t, "the UNRESOLVED answer", rec.GetSteps(), at("charge", held.GetToken()))
		if resp := mustClaim(t, s.c, &idemv1.ClaimRequest{Namespace: "hold.pay", Key: "finished"}); resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED ||
			resp.GetRecord().GetToken() <= finished.GetToken() {
			t.Fatalf("Claim of a lapsed job whose steps finished, under hold: %s", resp.GetOutcome())
		}
		if resp := mustClaim(t, s.c, &idemv1.ClaimRequest{Namespace: "rerun.pay", Key: "started"}); resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
			t.Fatalf("Claim of a lapsed job with a started step under rerun: %s", resp.GetOutcome())
		}
		if _, err := st.SweepExpire(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if got := mustLookupIn(t, s.c, "hold.pay", "swept"); got.GetState() != idemv1.State_STATE_UNRESOLVED || got.GetToken() != swept.GetToken() {
			t.Fatalf("swept: %s; want UNRESOLVED", got.GetState())
		}

		// An operator's release says run it again, started step and all.
		if _, err := s.admin.ResolveRecord(ctx, &idemv1.ResolveRecordRequest{Namespace: "hold.pay", Key: "started",
			Resolution: &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}}); err != nil {
			t.Fatal(err)
		}
		again := mustClaim(t, s.c, &idemv1.ClaimRequest{Namespace: "hold.pay", Key: "started"})
		if again.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
			t.Fatalf("Claim after an operator's release: %s; want ACQUIRED", again.GetOutcome())
		}
		wantSteps(t, "the takeover after the release", again.GetRecord().GetSteps(), at("charge", held.GetToken()))
	})
}

// TestStepsRaceAcrossTakeover: 64 calls race on one job's steps across a
// takeover: half carry the token of a holder whose lease ran out, half
// claim the job, and the one that takes it over records every step. Each
// step is finished once, by one caller, who is told so; the fenced
// holder's steps after the takeover are refused; and every step it was
// told it finished is in the takeover's answer.
func TestStepsRaceAcrossTakeover(t *testing.T) {
	t.Parallel()
	const racers, names = 64, 8
	onBothStores(t, func(t *testing.T, st store.Store) {
		s := serveSteps(t, st, server.Config{})
		first := mustAcquire(t, s.c, &idemv1.ClaimRequest{Key: "race", Claimant: "first", LeaseTtl: dur(limits.MinLeaseTTL)})
		lapseLease(first)

		type told struct {
			name, result string
			token        int64
			err          error
		}
		var (
			mu       sync.Mutex
			answers  []told
			takeover *idemv1.Record
			wg       sync.WaitGroup
			go1      = make(chan struct{})
		)
		record := func(name, result string, token int64) {
			_, err := s.complete(t, ns, "race", token, name, result)
			mu.Lock()
			answers = append(answers, told{name, result, token, err})
			mu.Unlock()
		}
		for i := range racers {
			wg.Go(func() {
				<-go1
				if i%2 == 0 { // the first holder, still at work
					record(fmt.Sprintf("s%d", i/2%names), fmt.Sprintf("first-%d", i), first.GetToken())
					return
				}
				resp, err := s.c.Claim(testContext(t), &idemv1.ClaimRequest{Namespace: ns, Key: "race", Claimant: fmt.Sprintf("c%d", i), LeaseTtl: dur(time.Minute)})
				if err != nil {
					t.Errorf("Claim %d: %v", i, err)
					return
				}
				if resp.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
					return
				}
				mu.Lock()
				if takeover != nil {
					t.Errorf("two Claims acquired: tokens %d and %d", takeover.GetToken(), resp.GetRecord().GetToken())
				}
				takeover = resp.GetRecord()
				mu.Unlock()
				for k := range names {
					record(fmt.Sprintf("s%d", k), fmt.Sprintf("successor-%d", k), resp.GetRecord().GetToken())
				}
			})
		}
		close(go1)
		wg.Wait()
		if takeover == nil {
			t.Fatal("no Claim took the job over")
		}

		final := mustLookup(t, s.c, "race")
		stored := map[string]*idemv1.Step{}
		for _, step := range final.GetSteps() {
			stored[step.GetName()] = step
		}
		handed := map[string]*idemv1.Step{}
		for _, step := range takeover.GetSteps() {
			handed[step.GetName()] = step
		}
		winners := map[string]int{}
		for _, a := range answers {
			fenced := a.token == first.GetToken()
			if a.err != nil {
				if ok, _ := checkStatus(a.err, codes.FailedPrecondition, "STEP_ALREADY_FINISHED"); ok {
					continue
				}
				if ok, _ := checkStatus(a.err, codes.Aborted, "LEASE_LOST"); ok && fenced {
					continue
				}
				t.Errorf("%s by token %d: %v", a.name, a.token, a.err)
				continue
			}
			winners[a.name]++
			if got := stored[a.name]; got == nil || string(got.GetResult()) != a.result || got.GetToken() != a.token {
				t.Errorf("%s: told token %d it finished it with %q; the record has %v", a.name, a.token, a.result, got)
			}
			switch h := handed[a.name]; {
			case fenced && (h == nil || string(h.GetResult()) != a.result):
				t.Errorf("the fenced holder was told it finished %s with %q; the takeover's answer has %v", a.name, a.result, h)
			case !fenced && h != nil:
				t.Errorf("the successor finished %s, which the takeover's answer had: %v", a.name, h)
			}
		}
		if len(final.GetSteps()) != names {
			t.Errorf("%d steps after the race; want %d: %v", len(final.GetSteps()), names, final.GetSteps())
		}
		for name, step := range stored {
			if step.GetState() != idemv1.StepState_STEP_STATE_FINISHED || winners[name] != 1 {
				t.Errorf("step %s: %s, %d callers told they finished it; want FINISHED by one", name, step.GetState(), winners[name])
			}
		}
		t.Logf("%d of the fenced holder's steps finished before the takeover", len(handed))
	})
}
