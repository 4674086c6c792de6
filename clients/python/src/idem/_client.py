"""Client: one typed method per RPC of IdempotencyService and AdminService."""

import os
import ssl
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from ._do import Attempt, Job, Once, Result, do, idempotent
from ._dobatch import do_batch
from ._errors import IdemError, InProgressError, UnresolvedError
from ._resolver import Held, Resolution, Resolver
from ._retry import RetryPolicy, retry
from ._types import (MAX_WAIT, ClaimRequest, ClaimResult, CompleteRequest, FailRequest, HeartbeatRequest,
                     LookupRequest, Outcome, Record, RecordPage, Seconds, State, StatsRow, Step, TimelineEntry,
                     bytes_to_wire, duration_from_wire, duration_to_wire, int_from_wire, seconds, time_from_wire)
from ._wire import Transport, decode_status

__all__ = ["Client", "AdminClient", "DEFAULT_URL", "MAX_WAIT"]

#: idemd's HTTP/JSON listener when it runs with its defaults on this machine.
DEFAULT_URL = "http://127.0.0.1:7072"

IDEMPOTENCY = "idem.v1.IdempotencyService"
ADMIN = "idem.v1.AdminService"
RESOLVER = "idem.v1.ResolverService"

T = TypeVar("T")


def _bytes(v: Any, field: str) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    hint = "; fingerprint a payload with idem.fingerprint_json(payload)" if field.endswith("fingerprint") else ""
    raise TypeError(f"idem: {field} must be bytes, not {type(v).__name__}{hint}")


def _token(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"idem: token must be an int (the fencing token of the Claim), not {type(v).__name__}")
    return str(v)


def _body(**fields: Any) -> Dict[str, Any]:
    """A request body without the fields left at their defaults (None, "",
    False), which the server reads as unset."""
    return {k: v for k, v in fields.items() if v is not None and v != "" and v is not False}


# The bodies of the token-bearing calls and the Claim, for the unary call and
# for an item of a batch; at prefixes the field an error names
# ("requests[3].").

def _claim_body(namespace: str, key: str, fingerprint: bytes, lease_ttl: Optional[Seconds], claimant: str,
                retention: Optional[Seconds], wait: float, at: str = "") -> Dict[str, Any]:
    fp = _bytes(fingerprint, at + "fingerprint")
    return _body(namespace=namespace, key=key, fingerprint=bytes_to_wire(fp) if fp else None,
                 leaseTtl=duration_to_wire(seconds(lease_ttl, at + "lease_ttl")), claimant=claimant,
                 retention=duration_to_wire(seconds(retention, at + "retention")), wait=duration_to_wire(wait))


def _claim_result(m: Mapping[str, Any]) -> ClaimResult:
    """What claim() makes of a ClaimResponse: ACQUIRED, COMPLETED and FAILED
    are returned, IN_PROGRESS and UNRESOLVED raised."""
    res = ClaimResult(outcome=Outcome.from_wire(m.get("outcome")), record=Record.from_wire(m.get("record")),
                      retry_after=duration_from_wire(m.get("retryAfter")))
    if res.outcome == Outcome.IN_PROGRESS:
        raise InProgressError(res.record, res.retry_after)
    if res.outcome == Outcome.UNRESOLVED:
        raise UnresolvedError(res.record)
    if res.outcome not in (Outcome.ACQUIRED, Outcome.COMPLETED, Outcome.FAILED):
        raise IdemError(f"Claim answered with an outcome this client does not know: {m.get('outcome')!r}",
                        code="UNKNOWN", rpc="Claim", transient=False)
    return res


def _complete_body(namespace: str, key: str, token: int, result: bytes, at: str = "") -> Dict[str, Any]:
    r = _bytes(result, at + "result")
    return _body(namespace=namespace, key=key, token=_token(token), result=bytes_to_wire(r) if r else None)


def _fail_body(namespace: str, key: str, token: int, error: str, retryable: bool) -> Dict[str, Any]:
    return _body(namespace=namespace, key=key, token=_token(token), error=str(error), retryable=bool(retryable))


def _heartbeat_body(namespace: str, key: str, token: int, lease_ttl: Optional[Seconds],
                    at: str = "") -> Dict[str, Any]:
    return _body(namespace=namespace, key=key, token=_token(token),
                 leaseTtl=duration_to_wire(seconds(lease_ttl, at + "lease_ttl")))


def _record(m: Mapping[str, Any]) -> Record:
    return Record.from_wire(m.get("record"))


def _items(requests: Sequence[Any], kind: type, call: str) -> List[Any]:
    items = list(requests)
    for i, r in enumerate(items):
        if not isinstance(r, kind):
            raise TypeError(f"idem: requests[{i}] is a {type(r).__name__}; {call} takes idem.{kind.__name__}s")
    return items


class Client:
    """A client of one idemd, over its HTTP/JSON listener (``idemd serve
    --json-listen``) with the Connect protocol. It is safe to share between
    threads; create one per process. Use it as a context manager, or call
    close(), to close its kept-alive connections.

    - ``url``: the listener, http:// or https:// (default
      http://127.0.0.1:7072); a path after the host is kept as a prefix.
    - ``token``: sent as "Authorization: Bearer <token>" when given; only
      over https or to a loopback address.
    - ``ca_file``: a PEM file of the CAs that signed idemd's certificate
      (default: the system's); ``cert_file`` and ``key_file``: a client
      certificate for mutual TLS; or ``ssl_context`` for anything else.
    - ``timeout``: each request's timeout in seconds (default 10; a Claim
      with a wait gets the wait on top).
    - ``retry``: how transient failures are retried (default RetryPolicy()).
      Every typed call is retried with it; ``RetryPolicy(max_attempts=1)``
      turns that off.
    """

    def __init__(self, url: str = DEFAULT_URL, *, token: str = "", timeout: float = 10.0,
                 retry: Optional[RetryPolicy] = None, ca_file: Optional[str] = None,
                 cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None):
        if ssl_context is not None and (ca_file or cert_file):
            raise ValueError("idem: pass ssl_context or ca_file/cert_file, not both")
        if (ca_file or cert_file) and not url.startswith("https://"):
            raise ValueError(f"idem: ca_file and cert_file are for an https:// url, not {url!r}")
        if key_file and not cert_file:
            raise ValueError("idem: key_file needs cert_file")
        if ssl_context is None and (ca_file or cert_file):
            try:
                ssl_context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as err:
                raise ValueError(f"idem: ca_file {ca_file!r}: {err.strerror or err}") from err
            if cert_file:
                try:
                    ssl_context.load_cert_chain(cert_file, key_file)
                except (OSError, ssl.SSLError) as err:
                    files = f"cert_file {cert_file!r}" + (f" with key_file {key_file!r}" if key_file else "")
                    raise ValueError(f"idem: {files}: {err.strerror or err}") from err
        if not timeout > 0:
            raise ValueError(f"idem: timeout is {timeout}; it must be above 0 seconds")
        self._transport = Transport(url, token=token, ssl_context=ssl_context)
        self.url = self._transport.url
        self.timeout = float(timeout)
        self.retry = retry if retry is not None else RetryPolicy()
        #: AdminService: list, delete, count and resolve records.
        self.admin = AdminClient(self)

    @classmethod
    def from_env(cls, **overrides: Any) -> "Client":
        """A Client configured from the environment, as the idem CLI is:
        IDEM_JSON_URL (default http://127.0.0.1:7072), IDEM_TOKEN,
        IDEM_TLS_CA, IDEM_TLS_CERT and IDEM_TLS_KEY. Keyword arguments win."""
        kw: Dict[str, Any] = {
            "url": os.environ.get("IDEM_JSON_URL") or DEFAULT_URL,
            "token": os.environ.get("IDEM_TOKEN", ""),
            "ca_file": os.environ.get("IDEM_TLS_CA") or None,
            "cert_file": os.environ.get("IDEM_TLS_CERT") or None,
            "key_file": os.environ.get("IDEM_TLS_KEY") or None,
        }
        kw.update(overrides)
        return cls(**kw)

    def close(self) -> None:
        """Closes the kept-alive connections. Calls after it open new ones."""
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"idem.Client({self.url!r})"

    # ------------------------------------------------------------------
    # The raw call

    def call(self, service: str, method: str, body: Mapping[str, Any], *,
             timeout: Optional[float] = None) -> Dict[str, Any]:
        """Sends one RPC as given, without retries, and returns the answer's
        JSON object (protobuf's JSON mapping: camelCase fields, int64 as
        strings, bytes as base64). service is "IdempotencyService" or
        "AdminService" (or with its package, "idem.v1.AdminService"). For
        RPCs without a typed call yet, and for tests of the wire itself.
        Errors are raised as for the typed calls."""
        if "." not in service:
            service = "idem.v1." + service
        return self._transport.call(service, method, body, self.timeout if timeout is None else timeout)

    def _retrying(self, call: Callable[[], T]) -> T:
        return retry(self.retry, call)

    # ------------------------------------------------------------------
    # IdempotencyService

    def claim(self, namespace: str, key: str, *, fingerprint: bytes = b"", lease_ttl: Optional[Seconds] = None,
              claimant: str = "", retention: Optional[Seconds] = None,
              wait: Optional[Seconds] = None) -> ClaimResult:
        """Asks for the right to perform the job (namespace, key).

        Returns a ClaimResult for ACQUIRED (perform the side effect, then
        complete() or fail() with ``result.record.token``), COMPLETED
        (``record.result`` is the stored result) and FAILED (``record.error``);
        raises InProgressError (with ``retry_after``) when another worker
        holds a live lease and UnresolvedError when the record is held for
        resolution, so that code which only looks at the return value never
        runs a side effect it must not.

        ``lease_ttl`` (seconds; default the server's, 5 minutes unless
        configured) is how long the lease lasts without a heartbeat;
        ``retention`` how long the outcome is kept; ``fingerprint`` (bytes,
        at most 64; see fingerprint_json) is stored with a new record, and a
        later Claim with another raises FingerprintMismatchError. ``wait``
        (seconds, at most 60) makes the server wait, when the job is in
        progress, until the holder finishes (the answer is then COMPLETED or
        FAILED, or ACQUIRED when it gave the job back or its lease ran out)
        or the wait runs out (InProgressError). ``claimant`` identifies the
        attempt; it defaults to a fresh UUID, so that this call's own
        retries of an answer that was lost still acquire.
        """
        claimant = claimant or str(uuid.uuid4())
        return self._retrying(lambda: self._claim(namespace, key, fingerprint=fingerprint, lease_ttl=lease_ttl,
                                                  claimant=claimant, retention=retention, wait=wait))

    def _claim(self, namespace: str, key: str, *, fingerprint: bytes = b"", lease_ttl: Optional[Seconds] = None,
               claimant: str = "", retention: Optional[Seconds] = None,
               wait: Optional[Seconds] = None) -> ClaimResult:
        w = seconds(wait, "wait") or 0.0
        body = _claim_body(namespace, key, fingerprint, lease_ttl, claimant, retention, w)
        return _claim_result(self._transport.call(IDEMPOTENCY, "Claim", body, self.timeout + w))

    def complete(self, namespace: str, key: str, token: int, result: bytes = b"") -> Record:
        """Records the job's success and its result (bytes, at most 64 KiB
        unless the server is configured otherwise) with the acquired token.
        Repeating it with the same token after a lost answer returns the
        stored record. Raises LeaseLostError (another worker took over),
        ResolvedByOperatorError, AlreadyTerminalError, NotFoundError."""
        return self._retrying(lambda: self._complete(namespace, key, token, result))

    def _complete(self, namespace: str, key: str, token: int, result: bytes = b"") -> Record:
        body = _complete_body(namespace, key, token, result)
        return _record(self._transport.call(IDEMPOTENCY, "Complete", body, self.timeout))

    def fail(self, namespace: str, key: str, token: int, error: str, *, retryable: bool) -> Record:
        """Records the job's failure with the acquired token: retryable=True
        gives the job back (RELEASED: the next Claim acquires it),
        retryable=False fails it for good (FAILED: replayed to every later
        Claim). error is at most 4 KiB of UTF-8 without NUL (see
        storable_text). Repeating it with the same token returns the stored
        record."""
        return self._retrying(lambda: self._fail(namespace, key, token, error, retryable=retryable))

    def _fail(self, namespace: str, key: str, token: int, error: str, *, retryable: bool) -> Record:
        body = _fail_body(namespace, key, token, error, retryable)
        return _record(self._transport.call(IDEMPOTENCY, "Fail", body, self.timeout))

    def heartbeat(self, namespace: str, key: str, token: int, lease_ttl: Optional[Seconds] = None) -> Record:
        """Extends the lease held with the token to lease_ttl seconds from now
        (default the server's); returns the record with its new
        lease_expires_at. Raises LeaseLostError, AlreadyTerminalError,
        NotFoundError."""
        return self._retrying(lambda: self._heartbeat(namespace, key, token, lease_ttl))

    def _heartbeat(self, namespace: str, key: str, token: int, lease_ttl: Optional[Seconds] = None,
                   timeout: Optional[float] = None) -> Record:
        body = _heartbeat_body(namespace, key, token, lease_ttl)
        return _record(self._transport.call(IDEMPOTENCY, "Heartbeat", body,
                                            self.timeout if timeout is None else timeout))

    def lookup(self, namespace: str, key: str) -> Record:
        """Reads the record without changing it; NotFoundError when there is
        none."""
        return self._retrying(lambda: Record.from_wire(
            self._transport.call(IDEMPOTENCY, "Lookup", _body(namespace=namespace, key=key),
                                 self.timeout).get("record")))

    def lookup_history(self, namespace: str, key: str) -> Tuple[Record, List[TimelineEntry]]:
        """Reads the record and its timeline (Lookup with include_history):
        the exceptions in the life of its key, oldest first (takeovers,
        failures, holds, resolutions, with who resolved it and why).
        NotFoundError when there is no record."""
        m = self._retrying(lambda: self._transport.call(
            IDEMPOTENCY, "Lookup", _body(namespace=namespace, key=key, includeHistory=True), self.timeout))
        return Record.from_wire(m.get("record")), [TimelineEntry.from_wire(e) for e in m.get("history") or []]

    # ------------------------------------------------------------------
    # Steps

    def start_step(self, namespace: str, key: str, token: int, step: str) -> Step:
        """Marks a step of the held job STARTED before its effect, so that a
        successor can tell "finished" from "may have happened"; returns the
        step as stored. Repeating it with the token that started it returns
        the stored step. Raises LeaseLostError, AlreadyTerminalError,
        ResolvedByOperatorError, StepAlreadyFinishedError (the step is
        FINISHED), StepLimitError, InvalidArgumentError (INVALID_STEP_NAME)
        and NotFoundError. Inside do(), use ``attempt.step`` instead."""
        body = _body(namespace=namespace, key=key, token=_token(token), step=step)
        return self._retrying(lambda: Step.from_wire(
            self._transport.call(IDEMPOTENCY, "StartStep", body, self.timeout).get("step")))

    def complete_step(self, namespace: str, key: str, token: int, step: str, result: bytes = b"") -> Step:
        """Records a step of the held job FINISHED with its result (bytes),
        whether or not it was started; returns the step as stored. Repeating
        it with the result the step holds returns the stored step; another
        result raises StepAlreadyFinishedError. Raises as start_step does."""
        r = _bytes(result, "result")
        body = _body(namespace=namespace, key=key, token=_token(token), step=step,
                     result=bytes_to_wire(r) if r else None)
        return self._retrying(lambda: Step.from_wire(
            self._transport.call(IDEMPOTENCY, "CompleteStep", body, self.timeout).get("step")))

    # ------------------------------------------------------------------
    # ResolverService

    def list_held(self, namespaces: Sequence[str] = (), *, page_size: Optional[int] = None,
                  page_token: str = "") -> RecordPage:
        """One page of the UNRESOLVED records of the caller's tenant, ordered
        by namespace, then key: of these namespaces, or of every namespace
        the token may use when none is given. page_size is 1 to 1000
        (default 100); pass next_page_token as page_token for the next
        page. Each record carries its token, for resolve(); the server
        leaves its steps out, so read them with lookup()."""
        if isinstance(namespaces, str):
            namespaces = [namespaces]
        body = _body(namespaces=list(namespaces) or None, pageSize=page_size, pageToken=page_token)
        m = self._retrying(lambda: self._transport.call(RESOLVER, "ListHeld", body, self.timeout))
        return RecordPage(records=[Record.from_wire(r) for r in m.get("records") or []],
                          next_page_token=m.get("nextPageToken") or "")

    def iter_held(self, namespaces: Sequence[str] = (), *, page_size: Optional[int] = None) -> Iterator[Record]:
        """Every record list_held pages through, one page at a time."""
        token = ""
        while True:
            page = self.list_held(namespaces, page_size=page_size, page_token=token)
            yield from page.records
            token = page.next_page_token
            if not token:
                return

    def resolve(self, namespace: str, key: str, token: int, *, resolver: str, completed: Optional[bytes] = None,
                failed: Optional[str] = None, released: bool = False, reason: str = "") -> Record:
        """A resolver's decision about an UNRESOLVED record held with token
        (Record.token, as list_held gave it), with exactly one of:
        completed=RESULT (the effect happened: COMPLETED with that result;
        b"" is a result), failed=ERROR (FAILED for good) or released=True
        (the effect did not happen: RELEASED, and the next Claim runs the
        job again). ``resolver`` (1 to 128 bytes) names who decided and
        ``reason`` says why, on the record's timeline and in idemd's log.
        Raises NotUnresolvedError when someone else decided first (unless
        they decided exactly this, which is answered as done),
        LeaseLostError when the record is held with another token, and
        NotFoundError."""
        given = [name for name, v in (("completed", completed is not None), ("failed", failed is not None),
                                      ("released", released)) if v]
        if len(given) != 1:
            raise ValueError("idem: resolve needs exactly one of completed=, failed= or released=True"
                             + (f"; got {', '.join(given)}" if given else ""))
        body = _body(namespace=namespace, key=key, token=_token(token), resolver=resolver, reason=reason)
        if completed is not None:
            r = _bytes(completed, "completed")
            body["completed"] = {"result": bytes_to_wire(r)} if r else {}
        elif failed is not None:
            body["failed"] = {"error": str(failed)}
        else:
            body["released"] = {}
        return self._retrying(lambda: Record.from_wire(
            self._transport.call(RESOLVER, "Resolve", body, self.timeout).get("record")))

    # ------------------------------------------------------------------
    # The batch calls

    def batch_claim(self, requests: Sequence[Union[ClaimRequest, Job]]) -> List[Union[ClaimResult, IdemError]]:
        """Claims many jobs in one call (BatchClaim), for a consumer that
        holds a delivery of many: each request a ClaimRequest, or a Job
        (claimed with its fingerprint, lease and retention). Returns one
        entry per request, in their order: the ClaimResult claim() would
        return, or the exception it would raise (InProgressError,
        UnresolvedError, FingerprintMismatchError, …), as
        ``asyncio.gather(return_exceptions=True)`` gives them. Two requests
        of one key are answered as two claims made in that order. A request
        without a claimant gets a fresh UUID, kept when it is sent again.

        Raises, for the batch as a whole, only what concerns it:
        InvalidArgumentError with reason INVALID_BATCH_SIZE (no requests, or
        more than the server's --batch-max-items, 500 by default), an
        IdemError with REQUEST_TOO_LARGE (over its --batch-max-bytes, 4 MiB
        by default), or a failure of the call itself (authentication, no
        answer). Retries are claim()'s, per item: the call is sent again
        when it fails transiently, and so are the items answered with a
        transient error (UNAVAILABLE, a rate limit, which is counted per
        item), in a batch of their own, until the client's RetryPolicy runs
        out; an item then keeps its last error."""
        items: List[ClaimRequest] = []
        for i, r in enumerate(requests):
            if isinstance(r, Job):
                r = ClaimRequest(r.namespace, r.key, fingerprint=r.fingerprint, lease_ttl=r.lease_ttl,
                                 retention=r.retention)
            elif not isinstance(r, ClaimRequest):
                raise TypeError(f"idem: requests[{i}] is a {type(r).__name__}; batch_claim takes idem.ClaimRequests "
                                "or idem.Jobs")
            items.append(r)
        bodies = [_claim_body(r.namespace, r.key, r.fingerprint, r.lease_ttl, r.claimant or str(uuid.uuid4()),
                              r.retention, 0.0, at=f"requests[{i}].") for i, r in enumerate(items)]
        return self._batch("BatchClaim", "Claim", bodies, _claim_result)

    def batch_complete(self, requests: Sequence[CompleteRequest]) -> List[Union[Record, IdemError]]:
        """Completes many jobs in one call (BatchComplete): one entry per
        request, in their order, the Record complete() would return or the
        exception it would raise (LeaseLostError, AlreadyTerminalError,
        ResolvedByOperatorError, …). It raises and retries as batch_claim
        does; an item sent again carries the same token and result, which
        is safe."""
        bodies = [_complete_body(r.namespace, r.key, r.token, r.result, at=f"requests[{i}].")
                  for i, r in enumerate(_items(requests, CompleteRequest, "batch_complete"))]
        return self._batch("BatchComplete", "Complete", bodies, _record)

    def batch_fail(self, requests: Sequence[FailRequest]) -> List[Union[Record, IdemError]]:
        """Fails many jobs in one call (BatchFail): one entry per request, in
        their order, the Record fail() would return or the exception it
        would raise. It raises and retries as batch_complete does."""
        bodies = [_fail_body(r.namespace, r.key, r.token, r.error, r.retryable)
                  for r in _items(requests, FailRequest, "batch_fail")]
        return self._batch("BatchFail", "Fail", bodies, _record)

    def batch_heartbeat(self, requests: Sequence[HeartbeatRequest]) -> List[Union[Record, IdemError]]:
        """Extends many leases in one call (BatchHeartbeat), to keep a whole
        delivery's jobs held while they run: one entry per request, in their
        order, the Record with its new lease_expires_at or the exception
        heartbeat() would raise (LeaseLostError: stop that job). It raises
        and retries as batch_claim does."""
        bodies = [_heartbeat_body(r.namespace, r.key, r.token, r.lease_ttl, at=f"requests[{i}].")
                  for i, r in enumerate(_items(requests, HeartbeatRequest, "batch_heartbeat"))]
        return self._batch("BatchHeartbeat", "Heartbeat", bodies, _record)

    def batch_lookup(self, requests: Sequence[LookupRequest]) -> List[Union[Record, IdemError]]:
        """Reads many records in one call (BatchLookup): one entry per
        request, in their order, the Record or the exception lookup() would
        raise (NotFoundError for one that does not exist)."""
        bodies = [_body(namespace=r.namespace, key=r.key) for r in _items(requests, LookupRequest, "batch_lookup")]
        return self._batch("BatchLookup", "Lookup", bodies, _record)

    def _batch(self, method: str, rpc: str, bodies: List[Dict[str, Any]],
               convert: Callable[[Dict[str, Any]], T]) -> List[Union[T, IdemError]]:
        return self._send_items(method, rpc, bodies, convert)[0]

    def _send_items(self, method: str, rpc: str, bodies: List[Dict[str, Any]], convert: Callable[[Dict[str, Any]], T],
                    *, until: Optional[List[float]] = None, stop: Optional[threading.Event] = None,
                    halve: bool = False, timeout: Optional[float] = None) -> Tuple[List[Any], List[float]]:
        """Sends the batch and returns its entries, and when the try that
        gave each its entry was sent (time.monotonic()). Each round sends the
        items still owed an answer: all of them first, then those whose
        error was transient, each until its limit: until[i] when given (no
        try starts after it, and the first always goes out), else the
        policy's max_attempts, one count for the rounds and the call's own
        transient failures, as a unary call counts its tries. stop, when set,
        ends the retries.

        A call that fails as a whole before any item was answered is raised,
        unless halve: then a batch refused for its size is halved and the
        halves sent in turn, and any other failure of the call is the error
        of each of its items, as do_batch needs them."""
        out: List[Any] = [None] * len(bodies)
        sent = [0.0] * len(bodies)
        pending = list(range(len(bodies)))
        answered = False
        attempt = 1
        while True:
            at = time.monotonic()
            try:
                answers = self._round(method, rpc, [bodies[i] for i in pending], convert,
                                      self.timeout if timeout is None else timeout, halve)
            except IdemError as err:
                if not answered and not (err.transient and attempt < self.retry.max_attempts):
                    raise
                answers = [err] * len(pending)
            else:
                answered = True
            for i, a in zip(pending, answers):
                out[i], sent[i] = a, at
            again, limit = [], None
            for i in pending:
                e = out[i]
                if not isinstance(e, IdemError) or not e.transient:
                    continue
                if until is not None:
                    if time.monotonic() >= until[i]:
                        continue  # its last try was this one
                    limit = until[i] if limit is None else min(limit, until[i])
                elif attempt >= self.retry.max_attempts:
                    continue
                again.append(i)
            if not again or (stop is not None and stop.is_set()):
                return out, sent
            slowest = max((out[i] for i in again), key=lambda e: e.retry_after or 0.0)
            wait = self.retry.backoff(attempt - 1, slowest)
            if limit is not None:
                wait = min(wait, max(limit - time.monotonic(), 0.0))
            if stop is not None:
                if stop.wait(wait):
                    return out, sent
            else:
                time.sleep(wait)
            pending = again
            attempt += 1

    def _round(self, method: str, rpc: str, bodies: List[Dict[str, Any]], convert: Callable[[Dict[str, Any]], T],
               timeout: float, halve: bool) -> List[Any]:
        """One try of a batch: an entry per body (see _send_items)."""
        try:
            m = self._transport.call(IDEMPOTENCY, method, {"requests": bodies}, timeout)
            results = m.get("results")
            if not isinstance(results, list) or len(results) != len(bodies):
                raise IdemError(f"{method} answered {len(results) if isinstance(results, list) else 'no'} results "
                                f"for {len(bodies)} requests; the server and this client disagree on the API",
                                code="UNKNOWN", rpc=method, transient=False)
        except IdemError as err:
            if not halve:
                raise
            if len(bodies) > 1 and _refused_for_size(err):
                half = len(bodies) // 2
                return (self._round(method, rpc, bodies[:half], convert, timeout, halve)
                        + self._round(method, rpc, bodies[half:], convert, timeout, halve))
            return [err] * len(bodies)
        return [_answer(rpc, item, convert) for item in results]

    # ------------------------------------------------------------------
    # do, @idempotent, once: see _do.py

    def do(self, job: Job, fn: Callable[[Attempt], Any], *, wait: Seconds = 0) -> Result:
        """Runs fn at most once per (job.namespace, job.key) across every
        worker, and records its outcome: the counterpart of the Go SDK's
        client.Do. See idem.do for the whole contract."""
        return do(self, job, fn, wait=wait)

    def do_batch(self, jobs: Sequence[Job], fn: Callable[[Attempt, int], Any], *,
                 concurrency: Optional[int] = None) -> List[Union[Result, BaseException]]:
        """do() for a delivery of several jobs, in batch calls: fn(attempt,
        i) runs for each job acquired, and each entry of the list returned
        is what do() would return or raise for jobs[i]. See idem.do_batch
        for the whole contract."""
        return do_batch(self, jobs, fn, concurrency=concurrency)

    def idempotent(self, namespace: str, *, key: Callable[..., str],
                   fingerprint: Optional[Callable[..., bytes]] = None, lease_ttl: Optional[Seconds] = None,
                   retention: Optional[Seconds] = None,
                   wait: Seconds = 0) -> Callable[[Callable[..., Any]], Callable[..., Result]]:
        """A decorator that runs the function through do(): see
        idem.idempotent."""
        return idempotent(self, namespace, key=key, fingerprint=fingerprint, lease_ttl=lease_ttl,
                          retention=retention, wait=wait)

    def resolver(self, name: str, fn: Callable[[Held], Resolution], *, namespaces: Sequence[str] = (),
                 poll_interval: float = 5.0, retry_interval: float = 60.0) -> Resolver:
        """A Resolver named name that decides this client's tenant's held
        records with fn: see idem.Resolver. Run it with run() or start()."""
        return Resolver(self, name, fn, namespaces=namespaces, poll_interval=poll_interval,
                        retry_interval=retry_interval)

    def once(self, job: Job, *, wait: Seconds = 0) -> Once:
        """A context manager that holds the job while its block runs: see
        idem.Once."""
        return Once(self, job, wait=wait)


def _refused_for_size(err: IdemError) -> bool:
    """Whether a batch was refused as a whole for its number of items or its
    bytes, so that smaller batches of the same items would be taken."""
    return err.reason in ("INVALID_BATCH_SIZE", "REQUEST_TOO_LARGE") or (
        err.code == "RESOURCE_EXHAUSTED" and not err.reason and err.retry_after is None)


def _answer(rpc: str, item: Any, convert: Callable[[Dict[str, Any]], T]) -> Union[T, IdemError]:
    """One entry of a batch: the item's response through convert (the unary
    call's own conversion, whose IdemError is the entry, as an IN_PROGRESS
    Claim's InProgressError), or its google.rpc.Status as the exception the
    unary call raises."""
    if isinstance(item, dict) and item.get("error") is not None:
        return decode_status(rpc, item["error"])
    if isinstance(item, dict) and item.get("response") is not None:
        try:
            return convert(item["response"])
        except IdemError as err:
            return err
    return IdemError(f"a result with neither a response nor an error: {item!r:.200}; this client is older than "
                     "the server", code="UNKNOWN", rpc=rpc, transient=False)


class AdminClient:
    """AdminService, for the people who run idem: ``client.admin``. When
    idemd runs with tenants, only tenants with ``admin: true`` may call it
    (PermissionDeniedError / NOT_ADMIN otherwise), and only operators may
    name another tenant (``tenant``) or every tenant (``all_tenants``)."""

    def __init__(self, client: Client):
        self._c = client

    def _call(self, method: str, body: Dict[str, Any]) -> Dict[str, Any]:
        return self._c._retrying(lambda: self._c._transport.call(ADMIN, method, body, self._c.timeout))

    def list_records(self, namespace: str = "", *, state: Optional[State] = None,
                     older_than: Optional[Seconds] = None, page_size: Optional[int] = None, page_token: str = "",
                     tenant: str = "", all_tenants: bool = False, key_prefix: str = "") -> RecordPage:
        """One page of records, ordered by namespace, then key: of one
        namespace or all, in one state or all, unchanged for at least
        older_than seconds (with state PROCESSING: the claims that have not
        heartbeated lately), whose key starts with key_prefix (all when
        empty). page_size is 1 to 1000 (default 100); pass the page's
        next_page_token as page_token for the next one."""
        body = _body(namespace=namespace, state=State(state).wire if state else None,
                     olderThan=duration_to_wire(seconds(older_than, "older_than")) if older_than is not None else None,
                     pageSize=page_size, pageToken=page_token, tenant=tenant, allTenants=all_tenants,
                     keyPrefix=key_prefix)
        if older_than is not None and "olderThan" not in body:
            body["olderThan"] = "0s"
        m = self._call("ListRecords", body)
        return RecordPage(records=[Record.from_wire(r) for r in m.get("records") or []],
                          next_page_token=m.get("nextPageToken") or "")

    def iter_records(self, namespace: str = "", *, state: Optional[State] = None,
                     older_than: Optional[Seconds] = None, page_size: Optional[int] = None, tenant: str = "",
                     all_tenants: bool = False, key_prefix: str = "") -> Iterator[Record]:
        """Every record list_records would page through, one page at a time."""
        token = ""
        while True:
            page = self.list_records(namespace, state=state, older_than=older_than, page_size=page_size,
                                     page_token=token, tenant=tenant, all_tenants=all_tenants, key_prefix=key_prefix)
            yield from page.records
            token = page.next_page_token
            if not token:
                return

    def delete_record(self, namespace: str, key: str, *, tenant: str = "") -> Record:
        """Evicts the record whatever its state and returns it as it was. The
        next Claim of the key creates it afresh (attempt 1) with a greater
        token; a worker still holding the old one gets NOT_FOUND or
        LEASE_LOST."""
        m = self._call("DeleteRecord", _body(namespace=namespace, key=key, tenant=tenant))
        return Record.from_wire(m.get("record"))

    def stats(self, namespace: str = "", *, tenant: str = "", all_tenants: bool = False) -> List[StatsRow]:
        """How many records each namespace holds in each state."""
        m = self._call("Stats", _body(namespace=namespace, tenant=tenant, allTenants=all_tenants))
        return [StatsRow(namespace=r.get("namespace") or "", state=State.from_wire(r.get("state")),
                         count=int_from_wire(r.get("count")), tenant=r.get("tenant") or "",
                         oldest_updated_at=time_from_wire(r.get("oldestUpdatedAt")))
                for r in m.get("rows") or []]

    def resolve_record(self, namespace: str, key: str, *, completed: Optional[bytes] = None,
                       failed: Optional[str] = None, released: bool = False, tenant: str = "") -> Record:
        """Moves an UNRESOLVED record on, with exactly one of: completed=
        RESULT (COMPLETED with that result; b"" is a result), failed=ERROR
        (FAILED with that error), or released=True (RELEASED: the next Claim
        acquires it). Raises NotUnresolvedError when the record is not
        UNRESOLVED (unless it is already resolved as asked: a retry)."""
        given = [name for name, v in (("completed", completed is not None), ("failed", failed is not None),
                                      ("released", released)) if v]
        if len(given) != 1:
            raise ValueError("idem: resolve_record needs exactly one of completed=, failed= or released=True"
                             + (f"; got {', '.join(given)}" if given else ""))
        body = _body(namespace=namespace, key=key, tenant=tenant)
        if completed is not None:
            r = _bytes(completed, "completed")
            body["completed"] = {"result": bytes_to_wire(r)} if r else {}
        elif failed is not None:
            body["failed"] = {"error": str(failed)}
        else:
            body["released"] = {}
        return Record.from_wire(self._call("ResolveRecord", body).get("record"))

