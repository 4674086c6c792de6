"""Capped exponential backoff with jitter, never sooner than the server asks."""

import dataclasses
import random
import threading
import time
from typing import Callable, Optional, TypeVar

from ._errors import IdemError

__all__ = ["RetryPolicy"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How calls that fail with a transient error are retried: UNAVAILABLE
    (idemd or its database unreachable, the record contended, or no answer
    at all), DEADLINE_EXCEEDED, and RESOURCE_EXHAUSTED with a retry delay
    (the tenant's rate limit). Retry n waits a random time between half and
    all of min(base_delay * 2**n, max_delay), and never less than the
    server's google.rpc.RetryInfo delay (or, without one, its Retry-After
    header). Nothing else is retried: a LEASE_LOST or an INVALID_* will not
    change."""

    #: The delay before the first retry, in seconds. It defaults to 0.1.
    base_delay: float = 0.1
    #: The cap on each delay, in seconds. It defaults to 5.
    max_delay: float = 5.0
    #: How many times one call is tried in all, the first try included. It
    #: defaults to 10: with the default delays, about 11 to 21 s of
    #: retrying, enough to ride out a restart of idemd. 1 turns retries off.
    max_attempts: int = 10

    def __post_init__(self) -> None:
        if not self.base_delay > 0:
            raise ValueError(f"idem: RetryPolicy.base_delay is {self.base_delay}; it must be above 0")
        if self.max_delay < self.base_delay:
            raise ValueError(f"idem: RetryPolicy.max_delay ({self.max_delay}) is below base_delay ({self.base_delay})")
        if self.max_attempts < 1:
            raise ValueError(f"idem: RetryPolicy.max_attempts is {self.max_attempts}; it must be 1 or more")

    def delay(self, n: int) -> float:
        """The wait before retry n (0 for the first retry), with jitter, so
        that many workers that failed together do not retry together."""
        d = min(self.base_delay * (2 ** min(n, 32)), self.max_delay)
        return d / 2 + random.uniform(0, d / 2)

    def backoff(self, n: int, err: IdemError) -> float:
        """The wait before retry n after err."""
        d = self.delay(n)
        if err.retry_after is not None and err.retry_after > d:
            d = err.retry_after
        return d


def retry(policy: RetryPolicy, call: Callable[[], T], *, stop: Optional[threading.Event] = None,
          deadline: Optional[float] = None) -> T:
    """Calls call until it succeeds or raises an error that is not
    transient; it raises the last error. Without a deadline it tries at most
    policy.max_attempts times; with one (a time.monotonic() value) it tries
    as often as it takes until the deadline, the last try at the deadline.
    stop, when set during a wait, ends it and raises the last error."""
    attempt = 1
    while True:
        try:
            return call()
        except IdemError as err:
            if not err.transient:
                raise
            wait = policy.backoff(attempt - 1, err)
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                wait = min(wait, remaining)  # one last try at the deadline
            elif attempt >= policy.max_attempts:
                raise
            if stop is not None:
                if stop.wait(wait):
                    raise
            else:
                time.sleep(wait)
            attempt += 1
