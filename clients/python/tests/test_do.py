"""do(), once() and @idempotent against a scripted server, for what a real
idemd cannot be made to do on cue: heartbeats that fail, a Complete whose
answer never comes, a Claim answered IN_PROGRESS before its wait. The
behaviours a real idemd shows are in test_scenarios.py."""

import base64
import json
import threading
import time
import unittest

from support import ACQUIRED, Scripted, err, idem, ok, record

FAST = idem.RetryPolicy(base_delay=0.01, max_delay=0.05, max_attempts=3)
UNAVAILABLE = err("unavailable", "the database is unreachable", "STORE_UNAVAILABLE")


def completed(req):
    return ok({"record": record(state="STATE_COMPLETED", result=req.json().get("result", ""))})


class Script:
    """Answers by RPC: a callable per RPC name, or a list of answers used in
    turn (the last one repeats)."""

    def __init__(self, **by_rpc):
        self.by_rpc = by_rpc
        self.lock = threading.Lock()

    def __call__(self, req):
        with self.lock:
            a = self.by_rpc.get(req.rpc)
            if a is None:
                return ok({"record": record()})
            if isinstance(a, list):
                return a.pop(0) if len(a) > 1 else a[0]
        return a(req)  # outside the lock: a callable may hang one RPC alone


class DoTest(unittest.TestCase):
    def serve(self, **by_rpc):
        s = Scripted(Script(**by_rpc))
        self.addCleanup(s.close)
        return s

    def client(self, s, **kw):
        kw.setdefault("retry", FAST)
        c = idem.Client(s.url, **kw)
        self.addCleanup(c.close)
        return c

    def test_the_claimant_is_reused_when_the_claim_is_retried(self):
        s = self.serve(Claim=[UNAVAILABLE, UNAVAILABLE, ACQUIRED], Complete=completed)
        res = self.client(s).do(idem.Job("ns", "k", lease_ttl=30), lambda a: b"v")
        self.assertEqual(res.value, b"v")
        claimants = {c.json()["claimant"] for c in s.of("Claim")}
        self.assertEqual(len(s.of("Claim")), 3)
        self.assertEqual(len(claimants), 1, "a retried Claim keeps its claimant, so a lost answer still acquires")

    def test_each_do_has_its_own_claimant(self):
        s = self.serve(Claim=[ACQUIRED], Complete=completed)
        c = self.client(s)
        c.do(idem.Job("ns", "k"), lambda a: b"")
        c.do(idem.Job("ns", "k"), lambda a: b"")
        self.assertEqual(len({r.json()["claimant"] for r in s.of("Claim")}), 2)

    def test_values_are_recorded_as_bytes(self):
        s = self.serve(Claim=[ACQUIRED], Complete=completed)
        c = self.client(s)
        for value, stored in [(b"raw", b"raw"), ("text é", "text é".encode()), (None, b""),
                              ({"b": [1, 2], "a": "x"}, b'{"b":[1,2],"a":"x"}'), (bytearray(b"ba"), b"ba")]:
            with self.subTest(value=value):
                res = c.do(idem.Job("ns", "k"), lambda a: value)
                self.assertEqual(res.value, stored)
        self.assertEqual(res.record.state, idem.State.COMPLETED)

    def test_a_value_that_cannot_be_stored_releases_the_job(self):
        s = self.serve(Claim=[ACQUIRED])
        with self.assertRaises(TypeError) as cm:
            self.client(s).do(idem.Job("ns", "k"), lambda a: object())
        self.assertIn("not bytes, str, None or JSON", str(cm.exception))
        self.assertEqual(s.rpcs(), ["Claim", "Fail"])
        self.assertTrue(s.of("Fail")[0].json()["retryable"])

    def test_an_exception_releases_and_permanent_fails_for_good(self):
        s = self.serve(Claim=[ACQUIRED])
        c = self.client(s)

        def boom(a):
            raise RuntimeError("the provider timed out")

        with self.assertRaises(RuntimeError):
            c.do(idem.Job("ns", "k"), boom)

        def declined(a):
            raise idem.Permanent(ValueError("card declined"))

        with self.assertRaises(idem.Permanent):
            c.do(idem.Job("ns", "k"), declined)

        class CardDeclined(idem.Permanent):
            pass

        def subclassed(a):
            raise CardDeclined("insufficient funds")

        with self.assertRaises(CardDeclined):
            c.do(idem.Job("ns", "k"), subclassed)
        fails = [(f.json()["error"], f.json().get("retryable", False)) for f in s.of("Fail")]
        self.assertEqual(fails, [("the provider timed out", True), ("card declined", False),
                                 ("insufficient funds", False)])
        self.assertNotIn("Complete", s.rpcs())

    def test_an_interrupt_releases_the_job_once_and_propagates(self):
        s = self.serve(Claim=[ACQUIRED], Fail=[UNAVAILABLE])

        def interrupted(a):
            raise KeyboardInterrupt()

        with self.assertRaises(KeyboardInterrupt):
            self.client(s).do(idem.Job("ns", "k", lease_ttl=30), interrupted)
        self.assertEqual(s.rpcs(), ["Claim", "Fail"], "one try: the process is stopping")
        self.assertEqual(s.of("Fail")[0].json()["error"], "interrupted: KeyboardInterrupt()")

    def test_a_failure_that_cannot_be_recorded_raises_both(self):
        s = self.serve(Claim=[ACQUIRED], Fail=[err("invalid_argument", "error is over 4 KiB", "INVALID_ERROR")])

        def boom(a):
            raise RuntimeError("boom")

        with self.assertRaises(idem.FailureNotRecordedError) as cm:
            self.client(s).do(idem.Job("ns", "k"), boom)
        self.assertIsInstance(cm.exception.handler_error, RuntimeError)
        self.assertIs(cm.exception.__cause__, cm.exception.handler_error)
        self.assertIsInstance(cm.exception.fail_error, idem.InvalidArgumentError)
        self.assertEqual(cm.exception.reason, "INVALID_ERROR")

    def test_fail_records_storable_text(self):
        s = self.serve(Claim=[ACQUIRED])

        def nasty(a):
            raise RuntimeError("bad\0" + "é" * 3000)

        with self.assertRaises(RuntimeError):
            self.client(s).do(idem.Job("ns", "k"), nasty)
        sent = s.of("Fail")[0].json()["error"]
        self.assertTrue(sent.startswith("bad\ufffdé"))
        self.assertLessEqual(len(sent.encode("utf-8")), 4096)

    def test_outcomes_that_are_not_done_by_you_raise(self):
        cases = [
            ({"outcome": "OUTCOME_IN_PROGRESS", "record": record(), "retryAfter": "12.5s"}, idem.InProgressError),
            ({"outcome": "OUTCOME_FAILED", "record": record(state="STATE_FAILED", error="declined")}, idem.JobFailedError),
            ({"outcome": "OUTCOME_UNRESOLVED", "record": record(state="STATE_UNRESOLVED")}, idem.UnresolvedError),
        ]
        for body, cls in cases:
            with self.subTest(cls=cls.__name__):
                s = self.serve(Claim=[ok(body)])
                ran = []
                with self.assertRaises(cls) as cm:
                    self.client(s).do(idem.Job("ns", "k"), ran.append)
                self.assertEqual((ran, s.rpcs()), ([], ["Claim"]))
                self.assertIsInstance(cm.exception, idem.IdemError)
        self.assertEqual(cm.exception.record.state, idem.State.UNRESOLVED)

    def test_a_replay_returns_the_stored_value(self):
        s = self.serve(Claim=[ok({"outcome": "OUTCOME_COMPLETED", "record": record(state="STATE_COMPLETED", result="Ug==")})])
        res = self.client(s).do(idem.Job("ns", "k"), lambda a: self.fail("ran a completed job"))
        self.assertEqual((res.value, res.replayed), (b"R", True))

    # ------------------------------------------------------------------
    # Heartbeats

    def test_a_lost_lease_sets_lost_and_raises_without_completing(self):
        s = self.serve(Claim=[ACQUIRED], Heartbeat=[err("aborted", "lease lost", "LEASE_LOST")])
        seen = {}

        def work(a):
            seen["lost"] = a.lost.wait(30)
            seen["error"] = a.lost_error
            return b"late"

        with self.assertRaises(idem.LeaseLostError) as cm:
            self.client(s).do(idem.Job("ns", "k", lease_ttl=1.5), work)
        self.assertTrue(seen["lost"])
        self.assertIs(seen["error"], cm.exception)
        self.assertEqual(cm.exception.value, b"late")
        self.assertNotIn("Complete", s.rpcs())
        self.assertEqual(len(s.of("Heartbeat")), 1, "LEASE_LOST is not retried")

    def test_check_and_sleep_raise_once_the_lease_is_lost(self):
        s = self.serve(Claim=[ACQUIRED], Heartbeat=[err("aborted", "lease lost", "LEASE_LOST")])
        after = []

        def work(a):
            a.check()
            a.sleep(30)  # raises at the first heartbeat, after 0.5 s
            after.append("slept through a lost lease")

        with self.assertRaises(idem.LeaseLostError):
            self.client(s).do(idem.Job("ns", "k", lease_ttl=1.5), work)
        self.assertEqual(after, [])
        self.assertEqual(s.rpcs(), ["Claim", "Heartbeat"])

    def test_one_retry_policy_per_heartbeat(self):
        # Every Heartbeat is UNAVAILABLE. A beat is one call retried with
        # the client's policy (3 tries), then left to the next beat, which
        # is a third of the lease (3 s) away: after the first beat's tries
        # no further Heartbeat comes until then.
        s = self.serve(Claim=[ACQUIRED], Heartbeat=[UNAVAILABLE], Complete=completed)
        counts = {}

        def work(a):
            deadline = time.monotonic() + 60
            while len(s.of("Heartbeat")) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.5)
            counts["after"] = len(s.of("Heartbeat"))
            return b"done"

        res = self.client(s).do(idem.Job("ns", "k", lease_ttl=9), work)
        self.assertEqual(counts["after"], 3)
        self.assertEqual(res.value, b"done")
        self.assertFalse(res.replayed)

    def test_do_returns_as_the_handler_does_not_after_the_heartbeat_backoff(self):
        # The heartbeat failed and its retry sleeps 30 s; the handler returns
        # meanwhile. do() must not sit out that sleep.
        slow_retry = idem.RetryPolicy(base_delay=30, max_delay=30, max_attempts=3)
        s = self.serve(Claim=[ACQUIRED], Heartbeat=[UNAVAILABLE], Complete=completed)

        def work(a):
            deadline = time.monotonic() + 60
            while not s.of("Heartbeat") and time.monotonic() < deadline:
                time.sleep(0.02)
            return b"done"

        start = time.monotonic()
        res = self.client(s, retry=slow_retry).do(idem.Job("ns", "k", lease_ttl=1.5), work)
        self.assertLess(time.monotonic() - start, 15)
        self.assertEqual(res.value, b"done")
        self.assertEqual(len(s.of("Heartbeat")), 1)

    def test_a_hung_heartbeat_holds_do_up_for_a_beat_not_the_clients_timeout(self):
        # The heartbeat hangs until the test ends; the handler returns once
        # it was sent. A beat's timeout is the beat interval (at least 1 s),
        # not the client's 10 s, and stop() waits for it.
        release = threading.Event()
        self.addCleanup(release.set)

        def hang(req):
            release.wait(30)
            return ok({"record": record()})

        s = self.serve(Claim=[ACQUIRED], Heartbeat=hang, Complete=completed)

        def work(a):
            deadline = time.monotonic() + 60
            while not s.of("Heartbeat") and time.monotonic() < deadline:
                time.sleep(0.02)
            return b"done"

        c = self.client(s, retry=idem.RetryPolicy(max_attempts=1))
        self.assertEqual(c.timeout, 10)
        res = c.do(idem.Job("ns", "k", lease_ttl=1.5), work)
        returned = time.monotonic()
        self.assertEqual(res.value, b"done")
        beat_sent = s.of("Heartbeat")[0].time
        self.assertLess(returned - beat_sent, 5, "do() sat out the client's 10 s timeout on a hung heartbeat")

    def test_the_lease_is_dated_from_when_the_heartbeat_was_sent(self):
        # Lease 6 s: the first beat goes out 2 s in and takes 1 s to be
        # answered; the handler returns after that answer and before the
        # next beat. Every Complete is UNAVAILABLE. The lease that beat
        # extended runs from when it was sent, so the Completes stop 6 s
        # after it was sent, not 6 s after its answer.
        def slow_beat(req):
            time.sleep(1.0)
            return ok({"record": record()})

        s = self.serve(Claim=[ACQUIRED], Heartbeat=slow_beat, Complete=[UNAVAILABLE])

        def work(a):
            deadline = time.monotonic() + 60
            while not s.of("Heartbeat") and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(1.3)  # its answer came; the next beat is 2 s after it
            return b"v"

        with self.assertRaises(idem.CompletionUnknownError):
            self.client(s).do(idem.Job("ns", "k", lease_ttl=6), work)
        beats, completes = s.of("Heartbeat"), s.of("Complete")
        self.assertEqual(len(beats), 1)
        self.assertLess(completes[-1].time - beats[0].time, 6.5,
                        "the Completes went on for a lease after the heartbeat's answer, not after it was sent")

    def test_heartbeats_send_the_jobs_lease(self):
        s = self.serve(Claim=[ACQUIRED], Complete=completed)

        def work(a):
            deadline = time.monotonic() + 60
            while len(s.of("Heartbeat")) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            return b""

        self.client(s).do(idem.Job("ns", "k", lease_ttl=1.2), work)
        self.assertEqual(s.of("Heartbeat")[0].json(), {"namespace": "ns", "key": "k", "token": "3", "leaseTtl": "1.200s"})

    # ------------------------------------------------------------------
    # Complete

    def test_a_complete_is_retried_until_confirmed(self):
        s = self.serve(Claim=[ACQUIRED], Complete=[UNAVAILABLE] * 6 + [ok({"record": record(state="STATE_COMPLETED")})])
        res = self.client(s).do(idem.Job("ns", "k", lease_ttl=30), lambda a: b"v")
        self.assertEqual(len(s.of("Complete")), 7, "more tries than the policy's 3: until confirmed")
        self.assertEqual(res.record.state, idem.State.COMPLETED)
        self.assertEqual(len({c.body for c in s.of("Complete")}), 1, "the same token and result each time")

    def test_a_complete_never_confirmed_is_completion_unknown_once_the_lease_is_gone(self):
        s = self.serve(Claim=[ACQUIRED], Complete=[UNAVAILABLE])
        start = time.monotonic()
        with self.assertRaises(idem.CompletionUnknownError) as cm:
            self.client(s).do(idem.Job("ns", "k", lease_ttl=1.5), lambda a: b"charged")
        took = time.monotonic() - start
        e = cm.exception
        self.assertEqual((e.value, e.record.token, e.reason, e.code), (b"charged", 3, "STORE_UNAVAILABLE", "UNAVAILABLE"))
        self.assertIsInstance(e.__cause__, idem.UnavailableError)
        self.assertGreater(len(s.of("Complete")), FAST.max_attempts)
        self.assertGreaterEqual(took, 1.4, "gave up before the lease ran out")

    def test_a_complete_refused_for_good_is_completion_unknown(self):
        s = self.serve(Claim=[ACQUIRED], Complete=[err("invalid_argument", "result is over 64 KiB", "INVALID_RESULT")])
        with self.assertRaises(idem.CompletionUnknownError) as cm:
            self.client(s).do(idem.Job("ns", "k"), lambda a: b"big")
        self.assertEqual((cm.exception.reason, len(s.of("Complete"))), ("INVALID_RESULT", 1))

    def test_a_complete_answered_lease_lost_or_resolved_by_operator(self):
        for reason, cls, code in [("LEASE_LOST", idem.LeaseLostError, "aborted"),
                                  ("RESOLVED_BY_OPERATOR", idem.ResolvedByOperatorError, "failed_precondition")]:
            with self.subTest(reason=reason):
                s = self.serve(Claim=[ACQUIRED], Complete=[err(code, "no", reason)])
                with self.assertRaises(cls) as cm:
                    self.client(s).do(idem.Job("ns", "k"), lambda a: b"B")
                self.assertEqual((cm.exception.value, len(s.of("Complete"))), (b"B", 1))
        self.assertIn("your result was not stored: the record was resolved by an operator", str(cm.exception))

    # ------------------------------------------------------------------
    # wait

    def test_wait_asks_the_server_to_wait(self):
        def claim(req):
            time.sleep(0.3)  # the holder finishes
            return ok({"outcome": "OUTCOME_COMPLETED", "record": record(state="STATE_COMPLETED", result="Ug==")})

        s = self.serve(Claim=claim)
        res = self.client(s, timeout=0.2).do(idem.Job("ns", "k"), lambda a: self.fail("ran"), wait=10)
        self.assertEqual((res.value, res.replayed), (b"R", True))
        self.assertEqual(len(s.of("Claim")), 1)
        self.assertEqual(s.of("Claim")[0].json()["wait"][-1], "s")
        self.assertGreater(float(s.of("Claim")[0].json()["wait"][:-1]), 9)

    def test_a_wait_over_a_minute_takes_several_claims(self):
        s = self.serve(Claim=[ACQUIRED], Complete=completed)
        self.client(s).do(idem.Job("ns", "k"), lambda a: b"", wait=90)
        self.assertEqual(s.of("Claim")[0].json()["wait"], "60s", "at most MaxWait per Claim")

    def test_an_early_in_progress_is_polled_never_past_the_holders_lease(self):
        # The server answers IN_PROGRESS at once (it holds as many waiting
        # Claims as it allows): do() polls with backoff instead.
        busy = ok({"outcome": "OUTCOME_IN_PROGRESS", "record": record(), "retryAfter": "0.050s"})
        s = self.serve(Claim=[busy, busy, busy, ACQUIRED], Complete=completed)
        res = self.client(s).do(idem.Job("ns", "k"), lambda a: b"mine", wait=30)
        self.assertEqual((res.value, res.replayed, len(s.of("Claim"))), (b"mine", False, 4))

    def test_no_wait_is_in_progress_at_once(self):
        busy = ok({"outcome": "OUTCOME_IN_PROGRESS", "record": record(), "retryAfter": "30s"})
        s = self.serve(Claim=[busy])
        with self.assertRaises(idem.InProgressError) as cm:
            self.client(s).do(idem.Job("ns", "k"), lambda a: self.fail("ran"))
        self.assertEqual((cm.exception.retry_after, len(s.of("Claim"))), (30.0, 1))
        self.assertNotIn("wait", s.of("Claim")[0].json())

    # ------------------------------------------------------------------
    # once() and @idempotent

    def test_once_completes_with_the_blocks_result(self):
        s = self.serve(Claim=[ACQUIRED], Complete=completed)
        c = self.client(s)
        with c.once(idem.Job("ns", "k")) as attempt:
            self.assertIs(idem.current_attempt(), attempt)
            attempt.result = {"sent": True}
        self.assertEqual(json.loads(base64.b64decode(s.of("Complete")[0].json()["result"])), {"sent": True})
        self.assertEqual(c.once(idem.Job("ns", "k")).result, None)
        with self.assertRaises(RuntimeError):
            idem.current_attempt()

    def test_once_fails_the_job_when_the_block_raises(self):
        s = self.serve(Claim=[ACQUIRED])
        with self.assertRaises(idem.Permanent):
            with self.client(s).once(idem.Job("ns", "k")):
                raise idem.Permanent("declined")
        self.assertEqual(s.of("Fail")[0].json(), {"namespace": "ns", "key": "k", "token": "3", "error": "declined"})

    def test_once_raises_replayed_for_a_completed_job(self):
        s = self.serve(Claim=[ok({"outcome": "OUTCOME_COMPLETED", "record": record(state="STATE_COMPLETED", result="Ug==")})])
        once = self.client(s).once(idem.Job("ns", "k"))
        ran = []
        with self.assertRaises(idem.Replayed) as cm:
            with once:
                ran.append(1)
        self.assertEqual((ran, cm.exception.result.value, once.result.replayed), ([], b"R", True))
        self.assertNotIsInstance(cm.exception, idem.IdemError)

    def test_idempotent_builds_the_job_from_the_arguments(self):
        s = self.serve(Claim=[ACQUIRED], Complete=completed)
        c = self.client(s)
        tokens = []

        @c.idempotent("receipts", key=lambda order, **kw: f"order-{order['id']}",
                      fingerprint=lambda order, **kw: idem.fingerprint_json(order), lease_ttl=30)
        def send(order, copies=1):
            """Sends a receipt."""
            tokens.append(idem.current_attempt().token)
            return {"sent": order["id"], "copies": copies}

        res = send({"id": 7}, copies=2)
        self.assertEqual((res.json(), tokens, send.__doc__, send.__name__),
                         ({"sent": 7, "copies": 2}, [3], "Sends a receipt.", "send"))
        body = s.of("Claim")[0].json()
        self.assertEqual((body["namespace"], body["key"], body["leaseTtl"]), ("receipts", "order-7", "30s"))
        self.assertEqual(base64.b64decode(body["fingerprint"]), idem.fingerprint_json({"id": 7}))


if __name__ == "__main__":
    unittest.main()
