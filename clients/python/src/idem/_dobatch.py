"""do_batch(): do() for a delivery of several jobs, in batch calls."""

import concurrent.futures
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Union

from ._do import Attempt, Job, Result, _current, _encode, _failure, _lease_of, _not_recorded
from ._errors import CompletionUnknownError, IdemError, JobFailedError, LeaseLostError, ResolvedByOperatorError
from ._types import ClaimResult, Outcome, Record

if TYPE_CHECKING:  # pragma: no cover
    from ._client import Client

__all__ = ["do_batch"]


class _Held:
    """One acquired job of a do_batch: its attempt, its lease, and what its
    handler did."""

    def __init__(self, client: "Client", index: int, job: Job, record: Record, claim_sent: float):
        self.index = index
        self.job = job
        self.record = record
        self.lease = _lease_of(job, record)
        self.attempt = Attempt(token=record.token, number=record.attempt, takeover=record.attempt > 1, record=record,
                               _client=client, _namespace=job.namespace, _key=job.key)
        # When the lease runs out, on this machine's clock: a lease after the
        # Claim or heartbeat that the server last answered was sent.
        self.until = claim_sent + self.lease
        self.value: Optional[bytes] = None
        self.exc: Optional[BaseException] = None


def do_batch(client: "Client", jobs: Sequence[Job], fn: Callable[[Attempt, int], Any], *,
             concurrency: Optional[int] = None) -> List[Union[Result, BaseException]]:
    """Runs fn(attempt, i) for each job of jobs that it acquires, as do()
    runs its fn, in batch calls: one BatchClaim for all the jobs, one
    BatchHeartbeat for the running ones every third of the shortest lease
    (a thread), and one BatchComplete and one BatchFail once every fn has
    returned. fn runs in a pool of ``concurrency`` threads (default: one per
    acquired job), in the order of the jobs; idem.current_attempt() works in
    it.

    Returns one entry per job, in the order of jobs, each what do() would
    return or raise for that job alone: a Result (fresh, or stored and
    ``replayed``), or the exception (InProgressError, UnresolvedError,
    JobFailedError, FingerprintMismatchError, fn's own, LeaseLostError,
    ResolvedByOperatorError, CompletionUnknownError, or the Claim's). Two
    jobs of one key are two Claims in that order: the second finds the
    first's lease, an InProgressError.

    Each item is retried as do() retries its unary call, and a retry carries
    only the items still owed an answer: the Claims while they fail
    transiently, up to the RetryPolicy's max_attempts, each under a claimant
    of its own that its retries keep; the heartbeats in the same way, and a
    job whose heartbeat is refused (LEASE_LOST, …) has ``attempt.lost`` set,
    as in do(); the Completes and Fails until the server confirms them or
    the job's lease runs out. A batch the server refuses for its size is
    halved and the halves sent in turn. No jobs is no call. When an fn is
    interrupted (KeyboardInterrupt, SystemExit), its job is released with
    the others' outcomes, and do_batch then raises the first interruption.
    """
    from ._client import _claim_body, _claim_result, _complete_body, _fail_body, _heartbeat_body, _record

    jobs = list(jobs)
    for i, job in enumerate(jobs):
        if not isinstance(job, Job):
            raise TypeError(f"idem: jobs[{i}] is a {type(job).__name__}; do_batch takes idem.Jobs")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ValueError(f"idem: concurrency is {concurrency!r}; it must be a whole number above 0, or None")
    out: List[Any] = [None] * len(jobs)
    if not jobs:
        return out
    bodies = [_claim_body(j.namespace, j.key, j.fingerprint, j.lease_ttl, str(uuid.uuid4()), j.retention, 0.0,
                          at=f"jobs[{i}].") for i, j in enumerate(jobs)]
    claims, sent = client._send_items("BatchClaim", "Claim", bodies, _claim_result, halve=True)
    held: List[_Held] = []
    for i, got in enumerate(claims):
        if not isinstance(got, ClaimResult):
            out[i] = got  # InProgressError and UnresolvedError among them: fn is not called
        elif got.outcome == Outcome.COMPLETED:
            out[i] = Result(value=got.record.result, replayed=True, record=got.record)
        elif got.outcome == Outcome.FAILED:
            out[i] = JobFailedError(got.record)
        else:
            held.append(_Held(client, i, jobs[i], got.record, sent[i]))
    if not held:
        return out

    stop = threading.Event()
    beats = threading.Thread(target=_keep_leases, args=(client, held, stop, _heartbeat_body, _record),
                             name=f"idem-heartbeat batch of {len(held)}", daemon=True)
    beats.start()

    def run(h: _Held) -> None:
        token = _current.set(h.attempt)
        try:
            h.value = _encode(fn(h.attempt, h.index))
        except BaseException as exc:  # recorded as the job's failure, as do() records it
            h.exc = exc
        finally:
            _current.reset(token)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(concurrency or len(held), len(held)),
                                                   thread_name_prefix="idem-do-batch") as pool:
            list(pool.map(run, held))
    finally:
        stop.set()
        beats.join()

    completes, fails = [], []
    for h in held:
        lost = h.attempt.lost_error
        if lost is not None:
            # A successor may hold the job now: record nothing.
            lost.value = h.value
            out[h.index] = lost
        elif h.exc is not None:
            fails.append(h)
        else:
            completes.append(h)
    failing = threading.Thread(target=_fail_batch, args=(client, fails, out, _fail_body, _record), daemon=True)
    failing.start()
    _complete_batch(client, completes, out, _complete_body, _record)
    failing.join()
    for h in held:
        if h.exc is not None and not isinstance(h.exc, Exception):
            raise h.exc
    return out


def _deadlines(held: List[_Held]) -> List[float]:
    # Complete and Fail record what already happened, so they are retried
    # for as long as each job's lease lasts (at least once).
    now = time.monotonic()
    return [max(h.until, now) for h in held]


def _keep_leases(client: "Client", held: List[_Held], stop: threading.Event, body: Any, convert: Any) -> None:
    """Heartbeats every job that still holds its lease in one BatchHeartbeat
    every third of the shortest lease, until stop. A job whose heartbeat
    fails with an error that is not transient has lost its lease:
    attempt.lost is set."""
    interval = min(h.lease for h in held) / 3
    # A beat that takes longer than the interval is of no use.
    timeout = min(client.timeout, max(interval, 1.0))
    while not stop.wait(interval):
        beating = [h for h in held if h.attempt.lost_error is None]
        if not beating:
            return
        try:
            bodies = [body(h.job.namespace, h.job.key, h.record.token, h.job.lease_ttl) for h in beating]
            items, sent = client._send_items("BatchHeartbeat", "Heartbeat", bodies, convert, stop=stop, halve=True,
                                             timeout=timeout)
        except Exception as err:  # a bug: the leases cannot be kept, so say they are lost
            lost = IdemError(f"the heartbeat thread failed: {err!r}", code="UNKNOWN", rpc="Heartbeat",
                             transient=False)
            items, sent = [lost] * len(beating), [0.0] * len(beating)
        for h, item, at in zip(beating, items, sent):
            if isinstance(item, Record):
                h.until = at + h.lease
            elif not stop.is_set() and not item.transient:
                h.attempt.lost_error = item
                h.attempt.lost.set()


def _complete_batch(client: "Client", held: List[_Held], out: List[Any], body: Any, convert: Any) -> None:
    if not held:
        return
    values = [h.value if h.value is not None else b"" for h in held]
    bodies = [body(h.job.namespace, h.job.key, h.record.token, v) for h, v in zip(held, values)]
    items, _ = client._send_items("BatchComplete", "Complete", bodies, convert, until=_deadlines(held), halve=True)
    for h, v, item in zip(held, values, items):
        if isinstance(item, Record):
            out[h.index] = Result(value=v, replayed=False, record=item)
        elif isinstance(item, (LeaseLostError, ResolvedByOperatorError)):
            item.value = v
            out[h.index] = item
        else:
            unknown = CompletionUnknownError(v, h.record, item)
            unknown.__cause__ = item
            out[h.index] = unknown


def _fail_batch(client: "Client", held: List[_Held], out: List[Any], body: Any, convert: Any) -> None:
    """Records the handlers' exceptions; a job's entry is then its handler's
    exception, or a FailureNotRecordedError with it when recording it failed
    (as do() raises them)."""
    if not held:
        return
    bodies = []
    for h in held:
        assert h.exc is not None
        text, retryable = _failure(h.exc)
        bodies.append(body(h.job.namespace, h.job.key, h.record.token, text, retryable))
    items, _ = client._send_items("BatchFail", "Fail", bodies, convert, until=_deadlines(held), halve=True)
    for h, item in zip(held, items):
        assert h.exc is not None
        out[h.index] = _not_recorded(h.exc, h.record, item) if isinstance(item, IdemError) else h.exc
