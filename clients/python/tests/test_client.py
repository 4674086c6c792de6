"""Every typed call of both services, the errors a worker branches on,
@idempotent and once(), against a real idemd (the SQLite harness); and TLS
with a bearer token against an idemd serving TLS."""

import dataclasses
import os
import shutil
import tempfile
import threading
import time
import unittest

from support import TOKENS, Idemd, fresh, harness, idem, self_signed_cert

RAW = idem.RetryPolicy(max_attempts=1)

h = None


def setUpModule():
    global h
    h = harness("sqlite")


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.c = h.client()
        self.ns, self.held = h.namespaces["plain"], h.namespaces["held"]
        self.addCleanup(self.c.close)

    def test_claim_heartbeat_complete_lookup(self):
        k = fresh("order/2024:17 100% ключ")  # characters a URL path would need escaped
        fp = idem.fingerprint_json({"amount_cents": 1250})
        res = self.c.claim(self.ns, k, fingerprint=fp, lease_ttl=30, claimant="c-1", retention=3600)
        rec = res.record
        self.assertEqual((res.outcome, rec.namespace, rec.key, rec.state, rec.attempt, rec.claimant, rec.fingerprint),
                         (idem.Outcome.ACQUIRED, self.ns, k, idem.State.PROCESSING, 1, "c-1", fp))
        self.assertGreater(rec.token, 0)
        self.assertAlmostEqual((rec.lease_expires_at - rec.updated_at).total_seconds(), 30, delta=0.01)
        self.assertEqual((rec.policy, rec.hold, rec.tenant), ("", False, ""))

        again = self.c.claim(self.ns, k, fingerprint=fp, claimant="c-1")
        self.assertEqual((again.outcome, again.record.token), (idem.Outcome.ACQUIRED, rec.token),
                         "the same claimant acquires again: a lost answer is safe to retry")
        with self.assertRaises(idem.InProgressError) as cm:
            self.c.claim(self.ns, k, claimant="c-2")
        self.assertGreater(cm.exception.retry_after, 20)

        beat = self.c.heartbeat(self.ns, k, rec.token, lease_ttl=60)
        self.assertGreater(beat.lease_expires_at, rec.lease_expires_at)
        done = self.c.complete(self.ns, k, rec.token, b'{"charge":"ch_1"}')
        self.assertEqual((done.state, done.result), (idem.State.COMPLETED, b'{"charge":"ch_1"}'))
        self.assertIsNotNone(done.completed_at)
        self.assertIsNotNone(done.expires_at)
        self.assertEqual(self.c.complete(self.ns, k, rec.token, b'{"charge":"ch_1"}').state, idem.State.COMPLETED,
                         "a repeated Complete with the same token returns the stored record")
        replay = self.c.claim(self.ns, k)
        self.assertEqual((replay.outcome, replay.record.result), (idem.Outcome.COMPLETED, b'{"charge":"ch_1"}'))
        self.assertEqual(self.c.lookup(self.ns, k), replay.record)

    def test_fail_retryable_and_permanent(self):
        k = fresh("fail")
        t1 = self.c.claim(self.ns, k, lease_ttl=30).record.token
        self.assertEqual(self.c.fail(self.ns, k, t1, "try again", retryable=True).state, idem.State.RELEASED)
        t2 = self.c.claim(self.ns, k, lease_ttl=30).record
        self.assertEqual((t2.attempt, t2.token > t1), (2, True))
        failed = self.c.fail(self.ns, k, t2.token, "card declined", retryable=False)
        self.assertEqual((failed.state, failed.error), (idem.State.FAILED, "card declined"))
        res = self.c.claim(self.ns, k)
        self.assertEqual((res.outcome, res.record.error), (idem.Outcome.FAILED, "card declined"))

    def test_errors_a_worker_branches_on(self):
        k = fresh("errors")
        rec = self.c.claim(self.ns, k, fingerprint=idem.fingerprint(b"a"), lease_ttl=5).record
        with self.assertRaises(idem.LeaseLostError) as cm:
            self.c.complete(self.ns, k, rec.token + 1000, b"x")
        self.assertEqual((cm.exception.code, cm.exception.reason, cm.exception.http_status), ("ABORTED", "LEASE_LOST", 409))
        with self.assertRaises(idem.FingerprintMismatchError):
            self.c.claim(self.ns, k, fingerprint=idem.fingerprint(b"b"))
        self.c.fail(self.ns, k, rec.token, "declined", retryable=False)
        with self.assertRaises(idem.AlreadyTerminalError):
            self.c.heartbeat(self.ns, k, rec.token)
        with self.assertRaises(idem.NotFoundError) as cm:
            self.c.lookup(self.ns, fresh("missing"))
        self.assertEqual(cm.exception.reason, idem.ErrorReason.NOT_FOUND)
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            self.c.claim(self.ns, "k" * 257)
        self.assertEqual((cm.exception.reason, cm.exception.field), ("INVALID_KEY", "key"))
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            self.c.claim(self.ns, fresh("lease"), lease_ttl=0.5)
        self.assertEqual(cm.exception.reason, "INVALID_LEASE_TTL")
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            self.c.claim(self.ns, fresh("wait"), wait=61)
        self.assertEqual(cm.exception.reason, "INVALID_WAIT")
        with idem.Client(h.url, token="not-a-token") as stranger:
            with self.assertRaises(idem.UnauthenticatedError):
                stranger.lookup(self.ns, k)
        with self.assertRaises(TypeError):
            self.c.claim(self.ns, k, fingerprint={"a": 1})

    def test_a_held_namespace_shows_its_policy(self):
        rec = self.c.claim(self.held, fresh("held"), lease_ttl=30).record
        self.assertEqual((rec.policy, rec.hold), ("held*", True))

    def test_admin_list_stats_delete_resolve(self):
        # The harness's worker tenant is no admin; its operator manages the
        # worker's records by naming the tenant.
        op = h.client("operator")
        self.addCleanup(op.close)
        with self.assertRaises(idem.PermissionDeniedError) as cm:
            self.c.admin.stats()
        self.assertEqual(cm.exception.reason, "NOT_ADMIN")
        ns = "admin-" + fresh("ns")[:20]
        keys = sorted(fresh(f"k{i}") for i in range(3))
        for k in keys:
            self.c.claim(ns, k, lease_ttl=30)
        page = op.admin.list_records(ns, page_size=2, tenant="worker")
        self.assertEqual(([r.key for r in page.records], bool(page.next_page_token)), (keys[:2], True))
        self.assertEqual([r.key for r in op.admin.iter_records(ns, page_size=2, tenant="worker")], keys)
        self.assertEqual([r.key for r in op.admin.iter_records(ns, state=idem.State.COMPLETED, tenant="worker")], [])
        self.assertEqual(op.admin.list_records(ns, state=idem.State.PROCESSING, older_than=3600, tenant="worker").records, [])
        other = fresh("other")
        self.c.claim(ns, other, lease_ttl=30)
        self.assertEqual([r.key for r in op.admin.iter_records(ns, key_prefix="k", tenant="worker")], keys)
        self.assertEqual([r.key for r in op.admin.list_records(ns, key_prefix="other-", tenant="worker").records], [other])
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            op.admin.list_records(ns, key_prefix="k\n", tenant="worker")
        self.assertIn("key_prefix", cm.exception.message)
        op.admin.delete_record(ns, other, tenant="worker")
        rows = op.admin.stats(ns, tenant="worker")
        self.assertEqual([dataclasses.replace(r, oldest_updated_at=None) for r in rows],
                         [idem.StatsRow(ns, idem.State.PROCESSING, 3, "worker")])
        first = op.admin.list_records(ns, tenant="worker").records[0]
        self.assertEqual(rows[0].oldest_updated_at, first.updated_at, "the oldest is the first key's claim")
        self.assertIn(idem.StatsRow(ns, idem.State.PROCESSING, 3, "worker", rows[0].oldest_updated_at),
                      op.admin.stats(ns, all_tenants=True))
        gone = op.admin.delete_record(ns, keys[0], tenant="worker")
        self.assertEqual((gone.key, gone.tenant), (keys[0], "worker"))
        with self.assertRaises(idem.NotFoundError):
            self.c.lookup(ns, keys[0])
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            op.admin.stats(ns, tenant="nobody")
        self.assertEqual(cm.exception.reason, "INVALID_TENANT")

        with self.assertRaises(idem.NotUnresolvedError):
            op.admin.resolve_record(ns, keys[1], released=True, tenant="worker")
        held = [fresh("r1"), fresh("r2")]
        for k in held:
            self.c.claim(self.held, k, lease_ttl=1)
        time.sleep(1.5)
        for k in held:
            with self.assertRaises(idem.UnresolvedError):
                self.c.claim(self.held, k)
        failed = op.admin.resolve_record(self.held, held[0], failed="checked: not charged", tenant="worker")
        self.assertEqual((failed.state, failed.error), (idem.State.FAILED, "checked: not charged"))
        released = op.admin.resolve_record(self.held, held[1], released=True, tenant="worker")
        self.assertEqual(released.state, idem.State.RELEASED)
        self.assertEqual(self.c.claim(self.held, held[1], lease_ttl=30).outcome, idem.Outcome.ACQUIRED)

    def test_the_raw_call(self):
        k = fresh("raw")
        answer = self.c.call("IdempotencyService", "Claim", {"namespace": self.ns, "key": k, "leaseTtl": "30s"})
        self.assertEqual((answer["outcome"], answer["record"]["key"]), ("OUTCOME_ACQUIRED", k))
        self.assertIsInstance(answer["record"]["token"], str, "int64 is a string in protobuf JSON")


class BatchTest(unittest.TestCase):
    """The batch calls and do_batch against idemd: each item answered as its
    unary call, its neighbours unaffected, and the batch refused as a whole
    only for its size."""

    def setUp(self):
        self.c = h.client()
        self.ns = h.namespaces["plain"]
        self.addCleanup(self.c.close)

    def test_each_item_is_answered_as_its_unary_call(self):
        c, ns = self.c, self.ns
        a, b, done, never = (fresh(f"batch-{p}") for p in ("a", "b", "done", "never"))
        holder = c.claim(ns, b, lease_ttl=30, claimant="holder")
        earlier = c.claim(ns, done).record.token
        c.complete(ns, done, earlier, b"earlier")

        claims = c.batch_claim([idem.ClaimRequest(ns, a, lease_ttl=20, claimant="batch"),
                                idem.ClaimRequest(ns, b, claimant="batch"), idem.Job(ns, done),
                                idem.ClaimRequest("Not A Namespace", a), idem.ClaimRequest(ns, a, lease_ttl=0.5)])
        self.assertEqual(len(claims), 5)
        got = claims[0]
        self.assertIsInstance(got, idem.ClaimResult, got)
        self.assertEqual((got.outcome, got.record.claimant), (idem.Outcome.ACQUIRED, "batch"))
        self.assertAlmostEqual((got.record.lease_expires_at - got.record.updated_at).total_seconds(), 20, delta=0.01)
        self.assertIsInstance(claims[1], idem.InProgressError, claims[1])
        self.assertTrue(0 < claims[1].retry_after <= 30)
        self.assertEqual((claims[2].outcome, claims[2].record.result), (idem.Outcome.COMPLETED, b"earlier"))
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            c.claim("Not A Namespace", a)
        unary = cm.exception
        item = claims[3]
        self.assertIs(type(item), type(unary))
        self.assertEqual((item.code, item.reason, item.metadata, item.message, item.http_status, item.rpc),
                         (unary.code, unary.reason, unary.metadata, unary.message, unary.http_status, unary.rpc),
                         "the item's exception is the unary call's")
        self.assertEqual((claims[4].reason, claims[4].field), ("INVALID_LEASE_TTL", "lease_ttl"))

        token = got.record.token
        beats = c.batch_heartbeat([idem.HeartbeatRequest(ns, a, token, lease_ttl=25),
                                   idem.HeartbeatRequest(ns, b, holder.record.token + 1000),
                                   idem.HeartbeatRequest(ns, never, token)])
        self.assertGreater(beats[0].lease_expires_at, got.record.lease_expires_at)
        self.assertIsInstance(beats[1], idem.LeaseLostError)
        self.assertIsInstance(beats[2], idem.NotFoundError)

        completes = c.batch_complete([idem.CompleteRequest(ns, b, token, b"not mine"),
                                      idem.CompleteRequest(ns, a, token, b"ra"),
                                      idem.CompleteRequest(ns, done, earlier, b"other bytes")])
        self.assertIsInstance(completes[0], idem.LeaseLostError)
        self.assertEqual((completes[0].code, completes[0].reason, completes[0].http_status), ("ABORTED", "LEASE_LOST", 409))
        self.assertEqual((completes[1].state, completes[1].result), (idem.State.COMPLETED, b"ra"))
        self.assertIsInstance(completes[2], idem.AlreadyTerminalError)

        fails = c.batch_fail([idem.FailRequest(ns, b, holder.record.token, "give it back", retryable=True),
                              idem.FailRequest(ns, a, token, "too late", retryable=False)])
        self.assertEqual(fails[0].state, idem.State.RELEASED)
        self.assertIsInstance(fails[1], idem.AlreadyTerminalError)

        looked = c.batch_lookup([idem.LookupRequest(ns, a), idem.LookupRequest(ns, never), idem.LookupRequest(ns, b)])
        self.assertEqual(looked[0], c.lookup(ns, a))
        self.assertIsInstance(looked[1], idem.NotFoundError)
        self.assertEqual(looked[2].state, idem.State.RELEASED)

    def test_the_batch_is_refused_as_a_whole_only_for_its_size(self):
        c, ns = self.c, self.ns
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            c.batch_claim([])
        self.assertEqual((cm.exception.code, cm.exception.reason), ("INVALID_ARGUMENT", "INVALID_BATCH_SIZE"))
        keys = [fresh(f"too-many-{i}") for i in range(501)]
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            c.batch_claim([idem.ClaimRequest(ns, k) for k in keys])
        self.assertEqual(cm.exception.reason, "INVALID_BATCH_SIZE")
        self.assertIn("501", cm.exception.message)
        self.assertIsInstance(c.batch_lookup([idem.LookupRequest(ns, keys[0])])[0], idem.NotFoundError,
                              "nothing was claimed")
        # Just over the server's 4 MiB of protobuf, within what its HTTP/JSON
        # API reads.
        with self.assertRaises(idem.IdemError) as cm:
            c.batch_complete([idem.CompleteRequest(ns, keys[0], 1, bytes(64 << 10)) for _ in range(64)])
        self.assertEqual((cm.exception.code, cm.exception.reason), ("RESOURCE_EXHAUSTED", "REQUEST_TOO_LARGE"))
        # Over what the HTTP/JSON API reads: refused before it is read, the
        # answer sent while the body still goes out.
        big = [idem.CompleteRequest(ns, keys[0], 1, bytes(64 << 10)) for _ in range(80)]
        with self.assertRaises(idem.IdemError) as cm:
            c.batch_complete(big)
        self.assertEqual((cm.exception.code, cm.exception.reason, cm.exception.http_status),
                         ("RESOURCE_EXHAUSTED", "REQUEST_TOO_LARGE", 413))
        self.assertIsInstance(c.batch_lookup([idem.LookupRequest(ns, keys[0])])[0], idem.NotFoundError,
                              "the client works on")

    def test_items_over_the_rate_limit_are_sent_again(self):
        # The limited tenant: 5 calls a second, burst 1, counted per item.
        limited = h.client("limited")
        self.addCleanup(limited.close)
        keys = [fresh(f"limited-{i}") for i in range(3)]
        sizes = []
        send = limited._transport.call
        limited._transport.call = lambda service, method, body, timeout: (
            sizes.append(len(body["requests"])) or send(service, method, body, timeout))
        got = limited.batch_claim([idem.ClaimRequest(self.ns, k) for k in keys])
        self.assertEqual([g.outcome if isinstance(g, idem.ClaimResult) else g for g in got],
                         [idem.Outcome.ACQUIRED] * 3, "each item got through, in time")
        self.assertEqual(sizes[0], 3)
        self.assertGreater(len(sizes), 1, "the items over the limit were sent again")
        self.assertTrue(all(n < 3 for n in sizes[1:]), f"only the refused items were sent again: {sizes}")
        with limited.__class__(h.url, token=h.tokens["limited"], retry=RAW) as raw:
            refused = raw.batch_lookup([idem.LookupRequest(self.ns, k) for k in keys])
        self.assertTrue(any(isinstance(r, idem.RateLimitedError) and r.retry_after is not None for r in refused),
                        f"no item was over the limit without retries: {refused}")

    def test_do_batch(self):
        c, ns = self.c, self.ns
        fresh_key, replayed, failed, busy, retryable, permanent = (fresh(f"do-batch-{p}") for p in (
            "fresh", "replayed", "failed", "busy", "retryable", "permanent"))
        c.do(idem.Job(ns, replayed), lambda a: b"stored")
        with self.assertRaises(idem.Permanent):
            c.do(idem.Job(ns, failed), lambda a: (_ for _ in ()).throw(idem.Permanent("declined")))
        c.claim(ns, busy, claimant="holder", lease_ttl=30)
        ran = []

        def fn(attempt, i):
            ran.append(i)
            self.assertIs(idem.current_attempt(), attempt)
            if i == 4:
                raise RuntimeError("try later")
            if i == 5:
                raise idem.Permanent("never")
            return {"i": i}

        out = c.do_batch([idem.Job(ns, k, lease_ttl=10)
                          for k in (fresh_key, replayed, failed, busy, retryable, permanent)], fn)
        self.assertEqual(sorted(ran), [0, 4, 5], "fn ran for the acquired jobs only")
        self.assertEqual((out[0].json(), out[0].replayed, out[0].record.state), ({"i": 0}, False, idem.State.COMPLETED))
        self.assertEqual((out[1].value, out[1].replayed), (b"stored", True))
        self.assertIsInstance(out[2], idem.JobFailedError)
        self.assertEqual(out[2].message, "declined")
        self.assertIsInstance(out[3], idem.InProgressError)
        self.assertIsInstance(out[4], RuntimeError)
        self.assertEqual(c.lookup(ns, retryable).state, idem.State.RELEASED)
        self.assertIsInstance(out[5], idem.Permanent)
        self.assertEqual(c.lookup(ns, permanent).state, idem.State.FAILED)
        self.assertEqual(c.do_batch([], fn), [], "no jobs, no call")

    def test_do_batch_stops_a_job_whose_lease_is_lost_and_completes_its_neighbours(self):
        c, ns = self.c, self.ns
        op = h.client("operator")
        self.addCleanup(op.close)
        gone, kept = fresh("do-batch-gone"), fresh("do-batch-kept")

        def fn(attempt, i):
            if i == 0:
                op.admin.delete_record(ns, gone, tenant="worker")  # the next heartbeat finds no record
                self.assertTrue(attempt.lost.wait(10), "the lease was not given up")
                return b"too late"
            time.sleep(1.2)  # past the first beats
            return b"kept"

        out = c.do_batch([idem.Job(ns, gone, lease_ttl=1.5), idem.Job(ns, kept, lease_ttl=1.5)], fn)
        self.assertIsInstance(out[0], idem.NotFoundError, out[0])
        self.assertEqual(out[0].value, b"too late", "the error carries fn's value")
        with self.assertRaises(idem.NotFoundError):
            c.lookup(ns, gone)  # nothing was recorded for it
        self.assertEqual((out[1].value, c.lookup(ns, kept).state), (b"kept", idem.State.COMPLETED))

    def test_do_batch_halves_a_delivery_larger_than_the_server_takes(self):
        rpcs = []
        send = self.c._transport.call

        def counting(service, method, body, timeout):
            if method == "BatchClaim":
                rpcs.append(len(body["requests"]))
            return send(service, method, body, timeout)

        self.c._transport.call = counting
        jobs = [idem.Job(self.ns, fresh(f"do-batch-many-{i}")) for i in range(501)]
        out = self.c.do_batch(jobs, lambda attempt, i: f"v{i}")
        self.assertEqual([r.value for r in out], [f"v{i}".encode() for i in range(501)])
        self.assertEqual(rpcs, [501, 250, 251], "refused whole, then sent in halves")

    def test_do_batch_halves_a_complete_larger_than_the_server_reads(self):
        rpcs = []
        send = self.c._transport.call

        def counting(service, method, body, timeout):
            if method == "BatchComplete":
                rpcs.append(len(body["requests"]))
            return send(service, method, body, timeout)

        self.c._transport.call = counting
        jobs = [idem.Job(self.ns, fresh(f"do-batch-big-{i}")) for i in range(80)]
        out = self.c.do_batch(jobs, lambda attempt, i: bytes([i]) * (64 << 10))
        self.assertEqual([r.value[:1] for r in out], [bytes([i]) for i in range(80)])
        self.assertEqual(rpcs, [80, 40, 40], "80 results of 64 KiB are over 4 MiB; 40 are not")


class DecoratorAndOnceTest(unittest.TestCase):
    def setUp(self):
        self.c = h.client()
        self.ns = h.namespaces["plain"]
        self.addCleanup(self.c.close)

    def test_idempotent_runs_once_per_key(self):
        sent = []

        @self.c.idempotent(self.ns, key=lambda order: order["key"], fingerprint=idem.fingerprint_json, lease_ttl=30)
        def send_receipt(order):
            a = idem.current_attempt()
            sent.append((order["key"], a.token))
            return {"sent_to": order["email"], "token": str(a.token)}

        order = {"key": fresh("receipt"), "email": "a@example.com"}
        first = send_receipt(order)
        again = send_receipt(dict(order))
        self.assertEqual((first.replayed, again.replayed, again.json(), len(sent)), (False, True, first.json(), 1))
        with self.assertRaises(idem.FingerprintMismatchError):
            send_receipt(dict(order, email="b@example.com"))

    def test_once_holds_the_job_for_the_block(self):
        k = fresh("once")
        effects = []

        def deliver():
            try:
                with self.c.once(idem.Job(self.ns, k, lease_ttl=30), wait=10) as attempt:
                    effects.append(attempt.token)
                    time.sleep(0.2)
                    attempt.result = b"sent"
                return "ran"
            except idem.Replayed as r:
                self.assertEqual(r.result.value, b"sent")
                return "replayed"

        out = []
        threads = [threading.Thread(target=lambda: out.append(deliver())) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual((sorted(out), len(effects)), (["ran", "replayed"], 1))
        rec = self.c.lookup(self.ns, k)
        self.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, b"sent"))


class TLSTest(unittest.TestCase):
    def test_a_token_over_tls_with_a_ca_file(self):
        d = tempfile.mkdtemp(prefix="idem-python-tls-")
        self.addCleanup(shutil.rmtree, d, True)
        cert, key = self_signed_cert(d)
        server = Idemd(extra_args=["--tls-cert", cert, "--tls-key", key], scheme="https")
        self.addCleanup(server.stop)
        with server.client(ca_file=cert) as c:
            res = c.claim("jobs", fresh("tls"), lease_ttl=30)
            self.assertEqual(res.outcome, idem.Outcome.ACQUIRED)
        with idem.Client(server.url, token=TOKENS["worker"]) as untrusted:  # the system's CAs
            with self.assertRaises(idem.IdemError) as cm:
                untrusted.lookup("jobs", "k")
            self.assertIn("certificate", str(cm.exception))
        with idem.Client(server.url.replace("https", "http"), token=TOKENS["worker"], retry=RAW) as plain:
            with self.assertRaises(idem.IdemError):
                plain.lookup("jobs", "k")


if __name__ == "__main__":
    unittest.main()
