"""The client and do() against a real idemd (built from ./cmd/idemd) on a
fresh PostgreSQL schema, over its HTTP/JSON API, with two tenants: one for
the tests and one whose rate limit is tiny."""

import hashlib
import threading
import time
import unittest

from harness import Idemd, idem

TOKEN = "python-worker-test-token"
LIMITED_TOKEN = "python-worker-limited-token"


def sha(token):
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


CONFIG = f"""
tenants:
  - name: workers
    tokens: ["{sha(TOKEN)}"]
  - name: limited
    tokens: ["{sha(LIMITED_TOKEN)}"]
    rate_limit: {{per_second: 0.25, burst: 1}}
"""

server = None


def setUpModule():
    global server
    server = Idemd(config=CONFIG)


def tearDownModule():
    if server is not None:
        server.stop()


NS = "python_client"
_n = [0]
_n_lock = threading.Lock()


def fresh(name):
    with _n_lock:
        _n[0] += 1
        return f"{name}-{_n[0]}-{time.monotonic_ns()}"


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.c = server.client(token=TOKEN)

    def test_claim_complete_replay_and_lookup(self):
        key = fresh("order/2024:17 100% ключ")  # every kind of character a path needs escaped
        fp = idem.fingerprint_json({"amount_cents": 1250})
        res = self.c.claim(NS, key, fingerprint=fp, lease_ttl=30, claimant="c-1")
        self.assertEqual(res.outcome, "OUTCOME_ACQUIRED")
        rec = res.record
        self.assertEqual((rec.namespace, rec.key, rec.state, rec.attempt, rec.claimant, rec.fingerprint),
                         (NS, key, "STATE_PROCESSING", 1, "c-1", fp))
        self.assertGreater(rec.token, 0)
        self.assertAlmostEqual((rec.lease_expires_at - rec.updated_at).total_seconds(), 30, delta=0.01)

        again = self.c.claim(NS, key, fingerprint=fp, claimant="c-1")
        self.assertEqual((again.outcome, again.record.token), ("OUTCOME_ACQUIRED", rec.token),
                         "the same claimant acquires again: a lost answer is safe to retry")
        busy = self.c.claim(NS, key, fingerprint=fp, claimant="c-2")
        self.assertEqual(busy.outcome, "OUTCOME_IN_PROGRESS")
        self.assertGreater(busy.retry_after, 20)

        beat = self.c.heartbeat(NS, key, rec.token, lease_ttl=60)
        self.assertGreater(beat.lease_expires_at, rec.lease_expires_at)
        done = self.c.complete(NS, key, rec.token, b'{"charge":"ch_1"}')
        self.assertEqual((done.state, done.result), ("STATE_COMPLETED", b'{"charge":"ch_1"}'))
        self.assertIsNotNone(done.completed_at)
        self.assertEqual(self.c.complete(NS, key, rec.token, b'{"charge":"ch_1"}').state, "STATE_COMPLETED",
                         "a repeated Complete with the same token returns the stored record")
        replay = self.c.claim(NS, key)
        self.assertEqual((replay.outcome, replay.record.result), ("OUTCOME_COMPLETED", b'{"charge":"ch_1"}'))
        self.assertEqual(self.c.lookup(NS, key).state, "STATE_COMPLETED")

    def test_typed_errors_from_the_reason(self):
        key = fresh("errors")
        rec = self.c.claim(NS, key, fingerprint=idem.fingerprint_json({"a": 1}), lease_ttl=5).record
        with self.assertRaises(idem.LeaseLostError) as cm:
            self.c.complete(NS, key, rec.token + 1000, b"x")
        self.assertEqual((cm.exception.code, cm.exception.reason, cm.exception.http_status), ("ABORTED", "LEASE_LOST", 409))
        with self.assertRaises(idem.FingerprintMismatchError) as cm:
            self.c.claim(NS, key, fingerprint=idem.fingerprint_json({"a": 2}))
        self.assertEqual((cm.exception.code, cm.exception.http_status), ("FAILED_PRECONDITION", 400))
        self.c.fail(NS, key, rec.token, "card declined", retryable=False)
        with self.assertRaises(idem.AlreadyTerminalError):
            self.c.heartbeat(NS, key, rec.token)
        self.assertEqual(self.c.claim(NS, key).record.error, "card declined")
        with self.assertRaises(idem.NotFoundError) as cm:
            self.c.lookup(NS, fresh("missing"))
        self.assertEqual(cm.exception.reason, "NOT_FOUND")
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            self.c.claim(NS, "k" * 257)
        self.assertEqual((cm.exception.reason, cm.exception.metadata.get("field")), ("INVALID_KEY", "key"))
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            self.c.claim(NS, fresh("lease"), lease_ttl=0.5)
        self.assertEqual(cm.exception.reason, "INVALID_LEASE_TTL")
        with self.assertRaises(idem.UnauthenticatedError):
            server.client(token="not-a-token").lookup(NS, key)

    def test_rate_limited_calls_wait_for_retry_after(self):
        # The "limited" tenant gets one call every 4 s. A client that may not
        # retry sees RATE_LIMITED with Retry-After; one that may retries after
        # it and gets the real answer.
        once = server.client(token=LIMITED_TOKEN, retry=idem.RetryPolicy(max_attempts=1))
        refused = None
        for _ in range(5):
            try:
                once.lookup(NS, "none")
            except idem.RateLimitedError as err:
                refused = err
                break
            except idem.NotFoundError:
                pass
        self.assertIsNotNone(refused, "five calls at once were all allowed")
        self.assertEqual((refused.reason, refused.http_status), ("RATE_LIMITED", 429))
        self.assertGreaterEqual(refused.retry_after, 1)

        patient = server.client(token=LIMITED_TOKEN, retry=idem.RetryPolicy(base_delay=0.01, max_attempts=6))
        sent = []
        request = patient._request

        def recording(*args):
            try:
                return request(*args)
            except idem.IdemError as err:
                sent.append((time.monotonic(), err))
                raise

        patient._request = recording
        with self.assertRaises(idem.NotFoundError):
            patient.lookup(NS, "none")
        for (t0, err), (t1, _) in zip(sent, sent[1:]):
            if isinstance(err, idem.RateLimitedError):
                self.assertGreaterEqual(t1 - t0, err.retry_after - 0.05, "a retry came before Retry-After")


class DoTest(unittest.TestCase):
    def setUp(self):
        self.c = server.client(token=TOKEN)

    def test_ran_then_replayed(self):
        job = idem.Job(NS, fresh("do"), payload={"order": "o-1", "amount_cents": 500}, lease_ttl=10)
        calls = []

        def charge(a):
            calls.append(a)
            return {"charge": "ch_1", "token": a.token}

        res = self.c.do(job, charge)
        self.assertFalse(res.replayed)
        self.assertEqual(res.record.state, "STATE_COMPLETED")
        self.assertEqual((calls[0].number, calls[0].takeover), (1, False))
        again = self.c.do(job, charge)
        self.assertTrue(again.replayed)
        self.assertEqual(again.value, res.value)
        self.assertEqual(len(calls), 1)
        with self.assertRaises(idem.FingerprintMismatchError):
            self.c.do(idem.Job(NS, job.key, payload={"order": "o-2"}), charge)

    def test_an_exception_releases_the_job_and_permanent_fails_it(self):
        job = idem.Job(NS, fresh("flaky"), lease_ttl=10)

        def boom(a):
            raise RuntimeError("the provider timed out")

        with self.assertRaises(RuntimeError):
            self.c.do(job, boom)
        self.assertEqual(self.c.lookup(NS, job.key).state, "STATE_RELEASED")

        def declined(a):
            self.assertTrue(a.takeover)
            self.assertEqual(a.number, 2)
            raise idem.Permanent("card declined\0 " + "é" * 3000)

        with self.assertRaises(idem.Permanent):
            self.c.do(job, declined)
        with self.assertRaises(idem.JobFailedError) as cm:
            self.c.do(job, lambda a: self.fail("fn ran for a failed job"))
        self.assertTrue(cm.exception.message.startswith("card declined\ufffd é"))
        self.assertLessEqual(len(cm.exception.message.encode()), 4096, "the error is cut to 4 KiB")

    def test_in_progress_and_wait(self):
        job = idem.Job(NS, fresh("busy"), lease_ttl=10)
        started, release = threading.Event(), threading.Event()
        results = {}

        def slow(a):
            started.set()
            release.wait(60)
            return b"slow"

        t = threading.Thread(target=lambda: results.setdefault("holder", self.c.do(job, slow)))
        t.start()
        self.assertTrue(started.wait(60))
        with self.assertRaises(idem.InProgressError) as cm:
            self.c.do(job, lambda a: self.fail("ran while held"))
        self.assertGreater(cm.exception.retry_after, 0)
        threading.Timer(0.5, release.set).start()
        waited = self.c.do(job, lambda a: self.fail("ran while held"), wait=60)
        t.join(60)
        self.assertEqual((waited.replayed, waited.value), (True, b"slow"))
        self.assertFalse(results["holder"].replayed)

    def test_heartbeats_keep_the_lease_while_fn_outlasts_it(self):
        # fn works for two and a half leases. Without heartbeats (every
        # 0.67 s) the other client would take the job over after one lease.
        job = idem.Job(NS, fresh("long"), lease_ttl=2)
        started = threading.Event()
        seen = []

        def long_work(a):
            started.set()
            a.sleep(5)
            return b"done"

        t = threading.Thread(target=lambda: seen.append(self.c.do(job, long_work)))
        t.start()
        self.assertTrue(started.wait(60))
        deadline = time.monotonic() + 4.5
        while time.monotonic() < deadline:
            res = self.c.claim(NS, job.key, lease_ttl=2)
            self.assertIn(res.outcome, ("OUTCOME_IN_PROGRESS", "OUTCOME_COMPLETED"))
            time.sleep(0.2)
        t.join(60)
        self.assertEqual(seen[0].value, b"done")
        self.assertEqual(self.c.lookup(NS, job.key).attempt, 1)

    def test_a_lost_lease_stops_fn_and_is_raised(self):
        job = idem.Job(NS, fresh("lost"), lease_ttl=1)
        rec = {}

        def taken_over(a):
            rec["token"] = a.token
            # Another worker takes the job over: a Fail (retryable) with our
            # token, then a Claim, as if our lease had run out.
            self.c.fail(NS, job.key, a.token, "simulated expiry", retryable=True)
            self.assertEqual(self.c.claim(NS, job.key, lease_ttl=30).outcome, "OUTCOME_ACQUIRED")
            a.sleep(30)  # raises LeaseLostError at the next heartbeat
            self.fail("slept through a lost lease")

        start = time.monotonic()
        with self.assertRaises(idem.LeaseLostError) as cm:
            self.c.do(job, taken_over)
        self.assertLess(time.monotonic() - start, 20)
        self.assertEqual(cm.exception.reason, "LEASE_LOST")
        self.assertEqual(self.c.lookup(NS, job.key).attempt, 2)


if __name__ == "__main__":
    unittest.main()
