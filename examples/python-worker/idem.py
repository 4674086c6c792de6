"""A small idem client for Python workers, on the standard library alone.

It talks to idemd's HTTP/JSON API (``idemd serve --json-listen``, by default
http://127.0.0.1:7072) through its REST routes, with ``urllib.request`` and
``json``: no gRPC, no generated code, nothing to install. Copy this one file
into a project.

- ``Client`` has one method per RPC (``claim``, ``complete``, ``fail``,
  ``heartbeat``, ``lookup``). Each retries with capped exponential backoff
  and jitter when idemd or its database is unavailable (503, or no answer at
  all) and, after at least the ``Retry-After`` it names, when the tenant is
  over its rate limit (429).
- Errors are ``IdemError`` subclasses chosen by the ``google.rpc.ErrorInfo``
  reason of the answer (``LeaseLostError`` for ``LEASE_LOST``, ...);
  ``REASON_ERRORS`` maps every reason of the proto enum
  ``idem.v1.ErrorReason`` to its class.
- ``Client.do(job, fn)`` is the counterpart of the Go SDK's ``client.Do``:
  claim, run ``fn`` while heartbeating the lease, record the outcome.
- ``fingerprint_json`` is the Go SDK's ``client.FingerprintJSON``: SHA-256 of
  the payload's canonical JSON (RFC 8785), so a Go, a Node and a Python
  worker claiming one job send one fingerprint.

Python 3.8 or newer.
"""

import base64
import dataclasses
import datetime
import decimal
import hashlib
import http.client
import json
import math
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Callable, Dict, Optional

__all__ = [
    "Client", "Job", "Attempt", "Result", "Record", "RetryPolicy", "Permanent",
    "Error", "IdemError", "InvalidArgumentError", "FingerprintMismatchError",
    "AlreadyTerminalError", "LeaseLostError", "NotFoundError", "UnavailableError",
    "InternalError", "UnauthenticatedError", "PermissionDeniedError", "RateLimitedError",
    "InProgressError", "JobFailedError", "UnresolvedError", "CompletionUnknownError",
    "REASON_ERRORS", "canonical_json", "fingerprint", "fingerprint_json",
]

DEFAULT_URL = "http://127.0.0.1:7072"
ERROR_DOMAIN = "idem"

# The server's documented default lease, for when neither the job nor the
# claimed record tells do() how long the lease is.
DEFAULT_LEASE_TTL = 300.0
# The server's bound on Fail's error text, in bytes.
MAX_ERROR_BYTES = 4096

# ---------------------------------------------------------------------------
# Errors


class Error(Exception):
    """Everything this module raises derives from Error."""


class IdemError(Error):
    """A call that idemd (or the way to it) refused.

    code is the gRPC code's name ("ABORTED", "UNAVAILABLE", ...), reason the
    ErrorInfo reason ("LEASE_LOST"; "" when the answer has none, as when
    idemd could not be reached), message idemd's text, http_status the HTTP
    status (0 without an answer), metadata the ErrorInfo metadata, and
    retry_after the Retry-After header in seconds (None without one).
    Branch on the class or the reason, never on the message.
    """

    def __init__(self, message: str, code: str = "UNKNOWN", reason: str = "", http_status: int = 0,
                 metadata: Optional[Dict[str, str]] = None, retry_after: Optional[float] = None,
                 rpc: str = ""):
        self.message = message
        self.code = code
        self.reason = reason
        self.http_status = http_status
        self.metadata = metadata or {}
        self.retry_after = retry_after
        self.rpc = rpc
        #: For LeaseLostError raised by Client.do after fn returned: its value.
        self.value: Optional[bytes] = None
        super().__init__(message)

    def __str__(self) -> str:
        where = "idem: " + (self.rpc + ": " if self.rpc else "")
        return f"{where}{self.code}: {self.message}" + (f" ({self.reason})" if self.reason else "")

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed when sent again later."""
        return self.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED") or (
            self.code == "RESOURCE_EXHAUSTED" and self.retry_after is not None)


class InvalidArgumentError(IdemError):
    """INVALID_ARGUMENT (reasons INVALID_*): a field is out of bounds;
    metadata["field"] names it. Nothing was written. Fix the request."""


class FingerprintMismatchError(IdemError):
    """FAILED_PRECONDITION / FINGERPRINT_MISMATCH: the key was claimed before
    for a request with another fingerprint. Reusing a key for a different
    request is a bug in the producer."""


class AlreadyTerminalError(IdemError):
    """FAILED_PRECONDITION / ALREADY_TERMINAL: the record already left
    PROCESSING, and this call does not repeat the one that ended it."""


class LeaseLostError(IdemError):
    """ABORTED / LEASE_LOST: the token is no longer the record's current
    token; another worker took the job over. Stop, and do not retry with that
    token."""


class NotFoundError(IdemError):
    """NOT_FOUND: no such record (never claimed, or purged after its
    retention)."""


class UnavailableError(IdemError):
    """UNAVAILABLE (STORE_UNAVAILABLE, CONTENTION) or no answer at all:
    nothing is known to have changed; the client retries these itself."""


class InternalError(IdemError):
    """INTERNAL: a bug in idemd; the cause is in idemd's log."""


class UnauthenticatedError(IdemError):
    """UNAUTHENTICATED: no bearer token, or one that names no tenant."""


class PermissionDeniedError(IdemError):
    """PERMISSION_DENIED (NAMESPACE_NOT_ALLOWED, NOT_ADMIN)."""


class RateLimitedError(IdemError):
    """RESOURCE_EXHAUSTED / RATE_LIMITED: the tenant is over its rate limit;
    retry_after says how long to wait. The client retries these itself."""


# REASON_ERRORS maps every reason of the proto enum idem.v1.ErrorReason
# (proto/idem/v1/error_reason.proto: the value's name without ERROR_REASON_)
# to the class raised for it. Its keys are the reasons this module knows; a
# test checks them against the proto. A reason it does not know yet is raised
# as the class of its code (CODE_ERRORS) with err.reason set.
REASON_ERRORS: Dict[str, type] = {
    "INVALID_NAMESPACE": InvalidArgumentError,
    "INVALID_KEY": InvalidArgumentError,
    "INVALID_FINGERPRINT": InvalidArgumentError,
    "INVALID_CLAIMANT": InvalidArgumentError,
    "INVALID_LEASE_TTL": InvalidArgumentError,
    "INVALID_RETENTION": InvalidArgumentError,
    "INVALID_RESULT": InvalidArgumentError,
    "INVALID_ERROR": InvalidArgumentError,
    "INVALID_TOKEN": InvalidArgumentError,
    "FINGERPRINT_MISMATCH": FingerprintMismatchError,
    "ALREADY_TERMINAL": AlreadyTerminalError,
    "LEASE_LOST": LeaseLostError,
    "NOT_FOUND": NotFoundError,
    "STORE_UNAVAILABLE": UnavailableError,
    "CONTENTION": UnavailableError,
    "INTERNAL": InternalError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "NAMESPACE_NOT_ALLOWED": PermissionDeniedError,
    "NOT_ADMIN": PermissionDeniedError,
    "RATE_LIMITED": RateLimitedError,
    "INVALID_STATE": InvalidArgumentError,
    "INVALID_OLDER_THAN": InvalidArgumentError,
    "INVALID_PAGE_SIZE": InvalidArgumentError,
    "INVALID_PAGE_TOKEN": InvalidArgumentError,
    "INVALID_WAIT": InvalidArgumentError,
    "NOT_OPERATOR": PermissionDeniedError,
    "INVALID_TENANT": InvalidArgumentError,
    "NOT_UNRESOLVED": IdemError,
    "INVALID_RESOLUTION": InvalidArgumentError,
    "MALFORMED_REQUEST": InvalidArgumentError,
    "UNKNOWN_FIELD": InvalidArgumentError,
    "REQUEST_TOO_LARGE": IdemError,
}

# The gRPC codes by number (google.rpc.Status.code), and the class of an
# error by its code when its reason is missing or unknown.
CODE_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}
CODE_ERRORS: Dict[str, type] = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "NOT_FOUND": NotFoundError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "INTERNAL": InternalError,
    "UNAVAILABLE": UnavailableError,
    "UNAUTHENTICATED": UnauthenticatedError,
}
# The code of an HTTP status, for answers without a google.rpc.Status body
# (a proxy's 502, a 413).
HTTP_CODES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    409: "ABORTED", 413: "RESOURCE_EXHAUSTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
    500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _error_class(code: str, reason: str) -> type:
    if reason in REASON_ERRORS:
        return REASON_ERRORS[reason]
    if code == "RESOURCE_EXHAUSTED" and reason == "":
        return IdemError
    return CODE_ERRORS.get(code, IdemError)


class InProgressError(Error):
    """Client.do's answer while another worker holds a live lease on the job:
    do not perform the side effect; let the queue redeliver it later.
    retry_after is how long (seconds) until the holder's lease runs out."""

    def __init__(self, record: "Record", retry_after: float):
        self.record = record
        self.retry_after = retry_after
        super().__init__(f"idem: {record.namespace}/{record.key} is in progress in another worker; "
                         f"its lease runs out in {retry_after:.3f}s")


class UnresolvedError(Error):
    """Client.do's answer for a job held for resolution (UNRESOLVED): a
    worker's lease ran out under a policy with on_lease_expiry: hold, so
    nobody knows whether the side effect happened. fn was not called; park
    the message until a person or a reconciler resolves the record
    (idem resolve, or the holder's late Complete or Fail)."""

    def __init__(self, record: "Record"):
        self.record = record
        super().__init__(f"idem: {record.namespace}/{record.key} is held for resolution (UNRESOLVED): "
                         f"do not run it; park the message until the record is resolved")


class JobFailedError(Error):
    """Client.do's answer for a job that failed permanently earlier (FAILED):
    fn was not called. message is the stored error."""

    def __init__(self, record: "Record"):
        self.record = record
        self.message = record.error
        super().__init__(f"idem: {record.namespace}/{record.key} failed permanently earlier: {record.error}")


class CompletionUnknownError(Error):
    """Client.do's answer when fn returned but the Complete was not confirmed
    (it failed after every retry, or idemd refused it, e.g. a result over its
    size limit). The side effect ran; value is what fn returned, record the
    record as acquired, and __cause__ the last Complete error."""

    def __init__(self, value: bytes, record: "Record", err: BaseException):
        self.value = value
        self.record = record
        self.err = err
        super().__init__(f"idem: {record.namespace}/{record.key} ran, but its completion was not confirmed: {err}")


class Permanent(Exception):
    """Raise Permanent (or a subclass) from fn to fail the job for good: do()
    records the failure with retryable=false, and every later do() for the
    key raises JobFailedError with its message without calling fn. Any other
    exception releases the job so that the next delivery runs fn again.

        raise idem.Permanent("card declined") from err
    """


# ---------------------------------------------------------------------------
# Records and durations


def _parse_time(s: Optional[str]) -> Optional[datetime.datetime]:
    """Parses an RFC 3339 timestamp as protobuf's JSON mapping writes it
    (UTC, "Z", 0 to 9 fraction digits) into an aware datetime."""
    if not s:
        return None
    main, _, frac = s.rstrip("Z").partition(".")
    frac = (frac + "000000")[:6]  # datetime has microseconds
    return datetime.datetime.strptime(main + "." + frac, "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc)


def _parse_duration(s: Optional[str]) -> float:
    """Parses a google.protobuf.Duration in JSON ("1.5s") into seconds."""
    return float(s[:-1]) if s else 0.0


def _duration(seconds: Optional[float]) -> Optional[str]:
    """Writes seconds as a google.protobuf.Duration in JSON; None for the
    server's default."""
    if not seconds:
        return None
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return text + "s"


def _b64decode(s: Optional[str]) -> bytes:
    if not s:
        return b""
    return base64.b64decode(s + "=" * (-len(s) % 4), altchars=b"-_" if ("-" in s or "_" in s) else None)


@dataclasses.dataclass
class Record:
    """A record as idemd returns it. state is the State's name
    ("STATE_COMPLETED"); times are aware datetimes in UTC, or None."""

    namespace: str = ""
    key: str = ""
    state: str = "STATE_UNSPECIFIED"
    token: int = 0
    attempt: int = 0
    claimant: str = ""
    fingerprint: bytes = b""
    lease_expires_at: Optional[datetime.datetime] = None
    result: bytes = b""
    error: str = ""
    created_at: Optional[datetime.datetime] = None
    updated_at: Optional[datetime.datetime] = None
    completed_at: Optional[datetime.datetime] = None
    expires_at: Optional[datetime.datetime] = None

    @classmethod
    def from_json(cls, m: Optional[Dict[str, Any]]) -> "Record":
        m = m or {}

        def get(camel: str, snake: str) -> Any:
            return m.get(camel, m.get(snake))

        return cls(
            namespace=m.get("namespace", ""),
            key=m.get("key", ""),
            state=m.get("state", "STATE_UNSPECIFIED"),
            token=int(m.get("token") or 0),
            attempt=int(m.get("attempt") or 0),
            claimant=m.get("claimant", ""),
            fingerprint=_b64decode(m.get("fingerprint")),
            lease_expires_at=_parse_time(get("leaseExpiresAt", "lease_expires_at")),
            result=_b64decode(m.get("result")),
            error=m.get("error", ""),
            created_at=_parse_time(get("createdAt", "created_at")),
            updated_at=_parse_time(get("updatedAt", "updated_at")),
            completed_at=_parse_time(get("completedAt", "completed_at")),
            expires_at=_parse_time(get("expiresAt", "expires_at")),
        )


@dataclasses.dataclass
class ClaimResult:
    """Claim's answer: outcome is the Outcome's name ("OUTCOME_ACQUIRED",
    "OUTCOME_IN_PROGRESS", "OUTCOME_COMPLETED", "OUTCOME_FAILED"), and
    retry_after, for IN_PROGRESS, the seconds until the holder's lease runs
    out."""

    outcome: str
    record: Record
    retry_after: float = 0.0


# ---------------------------------------------------------------------------
# Retries


@dataclasses.dataclass
class RetryPolicy:
    """Capped exponential backoff with jitter for calls that fail with a
    transient error: UNAVAILABLE (idemd or its database unreachable, or the
    record contended; also no answer at all), DEADLINE_EXCEEDED (504), and
    RESOURCE_EXHAUSTED with a Retry-After (429, the tenant's rate limit).
    Retry n waits a random time between half and all of
    min(base_delay * 2**n, max_delay), and never less than Retry-After."""

    #: The delay before the first retry, in seconds. It defaults to 0.1.
    base_delay: float = 0.1
    #: The cap on each delay, in seconds. It defaults to 5.
    max_delay: float = 5.0
    #: How many times one call is tried in all, the first try included. It
    #: defaults to 6 (about 3 s of retrying with the default delays).
    max_attempts: int = 6

    def delay(self, n: int) -> float:
        d = min(self.base_delay * (2 ** min(n, 32)), self.max_delay)
        return d / 2 + random.uniform(0, d / 2)

    def backoff(self, n: int, err: IdemError) -> float:
        d = self.delay(n)
        if err.retry_after is not None and err.retry_after > d:
            d = err.retry_after
        return d


def _retry(policy: RetryPolicy, call: Callable[[], Any], stop: Optional[threading.Event] = None) -> Any:
    """Calls call until it succeeds, raises an error that is not transient,
    has been tried policy.max_attempts times, or stop is set while it
    waits; it raises the last error."""
    attempt = 1
    while True:
        try:
            return call()
        except IdemError as err:
            if not err.transient or attempt >= policy.max_attempts:
                raise
            wait = policy.backoff(attempt - 1, err)
            if stop is not None:
                if stop.wait(wait):
                    raise
            else:
                time.sleep(wait)
            attempt += 1


# ---------------------------------------------------------------------------
# The client


def _is_loopback(host: str) -> bool:
    return host == "localhost" or host == "::1" or host.startswith("127.")


class Client:
    """Client talks to one idemd's HTTP/JSON API. It is safe to share between
    threads: each call is one HTTP request.

    url is idemd's --json-listen address as a URL (default
    http://127.0.0.1:7072); token, when given, is sent as
    "Authorization: Bearer <token>", and only over https or to a loopback
    address. timeout is each request's timeout in seconds (default 10), and
    retry the RetryPolicy of every call.
    """

    def __init__(self, url: str = DEFAULT_URL, token: str = "", timeout: float = 10.0,
                 retry: Optional[RetryPolicy] = None):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"idem: {url!r} is not an http:// or https:// URL")
        if token and parsed.scheme != "https" and not _is_loopback(parsed.hostname):
            raise ValueError(f"idem: refusing to send the token in plaintext to {parsed.hostname}: "
                             "use https, or a loopback address")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        # Proxies from the environment apply, except to this machine.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(parsed.hostname) else []
        self._opener = urllib.request.build_opener(*handlers)

    # One method per RPC. Each returns the answer, retried as the RetryPolicy
    # says, or raises an IdemError.

    def claim(self, namespace: str, key: str, *, fingerprint: bytes = b"", lease_ttl: Optional[float] = None,
              claimant: str = "", retention: Optional[float] = None) -> ClaimResult:
        """Claim asks to hold the job. lease_ttl and retention are seconds
        (None: the server's defaults). Reuse one claimant when you retry a
        Claim yourself: a Claim whose answer was lost then still acquires."""
        body = {"fingerprint": base64.b64encode(fingerprint).decode() if fingerprint else None,
                "leaseTtl": _duration(lease_ttl), "claimant": claimant or None,
                "retention": _duration(retention)}
        m = self._call("Claim", "POST", self._path(namespace, key, ":claim"), body)
        return ClaimResult(outcome=m.get("outcome", "OUTCOME_UNSPECIFIED"), record=Record.from_json(m.get("record")),
                           retry_after=_parse_duration(m.get("retryAfter", m.get("retry_after"))))

    def complete(self, namespace: str, key: str, token: int, result: bytes = b"") -> Record:
        """Complete records success with result; repeating it with the same
        token after a lost answer returns the stored record."""
        body = {"token": str(token), "result": base64.b64encode(result).decode() if result else None}
        return Record.from_json(self._call("Complete", "POST", self._path(namespace, key, ":complete"), body).get("record"))

    def fail(self, namespace: str, key: str, token: int, error: str, retryable: bool) -> Record:
        """Fail records a failure: retryable releases the job (the next Claim
        acquires it), otherwise it is FAILED for good."""
        body = {"token": str(token), "error": error, "retryable": retryable}
        return Record.from_json(self._call("Fail", "POST", self._path(namespace, key, ":fail"), body).get("record"))

    def heartbeat(self, namespace: str, key: str, token: int, lease_ttl: Optional[float] = None) -> Record:
        """Heartbeat extends the lease by lease_ttl seconds (None: the
        server's default) from now."""
        body = {"token": str(token), "leaseTtl": _duration(lease_ttl)}
        return Record.from_json(self._call("Heartbeat", "POST", self._path(namespace, key, ":heartbeat"), body).get("record"))

    def lookup(self, namespace: str, key: str) -> Record:
        """Lookup reads the record; NotFoundError when there is none."""
        return Record.from_json(self._call("Lookup", "GET", self._path(namespace, key, ""), None).get("record"))

    @staticmethod
    def _path(namespace: str, key: str, verb: str) -> str:
        # The key is one path segment: every byte outside A-Z a-z 0-9 - . _ ~
        # percent-encoded, "/" and ":" included.
        return (f"/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
                f"/records/{urllib.parse.quote(key, safe='')}{verb}")

    def _call(self, rpc: str, method: str, path: str, body: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        return _retry(self.retry, lambda: self._request(rpc, method, path, body))

    def _request(self, rpc: str, method: str, path: str, body: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                text = resp.read()
            try:
                answer = json.loads(text or b"{}")
            except ValueError:
                answer = None
            if not isinstance(answer, dict):
                # Not idemd (a proxy's page?): an error, not a crash of the
                # heartbeat thread.
                raise IdemError(f"HTTP {resp.status} with a body that is not a JSON object: {text[:200]!r}",
                                code="UNKNOWN", http_status=resp.status, rpc=rpc)
            return answer
        except urllib.error.HTTPError as err:
            with err:
                raise _decode_error(rpc, err.code, err.headers, err.read()) from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError) as err:
            # No answer: idemd is down, restarting, or too slow. Nothing is
            # known to have changed, and every call is safe to send again
            # (Claim with the same claimant, the others with the same token).
            reason = getattr(err, "reason", err)
            timed_out = isinstance(reason, (socket.timeout, TimeoutError))
            raise UnavailableError(f"no answer from {self.url}: {reason}",
                                   code="DEADLINE_EXCEEDED" if timed_out else "UNAVAILABLE", rpc=rpc) from err

    # ------------------------------------------------------------------
    # do

    def do(self, job: "Job", fn: Callable[["Attempt"], Any], *, wait: float = 0) -> "Result":
        """do runs fn at most once per (job.namespace, job.key) across all
        workers, in any language, and records its outcome: the Python
        counterpart of the Go SDK's client.Do.

        It claims the job under a fresh claimant id (a UUID), reused when a
        Claim that failed transiently is retried. Then, by outcome:

        - COMPLETED: returns the stored value with replayed=True; fn is not
          called.
        - FAILED: raises JobFailedError with the stored error; fn is not
          called.
        - IN_PROGRESS: raises InProgressError, unless wait (seconds) is given:
          then it polls, never later than the holder's lease runs out, until
          the job is done or acquired, or wait has passed.
        - ACQUIRED: calls fn(attempt) while a thread heartbeats every third
          of the lease. fn's value (bytes, str, or anything json.dumps takes)
          is recorded with Complete and returned.

        If fn raises, the job is released (Fail, retryable) so that the next
        delivery runs fn again, or failed for good when the exception is a
        Permanent; the exception propagates. A heartbeat answered LEASE_LOST
        sets attempt.lost: another worker took the job over, so fn should
        stop before its side effect (attempt.check() and attempt.sleep()
        raise LeaseLostError then). do then raises that LeaseLostError, with
        fn's value, if it returned one, in err.value, and never Completes. If
        the Complete cannot be confirmed, do raises CompletionUnknownError
        with fn's value: the side effect ran, and the caller must know.
        """
        fp = job.fingerprint
        if not fp and job.payload is not None:
            fp = fingerprint_json(job.payload)
        claimant = str(uuid.uuid4())
        wait_until = time.monotonic() + wait
        poll = 0
        while True:
            res = self.claim(job.namespace, job.key, fingerprint=fp or b"", lease_ttl=job.lease_ttl,
                             claimant=claimant, retention=job.retention)
            if res.outcome == "OUTCOME_COMPLETED":
                return Result(value=res.record.result, replayed=True, record=res.record)
            if res.outcome == "OUTCOME_FAILED":
                raise JobFailedError(res.record)
            if res.outcome == "OUTCOME_UNRESOLVED":
                raise UnresolvedError(res.record)
            if res.outcome == "OUTCOME_ACQUIRED":
                return self._run(job, res.record, fn)
            if res.outcome != "OUTCOME_IN_PROGRESS":
                raise Error(f"idem: Claim answered with an unknown outcome {res.outcome}")
            remaining = wait_until - time.monotonic()
            if remaining <= 0:
                raise InProgressError(res.record, res.retry_after)
            time.sleep(max(min(self.retry.delay(poll), remaining, res.retry_after), 0.001))
            poll += 1

    def _run(self, job: "Job", rec: Record, fn: Callable[["Attempt"], Any]) -> "Result":
        lease = job.lease_ttl
        if not lease and rec.lease_expires_at and rec.updated_at:
            # The server's default lease, measured on the server's clock.
            lease = (rec.lease_expires_at - rec.updated_at).total_seconds()
        if not lease or lease <= 0:
            lease = DEFAULT_LEASE_TTL

        attempt = Attempt(token=rec.token, number=rec.attempt, takeover=rec.attempt > 1)
        done = threading.Event()  # fn has returned: stop heartbeating
        beats = threading.Thread(target=self._keep_lease, args=(job, rec.token, lease / 3, done, attempt),
                                 name=f"idem-heartbeat-{job.key}", daemon=True)
        beats.start()
        try:
            value = fn(attempt)
        except BaseException as fn_err:
            done.set()
            beats.join()
            if attempt.lost_error is not None:
                # A successor may hold the job; anything recorded would be
                # rejected, and fn's error is most likely the loss itself.
                if fn_err is attempt.lost_error:
                    raise
                raise attempt.lost_error from fn_err
            permanent = isinstance(fn_err, Permanent)
            if not isinstance(fn_err, Exception):
                # KeyboardInterrupt, SystemExit: release the job, best effort
                # and without retrying for long: the process is stopping.
                try:
                    self.fail(job.namespace, job.key, rec.token, _storable_text(f"interrupted: {fn_err!r}"), True)
                except Error:
                    pass
                raise
            try:
                self._finish(lambda: self.fail(job.namespace, job.key, rec.token,
                                               _storable_text(str(fn_err) or type(fn_err).__name__),
                                               not permanent), lease)
            except IdemError as rec_err:
                fn_err.idem_fail_error = rec_err  # the failure was not recorded
            raise
        done.set()
        beats.join()
        result = _to_bytes(value)
        if attempt.lost_error is not None:
            attempt.lost_error.value = result
            raise attempt.lost_error
        try:
            completed = self._finish(lambda: self.complete(job.namespace, job.key, rec.token, result), lease)
        except LeaseLostError as err:
            err.value = result
            raise
        except IdemError as err:
            raise CompletionUnknownError(result, rec, err) from err
        return Result(value=result, replayed=False, record=completed)

    def _finish(self, call: Callable[[], Any], lease: float) -> Any:
        """Retries call, a Complete or Fail that records what already
        happened, for up to one lease: longer than the RetryPolicy alone."""
        deadline = time.monotonic() + lease
        while True:
            try:
                return _retry(self.retry, call)
            except IdemError as err:
                if not err.transient or time.monotonic() >= deadline:
                    raise
                time.sleep(min(self.retry.max_delay, max(deadline - time.monotonic(), 0)))

    def _keep_lease(self, job: "Job", token: int, interval: float, done: threading.Event, attempt: "Attempt") -> None:
        """Heartbeats every interval until done is set. The first error that
        is not transient (LEASE_LOST, ALREADY_TERMINAL, NOT_FOUND) ends the
        lease: it goes to attempt and attempt.lost is set. Transient
        failures are retried and then left to the next beat: the lease
        outlives two missed beats, and a lease that ran out is still ours
        until someone takes it over."""
        while not done.wait(interval):
            try:
                _retry(self.retry, lambda: self.heartbeat(job.namespace, job.key, token, job.lease_ttl), stop=done)
            except IdemError as err:
                if not err.transient and not done.is_set():
                    attempt.lost_error = err
                    attempt.lost.set()
                    return


@dataclasses.dataclass
class Job:
    """One unit of work and how to hold it.

    payload, when given, is fingerprinted with fingerprint_json (unless
    fingerprint is given): a later Claim of the key with another payload
    raises FingerprintMismatchError. lease_ttl (seconds) is how long the job
    is held without a heartbeat; None means the server's default (5 minutes
    unless configured otherwise); do() heartbeats every third of it.
    retention (seconds) is how long the outcome is kept and replayed; None
    means the server's default (24 hours unless configured otherwise).
    """

    namespace: str
    key: str
    payload: Any = None
    fingerprint: bytes = b""
    lease_ttl: Optional[float] = None
    retention: Optional[float] = None


@dataclasses.dataclass
class Attempt:
    """The acquisition fn runs under.

    token is the fencing token: pass it to downstream systems that can
    reject writes from a superseded token. number is the record's attempt
    count (1 the first time); takeover is number > 1: an earlier attempt may
    have done part of the work, so check before repeating a partial effect.
    lost is set when a heartbeat found the lease taken over.
    """

    token: int
    number: int
    takeover: bool
    lost: threading.Event = dataclasses.field(default_factory=threading.Event)
    lost_error: Optional[IdemError] = None

    def check(self) -> None:
        """Raises the LeaseLostError (or other error) that ended the lease,
        if one did. Call it right before the side effect."""
        if self.lost_error is not None:
            raise self.lost_error

    def sleep(self, seconds: float) -> None:
        """Sleeps, and raises as check() does as soon as the lease is lost."""
        self.lost.wait(seconds)
        self.check()


@dataclasses.dataclass
class Result:
    """What do() returns: value is fn's value as recorded, or the stored one
    when replayed; record the record after do's last call."""

    value: bytes
    replayed: bool
    record: Record


def _to_bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _storable_text(s: str, n: int = MAX_ERROR_BYTES) -> str:
    """Returns s as text idem stores, for an error message that must be
    recorded whatever it holds: NULs and lone surrogates become U+FFFD, and
    it is cut to at most n bytes of UTF-8 on a character boundary."""
    s = "".join("\ufffd" if c == "\0" or "\ud800" <= c <= "\udfff" else c for c in s)
    b = s.encode("utf-8")
    if len(b) <= n:
        return s
    return b[:n].decode("utf-8", errors="ignore")


def _decode_error(rpc: str, status: int, headers: Any, body: bytes) -> IdemError:
    """Turns an error answer into an IdemError: the google.rpc.Status body of
    the REST routes, its ErrorInfo reason, and Retry-After."""
    retry_after = None
    if headers is not None and headers.get("Retry-After"):
        try:
            retry_after = max(float(headers.get("Retry-After")), 0.0)
        except ValueError:
            retry_after = 1.0  # an HTTP date: not something idemd sends
    code = HTTP_CODES.get(status, "UNAVAILABLE" if status >= 500 else "UNKNOWN")
    message = f"HTTP {status}"
    reason = ""
    metadata: Dict[str, str] = {}
    try:
        st = json.loads(body)
    except ValueError:
        st = None
    if isinstance(st, dict):
        c = st.get("code")
        if isinstance(c, int):
            code = CODE_NAMES.get(c, code)
        elif isinstance(c, str):  # a Connect error: "aborted"
            code = c.upper()
        message = st.get("message") or message
        for d in st.get("details") or []:
            if not isinstance(d, dict):
                continue
            if str(d.get("@type", "")).endswith("/google.rpc.ErrorInfo"):
                info = d  # google.rpc.Status, from the REST routes
            elif d.get("type") == "google.rpc.ErrorInfo":
                info = d.get("debug")  # a Connect error
            else:
                continue
            if isinstance(info, dict) and info.get("domain") == ERROR_DOMAIN:
                reason = info.get("reason", "")
                metadata = info.get("metadata") or {}
    elif body:
        message = f"HTTP {status}: {body[:200].decode('utf-8', 'replace').strip()}"
    cls = _error_class(code, reason)
    return cls(message, code=code, reason=reason, http_status=status, metadata=metadata,
               retry_after=retry_after, rpc=rpc)


# ---------------------------------------------------------------------------
# Fingerprints


def fingerprint(payload: bytes) -> bytes:
    """Returns the SHA-256 of payload (32 bytes), for Job.fingerprint."""
    return hashlib.sha256(payload).digest()


def fingerprint_json(value: Any) -> bytes:
    """Returns the SHA-256 of canonical_json(value): the Go SDK's
    client.FingerprintJSON, so that workers in different languages
    fingerprint one payload alike. Pass parsed JSON (dict, list, str, int,
    float, bool, None); to fingerprint JSON text, json.loads it first."""
    return fingerprint(canonical_json(value).encode("utf-8"))


def canonical_json(value: Any) -> str:
    """Returns the RFC 8785 (JSON Canonicalization Scheme) form of a JSON
    value, as the Go SDK's client.FingerprintJSON writes it:

    - no whitespace; object members sorted by key, keys compared as sequences
      of UTF-16 code units (not code points: they differ between characters
      above U+FFFF and those in U+E000-U+FFFF); keys must be strings;
    - every number (int or float) read as an IEEE 754 double and written as
      JavaScript's Number.prototype.toString writes it: 100.0 and 1e2 are
      "100", 1e21 is "1e+21", -0.0 is "0"; integers beyond 2**53 lose
      precision as in JavaScript (send large ids as strings), and a number
      beyond a double's range, NaN or an infinity is a ValueError;
    - strings in UTF-8 with only \\" \\\\ \\b \\t \\n \\f \\r and \\u00xx
      (lowercase) for the other characters below U+0020 escaped; a lone
      surrogate becomes U+FFFD;
    - true, false, null. Tuples are arrays.
    """
    out: list = []
    _write(out, value)
    return "".join(out)


def _write(out: list, v: Any) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        _write_string(out, v)
    elif isinstance(v, (int, float, decimal.Decimal)):
        out.append(_format_number(v))
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, e in enumerate(v):
            if i:
                out.append(",")
            _write(out, e)
        out.append("]")
    elif isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise TypeError(f"idem: fingerprint: an object key must be a string, not {type(k).__name__} {k!r}")
        out.append("{")
        for i, k in enumerate(sorted(v, key=lambda k: _surrogates_replaced(k).encode("utf-16-be"))):
            if i:
                out.append(",")
            _write_string(out, k)
            out.append(":")
            _write(out, v[k])
        out.append("}")
    else:
        raise TypeError(f"idem: fingerprint: {type(v).__name__} has no JSON form")


def _surrogates_replaced(s: str) -> str:
    if any("\ud800" <= c <= "\udfff" for c in s):
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)
    return s


# json.dumps escapes exactly RFC 8785's characters when ensure_ascii is off:
# " \ \b \t \n \f \r, and \u00xx in lowercase for the rest below U+0020.
def _write_string(out: list, s: str) -> None:
    out.append(json.dumps(_surrogates_replaced(s), ensure_ascii=False))


def _format_number(v: Any) -> str:
    """Writes a number as ECMAScript's Number.prototype.toString writes the
    double nearest to it."""
    try:
        f = float(v)
    except OverflowError:
        raise ValueError(f"idem: fingerprint: the number {v} is beyond the range of a double") from None
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"idem: fingerprint: {v} has no JSON form (a number beyond the range of a double?)")
    if f == 0:
        return "0"  # also -0
    if f < 0:
        return "-" + _format_number(-f)
    # repr gives the shortest digits that read back as f; ECMAScript lays
    # them out by the decimal exponent n (f = 0.d1d2...dk * 10**n).
    _, digit_tuple, exp = decimal.Decimal(repr(f)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    k = len(digits)
    n = exp + k
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{sign}{abs(e)}"
