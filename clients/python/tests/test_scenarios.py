"""Every scenario of clients/scenarios/scenarios.json, against a real idemd
on PostgreSQL and on SQLite (internal/testsupport/sdkharness). The suite fails when the
file has a scenario this file does not implement, and when this file
implements one the file no longer has."""

import concurrent.futures
import hashlib
import json
import os
import threading
import time
import unittest
import uuid

from support import REPO, harness, idem

SCENARIO_FILE = os.path.join(REPO, "clients", "scenarios", "scenarios.json")

RAW = idem.RetryPolicy(max_attempts=1)  # a raw call: one RPC, no retries


def load_scenarios():
    with open(SCENARIO_FILE, encoding="utf-8") as f:
        doc = json.load(f)
    return doc["scenarios"]


class Recorder:
    """Records the RPCs a client sends: (method, start, end, error), as the
    scenarios observe the SDK; ok_beats counts Heartbeats answered OK."""

    def __init__(self, client):
        self.calls = []
        self.lock = threading.Lock()
        self.beat = threading.Event()
        send = client._transport.call

        def call(service, method, body, timeout):
            start = time.monotonic()
            try:
                answer = send(service, method, body, timeout)
            except idem.IdemError as e:
                with self.lock:
                    self.calls.append((method, start, time.monotonic(), e))
                raise
            with self.lock:
                self.calls.append((method, start, time.monotonic(), None))
            if method == "Heartbeat":
                self.beat.set()
            return answer

        client._transport.call = call

    def snapshot(self):
        with self.lock:
            return list(self.calls)

    def count(self, method):
        return sum(1 for c in self.snapshot() if c[0] == method)


class Counter:
    def __init__(self):
        self.n = 0
        self.attempts = []
        self.lock = threading.Lock()

    def hit(self, attempt=None):
        with self.lock:
            self.n += 1
            self.attempts.append(attempt)

    def returns(self, value):
        def handler(attempt):
            self.hit(attempt)
            return value
        return handler

    def must_not_run(self, attempt):
        self.hit(attempt)
        raise AssertionError("the handler ran; it must not")


class Scenarios:
    """The implementations, by scenario id. Each runs in a thread of its own
    (the exclusive ones alone) against self.h."""

    def __init__(self, test, h):
        self.t = test
        self.h = h
        self.plain = h.namespaces["plain"]
        self.held = h.namespaces["held"]
        self.step_held = h.namespaces["step_held"]
        self.clients = []

    def key(self, sid, part="k"):
        return f"{sid}-{part}-{uuid.uuid4().hex[:10]}"

    def client(self, tenant="worker", **kw):
        c = self.h.client(tenant, **kw)
        self.clients.append(c)
        return c

    def raw(self, tenant="worker"):
        return self.client(tenant, retry=RAW)

    def close(self):
        for c in self.clients:
            c.close()

    # ------------------------------------------------------------------

    def claim_complete_replay(self, sid):
        t, c, k = self.t, self.client(), self.key(sid)
        r = ("result-" + k).encode()
        calls = Counter()
        res = c.do(idem.Job(self.plain, k), calls.returns(r))
        t.assertEqual((res.value, res.replayed), (r, False))
        t.assertEqual((calls.n, calls.attempts[0].number, calls.attempts[0].takeover), (1, 1, False))
        res = c.do(idem.Job(self.plain, k), calls.returns(r))
        t.assertEqual((res.value, res.replayed, calls.n), (r, True, 1))
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.result, rec.attempt), (idem.State.COMPLETED, r, 1))

    def concurrent_deliveries(self, sid):
        t = self.t
        # Part A: no wait. The handler holds the job until the other do()
        # has returned, so that one meets it in progress.
        c, k1, r = self.client(), self.key(sid, "a"), b"R"
        calls = Counter()
        one_returned = threading.Event()

        def blocking(attempt):
            calls.hit(attempt)
            if not one_returned.wait(10):
                raise AssertionError("the other do() did not return within 10 s")
            return r

        outcomes = [None, None]

        def deliver(i, job, handler, wait=0):
            try:
                outcomes[i] = c.do(job, handler, wait=wait)
            except BaseException as e:  # noqa: BLE001
                outcomes[i] = e
            finally:
                one_returned.set()

        threads = [threading.Thread(target=deliver, args=(i, idem.Job(self.plain, k1), blocking)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        t.assertEqual(calls.n, 1, outcomes)
        ran = [o for o in outcomes if isinstance(o, idem.Result)]
        busy = [o for o in outcomes if isinstance(o, idem.InProgressError)]
        t.assertEqual((len(ran), len(busy)), (1, 1), outcomes)
        t.assertEqual((ran[0].value, ran[0].replayed), (r, False))
        t.assertGreater(busy[0].retry_after, 0)

        # Part B: with a wait, the other gets the replay.
        k2, calls = self.key(sid, "b"), Counter()

        def sleepy(attempt):
            calls.hit(attempt)
            time.sleep(0.2)
            return r

        outcomes = [None, None]
        threads = [threading.Thread(target=deliver, args=(i, idem.Job(self.plain, k2), sleepy, 10)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        t.assertEqual(calls.n, 1, outcomes)
        t.assertTrue(all(isinstance(o, idem.Result) for o in outcomes), outcomes)
        t.assertEqual(sorted((o.value, o.replayed) for o in outcomes), [(r, False), (r, True)])

    def in_progress_retry_after(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        held = raw.claim(self.plain, k, lease_ttl=30, claimant="holder")
        t.assertEqual(held.outcome, idem.Outcome.ACQUIRED)
        calls = Counter()
        with t.assertRaises(idem.InProgressError) as cm:
            self.client().do(idem.Job(self.plain, k), calls.must_not_run)
        t.assertGreater(cm.exception.retry_after, 0)
        t.assertLessEqual(cm.exception.retry_after, 30)
        t.assertEqual(calls.n, 0)
        rec = raw.lookup(self.plain, k)
        t.assertEqual((rec.state, rec.token), (idem.State.PROCESSING, held.record.token))

    def fingerprint_mismatch(self, sid):
        t, c, k = self.t, self.client(), self.key(sid)
        f1, f2 = idem.fingerprint(b"payload-1"), idem.fingerprint(b"payload-2")
        calls = Counter()
        res = c.do(idem.Job(self.plain, k, fingerprint=f1), calls.returns(b"R"))
        t.assertEqual(res.value, b"R")
        with t.assertRaises(idem.FingerprintMismatchError) as cm:
            c.do(idem.Job(self.plain, k, fingerprint=f2), calls.must_not_run)
        t.assertEqual((cm.exception.code, cm.exception.reason), ("FAILED_PRECONDITION", "FINGERPRINT_MISMATCH"))
        res = c.do(idem.Job(self.plain, k, fingerprint=f1), calls.must_not_run)
        t.assertEqual((res.value, res.replayed, calls.n), (b"R", True, 1))
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.result, rec.fingerprint), (idem.State.COMPLETED, b"R", f1))

    def lease_lost_mid_job(self, sid):
        t, k = self.t, self.key(sid)
        c = self.client()
        rpcs = Recorder(c)
        started, seen = threading.Event(), {}

        def holder(attempt):
            seen["token"] = attempt.token
            started.set()
            seen["stopped"] = attempt.lost.wait(10)
            return b"late"

        out = {}

        def run():
            try:
                out["result"] = c.do(idem.Job(self.plain, k, lease_ttl=3), holder)
            except BaseException as e:  # noqa: BLE001
                out["error"] = e

        th = threading.Thread(target=run)
        th.start()
        t.assertTrue(started.wait(30), "the handler did not start")
        t.assertTrue(rpcs.beat.wait(30), "no heartbeat was answered OK")
        self.client("operator").admin.delete_record(self.plain, k, tenant="worker")
        successor = self.raw().claim(self.plain, k, lease_ttl=30, claimant="successor")
        t.assertEqual(successor.outcome, idem.Outcome.ACQUIRED)
        th.join(60)
        t.assertGreater(successor.record.token, seen["token"])
        t.assertTrue(seen["stopped"], "the handler was not told to stop")
        err = out.get("error")
        t.assertIsInstance(err, idem.LeaseLostError, out)
        t.assertNotIsInstance(err, idem.CompletionUnknownError)
        t.assertEqual((err.code, err.reason, err.value), ("ABORTED", "LEASE_LOST", b"late"))
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.token, rec.claimant, rec.result),
                      (idem.State.PROCESSING, successor.record.token, "successor", b""))

    def retryable_failure(self, sid):
        t, c, k = self.t, self.client(), self.key(sid)
        e = RuntimeError("transient: try again")

        def fails(attempt):
            raise e

        with t.assertRaises(RuntimeError) as cm:
            c.do(idem.Job(self.plain, k), fails)
        t.assertIs(cm.exception, e)
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.error, rec.attempt), (idem.State.RELEASED, "transient: try again", 1))
        calls = Counter()
        res = c.do(idem.Job(self.plain, k), calls.returns(b"R"))
        t.assertEqual((res.value, res.replayed), (b"R", False))
        t.assertEqual((calls.attempts[0].number, calls.attempts[0].takeover), (2, True))
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.result, rec.attempt), (idem.State.COMPLETED, b"R", 2))

    def permanent_failure(self, sid):
        t, c, k = self.t, self.client(), self.key(sid)
        e = idem.Permanent(ValueError("card declined"))

        def declined(attempt):
            raise e

        with t.assertRaises(idem.Permanent) as cm:
            c.do(idem.Job(self.plain, k), declined)
        t.assertIs(cm.exception, e)
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.error), (idem.State.FAILED, "card declined"))
        calls = Counter()
        with t.assertRaises(idem.JobFailedError) as cm:
            c.do(idem.Job(self.plain, k), calls.must_not_run)
        t.assertEqual((cm.exception.message, calls.n), ("card declined", 0))

    def fail_after_own_complete(self, sid):
        t, c = self.t, self.client()
        r = b"completed-by-handler"

        def completes_then_fails(key, exc):
            # A raw Complete of its own token, then an error of its own.
            def handler(attempt, index=0):
                self.raw().complete(self.plain, key, attempt.token, r)
                raise exc
            return handler

        def want_both(step, err, exc):
            t.assertIsInstance(err, idem.FailureNotRecordedError, step)
            t.assertIs(err.handler_error, exc, step + ": the handler's error itself")
            t.assertIs(err.__cause__, exc, step + ": the cause is the handler's error")
            t.assertIsInstance(err.fail_error, idem.AlreadyTerminalError, step)
            t.assertEqual((err.fail_error.code, err.fail_error.reason), ("FAILED_PRECONDITION", "ALREADY_TERMINAL"))
            t.assertEqual((err.code, err.reason), ("FAILED_PRECONDITION", "ALREADY_TERMINAL"), step)
            t.assertIn("failed after completing", str(err), step)
            t.assertIn("ALREADY_TERMINAL", str(err), step)

        k = self.key(sid)
        e = RuntimeError("failed after completing")
        with t.assertRaises(idem.IdemError) as cm:
            c.do(idem.Job(self.plain, k), completes_then_fails(k, e))
        want_both("step 1", cm.exception, e)
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.result, rec.attempt, rec.error), (idem.State.COMPLETED, r, 1, ""))
        calls = Counter()
        res = c.do(idem.Job(self.plain, k), calls.must_not_run)
        t.assertEqual((res.value, res.replayed, calls.n), (r, True, 0))

        k2 = self.key(sid, "k2")
        e2 = RuntimeError("failed after completing")
        out = c.do_batch([idem.Job(self.plain, k2)], completes_then_fails(k2, e2))
        t.assertEqual(len(out), 1)
        want_both("step 4", out[0], e2)
        rec = self.raw().lookup(self.plain, k2)
        t.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, r))

    def unresolved(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        held = raw.claim(self.held, k, lease_ttl=1, claimant="holder")
        t.assertEqual(held.outcome, idem.Outcome.ACQUIRED)
        time.sleep(1.5)
        calls = Counter()
        with t.assertRaises(idem.UnresolvedError):
            self.client().do(idem.Job(self.held, k), calls.must_not_run)
        t.assertEqual(calls.n, 0)
        rec = raw.lookup(self.held, k)
        t.assertEqual((rec.state, rec.hold, rec.token, rec.policy),
                      (idem.State.UNRESOLVED, True, held.record.token, "held*"))

    def resolved_by_operator(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        a, b = b"resolved-by-operator", b"late-holder"
        held = raw.claim(self.held, k, lease_ttl=1, claimant="holder")
        time.sleep(1.5)
        with t.assertRaises(idem.UnresolvedError):
            raw.claim(self.held, k, claimant="other")
        rec = self.client("operator").admin.resolve_record(self.held, k, completed=a, tenant="worker")
        t.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, a))
        with t.assertRaises(idem.ResolvedByOperatorError) as cm:
            raw.complete(self.held, k, held.record.token, b)
        t.assertEqual((cm.exception.code, cm.exception.reason), ("FAILED_PRECONDITION", "RESOLVED_BY_OPERATOR"))
        t.assertIn("your result was not stored: the record was resolved by an operator", str(cm.exception))
        rec = raw.lookup(self.held, k)
        t.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, a))
        rec = raw.complete(self.held, k, held.record.token, a)
        t.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, a))

    def wait(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        held = raw.claim(self.plain, k, lease_ttl=30, claimant="holder")
        c = self.client()
        rpcs = Recorder(c)
        calls, out = Counter(), {}

        def run():
            try:
                out["result"] = c.do(idem.Job(self.plain, k), calls.must_not_run, wait=10)
            except BaseException as e:  # noqa: BLE001
                out["error"] = e

        th = threading.Thread(target=run)
        th.start()
        time.sleep(0.3)
        raw.complete(self.plain, k, held.record.token, b"R")
        th.join(60)
        res = out.get("result")
        t.assertIsInstance(res, idem.Result, out)
        t.assertEqual((res.value, res.replayed, calls.n), (b"R", True, 0))
        t.assertLessEqual(rpcs.count("Claim"), 2, "do() polled instead of letting the server wait")

    def unavailable_retried(self, sid):
        t, k = self.t, self.key(sid)
        self.h.control("/unavailable?ms=1000")
        calls = Counter()
        res = self.client().do(idem.Job(self.plain, k), calls.returns(b"R"))
        t.assertEqual((res.value, res.replayed, calls.n), (b"R", False, 1))
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, b"R"))

    def restart_mid_complete(self, sid):
        t, k = self.t, self.key(sid)
        effects = Counter()

        def effect_then_restart(attempt):
            effects.hit(attempt)
            self.h.control("/restart?down_ms=1500")
            return b"R"

        res = self.client().do(idem.Job(self.plain, k, lease_ttl=30), effect_then_restart)
        t.assertEqual((res.value, res.replayed, effects.n), (b"R", False, 1))
        rec = self.client().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.result, rec.attempt), (idem.State.COMPLETED, b"R", 1))

    def restart_mid_claim(self, sid):
        t, k = self.t, self.key(sid)
        self.h.control("/restart?down_ms=4000")
        calls = Counter()
        res = self.client().do(idem.Job(self.plain, k), calls.returns(b"R"))
        t.assertEqual((res.value, res.replayed, calls.n), (b"R", False, 1))
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual((rec.state, rec.result, rec.attempt), (idem.State.COMPLETED, b"R", 1))

    def rate_limited(self, sid):
        t = self.t
        c = self.client("limited")
        rpcs = Recorder(c)
        for i in range(1, 6):
            v = f"R{i}".encode()
            res = c.do(idem.Job(self.plain, self.key(sid, str(i))), lambda a, v=v: v)
            t.assertEqual((res.value, res.replayed), (v, False))
        calls = rpcs.snapshot()
        limited = [i for i, call in enumerate(calls) if isinstance(call[3], idem.RateLimitedError)]
        t.assertTrue(limited, "no RPC was rate limited")
        for i in limited:
            method, start, end, e = calls[i]
            t.assertEqual((e.code, e.reason), ("RESOURCE_EXHAUSTED", "RATE_LIMITED"))
            t.assertIsNotNone(e.retry_after)
            t.assertLess(i + 1, len(calls))
            t.assertGreaterEqual(calls[i + 1][1] - end, e.retry_after, "the next RPC came before RetryInfo's delay")

    def error_text_unstorable(self, sid):
        t, k = self.t, self.key(sid)
        e = RuntimeError("nul:\0:" + "€" * 2000)

        def fails(attempt):
            raise e

        with t.assertRaises(RuntimeError) as cm:
            self.client().do(idem.Job(self.plain, k), fails)
        t.assertIs(cm.exception, e)
        rec = self.raw().lookup(self.plain, k)
        t.assertEqual(rec.state, idem.State.RELEASED)
        t.assertEqual(rec.error, "nul:\ufffd:" + "€" * 1362)
        t.assertEqual(len(rec.error.encode("utf-8")), 4094)

    def unknown_field_refused(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        with t.assertRaises(idem.InvalidArgumentError) as cm:
            raw.call("IdempotencyService", "Claim", {"namespace": self.plain, "key": k, "leaseTTL": "5s"})
        t.assertEqual((cm.exception.http_status, cm.exception.code), (400, "INVALID_ARGUMENT"))
        t.assertIn("leaseTTL", cm.exception.message)
        with t.assertRaises(idem.NotFoundError):
            raw.lookup(self.plain, k)

    def batch_claim_mixed(self, sid):
        t, raw = self.t, self.raw()
        k1, k2, k3, k4 = (self.key(sid, p) for p in "1234")
        t.assertEqual(self.client().do(idem.Job(self.plain, k2), lambda a: b"result-2").value, b"result-2")
        held = raw.claim(self.plain, k3, lease_ttl=30, claimant="holder")
        t.assertEqual(held.outcome, idem.Outcome.ACQUIRED)
        f1, f2 = idem.fingerprint(b"payload-1"), idem.fingerprint(b"payload-2")
        t.assertEqual(self.client().do(idem.Job(self.plain, k4, fingerprint=f1), lambda a: b"result-4").value,
                      b"result-4")

        items = raw.batch_claim([idem.ClaimRequest(self.plain, k1, claimant="batch"),
                                 idem.ClaimRequest(self.plain, k2, claimant="batch"),
                                 idem.ClaimRequest(self.plain, k3, claimant="batch"),
                                 idem.ClaimRequest(self.plain, k4, claimant="batch", fingerprint=f2)])
        t.assertEqual(len(items), 4)
        t.assertIsInstance(items[0], idem.ClaimResult, items[0])
        t.assertEqual((items[0].outcome, items[0].record.attempt), (idem.Outcome.ACQUIRED, 1))
        t.assertIsInstance(items[1], idem.ClaimResult, items[1])
        t.assertEqual((items[1].outcome, items[1].record.result), (idem.Outcome.COMPLETED, b"result-2"))
        t.assertIsInstance(items[2], idem.InProgressError, items[2])
        t.assertTrue(0 < items[2].retry_after <= 30, items[2].retry_after)
        t.assertIsInstance(items[3], idem.FingerprintMismatchError, items[3])
        t.assertEqual((items[3].code, items[3].reason), ("FAILED_PRECONDITION", "FINGERPRINT_MISMATCH"))

        done = raw.batch_complete([idem.CompleteRequest(self.plain, k1, items[0].record.token, b"result-1")])
        t.assertEqual(len(done), 1)
        t.assertIsInstance(done[0], idem.Record, done[0])
        t.assertEqual((done[0].state, done[0].result), (idem.State.COMPLETED, b"result-1"))

        rec1, rec3 = raw.lookup(self.plain, k1), raw.lookup(self.plain, k3)
        t.assertEqual((rec1.state, rec1.result, rec1.attempt), (idem.State.COMPLETED, b"result-1", 1))
        t.assertEqual((rec3.state, rec3.token), (idem.State.PROCESSING, held.record.token))

    def batch_same_key_twice(self, sid):
        t, raw = self.t, self.raw()
        k1 = self.key(sid, "1")
        claims = raw.batch_claim([idem.ClaimRequest(self.plain, k1, claimant="a"),
                                  idem.ClaimRequest(self.plain, k1, claimant="b")])
        t.assertIsInstance(claims[0], idem.ClaimResult, claims[0])
        t.assertEqual(claims[0].outcome, idem.Outcome.ACQUIRED)
        t.assertIsInstance(claims[1], idem.InProgressError, claims[1])
        token = claims[0].record.token
        done = raw.batch_complete([idem.CompleteRequest(self.plain, k1, token, b"result"),
                                   idem.CompleteRequest(self.plain, k1, token, b"other")])
        t.assertIsInstance(done[0], idem.Record, done[0])
        t.assertEqual((done[0].state, done[0].result), (idem.State.COMPLETED, b"result"))
        t.assertIsInstance(done[1], idem.AlreadyTerminalError, done[1])
        t.assertEqual((done[1].code, done[1].reason), ("FAILED_PRECONDITION", "ALREADY_TERMINAL"))
        rec = raw.lookup(self.plain, k1)
        t.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, b"result"))

        k2 = self.key(sid, "2")
        calls = Counter()
        out = self.client().do_batch([idem.Job(self.plain, k2), idem.Job(self.plain, k2)],
                                     lambda attempt, i: calls.returns(b"result")(attempt))
        t.assertEqual(calls.n, 1, "part B: the handler's calls")
        t.assertIsInstance(out[0], idem.Result, out[0])
        t.assertEqual((out[0].value, out[0].replayed), (b"result", False))
        t.assertIsInstance(out[1], idem.InProgressError, out[1])
        rec = raw.lookup(self.plain, k2)
        t.assertEqual((rec.state, rec.result, rec.attempt), (idem.State.COMPLETED, b"result", 1))

    def batch_restart_mid_complete(self, sid):
        t = self.t
        keys = [self.key(sid, p) for p in "123"]
        effects = {k: Counter() for k in keys}
        restarted = threading.Event()

        def handler(attempt, i):
            effects[keys[i]].hit(attempt)
            if i == 0:
                try:
                    self.h.control("/restart?down_ms=1500")
                finally:
                    restarted.set()
            elif not restarted.wait(60):
                raise AssertionError("the restart did not happen within 60 s")
            return ("result-" + keys[i]).encode()

        out = self.client().do_batch([idem.Job(self.plain, k, lease_ttl=30) for k in keys], handler)
        t.assertEqual(len(out), 3)
        for k, res in zip(keys, out):
            t.assertIsInstance(res, idem.Result, res)
            t.assertEqual((res.value, res.replayed), (("result-" + k).encode(), False))
            t.assertEqual(effects[k].n, 1, f"the effects of {k}")
        raw = self.raw()
        for k in keys:
            rec = raw.lookup(self.plain, k)
            t.assertEqual((rec.state, rec.result, rec.attempt), (idem.State.COMPLETED, ("result-" + k).encode(), 1))

    # ------------------------------------------------------------------
    # Steps

    def steps_crash_between_steps(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        t1 = raw.claim(self.plain, k, lease_ttl=1, claimant="holder").record.token
        raw.complete_step(self.plain, k, t1, "charge", b"ch_1")
        time.sleep(1.5)
        f1, f2 = Counter(), Counter()

        def handler(attempt):
            charge = attempt.step("charge", lambda key: f1.hit(key) or "ch_2")
            receipt = attempt.step("receipt", lambda key: f2.hit(key) or "rc_1")
            return charge + receipt

        res = self.client().do(idem.Job(self.plain, k), handler)
        t.assertEqual((res.value, res.replayed), (b"ch_1rc_1", False))
        t.assertEqual((f1.n, f2.n), (0, 1))
        t.assertEqual(f2.attempts, [idem.step_key(self.plain, k, "receipt")])
        t.assertEqual(res.record.attempt, 2)
        rec = raw.lookup(self.plain, k)
        t.assertEqual(rec.state, idem.State.COMPLETED)
        t.assertEqual([(s.name, s.state, s.result, s.token) for s in rec.steps],
                      [("charge", idem.StepState.FINISHED, b"ch_1", t1),
                       ("receipt", idem.StepState.FINISHED, b"rc_1", rec.token)])
        t.assertNotEqual(rec.token, t1)

    def steps_stale_holder_refused(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        t1 = raw.claim(self.plain, k, lease_ttl=1, claimant="holder").record.token
        time.sleep(1.5)
        got = raw.claim(self.plain, k, claimant="successor")
        t.assertEqual(got.outcome, idem.Outcome.ACQUIRED)
        for call in (lambda: raw.complete_step(self.plain, k, t1, "charge", b"ch_1"),
                     lambda: raw.start_step(self.plain, k, t1, "charge")):
            with t.assertRaises(idem.LeaseLostError) as cm:
                call()
            t.assertEqual((cm.exception.code, cm.exception.reason), ("ABORTED", "LEASE_LOST"))
        rec = raw.lookup(self.plain, k)
        t.assertEqual((rec.state, rec.token, rec.steps), (idem.State.PROCESSING, got.record.token, ()))

    def steps_repeat_and_conflict(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        tok = raw.claim(self.plain, k).record.token
        for _ in range(2):
            st = raw.complete_step(self.plain, k, tok, "charge", b"ch_1")
            t.assertEqual((st.name, st.state, st.result, st.token), ("charge", idem.StepState.FINISHED, b"ch_1", tok))
        for call in (lambda: raw.complete_step(self.plain, k, tok, "charge", b"ch_2"),
                     lambda: raw.start_step(self.plain, k, tok, "charge")):
            with t.assertRaises(idem.StepAlreadyFinishedError) as cm:
                call()
            t.assertEqual((cm.exception.code, cm.exception.reason), ("FAILED_PRECONDITION", "STEP_ALREADY_FINISHED"))
        with t.assertRaises(idem.InvalidArgumentError) as cm:
            raw.complete_step(self.plain, k, tok, "bad\u0007name", b"x")
        t.assertEqual((cm.exception.code, cm.exception.reason), ("INVALID_ARGUMENT", "INVALID_STEP_NAME"))
        rec = raw.lookup(self.plain, k)
        t.assertEqual([(s.name, s.result) for s in rec.steps], [("charge", b"ch_1")])

    def steps_unfinished_rerun(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        t1 = raw.claim(self.plain, k, lease_ttl=1, claimant="holder").record.token
        raw.start_step(self.plain, k, t1, "charge")
        time.sleep(1.5)
        f = Counter()
        res = self.client().do(idem.Job(self.plain, k),
                               lambda attempt: attempt.step("charge", lambda key: f.hit(key) or b"ch_2"))
        t.assertEqual((res.value, f.n, f.attempts), (b"ch_2", 1, [idem.step_key(self.plain, k, "charge")]))
        rec = raw.lookup(self.plain, k)
        t.assertEqual(rec.state, idem.State.COMPLETED)
        t.assertEqual([(s.name, s.state, s.result) for s in rec.steps],
                      [("charge", idem.StepState.FINISHED, b"ch_2")])

    def steps_unfinished_hold(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        t1 = raw.claim(self.step_held, k, lease_ttl=1, claimant="holder").record.token
        raw.start_step(self.step_held, k, t1, "charge")
        time.sleep(1.5)
        calls = Counter()
        with t.assertRaises(idem.UnresolvedError):
            self.client().do(idem.Job(self.step_held, k), calls.must_not_run)
        t.assertEqual(calls.n, 0)
        rec = raw.lookup(self.step_held, k)
        t.assertEqual(rec.state, idem.State.UNRESOLVED)
        t.assertEqual([(s.name, s.state, s.token) for s in rec.steps], [("charge", idem.StepState.STARTED, t1)])

    def steps_key_vectors(self, sid):
        t = self.t
        with open(SCENARIO_FILE, encoding="utf-8") as f:
            vectors = json.load(f)["step_key_vectors"]
        cases = [("payments", "order-42", "charge"), ("jobs", "k\u00e9y/1", "send receipt")]
        t.assertEqual([(v["namespace"], v["key"], v["step"]) for v in vectors], cases)
        for (ns, key, name), v in zip(cases, vectors):
            want = "idem-" + hashlib.sha256(f"{ns}\0{key}\0{name}".encode("utf-8")).hexdigest()
            t.assertEqual(idem.step_key(ns, key, name), want)
            t.assertEqual(want, v["step_key"])

    # ------------------------------------------------------------------
    # Resolvers

    def _held_records(self, raw, keys):
        """Claims each key in namespaces.held for 1 s and waits until it is
        UNRESOLVED; returns the tokens by key."""
        tokens = {k: raw.claim(self.held, k, lease_ttl=1, claimant="holder").record.token for k in keys}
        time.sleep(1.5)
        for k in keys:
            with self.t.assertRaises(idem.UnresolvedError):
                raw.claim(self.held, k, claimant="other")  # makes it UNRESOLVED if the sweeper has not yet
        return tokens

    def _run(self, resolver):
        """Runs the resolver in a thread; the list gets what run() returned
        or raised."""
        outcome = []

        def run():
            try:
                outcome.append(resolver.run())
            except BaseException as e:  # noqa: BLE001
                outcome.append(e)

        th = threading.Thread(target=run, daemon=True)
        th.start()
        return th, outcome

    def resolver_decides_held(self, sid):
        t, raw = self.t, self.raw()
        k1, k2, k3 = (self.key(sid, p) for p in ("1", "2", "3"))
        tokens = self._held_records(raw, [k1, k2, k3])
        calls, lock = {}, threading.Lock()
        answers = {k1: idem.Resolution.completed(b"found", reason="charge found"),
                   k2: idem.Resolution.failed("no charge"), k3: idem.Resolution.release()}

        def decide(held):
            with lock:
                calls.setdefault(held.key, []).append(held.token)
            return answers.get(held.key, idem.Resolution.cant_tell())

        resolver = self.client().resolver("charges-resolver", decide, namespaces=[self.held], poll_interval=0.1)
        th, outcome = self._run(resolver)
        deadline = time.monotonic() + 10
        while any(raw.lookup(self.held, k).state == idem.State.UNRESOLVED for k in (k1, k2, k3)):
            t.assertLess(time.monotonic(), deadline, "K1-K3 still UNRESOLVED after 10 s")
            time.sleep(0.1)
        resolver.stop()
        th.join(30)
        t.assertFalse(th.is_alive(), "the resolver did not stop")
        t.assertEqual(outcome, [None])
        with lock:
            t.assertEqual({k: calls.get(k) for k in (k1, k2, k3)}, {k: [tokens[k]] for k in (k1, k2, k3)})
        never = Counter()
        res = self.client().do(idem.Job(self.held, k1), never.must_not_run)
        t.assertEqual((res.value, res.replayed, never.n), (b"found", True, 0))
        res = self.client().do(idem.Job(self.held, k3), lambda attempt: b"again")
        t.assertEqual((res.value, res.replayed), (b"again", False))
        rec, history = raw.lookup_history(self.held, k2)
        t.assertEqual((rec.state, rec.error), (idem.State.FAILED, "no charge"))
        resolved = [e for e in history if e.kind == idem.TimelineEntryKind.RESOLVED]
        t.assertEqual([e.actor.resolver for e in resolved], ["charges-resolver"], history)

    def resolver_cant_tell_and_race(self, sid):
        t, raw, k = self.t, self.raw(), self.key(sid)
        self._held_records(raw, [k])
        asked = threading.Event()

        def decide(held):
            if held.key == k:
                asked.set()
            return idem.Resolution.cant_tell()

        resolver = self.client().resolver("unsure", decide, namespaces=[self.held], poll_interval=0.1)
        th, outcome = self._run(resolver)
        t.assertTrue(asked.wait(10), "the resolver was not called for K within 10 s")
        resolver.stop()
        th.join(30)
        t.assertEqual(outcome, [None])
        rec = raw.lookup(self.held, k)
        t.assertEqual(rec.state, idem.State.UNRESOLVED)

        start = threading.Barrier(2)

        def decide_as(name, **decision):
            start.wait(10)
            try:
                return raw.resolve(self.held, k, rec.token, resolver=name, **decision)
            except idem.IdemError as e:
                return e

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            a = pool.submit(decide_as, "a", completed=b"x")
            b = pool.submit(decide_as, "b", failed="y")
            got = [a.result(), b.result()]
        won = [g for g in got if isinstance(g, idem.Record)]
        lost = [g for g in got if isinstance(g, idem.NotUnresolvedError)]
        t.assertEqual((len(won), len(lost)), (1, 1), got)
        t.assertEqual((lost[0].code, lost[0].reason), ("FAILED_PRECONDITION", "NOT_UNRESOLVED"))
        rec = raw.lookup(self.held, k)
        if won[0] is got[0]:
            t.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, b"x"))
        else:
            t.assertEqual((rec.state, rec.error), (idem.State.FAILED, "y"))


IMPLEMENTED = {name.replace("_", "-"): getattr(Scenarios, name) for name in dir(Scenarios)
               if not name.startswith("_") and name not in ("key", "client", "raw", "close")}


class ScenarioFileTest(unittest.TestCase):
    def test_the_file_and_this_suite_name_the_same_scenarios(self):
        ids = [s["id"] for s in load_scenarios()]
        self.assertEqual(len(ids), len(set(ids)), "an id is given twice")
        self.assertEqual(sorted(set(ids) - set(IMPLEMENTED)), [],
                         f"scenarios of {SCENARIO_FILE} without a Python implementation in {__file__}")
        self.assertEqual(sorted(set(IMPLEMENTED) - set(ids)), [],
                         f"scenarios implemented in {__file__} that {SCENARIO_FILE} no longer has: remove them")


class _StoreScenarios:
    store = ""

    def test_scenarios(self):
        h = harness(self.store)
        specs = load_scenarios()
        env = Scenarios(self, h)
        self.addCleanup(env.close)

        def run(spec):
            impl = IMPLEMENTED.get(spec["id"])
            if impl is None:
                raise AssertionError(f"scenario {spec['id']!r} has no Python implementation")
            start = time.monotonic()
            impl(env, spec["id"])
            return time.monotonic() - start

        results = {}
        shared = [s for s in specs if not s.get("exclusive")]
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(shared)) as pool:
            futures = {s["id"]: pool.submit(run, s) for s in shared}
            for sid, f in futures.items():
                results[sid] = f.exception() or f.result()
        for s in specs:
            if s.get("exclusive"):
                try:
                    results[s["id"]] = run(s)
                except BaseException as e:  # noqa: BLE001
                    results[s["id"]] = e
                finally:
                    h.control("/ready")
        for s in specs:
            with self.subTest(scenario=s["id"], store=self.store):
                r = results[s["id"]]
                if isinstance(r, BaseException):
                    raise r


class PostgresScenarios(_StoreScenarios, unittest.TestCase):
    store = "postgres"


class SQLiteScenarios(_StoreScenarios, unittest.TestCase):
    store = "sqlite"


if __name__ == "__main__":
    unittest.main()
