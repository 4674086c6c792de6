"""idem.Resolver against a real idemd (the SQLite harness): one pass at a
time with poll(), so that what it asks and sends does not depend on timing;
and run() in a thread ending on stop()."""

import threading
import time
import unittest

from support import fresh, harness, idem

h = None


def setUpModule():
    global h
    h = harness("sqlite")


class ResolverTest(unittest.TestCase):
    def setUp(self):
        self.c = h.client()
        self.held = h.namespaces["held"]
        self.addCleanup(self.c.close)

    def hold(self, k, step=""):
        """Makes (held, k) UNRESOLVED, with a STARTED step when given."""
        tok = self.c.claim(self.held, k, lease_ttl=1, claimant="holder").record.token
        if step:
            self.c.start_step(self.held, k, tok, step)
        time.sleep(1.5)
        with self.assertRaises(idem.UnresolvedError):
            self.c.claim(self.held, k, claimant="other")
        return tok

    def only(self, k, answer):
        """A resolver function that answers for k and can't tell the rest
        (other tests' held records); its calls for k are in .calls."""
        calls = []

        def fn(held):
            if held.key != k:
                return idem.Resolution.cant_tell()
            calls.append(held)
            return answer(held) if callable(answer) else answer

        fn.calls = calls
        return fn

    def test_it_resolves_with_its_name_and_reason_and_passes_the_step_keys(self):
        k = fresh("resolver-complete")
        tok = self.hold(k, step="charge")
        fn = self.only(k, idem.Resolution.completed("ch_1", reason="charge ch_1 found"))
        r = self.c.resolver("test-resolver", fn, namespaces=[self.held])
        r.poll()
        self.assertEqual(len(fn.calls), 1)
        held = fn.calls[0]
        self.assertEqual((held.namespace, held.key, held.token, held.attempt), (self.held, k, tok, 1))
        self.assertEqual([s.name for s in held.steps], ["charge"])
        self.assertEqual(held.step_keys, {"charge": idem.step_key(self.held, k, "charge")})
        rec, history = self.c.lookup_history(self.held, k)
        self.assertEqual((rec.state, rec.result), (idem.State.COMPLETED, b"ch_1"))
        resolved = [e for e in history if e.kind == idem.TimelineEntryKind.RESOLVED][-1]
        self.assertEqual((resolved.actor.resolver, resolved.reason, resolved.state),
                         ("test-resolver", "charge ch_1 found", idem.State.COMPLETED))

    def test_a_function_that_raises_cant_tell_and_is_asked_again_after_the_retry_interval(self):
        k = fresh("resolver-raises")
        self.hold(k)

        def boom(held):
            raise RuntimeError("downstream down")

        fn = self.only(k, boom)
        r = idem.Resolver(self.c, "test-resolver", fn, namespaces=[self.held], retry_interval=3600)
        with self.assertLogs("idem.resolver", "ERROR") as logs:
            r.poll()
        self.assertIn("downstream down", "\n".join(logs.output))
        r.poll()
        self.assertEqual(len(fn.calls), 1, "asked again within the retry interval")
        self.assertEqual(self.c.lookup(self.held, k).state, idem.State.UNRESOLVED)
        r.retry_interval = 0
        with self.assertLogs("idem.resolver", "ERROR"):
            r.poll()
        self.assertEqual(len(fn.calls), 2)

    def test_a_record_someone_else_decided_first_is_not_an_error(self):
        k = fresh("resolver-race")
        self.hold(k)

        def decided_meanwhile(held):
            self.c.resolve(self.held, k, held.token, resolver="person", released=True)
            return idem.Resolution.completed(b"x")

        fn = self.only(k, decided_meanwhile)
        r = idem.Resolver(self.c, "test-resolver", fn, namespaces=[self.held], retry_interval=0)
        r.poll()
        r.poll()
        self.assertEqual(len(fn.calls), 1)
        self.assertEqual(self.c.lookup(self.held, k).state, idem.State.RELEASED)

    def test_run_ends_on_stop_and_on_its_event(self):
        k = fresh("resolver-run")
        self.hold(k)
        fn = self.only(k, idem.Resolution.failed("no charge"))
        r = idem.Resolver(self.c, "test-resolver", fn, namespaces=self.held, poll_interval=0.05)
        th = r.start()
        deadline = time.monotonic() + 10
        while self.c.lookup(self.held, k).state == idem.State.UNRESOLVED:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        r.stop()
        th.join(30)
        self.assertFalse(th.is_alive())
        self.assertEqual(self.c.lookup(self.held, k).error, "no charge")
        stopped = threading.Event()
        stopped.set()
        idem.Resolver(self.c, "test-resolver", fn, stop=stopped).run()  # returns at once
        self.assertEqual(len(fn.calls), 1)

    def test_bad_arguments(self):
        fn = lambda held: idem.Resolution.cant_tell()  # noqa: E731
        with self.assertRaises(ValueError):
            idem.Resolver(self.c, "", fn)
        with self.assertRaises(ValueError):
            idem.Resolver(self.c, "r", fn, poll_interval=0)
        with self.assertRaises(TypeError):
            idem.Resolver(self.c, "r", "not a function")
        with self.assertRaises(ValueError):
            self.c.resolve(self.held, "k", 1, resolver="r")
        with self.assertRaises(ValueError):
            self.c.resolve(self.held, "k", 1, resolver="r", released=True, failed="y")


if __name__ == "__main__":
    unittest.main()
