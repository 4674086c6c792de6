"""One payment handler written twice: naively, as a first version often is,
and fixed. tests/test_charge.py runs both through idem.testkit."""

import json
import threading


class Provider:
    """A fake payment provider that counts the charges it applied. Like
    Stripe's API, it answers a request whose Idempotency-Key it has seen with
    the first answer, and moves no money."""

    def __init__(self):
        self.charges_applied = 0
        self._by_key = {}
        self._lock = threading.Lock()

    def charge(self, amount_cents, idempotency_key=""):
        """Charges amount_cents once per idempotency_key (none: every time)."""
        with self._lock:
            if idempotency_key and idempotency_key in self._by_key:
                return self._by_key[idempotency_key]
            self.charges_applied += 1
            charge = {"id": f"ch_{self.charges_applied}", "amount_cents": amount_cents}
            if idempotency_key:
                self._by_key[idempotency_key] = charge
            return charge


def naive_handler(provider, order):
    """The handler a worker passes to client.do() for order: it charges the
    card and returns the receipt. idem makes sure that two deliveries of the
    order do not both run it, but a worker that dies after the charge and
    before Complete leaves idem no way to know the charge happened: the next
    delivery takes the job over and charges again."""
    return lambda attempt: json.dumps(provider.charge(order["amount_cents"]))


def handler(provider, job, order):
    """naive_handler fixed: the provider's idempotency key is the idem
    record's namespace and key, the same for every delivery and every attempt
    of the job, so the provider answers a takeover's repeated charge from its
    records."""
    return lambda attempt: json.dumps(provider.charge(order["amount_cents"], f"{job.namespace}/{job.key}"))
