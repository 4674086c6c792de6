"""Results as large as idemd takes, on both stores (internal/testsupport/
sdkharness with --max-result-bytes at its 16 MiB ceiling): completed by do()
and read back by do(), claim(), lookup(), the batch calls and a page of
list_records, several in one answer; one larger, refused with an error that
names the limit; and a do_batch whose BatchClaim answer was lost on its way
back (too large for a proxy, say), though the server acquired a job in it:
halved and sent again, the job's Claim is answered ACQUIRED under its
claimant, and the handler runs."""

import json
import unittest

from support import fresh, harness, idem

MIB = 1 << 20
CEILING = 16 * MIB  # idemd's most --max-result-bytes


class ResultSizeTest(unittest.TestCase):
    store = ""

    def setUp(self):
        self.h = harness(self.store, CEILING)
        self.c = self.h.client()
        self.addCleanup(self.c.close)
        self.ns = self.h.namespaces["plain"]

    def test_results_of_every_allowed_size_are_read(self):
        c, ns = self.c, self.ns
        prefix = fresh("large")
        keys, results = [], []
        for size in (4 * MIB, CEILING):
            with self.subTest(size=size):
                want = b"r" * size
                k = f"{prefix}-{size}"
                keys.append(k)
                results.append(want)
                got = c.do(idem.Job(ns, k), lambda a: want)
                self.assertEqual((len(got.value), got.replayed, got.record.state), (size, False, idem.State.COMPLETED))
                again = c.do(idem.Job(ns, k), lambda a: self.fail("the handler ran again"))
                self.assertTrue(again.replayed)
                self.assertEqual(again.value, want)
                claimed = c.claim(ns, k)
                self.assertEqual(claimed.outcome, idem.Outcome.COMPLETED)
                self.assertEqual(claimed.record.result, want)
                self.assertEqual(c.lookup(ns, k).result, want)
                [item] = c.batch_claim([idem.ClaimRequest(ns, k)])
                self.assertIsInstance(item, idem.ClaimResult, item)
                self.assertEqual(item.record.result, want)
        # Answers holding both: more than the largest request idemd reads.
        recs = c.batch_lookup([idem.LookupRequest(ns, k) for k in keys])
        self.assertEqual([r.result if isinstance(r, idem.Record) else r for r in recs], results)
        page = self.h.client("operator").admin.list_records(namespace=ns, tenant="worker", key_prefix=prefix)
        self.assertEqual(sorted(r.result for r in page.records), sorted(results))

    def test_a_result_too_large_for_idemd_names_the_limit(self):
        with self.assertRaises(idem.CompletionUnknownError) as cm:
            self.c.do(idem.Job(self.ns, fresh("too-large")), lambda a: b"x" * (17 * MIB))
        self.assertIn("--max-result-bytes", str(cm.exception))

    def test_a_claim_sent_again_after_its_answer_was_lost_is_acquired(self):
        c, ns = self.c, self.ns
        stored = b"s" * (600 << 10)
        prefix = fresh("lost")
        replays, new = [prefix + "-a", prefix + "-b"], prefix + "-new"
        for k in replays:
            c.do(idem.Job(ns, k), lambda a: stored)
        proxy_limit = 1 * MIB  # of JSON: one of the stored results passes, two do not
        batches = []
        send = c._transport.call

        def through_proxy(service, method, body, timeout):
            answer = send(service, method, body, timeout)  # idemd did the items
            if method != "BatchClaim":
                return answer
            lost = len(json.dumps(answer)) > proxy_limit
            batches.append((len(body["requests"]), lost))
            if lost:
                raise idem.IdemError("the answer is larger than the proxy passes", code="RESOURCE_EXHAUSTED",
                                     http_status=502, rpc=method, transient=False)
            return answer

        c._transport.call = through_proxy
        ran = []
        out = c.do_batch([idem.Job(ns, k) for k in replays] + [idem.Job(ns, new)],
                         lambda a, i: ran.append(i) or b"done")
        self.assertEqual(batches[0], (3, True), f"BatchClaims {batches}; want the first one's answer lost")
        self.assertEqual(ran, [2], "the handler ran for the new job only")
        for r in out[:2]:
            self.assertIsInstance(r, idem.Result, r)
            self.assertTrue(r.replayed)
            self.assertEqual(r.value, stored)
        self.assertIsInstance(out[2], idem.Result, out[2])
        self.assertEqual((out[2].value, out[2].replayed), (b"done", False))
        rec = c.lookup(ns, new)
        self.assertEqual((rec.state, rec.attempt, rec.result), (idem.State.COMPLETED, 1, b"done"))


class PostgresResultSizeTest(ResultSizeTest):
    store = "postgres"


class SQLiteResultSizeTest(ResultSizeTest):
    store = "sqlite"


del ResultSizeTest  # the base class runs only through its stores

if __name__ == "__main__":
    unittest.main()
