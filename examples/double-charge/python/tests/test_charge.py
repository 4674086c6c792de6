"""charge.py's handlers through idem.testkit. The kit needs an idemd binary:
IDEMD_BIN, or idemd on the PATH (`make test-python` builds one). The idem
package is the one in clients/python/src."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(EXAMPLE)))
sys.path[:0] = [EXAMPLE, os.path.join(REPO, "clients", "python", "src")]

import idem  # noqa: E402
from idem import testkit  # noqa: E402

from charge import Provider, handler, naive_handler  # noqa: E402

JOB = idem.Job("payments", "order-1042")


class ChargeTest(unittest.TestCase):
    def test_the_fixed_handler_charges_once(self):
        # As a worker's test would check it: every duplicate delivery the
        # kit makes charges the card once.
        provider = Provider()
        testkit.check_handler(lambda job: handler(provider, job, {"id": job.key, "amount_cents": 1250}),
                              lambda: provider.charges_applied, job=JOB)

    def test_the_naive_handler_charges_twice_when_the_worker_dies_after_the_charge(self):
        # check_handler would fail this test with the report below;
        # inspect_handler returns it, so that the test can show that the
        # report names the window and the remedy.
        provider = Provider()
        report = testkit.inspect_handler(lambda job: naive_handler(provider, {"id": job.key, "amount_cents": 1250}),
                                         lambda: provider.charges_applied, job=JOB)
        crash = str(report.case(testkit.CRASH_AFTER_EFFECT))
        for want in [
            "crash-after-effect: the effect ran 2 times for one job; want once",
            "window: between the side effect and Complete",
            "remedy: pass the record's key (payments/order-1042.crash-after-effect) to the downstream system as "
            "its own idempotency key",
        ]:
            self.assertIn(want, crash)


if __name__ == "__main__":
    unittest.main()
