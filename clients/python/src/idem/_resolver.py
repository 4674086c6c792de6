"""Resolver: a loop beside a tenant's workers that decides held (UNRESOLVED)
records by asking the downstream system whether the effect happened, rather
than leaving each to a person."""

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, Optional, Sequence, Tuple

from ._errors import IdemError, LeaseLostError, NotFoundError, NotUnresolvedError
from ._step import step_key
from ._types import Record, Step

if TYPE_CHECKING:  # pragma: no cover
    from ._client import Client

__all__ = ["Held", "Resolution", "Resolver"]

log = logging.getLogger("idem.resolver")


@dataclasses.dataclass(frozen=True)
class Resolution:
    """A resolver function's answer about one held record: make one with
    Resolution.completed, failed, release or cant_tell."""

    #: "completed", "failed", "released" or "" (can't tell).
    kind: str
    result: bytes = b""
    error: str = ""
    #: Why, in a few words ("charge ch_123 found"): kept on the record's
    #: timeline and in idemd's log.
    reason: str = ""

    @classmethod
    def completed(cls, result: bytes = b"", reason: str = "") -> "Resolution":
        """The effect happened: the record becomes COMPLETED with result."""
        if isinstance(result, str):
            result = result.encode("utf-8")
        return cls("completed", result=bytes(result), reason=reason)

    @classmethod
    def failed(cls, error: str, reason: str = "") -> "Resolution":
        """The job failed for good: the record becomes FAILED with error."""
        return cls("failed", error=str(error), reason=reason)

    @classmethod
    def release(cls, reason: str = "") -> "Resolution":
        """The effect did not happen: the record becomes RELEASED and the
        next Claim runs the job again."""
        return cls("released", reason=reason)

    @classmethod
    def cant_tell(cls) -> "Resolution":
        """Nobody can tell yet: leave the record for a person, and ask again
        after the resolver's retry interval."""
        return cls("")


@dataclasses.dataclass(frozen=True)
class Held:
    """A held record as a resolver function receives it: ``record`` (its
    namespace, key, token, attempt and steps) and the downstream key of
    each of its steps (``step_keys``), to look the effects up by."""

    record: Record
    step_keys: Dict[str, str]

    @property
    def namespace(self) -> str:
        return self.record.namespace

    @property
    def key(self) -> str:
        return self.record.key

    @property
    def token(self) -> int:
        return self.record.token

    @property
    def attempt(self) -> int:
        return self.record.attempt

    @property
    def steps(self) -> Tuple[Step, ...]:
        return self.record.steps

    def step_key(self, name: str) -> str:
        """The key the job's step name passed downstream (attempt.step_key)."""
        return step_key(self.record.namespace, self.record.key, name)


class Resolver:
    """Decides the held records of the client's tenant with fn.

    It polls ListHeld (the HTTP/JSON API cannot stream WatchHeld) every
    ``poll_interval`` seconds (default 5) for the UNRESOLVED records of
    ``namespaces`` (default: every namespace the token may use), with their
    steps, and calls fn(Held) for each, in turn; fn
    returns a Resolution. A completed, failed or released answer is sent
    with Resolve under the resolver's ``name`` (1 to 128 bytes, on the
    record's timeline); a record that someone else decided first
    (NOT_UNRESOLVED) or that is held again with another token is left
    alone. A can't-tell answer, and an fn that raises
    (logged on the "idem.resolver" logger), leaves the record for a person
    and asks fn about it again only after ``retry_interval`` seconds
    (default 60).

    run() runs the loop in the calling thread until stop(); start() runs it
    in a daemon thread and returns the thread.

        resolver = idem.Resolver(client, "charges-resolver", decide, namespaces=["payments"])
        resolver.start()
        ...
        resolver.stop()
    """

    def __init__(self, client: "Client", name: str, fn: Callable[[Held], Resolution], *,
                 namespaces: Sequence[str] = (), poll_interval: float = 5.0, retry_interval: float = 60.0,
                 stop: Optional[threading.Event] = None):
        if not name:
            raise ValueError("idem: a resolver needs a name (1 to 128 bytes): it is kept on each record it decides")
        if not callable(fn):
            raise TypeError("idem: a resolver needs a function of the held record that returns a Resolution")
        if not poll_interval > 0 or retry_interval < 0:
            raise ValueError(f"idem: poll_interval is {poll_interval} and retry_interval {retry_interval}; "
                             "the first must be above 0 seconds, the second 0 or more")
        self.client = client
        self.name = name
        self.fn = fn
        self.namespaces = [namespaces] if isinstance(namespaces, str) else list(namespaces)
        self.poll_interval = float(poll_interval)
        self.retry_interval = float(retry_interval)
        #: Set to end the loop; stop() sets it.
        self.stopped = stop if stop is not None else threading.Event()
        # When fn was last asked about each (namespace, key, token) it could
        # not tell about, on this machine's clock.
        self._asked: Dict[Tuple[str, str, int], float] = {}

    def stop(self) -> None:
        """Ends the loop: run() returns once fn, or the call in flight, is
        done."""
        self.stopped.set()

    def start(self) -> threading.Thread:
        """Runs run() in a daemon thread, and returns it (join it after
        stop())."""
        t = threading.Thread(target=self.run, name=f"idem-resolver {self.name}", daemon=True)
        t.start()
        return t

    def run(self) -> None:
        """Polls and decides until stop(). A poll that fails is logged and
        tried again at the next interval."""
        while not self.stopped.is_set():
            try:
                self.poll()
            except IdemError as err:
                log.warning("idem resolver %s: a poll failed; trying again at the next: %s", self.name, err)
            self.stopped.wait(self.poll_interval)

    def poll(self) -> int:
        """One pass over the held records: asks fn about each one not asked
        lately and sends its decision. Returns how many of those it looked
        at are no longer held: decided by fn's answer, or by someone else
        first."""
        seen = set()
        resolved = 0
        for rec in self.client.iter_held(self.namespaces):
            if self.stopped.is_set():
                break
            ident = (rec.namespace, rec.key, rec.token)
            seen.add(ident)
            asked = self._asked.get(ident)
            if asked is not None and time.monotonic() - asked < self.retry_interval:
                continue
            if self._decide(rec):
                resolved += 1
                self._asked.pop(ident, None)
            else:
                self._asked[ident] = time.monotonic()
        else:
            # Forget the records no longer held, once the pass saw them all.
            self._asked = {i: t for i, t in self._asked.items() if i in seen}
        return resolved

    def _decide(self, rec: Record) -> bool:
        """Asks fn about rec and sends its answer: True when rec is no longer
        held by this token (decided here or by someone else)."""
        held = Held(rec, {st.name: step_key(rec.namespace, rec.key, st.name) for st in rec.steps})
        try:
            answer = self.fn(held)
        except Exception:  # a resolver that cannot tell: a person will
            log.exception("idem resolver %s: its function raised for %s/%s; left for a person",
                          self.name, rec.namespace, rec.key)
            return False
        if not isinstance(answer, Resolution):
            log.error("idem resolver %s: its function returned %r for %s/%s, not an idem.Resolution; left for a "
                      "person", self.name, answer, rec.namespace, rec.key)
            return False
        if not answer.kind:
            return False
        try:
            self.client.resolve(rec.namespace, rec.key, rec.token, resolver=self.name, reason=answer.reason,
                                completed=answer.result if answer.kind == "completed" else None,
                                failed=answer.error if answer.kind == "failed" else None,
                                released=answer.kind == "released")
        except (NotUnresolvedError, LeaseLostError, NotFoundError) as err:
            log.info("idem resolver %s: %s/%s was decided elsewhere: %s", self.name, rec.namespace, rec.key, err)
        except IdemError as err:
            log.warning("idem resolver %s: resolving %s/%s failed: %s", self.name, rec.namespace, rec.key, err)
            return False
        return True
