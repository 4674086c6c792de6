"""The duplicate-delivery test kit (idem.testkit) against real idemd
processes: the windows each kind of handler leaves open, the words (the same
file as the Go kit's), and the failures it raises."""

import hashlib
import json
import os
import re
import tempfile
import threading
import unittest
from unittest import mock

from support import REPO, idem, idemd_bin

from idem import testkit
from idem._testkit_words import WORDS


class PaymentsAPI:
    """A fake payment provider that counts the charges it applied. Like real
    providers, it can answer a request whose idempotency key it has seen
    from its records, and refuse a write fenced by a token lower than one it
    has seen."""

    def __init__(self):
        self.applied = 0
        self._by_key = {}
        self._max_token = {}
        self._charged = set()
        self._lock = threading.Lock()

    def charge(self, order, idempotency_key="", token=0):
        with self._lock:
            if idempotency_key and idempotency_key in self._by_key:
                return self._by_key[idempotency_key]
            if token > 0:
                if token < self._max_token.get(order, 0):
                    raise RuntimeError("payments: a later attempt already wrote this order")
                self._max_token[order] = token
            self.applied += 1
            self._charged.add(order)
            charge_id = f"ch_{self.applied}"
            if idempotency_key:
                self._by_key[idempotency_key] = charge_id
            return charge_id

    def was_charged(self, order):
        with self._lock:
            return order in self._charged


HANDLERS = {
    "naive": lambda p: lambda job: lambda attempt: p.charge(job.key),
    "downstream key": lambda p: lambda job: lambda attempt: p.charge(job.key, f"{job.namespace}/{job.key}"),
    "fencing token": lambda p: lambda job: lambda attempt: p.charge(job.key, "", attempt.token),
    "takeover check": lambda p: lambda job: lambda attempt: (
        "charged earlier" if attempt.takeover and p.was_charged(job.key) else p.charge(job.key)),
    "step key": lambda p: lambda job: lambda attempt: attempt.step("charge", lambda key: p.charge(job.key, key)),
    "step without its key": lambda p: lambda job: lambda attempt: attempt.step(
        "charge", lambda key: p.charge(job.key)),
    "effect outside the steps": lambda p: lambda job: lambda attempt: (
        p.charge(job.key) + attempt.step("receipt", lambda key: "sent").decode()),
}

HOLD_HELD = 'policies:\n  - namespaces: ["held.*"]\n    on_lease_expiry: hold\n'


class TestKitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # One idemd for most tests: namespaces held.* are held.
        cls.idemd = testkit.start_idemd(bin=idemd_bin(), config=HOLD_HELD)

    @classmethod
    def tearDownClass(cls):
        cls.idemd.stop()

    def test_words_are_idemtests(self):
        with open(os.path.join(REPO, "idemtest", "cases.json"), encoding="utf-8") as f:
            want = json.load(f)
        words = WORDS
        if not any(c["id"].startswith("steps-") for c in want["cases"]):
            # The step cases' words reach idemtest/cases.json with the Go
            # kit's step cases; until then the rest must match.
            words = dict(WORDS, cases=[c for c in WORDS["cases"] if not c["id"].startswith("steps-")])
        self.assertEqual(words, want, "idem/_testkit_words.py differs from idemtest/cases.json: copy the file's "
                                      "object into it")
        self.assertEqual([c["id"] for c in WORDS["cases"]], [*testkit.ALL_CASES, testkit.STEPS_HELD_RESOLVER])

    def test_finds_the_windows_each_handler_leaves_open(self):
        for name, handler, job, open_cases, held in [
            ("naive", "naive", None,
             [testkit.CRASH_AFTER_EFFECT, testkit.LEASE_LAPSED, testkit.RETRYABLE_FAILURE, *testkit.STEP_CASES], []),
            ("downstream key", "downstream key", None, [], []),
            ("fencing token", "fencing token", None,
             [testkit.CRASH_AFTER_EFFECT, testkit.RETRYABLE_FAILURE, *testkit.STEP_CASES], []),
            ("takeover check", "takeover check", None, [testkit.LEASE_LAPSED], []),
            ("naive under hold", "naive", idem.Job("held.payments", "order-7"), [testkit.RETRYABLE_FAILURE],
             [testkit.CRASH_AFTER_EFFECT, testkit.LEASE_LAPSED, *testkit.STEP_CASES]),
            ("step key", "step key", None, [], []),
            ("step without its key under hold", "step without its key", idem.Job("held.payments", "order-8"), [],
             [testkit.CRASH_AFTER_EFFECT, testkit.LEASE_LAPSED, *testkit.STEP_CASES]),
        ]:
            with self.subTest(name):
                api = PaymentsAPI()
                r = testkit.inspect_handler(HANDLERS[handler](api), lambda: api.applied, job=job,
                                            server=self.idemd.json_url)
                self.assertEqual(len(r.cases), len(testkit.ALL_CASES))
                for cr in r.cases:
                    self.assertIsNone(cr.error, f"{cr.case} could not run:\n{cr}")
                    if cr.case in open_cases:
                        self.assertTrue(cr.effects == 2 and not cr.ok and cr.window and cr.remedy,
                                        f"{cr.case}: want the effect twice, a window and a remedy:\n{cr}")
                    else:
                        self.assertTrue(cr.ok, f"{cr.case}: want the effect once:\n{cr}")
                    self.assertEqual(bool(cr.held), cr.case in held, f"{cr.case}: held note {cr.held!r}:\n{cr}")

    def test_names_the_crashs_window_and_remedy_as_the_go_kit_does(self):
        api = PaymentsAPI()
        r = testkit.inspect_handler(HANDLERS["naive"](api), lambda: api.applied, idemd=idemd_bin(),
                                    job=idem.Job("payments", "order-1042"))
        msg = str(r.case(testkit.CRASH_AFTER_EFFECT))
        for want in [
            "crash-after-effect: the effect ran 2 times for one job; want once",
            "\n  delivery 1: ran the handler (attempt 1, token ",
            "the worker died before Complete, and its lease lapsed",
            "\n  delivery 2: ran the handler (attempt 2, token ",
            "\n  record: COMPLETED, attempt 2",
            "\n  window: between the side effect and Complete",
            "\n  remedy: pass the record's key (payments/order-1042.crash-after-effect) to the downstream system "
            "as its own idempotency key",
            "attempt.takeover",
        ]:
            self.assertIn(want, msg)
        self.assertIsNone(re.search(r"\{[a-z_]+\}", str(r)), str(r))

    def test_interrupts_the_steps_and_names_the_step_and_the_remedy(self):
        api = PaymentsAPI()
        r = testkit.inspect_handler(HANDLERS["step without its key"](api), lambda: api.applied,
                                    server=self.idemd.json_url, job=idem.Job("payments", "order-3"))
        self.assertEqual([c.case for c in r.failed()], [testkit.STEPS_CRASH_INSIDE_STEP], str(r))
        cr = r.case(testkit.STEPS_CRASH_INSIDE_STEP)
        self.assertEqual((cr.repeated_step, cr.step_effects), ("charge", {"charge": 2}), str(cr))
        msg = str(cr)
        for want in [
            "steps-crash-inside-step: the effect ran 2 times for one job; want once",
            "\n  window: inside the step charge, between its effect and its CompleteStep.",
            "\n  remedy: pass the step key downstream: give the downstream API the key the step's function "
            "receives (attempt.step_key(name), the same on every attempt)",
        ]:
            self.assertIn(want, msg)
        self.assertIsNone(re.search(r"\{[a-z_]+\}", str(r)), str(r))

        api = PaymentsAPI()
        r = testkit.inspect_handler(HANDLERS["effect outside the steps"](api), lambda: api.applied,
                                    server=self.idemd.json_url, job=idem.Job("payments", "order-4"))
        self.assertEqual([c.case for c in r.failed()], [testkit.CRASH_AFTER_EFFECT, testkit.LEASE_LAPSED,
                                                        testkit.RETRYABLE_FAILURE, *testkit.STEP_CASES], str(r))
        between = r.case(testkit.STEPS_CRASH_BETWEEN_STEPS)
        self.assertTrue(between.repeated_unrecorded and between.step_effects[""] == 2, str(between))
        msg = str(between)
        self.assertIn("\n  window: between two of the job's effects, after the first was made.", msg)
        self.assertIn("\n  remedy: record it as a step: make the effect inside attempt.step(name, fn), so that the "
                      "successor finds the step FINISHED", msg)
        self.assertRegex(msg, r"\(payments/order-4\.[0-9a-f]+\.steps-crash-between-steps\) to the downstream system")
        self.assertIsNone(re.search(r"\{[a-z_]+\}", str(r)), str(r))

        api = PaymentsAPI()
        r = testkit.inspect_handler(HANDLERS["naive"](api), lambda: api.applied, server=self.idemd.json_url)
        inside = str(r.case(testkit.STEPS_CRASH_INSIDE_STEP))
        self.assertIn("\n  window: between the side effect and Complete. The handler recorded no step", inside)
        self.assertIn("\n  remedy: record it as a step: make the effect inside attempt.step(name, fn) and pass the "
                      "key its function receives", inside)

    def test_checks_the_teams_resolver_on_a_job_held_inside_a_step(self):
        def inspect(decide, job):
            api = PaymentsAPI()
            r = testkit.inspect_handler(HANDLERS["step without its key"](api), lambda: api.applied,
                                        server=self.idemd.json_url, job=job, resolver=decide(api))
            self.assertEqual([c.case for c in r.cases], [*testkit.ALL_CASES, testkit.STEPS_HELD_RESOLVER])
            return r.case(testkit.STEPS_HELD_RESOLVER)

        held = idem.Job("held.payments", "order-11")
        looks_up = lambda api: lambda h: (idem.Resolution.completed(b"found") if api.was_charged(h.key)  # noqa: E731
                                          else idem.Resolution.release())
        cr = inspect(looks_up, held)
        self.assertTrue(cr.ok and cr.effects == 1, str(cr))

        cr = inspect(lambda api: lambda h: idem.Resolution.release(), held)
        msg = str(cr)
        self.assertTrue(not cr.ok and cr.repeated_step == "charge" and cr.step_effects["charge"] == 2, msg)
        self.assertIn("\n  window: the resolver's answer. The record was held with a step STARTED", msg)
        self.assertIn("\n  remedy: look the effect up downstream by the step's key (attempt.step_key(name) on the "
                      "held record", msg)
        self.assertIsNone(re.search(r"\{[a-z_]+\}", msg), msg)

        cr = inspect(lambda api: lambda h: idem.Resolution.cant_tell(), held)
        self.assertTrue(not cr.ok and cr.finding.startswith("the resolver left the record UNRESOLVED"), str(cr))

        cr = inspect(looks_up, idem.Job("payments", "order-12"))
        self.assertTrue(not cr.ok and cr.finding.startswith("the namespace's policy did not hold the record"), str(cr))

    def test_check_handler_fails_with_each_open_window_and_passes_a_safe_handler(self):
        api = PaymentsAPI()
        with self.assertRaises(AssertionError) as caught:
            testkit.check_handler(HANDLERS["naive"](api), lambda: api.applied, server=self.idemd.json_url)
        msg = str(caught.exception)
        for c in ["crash-after-effect: the effect ran 2 times", "lease-lapsed: the effect ran 2 times",
                  "retryable-failure: the effect ran 2 times"]:
            self.assertIn(c, msg)
        self.assertNotIn("twice-in-sequence", msg)

        safe = PaymentsAPI()
        logged = []
        r = testkit.check_handler(HANDLERS["downstream key"](safe), lambda: safe.applied, server=self.idemd.json_url,
                                  log=logged.append)
        self.assertEqual(r.failed(), [])
        self.assertEqual(len(logged), len(testkit.ALL_CASES))

    def test_says_when_the_counter_counts_nothing_and_when_the_handler_fails(self):
        api = PaymentsAPI()
        r = testkit.inspect_handler(HANDLERS["downstream key"](api), lambda: 0, server=self.idemd.json_url)
        for cr in r.cases:
            self.assertTrue(not cr.ok and "the effect counter saw nothing" in cr.finding
                            and str(cr).startswith(f"{cr.case}: the effect counter saw no effect"), str(cr))

        def failing(job):
            def handler(attempt):
                raise RuntimeError("no route to the provider")
            return handler

        r = testkit.inspect_handler(failing, lambda: 1, server=self.idemd.json_url)
        for cr in r.cases:
            self.assertIn("the case could not run: the handler failed on a delivery that should succeed: "
                          "no route to the provider", str(cr))

    def test_stops_the_worker_right_after_the_handlers_own_complete_and_names_the_effect_lost(self):
        api = PaymentsAPI()

        def completes_first(job):
            # Completes its own record through its worker's client, then
            # charges (with the record's key: no other window is open).
            def handler(attempt):
                testkit.worker_client().complete(job.namespace, job.key, attempt.token, b"done")
                api.charge(job.key, f"{job.namespace}/{job.key}")
                return b"done"
            return handler

        with self.assertRaises(AssertionError) as caught:
            testkit.check_handler(completes_first, lambda: api.applied, server=self.idemd.json_url,
                                  job=idem.Job("payments", "order-1042"))
        self.assertIn("crash-after-complete: the effect never ran", str(caught.exception))
        r = testkit.inspect_handler(completes_first, lambda: api.applied, server=self.idemd.json_url,
                                    job=idem.Job("payments", "order-1042"))
        cr = r.case(testkit.CRASH_AFTER_COMPLETE)
        msg = str(cr)
        self.assertTrue(not cr.ok and cr.error is None and cr.effects == 0 and not cr.finding, msg)
        for want in [
            "crash-after-complete: the effect never ran, and the record says the job is done; want once",
            "the handler completed the record itself (Complete with its token), and the worker died right there",
            "\n  delivery 2: replayed the stored result; the handler did not run",
            "\n  record: COMPLETED, attempt 1",
            "\n  window: between the handler's own Complete and its side effect",
            "The effect is lost.",
            "\n  remedy: make the side effect before anything records the job as done: return the result from the "
            "handler and let do() send the Complete",
            "instead of completing with attempt.token yourself",
        ]:
            self.assertIn(want, msg)
        self.assertIsNone(re.search(r"\{[a-z_]+\}", msg), msg)

    def test_says_what_became_of_the_record_when_a_failure_follows_the_handlers_own_complete(self):
        api = PaymentsAPI()
        own = idem.Client(self.idemd.json_url)
        self.addCleanup(own.close)

        def completes_itself(job):
            # Charges, then completes its own record through a client of its own.
            def handler(attempt):
                api.charge(job.key, f"{job.namespace}/{job.key}")
                own.complete(job.namespace, job.key, attempt.token, b"done")
                return b"done"
            return handler

        r = testkit.inspect_handler(completes_itself, lambda: api.applied, server=self.idemd.json_url)
        retry = r.case(testkit.RETRYABLE_FAILURE)
        msg = str(retry)
        self.assertEqual(retry.record.state, idem.State.COMPLETED, msg)
        self.assertTrue(retry.ok, msg)
        self.assertIn("then failed, but the failure was not recorded (ALREADY_TERMINAL), so the job was not released",
                      msg)
        self.assertNotIn("recorded as retryable", msg)
        crash = str(r.case(testkit.CRASH_AFTER_COMPLETE))
        self.assertIn("the handler ended the record itself (COMPLETED) through a client the kit does not see", crash)
        self.assertIn("idem.testkit.worker_client()", crash)

    def test_tells_an_effect_made_while_the_handler_is_built_to_move_into_the_handler(self):
        api = PaymentsAPI()

        def charges_first(job):
            charge = api.charge(job.key)  # before do() claimed the job
            return lambda attempt: charge

        r = testkit.inspect_handler(charges_first, lambda: api.applied, server=self.idemd.json_url)
        for cr in r.cases:
            msg = str(cr)
            self.assertTrue(not cr.ok and cr.error is None and cr.outside == cr.effects and not cr.window
                            and not cr.remedy, msg)
            self.assertIn("effects happened while the kit built the handler of a delivery, before do() claimed the job",
                          cr.finding)
            self.assertIn("Move it into the function the worker passes to do()", cr.finding)
            for wrong in ("retry loop", "idempotency key", "remedy:"):
                self.assertNotIn(wrong, msg)
        # One effect per delivery: the 8 at once, and the redelivery of each
        # that found the job in progress.
        concurrent = r.case(testkit.CONCURRENT)
        n = concurrent.effects
        self.assertGreaterEqual(n, 8, str(concurrent))
        self.assertIn(f"{n} of the {n} effects happened while the kit built the handler of a delivery, before do() "
                      f"claimed the job ({n} deliveries, 1 of which ran the handler)", concurrent.finding)

    def test_starts_an_idemd_of_its_own_with_the_tenants_and_policies_of_a_config(self):
        token = "idem_test-token-of-payments"
        digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
        config = (f'tenants:\n  - name: payments\n    tokens: ["{digest}"]\n    namespaces: ["payments.*"]\n'
                  f'    policies:\n      - namespaces: ["payments.*"]\n        on_lease_expiry: hold\n')
        api = PaymentsAPI()
        r = testkit.check_handler(HANDLERS["downstream key"](api), lambda: api.applied, idemd=idemd_bin(),
                                  config=config, token=token, job=idem.Job("payments.card", "order-9"))
        crash = r.case(testkit.CRASH_AFTER_EFFECT)
        self.assertTrue(crash.held and crash.record is not None and crash.record.hold, str(crash))

    def test_says_how_to_give_it_idemd_and_how_to_get_one_when_there_is_none(self):
        get_one = re.escape("To get idemd: in a clone of https://github.com/idemhq/idem, `make install` "
                            "(it says where it puts idemd) or `make build` (bin/idemd).")
        with self.assertRaisesRegex(RuntimeError, r"^idem testkit: cannot start .*no-such-idemd: .*; give idemd=, "
                                    r"set IDEMD_BIN, or put idemd on the PATH\. " + get_one + "$"):
            testkit.start_idemd(bin=os.path.join(REPO, "no-such-idemd"))
        with tempfile.TemporaryDirectory() as empty:
            env = {k: v for k, v in os.environ.items() if k != "IDEMD_BIN"}
            env["PATH"] = empty
            with mock.patch.dict(os.environ, env, clear=True):
                with self.assertRaisesRegex(RuntimeError, r"^idem testkit: no idemd to start: give idemd=, set "
                                            r"IDEMD_BIN, or put idemd on the PATH\. " + get_one + "$"):
                    testkit.start_idemd()

    def test_refuses_a_concurrency_that_is_not_a_whole_number(self):
        delivered = []
        for bad in (2.5, float("nan"), "8", True):
            with self.assertRaisesRegex(TypeError, "concurrency is .*; it must be a whole number"):
                testkit.inspect_handler(lambda job: lambda attempt: delivered.append(1), lambda: len(delivered),
                                        concurrency=bad, idemd=os.path.join(REPO, "no-such-idemd"))
        self.assertEqual(delivered, [])


if __name__ == "__main__":
    unittest.main()
