"""do(), @idempotent and once(): run a job's side effect at most once per key
across every worker, in any language, and record its outcome."""

import contextvars
import dataclasses
import functools
import json
import math
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple, Union

from ._errors import (CompletionUnknownError, FailureNotRecordedError, IdemError, InProgressError, JobFailedError,
                      LeaseLostError, Permanent, Replayed, ResolvedByOperatorError)
from ._retry import retry
from ._step import run_step, step_key
from ._types import MAX_WAIT, ClaimResult, Outcome, Record, Seconds, Step, seconds

if TYPE_CHECKING:  # pragma: no cover
    from ._client import Client

__all__ = ["Job", "Attempt", "Result", "Once", "do", "idempotent", "current_attempt", "storable_text",
           "MAX_ERROR_BYTES"]

# Copied from limits/limits.go in the Go module; limits/copies_test.go fails when a copy disagrees.
#: The server's bound on a Fail's error text, in bytes of UTF-8.
MAX_ERROR_BYTES = 4096
# The lease do() assumes when neither the job nor the claimed record tells
# it: the server's documented default.
_DEFAULT_LEASE_TTL = 300.0


@dataclasses.dataclass(frozen=True)
class Job:
    """One unit of work and how to hold it.

    ``namespace`` is the job type (^[a-z0-9][a-z0-9_.-]{0,63}$), ``key`` the
    idempotency key, chosen once when the job was created. ``fingerprint``
    (bytes, at most 64; see fingerprint_json) is stored with the record: a
    later claim of the key with another fingerprint raises
    FingerprintMismatchError. ``lease_ttl`` (seconds) is how long the job is
    held without a heartbeat; None means the server's default (5 minutes
    unless configured otherwise); do() heartbeats every third of it.
    ``retention`` (seconds) is how long the outcome is kept and replayed;
    None means the server's default (24 hours unless configured otherwise).
    """

    namespace: str
    key: str
    fingerprint: bytes = b""
    lease_ttl: Optional[Seconds] = None
    retention: Optional[Seconds] = None


@dataclasses.dataclass(eq=False)
class Attempt:
    """The acquisition a handler runs under.

    ``token`` is the fencing token: pass it to downstream systems that can
    reject writes from a superseded token. ``number`` is the record's
    attempt count (1 the first time); ``takeover`` is number > 1: an earlier
    attempt may have done part of the work, so check before repeating a
    partial effect. ``record`` is the record as acquired.

    ``lost`` is set when a heartbeat found the lease gone (another worker
    took the job over, or the record was deleted or resolved): the handler
    should stop before its side effect. Python cannot stop a thread, so the
    handler looks: ``attempt.check()`` raises the error that ended the lease,
    ``attempt.sleep(s)`` raises it as soon as it happens, and ``attempt.lost``
    is a threading.Event to wait on.

    ``result``, in ``with client.once(job) as attempt``, is what the block
    sets for Complete to record.

    ``steps`` are the job's steps by name: those the Claim returned (a
    successor sees what its predecessors recorded) and those this attempt
    recorded since. ``step(name, fn)`` runs one side effect of the job at
    most once across attempts; ``step_key(name)`` is the key to pass
    downstream for it.
    """

    token: int
    number: int
    takeover: bool
    record: Record
    lost: threading.Event = dataclasses.field(default_factory=threading.Event)
    lost_error: Optional[IdemError] = None
    result: Any = None
    steps: Dict[str, Step] = dataclasses.field(default_factory=dict)
    _client: Any = dataclasses.field(default=None, repr=False)
    _namespace: str = dataclasses.field(default="", repr=False)
    _key: str = dataclasses.field(default="", repr=False)
    _steps_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not self.steps:
            self.steps = {st.name: st for st in self.record.steps}
        self._namespace = self._namespace or self.record.namespace
        self._key = self._key or self.record.key

    def step(self, name: str, fn: Callable[[str], Any]) -> bytes:
        """Runs one named side effect of the job at most once across its
        attempts, and returns its result as bytes. A step FINISHED earlier
        (by this attempt or a predecessor) returns its recorded result
        without calling fn. Otherwise the step is marked STARTED, fn is
        called with ``step_key(name)`` (pass it to the downstream API as its
        idempotency key: a successor that finds the step STARTED runs it
        again, and the downstream dedupes the repeat), and fn's value
        (bytes, str, None, or JSON, as a handler's) is recorded and
        returned. A refused call raises its typed error (LeaseLostError,
        AlreadyTerminalError, StepAlreadyFinishedError, StepLimitError, …),
        and fn's value is then not returned; an exception of fn propagates
        and the step stays STARTED.

            charge = attempt.step("charge", lambda k: stripe.charge(order, idempotency_key=k))
            attempt.step("receipt", lambda k: mailer.send(order, dedupe_id=k))
        """
        return run_step(self, name, fn)

    def step_key(self, name: str) -> str:
        """The idempotency key of step name for a downstream API: "idem-"
        and 64 hex digits, the same in every SDK and on every attempt."""
        return step_key(self._namespace, self._key, name)

    def _keep_step(self, st: Step) -> None:
        with self._steps_lock:
            self.steps[st.name] = st

    def check(self) -> None:
        """Raises the error that ended the lease (LeaseLostError, …), if one
        did. Call it right before the side effect."""
        if self.lost_error is not None:
            raise self.lost_error

    def sleep(self, seconds: float) -> None:
        """Sleeps, and raises as check() does as soon as the lease is lost."""
        self.lost.wait(seconds)
        self.check()


@dataclasses.dataclass(frozen=True)
class Result:
    """What do() returns: ``value`` is the handler's value as recorded, or
    the stored one when ``replayed``; ``record`` the record after do's last
    call."""

    value: bytes
    replayed: bool
    record: Record

    def text(self) -> str:
        """value as UTF-8 text."""
        return self.value.decode("utf-8")

    def json(self) -> Any:
        """value parsed as JSON (what a handler that returned a dict
        stored)."""
        return json.loads(self.value)


_current: "contextvars.ContextVar[Optional[Attempt]]" = contextvars.ContextVar("idem_attempt", default=None)


def current_attempt() -> Attempt:
    """The Attempt of the handler running in this thread (under do(),
    @idempotent or once()): how an @idempotent function reads its fencing
    token and its lease. RuntimeError outside a handler."""
    a = _current.get()
    if a is None:
        raise RuntimeError("idem.current_attempt() is only set while a handler of do(), @idempotent or once() runs")
    return a


def storable_text(s: str, limit: int = MAX_ERROR_BYTES) -> str:
    """s as text idem stores, for an error message that must be recorded
    whatever it holds: every NUL (U+0000) and lone surrogate becomes U+FFFD,
    and the text is cut to at most limit bytes of UTF-8 on a character
    boundary. Text that is already fine comes back unchanged."""
    # Every character is at least one byte, so the first limit characters
    # hold all that can be kept.
    head = s[:limit + 1]
    if "\0" in head or any("\ud800" <= c <= "\udfff" for c in head):
        head = "".join("\ufffd" if c == "\0" or "\ud800" <= c <= "\udfff" else c for c in head)
    b = head.encode("utf-8")
    if len(b) <= limit and len(head) == len(s):
        return head
    return b[:limit].decode("utf-8", errors="ignore")


def _error_text(exc: BaseException) -> str:
    return storable_text(str(exc) or type(exc).__name__)


def _encode(value: Any) -> bytes:
    """A handler's value as the bytes Complete stores: bytes as they are,
    str as UTF-8, None as b"", anything else as compact JSON."""
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise TypeError(f"idem: the handler returned {type(value).__name__}, which is not bytes, str, None or "
                        f"JSON ({err}); the job was released, not completed") from err


# ---------------------------------------------------------------------------
# Claim, with the server-side wait


def _acquire(client: "Client", job: Job, wait: Optional[Seconds]) -> Union[Result, Tuple[Record, float]]:
    """Claims the job under a fresh claimant id (reused on every retry, so a
    Claim whose answer was lost still acquires). Returns the replay of a
    COMPLETED job, or the record acquired and when the Claim that acquired
    it was sent (time.monotonic()): the lease runs from after then. Raises
    for every other outcome."""
    total = seconds(wait, "wait") or 0.0
    claimant = str(uuid.uuid4())
    until = time.monotonic() + total
    poll = 0
    while True:
        # The server waits for the holder, for what is left of the wait.
        w = math.floor(min(max(until - time.monotonic(), 0.0), MAX_WAIT) * 1000) / 1000
        asked = time.monotonic()
        sent = [asked]

        def claim(w: float = w) -> ClaimResult:
            sent[0] = time.monotonic()
            return client._claim(job.namespace, job.key, fingerprint=job.fingerprint, lease_ttl=job.lease_ttl,
                                 claimant=claimant, retention=job.retention, wait=w or None)

        try:
            res = retry(client.retry, claim)
        except InProgressError as busy:
            remaining = until - time.monotonic()
            if remaining <= 0:
                raise
            if w > 0 and time.monotonic() - asked >= w:
                continue  # the server waited all it was asked to: ask again
            # Answered before the wait it was asked for (the server holds as
            # many waiting Claims as it allows): poll, never past the
            # holder's lease.
            time.sleep(min(client.retry.delay(poll), remaining, max(busy.retry_after, 0.001)))
            poll += 1
            continue
        if res.outcome == Outcome.COMPLETED:
            return Result(value=res.record.result, replayed=True, record=res.record)
        if res.outcome == Outcome.FAILED:
            raise JobFailedError(res.record)
        return res.record, sent[0]


# ---------------------------------------------------------------------------
# Holding a lease while the handler runs


def _lease_of(job: Job, record: Record) -> float:
    """The lease job holds record under, in seconds."""
    lease = seconds(job.lease_ttl, "lease_ttl")
    if not lease and record.lease_expires_at and record.updated_at:
        # The server's default lease, measured on the server's clock.
        lease = (record.lease_expires_at - record.updated_at).total_seconds()
    return lease if lease and lease > 0 else _DEFAULT_LEASE_TTL


class _Lease:
    """The lease of one acquisition: heartbeats in a thread every third of
    it, and the Complete or Fail that ends it."""

    def __init__(self, client: "Client", job: Job, record: Record, claim_sent: float):
        self.client = client
        self.job = job
        self.lease = _lease_of(job, record)
        self.attempt = Attempt(token=record.token, number=record.attempt, takeover=record.attempt > 1,
                               record=record, _client=client, _namespace=job.namespace, _key=job.key)
        # When the lease was last extended, on this machine's clock: when
        # the Claim or heartbeat that the server last answered was sent,
        # which is before the server extended it.
        self._extended = claim_sent
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._keep, name=f"idem-heartbeat {job.namespace}/{job.key}",
                                        daemon=True)
        self._thread.start()

    def _keep(self) -> None:
        """Heartbeats every third of the lease until stop(). A beat is one
        call retried with the client's RetryPolicy; if that gives up on a
        transient error the next beat tries again (the lease outlives two
        missed beats, and a lease that ran out is still ours until someone
        takes it over). The first error that is not transient (LEASE_LOST,
        NOT_FOUND, ALREADY_TERMINAL, …) ends the lease: attempt.lost is set."""
        a, job = self.attempt, self.job
        interval = self.lease / 3
        # A beat that takes longer than the interval is of no use, and one
        # hung on a dead connection must hold up neither the beats after it
        # nor stop().
        timeout = min(self.client.timeout, max(interval, 1.0))
        sent = [0.0]

        def beat() -> Record:
            sent[0] = time.monotonic()
            return self.client._heartbeat(job.namespace, job.key, a.token, job.lease_ttl, timeout=timeout)

        while not self._done.wait(interval):
            try:
                retry(self.client.retry, beat, stop=self._done)
                self._extended = sent[0]
            except IdemError as err:
                if self._done.is_set():
                    return
                if not err.transient:
                    self._lose(err)
                    return
            except Exception as err:  # a bug: the lease cannot be kept, so say it is lost
                self._lose(IdemError(f"the heartbeat thread failed: {err!r}", code="UNKNOWN", rpc="Heartbeat",
                                     transient=False))
                return

    def _lose(self, err: IdemError) -> None:
        self.attempt.lost_error = err
        self.attempt.lost.set()

    def stop(self) -> Optional[IdemError]:
        """Stops the heartbeats; returns the error that ended the lease, or
        None while it is ours."""
        self._done.set()
        self._thread.join()
        return self.attempt.lost_error

    def _deadline(self) -> float:
        # Complete and Fail record what already happened, so they are
        # retried for as long as the lease we hold lasts (at least once).
        return max(self._extended + self.lease, time.monotonic())

    def complete(self, value: bytes) -> Result:
        job, a = self.job, self.attempt
        try:
            done = retry(self.client.retry, lambda: self.client._complete(job.namespace, job.key, a.token, value),
                         deadline=self._deadline())
        except (LeaseLostError, ResolvedByOperatorError) as err:
            err.value = value
            raise
        except IdemError as err:
            raise CompletionUnknownError(value, a.record, err) from err
        return Result(value=value, replayed=False, record=done)

    def fail(self, exc: BaseException) -> BaseException:
        """Records the handler's exception: a Permanent fails the job for
        good, any other Exception releases it, and an interrupt
        (KeyboardInterrupt, SystemExit) releases it with one try, as the
        process is stopping. Returns what do() raises: exc itself, or, when
        the failure cannot be recorded, what _not_recorded makes of it."""
        job, a = self.job, self.attempt
        interrupted = not isinstance(exc, Exception)
        text, retryable = _failure(exc)
        call = lambda: self.client._fail(job.namespace, job.key, a.token, text, retryable=retryable)  # noqa: E731
        try:
            if interrupted:
                call()
            else:
                retry(self.client.retry, call, deadline=self._deadline())
        except IdemError as err:
            return _not_recorded(exc, a.record, err)
        return exc


def _failure(exc: BaseException) -> Tuple[str, bool]:
    """The error text and retryable flag a Fail records for a handler's
    exception."""
    if not isinstance(exc, Exception):
        return storable_text(f"interrupted: {exc!r}"), True
    return _error_text(exc), not isinstance(exc, Permanent)


def _not_recorded(exc: BaseException, record: Record, err: IdemError) -> BaseException:
    """What do() raises for the handler's exception exc when recording it as
    the failure of record's job failed with err: a FailureNotRecordedError
    that carries both, or, for an interrupt (KeyboardInterrupt,
    SystemExit), exc itself with a note, so that the process still stops."""
    if isinstance(exc, Exception):
        return FailureNotRecordedError(exc, err, record)
    if hasattr(exc, "add_note"):
        exc.add_note(f"idem: recording this failure of {record.namespace}/{record.key} failed: {err}")
    return exc


def _finish(lease: _Lease, exc: Optional[BaseException], value: Any) -> Result:
    """Ends a lease after the handler: raises what it must, or returns the
    confirmed Result."""
    lost = lease.stop()
    if exc is not None:
        if lost is not None:
            # A successor may hold the job: anything recorded would be
            # refused, and the handler's exception is most likely the loss.
            if exc is lost:
                raise exc
            raise lost from exc
        raised = lease.fail(exc)
        if raised is exc:
            raise exc
        raise raised from exc
    try:
        encoded = _encode(value)
    except TypeError as err:
        if lost is not None:
            raise lost from err
        raised = lease.fail(err)
        if raised is err:
            raise
        raise raised from err
    if lost is not None:
        lost.value = encoded
        raise lost
    return lease.complete(encoded)


def do(client: "Client", job: Job, fn: Callable[[Attempt], Any], *, wait: Seconds = 0) -> Result:
    """Runs fn at most once per (job.namespace, job.key) across every worker,
    and records its outcome: the Python counterpart of the Go SDK's
    client.Do. It returns only when the job is done: by this call (fn ran
    and its Complete was confirmed) or before (a replay). Every other
    outcome raises.

    It claims the job under a fresh claimant id (a UUID), reused when a
    Claim that failed transiently is retried. Then, by outcome:

    - COMPLETED: returns the stored value with ``replayed=True``; fn is not
      called.
    - FAILED: raises JobFailedError with the stored error; fn is not called.
    - IN_PROGRESS: raises InProgressError (with ``retry_after``), unless
      ``wait`` (seconds) is given: then the server waits for the holder
      (Claim's wait, up to 60 s per Claim) and answers as soon as it
      finishes, with its stored result (a replay), its failure, or the job
      itself when the holder gave it back or its lease ran out.
    - UNRESOLVED: raises UnresolvedError; fn is not called.
    - ACQUIRED: calls fn(attempt) while a thread heartbeats every third of
      the lease; fn's value (bytes, str, None, or anything json.dumps
      takes) is recorded with Complete and returned as bytes.

    If fn raises, the job is released (a retryable Fail) so that the next
    delivery runs fn again, or failed for good when the exception is a
    Permanent, and the exception propagates; the text recorded is made
    storable (storable_text), so the failure is recorded whatever it holds.
    When the Fail is refused (ALREADY_TERMINAL when fn completed its own
    token first) or not confirmed, do() raises FailureNotRecordedError, with
    fn's exception as its ``handler_error`` and ``__cause__``.

    If a heartbeat finds the lease gone (LEASE_LOST: another worker took the
    job over), ``attempt.lost`` is set, do() raises that error once fn
    returns (with fn's value in ``err.value``), and never Completes: the
    side effect may then have run twice, which is what the fencing token is
    for. A Complete answered RESOLVED_BY_OPERATOR raises
    ResolvedByOperatorError: the result was not stored. A Complete that
    fails transiently is retried until it is confirmed or the lease runs
    out; then do() raises CompletionUnknownError with fn's value: the side
    effect ran, and the caller must know.
    """
    got = _acquire(client, job, wait)
    if isinstance(got, Result):
        return got
    lease = _Lease(client, job, *got)
    token = _current.set(lease.attempt)
    try:
        value = fn(lease.attempt)
    except BaseException as exc:
        _finish(lease, exc, None)  # raises
        raise
    finally:
        _current.reset(token)
    return _finish(lease, None, value)


def idempotent(client: "Client", namespace: str, *, key: Callable[..., str],
               fingerprint: Optional[Callable[..., bytes]] = None, lease_ttl: Optional[Seconds] = None,
               retention: Optional[Seconds] = None,
               wait: Seconds = 0) -> Callable[[Callable[..., Any]], Callable[..., Result]]:
    """A decorator that runs each call of the function through do(): the
    call's job is (namespace, key(*args, **kwargs)), fingerprinted with
    fingerprint(*args, **kwargs) when given. The decorated function returns
    do()'s Result (``.value`` bytes, ``.json()``, ``.replayed``) and raises
    what do() raises. Inside, ``idem.current_attempt()`` is the Attempt
    (token, lost, check()).

        @client.idempotent("send_receipt", key=lambda order: order["id"],
                           fingerprint=idem.fingerprint_json, lease_ttl=30)
        def send_receipt(order):
            idem.current_attempt().check()
            return mailer.send(order["email"], render(order))
    """
    if not callable(key):
        raise TypeError("idem: idempotent(key=…) must be a function of the call's arguments that returns the key")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Result]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Result:
            job = Job(namespace, key(*args, **kwargs),
                      fingerprint=fingerprint(*args, **kwargs) if fingerprint is not None else b"",
                      lease_ttl=lease_ttl, retention=retention)
            return do(client, job, lambda attempt: fn(*args, **kwargs), wait=wait)

        return wrapper

    return decorate


class Once:
    """``with client.once(job) as attempt:`` holds the job while the block
    runs, as do() holds it while its handler runs: entering claims it (and
    raises InProgressError, JobFailedError, UnresolvedError, …, as do()
    does), the block runs with heartbeats, and leaving records the outcome:
    Complete with ``attempt.result`` when the block ends normally, a Fail
    when it raises (released, or failed for good for a Permanent). Leaving
    raises LeaseLostError, ResolvedByOperatorError or CompletionUnknownError
    as do() does. ``once.result`` is the confirmed Result afterwards.

    A with-block cannot be skipped, so a job that completed earlier makes
    entering raise ``Replayed`` (with the stored ``result``): catch it and
    treat it as done.

        try:
            with client.once(idem.Job("emails", msg.id)) as attempt:
                attempt.result = mailer.send(msg)
        except idem.Replayed:
            pass  # sent before
        msg.ack()
    """

    def __init__(self, client: "Client", job: Job, *, wait: Seconds = 0):
        self.client = client
        self.job = job
        self.wait = wait
        self.result: Optional[Result] = None
        self._lease: Optional[_Lease] = None
        self._token: Optional[contextvars.Token] = None
        self._used = False

    def __enter__(self) -> Attempt:
        if self._used:
            raise RuntimeError("idem: a once() holds one job once; make a new one with client.once(job)")
        self._used = True
        got = _acquire(self.client, self.job, self.wait)
        if isinstance(got, Result):
            self.result = got
            raise Replayed(got)
        self._lease = _Lease(self.client, self.job, *got)
        self._token = _current.set(self._lease.attempt)
        return self._lease.attempt

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        assert self._lease is not None and self._token is not None
        _current.reset(self._token)
        if exc is not None:
            try:
                _finish(self._lease, exc, None)
            except BaseException as raised:
                if raised is exc:
                    return False  # let the with statement re-raise it with its traceback
                raise
            return False  # pragma: no cover (_finish raises)
        self.result = _finish(self._lease, None, self._lease.attempt.result)
        return False
