"""Steps: the step key every SDK derives, and attempt.step in do() and
do_batch() against a real idemd (the SQLite harness): a finished step is not
run again, and a refused step call raises instead of returning fn's value."""

import hashlib
import json
import os
import unittest

from support import REPO, fresh, harness, idem

h = None


def setUpModule():
    global h
    h = harness("sqlite")


class StepKeyTest(unittest.TestCase):
    def test_the_vectors_of_the_scenario_file(self):
        with open(os.path.join(REPO, "clients", "scenarios", "scenarios.json"), encoding="utf-8") as f:
            vectors = json.load(f)["step_key_vectors"]
        self.assertGreaterEqual(len(vectors), 2)
        for v in vectors:
            got = idem.step_key(v["namespace"], v["key"], v["step"])
            self.assertEqual(got, v["step_key"], v)
            self.assertRegex(got, r"^idem-[0-9a-f]{64}$")

    def test_each_part_counts_and_cannot_run_into_the_next(self):
        key = idem.step_key("ns", "a", "b")
        self.assertEqual(key, "idem-" + hashlib.sha256(b"ns\0a\0b").hexdigest())
        self.assertNotEqual(key, idem.step_key("ns", "a\0b", ""))
        self.assertNotEqual(key, idem.step_key("ns", "a", "c"))


class Effects:
    """A downstream that counts its effects and the keys they came with."""

    def __init__(self):
        self.keys = []

    def make(self, value):
        def fn(step_key):
            self.keys.append(step_key)
            return value
        return fn


class StepTest(unittest.TestCase):
    def setUp(self):
        self.c = h.client()
        self.raw = h.client(retry=idem.RetryPolicy(max_attempts=1))
        self.ns = h.namespaces["plain"]
        self.addCleanup(self.c.close)
        self.addCleanup(self.raw.close)

    def test_a_step_runs_once_and_its_result_is_reused(self):
        k, effects = fresh("step"), Effects()

        def handler(attempt):
            self.assertEqual(attempt.steps, {})
            first = attempt.step("charge", effects.make("ch_1"))
            again = attempt.step("charge", effects.make("ch_2"))
            self.assertEqual(attempt.steps["charge"].state, idem.StepState.FINISHED)
            self.assertEqual(attempt.step("none", effects.make(None)), b"")
            self.assertEqual(attempt.step("json", effects.make({"id": 1})), b'{"id":1}')
            return first + again

        res = self.c.do(idem.Job(self.ns, k), handler)
        self.assertEqual(res.value, b"ch_1ch_1")
        self.assertEqual(effects.keys, [idem.step_key(self.ns, k, n) for n in ("charge", "none", "json")])
        rec = self.raw.lookup(self.ns, k)
        self.assertEqual([(s.name, s.result, s.token) for s in rec.steps],
                         [("charge", b"ch_1", rec.token), ("none", b"", rec.token), ("json", b'{"id":1}', rec.token)])

    def test_a_refused_step_raises_and_fn_value_is_not_returned(self):
        k, effects = fresh("step-refused"), Effects()
        got = []

        def take_over(step_key):
            # Another worker gets the job while fn runs: the record is
            # deleted and claimed afresh under a greater token.
            effects.keys.append(step_key)
            with h.client("operator") as op:
                op.admin.delete_record(self.ns, k, tenant="worker")
            self.raw.claim(self.ns, k, claimant="successor")
            return "ch_1"

        def handler(attempt):
            try:
                got.append(attempt.step("charge", take_over))
            except idem.LeaseLostError as err:
                got.append(err)
            try:
                got.append(attempt.step("receipt", effects.make("rc_1")))
            except idem.LeaseLostError as err:
                got.append(err)
            return b"done"

        with self.assertRaises(idem.LeaseLostError):
            self.c.do(idem.Job(self.ns, k), handler)
        self.assertEqual([type(g) for g in got], [idem.LeaseLostError, idem.LeaseLostError])
        self.assertEqual(len(effects.keys), 1, "the second step's fn ran although its StartStep was refused")
        rec = self.raw.lookup(self.ns, k)
        self.assertEqual((rec.state, rec.steps), (idem.State.PROCESSING, ()))

    def test_steps_in_do_batch_and_a_successor_that_reuses_them(self):
        keys, effects = [fresh("batch-step-1"), fresh("batch-step-2")], Effects()

        def handler(attempt, i):
            a = attempt.step("a", effects.make(f"a{i}"))
            if i == 1:
                raise RuntimeError("after step a")  # released: the next delivery reuses a
            return a + attempt.step("b", effects.make(f"b{i}"))

        out = self.c.do_batch([idem.Job(self.ns, k) for k in keys], handler)
        self.assertEqual(out[0].value, b"a0b0")
        self.assertIsInstance(out[1], RuntimeError)
        self.assertEqual(sorted(effects.keys), sorted([idem.step_key(self.ns, keys[0], "a"),
                                                       idem.step_key(self.ns, keys[0], "b"),
                                                       idem.step_key(self.ns, keys[1], "a")]))
        effects.keys.clear()
        out = self.c.do_batch([idem.Job(self.ns, keys[1])],
                              lambda attempt, i: attempt.step("a", effects.make("again"))
                              + attempt.step("b", effects.make("b1")))
        self.assertEqual(out[0].value, b"a1b1")
        self.assertEqual(effects.keys, [idem.step_key(self.ns, keys[1], "b")])

    def test_step_outside_a_handler_and_with_no_function(self):
        a = idem.Attempt(token=1, number=1, takeover=False, record=idem.Record(namespace="ns", key="k"))
        self.assertEqual(a.step_key("s"), idem.step_key("ns", "k", "s"))
        with self.assertRaises(RuntimeError):
            a.step("s", lambda key: b"")

        def handler(attempt):
            with self.assertRaises(TypeError):
                attempt.step("s", b"not a function")
            return b""

        self.c.do(idem.Job(self.ns, fresh("step-type")), handler)

    def test_the_raw_calls_refuse_a_step_past_the_bounds_of_its_name(self):
        k = fresh("step-name")
        tok = self.raw.claim(self.ns, k).record.token
        for bad in ("", "x" * 129, "tab\tname"):
            with self.assertRaises(idem.InvalidArgumentError) as cm:
                self.raw.start_step(self.ns, k, tok, bad)
            self.assertEqual(cm.exception.reason, "INVALID_STEP_NAME", bad)
        st = self.raw.start_step(self.ns, k, tok, "x" * 128)
        self.assertEqual((st.state, st.token, st.finished_at), (idem.StepState.STARTED, tok, None))
        self.assertIsNotNone(st.started_at)


if __name__ == "__main__":
    unittest.main()
