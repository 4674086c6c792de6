"""The exceptions this package raises.

Every error idemd sends carries a google.rpc.ErrorInfo whose reason says what
happened; the class raised is chosen by that reason (REASON_ERRORS), or by the
status code when the reason is missing or newer than this package. Branch on
the class or on ``err.reason``, never on the message.
"""

import enum
from typing import TYPE_CHECKING, Dict, Mapping, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ._types import Record

__all__ = [
    "ErrorReason", "IdemError", "InvalidArgumentError", "FingerprintMismatchError", "AlreadyTerminalError",
    "LeaseLostError", "NotFoundError", "UnavailableError", "InternalError", "UnauthenticatedError",
    "PermissionDeniedError", "RateLimitedError", "NotUnresolvedError", "ResolvedByOperatorError",
    "InProgressError", "UnresolvedError", "JobFailedError", "CompletionUnknownError", "FailureNotRecordedError",
    "StepAlreadyFinishedError", "StepLimitError", "Permanent",
    "Replayed", "REASON_ERRORS",
]


class ErrorReason(str, enum.Enum):
    """The reasons idemd puts in the google.rpc.ErrorInfo of its errors: the
    values of the proto enum idem.v1.ErrorReason (error_reason.proto) without
    their ERROR_REASON_ prefix. A member equals its string, so
    ``err.reason == ErrorReason.LEASE_LOST`` works, and so does
    ``err.reason == "LEASE_LOST"``. ``err.reason`` is a plain string, so a
    reason newer than this package still arrives."""

    INVALID_NAMESPACE = "INVALID_NAMESPACE"
    INVALID_KEY = "INVALID_KEY"
    INVALID_FINGERPRINT = "INVALID_FINGERPRINT"
    INVALID_CLAIMANT = "INVALID_CLAIMANT"
    INVALID_LEASE_TTL = "INVALID_LEASE_TTL"
    INVALID_RETENTION = "INVALID_RETENTION"
    INVALID_RESULT = "INVALID_RESULT"
    INVALID_ERROR = "INVALID_ERROR"
    INVALID_TOKEN = "INVALID_TOKEN"
    FINGERPRINT_MISMATCH = "FINGERPRINT_MISMATCH"
    ALREADY_TERMINAL = "ALREADY_TERMINAL"
    LEASE_LOST = "LEASE_LOST"
    NOT_FOUND = "NOT_FOUND"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    CONTENTION = "CONTENTION"
    INTERNAL = "INTERNAL"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    NAMESPACE_NOT_ALLOWED = "NAMESPACE_NOT_ALLOWED"
    NOT_ADMIN = "NOT_ADMIN"
    RATE_LIMITED = "RATE_LIMITED"
    INVALID_STATE = "INVALID_STATE"
    INVALID_OLDER_THAN = "INVALID_OLDER_THAN"
    INVALID_PAGE_SIZE = "INVALID_PAGE_SIZE"
    INVALID_PAGE_TOKEN = "INVALID_PAGE_TOKEN"
    INVALID_WAIT = "INVALID_WAIT"
    NOT_OPERATOR = "NOT_OPERATOR"
    INVALID_TENANT = "INVALID_TENANT"
    NOT_UNRESOLVED = "NOT_UNRESOLVED"
    INVALID_RESOLUTION = "INVALID_RESOLUTION"
    MALFORMED_REQUEST = "MALFORMED_REQUEST"
    UNKNOWN_FIELD = "UNKNOWN_FIELD"
    REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
    RESOLVED_BY_OPERATOR = "RESOLVED_BY_OPERATOR"
    INVALID_BATCH_SIZE = "INVALID_BATCH_SIZE"
    INVALID_STEP_NAME = "INVALID_STEP_NAME"
    STEP_ALREADY_FINISHED = "STEP_ALREADY_FINISHED"
    TOO_MANY_STEPS = "TOO_MANY_STEPS"
    STEPS_TOO_LARGE = "STEPS_TOO_LARGE"
    INVALID_RESOLVER = "INVALID_RESOLVER"
    INVALID_REASON = "INVALID_REASON"

    def __str__(self) -> str:
        return self.value


# Codes that are worth sending the same request again for.
_TRANSIENT_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


class IdemError(Exception):
    """Base of everything this package raises for a call that did not do
    what was asked, and of every outcome of ``Client.do`` that does not mean
    "done by you".

    ``code`` is the status code's name ("ABORTED", "UNAVAILABLE", …; "" for
    an outcome such as IN_PROGRESS, which is not a server error), ``reason``
    the ErrorInfo reason ("LEASE_LOST"; "" when there is none, as when idemd
    could not be reached), ``message`` idemd's text, ``metadata`` the
    ErrorInfo metadata (``metadata["field"]`` names the field of an
    INVALID_* error), ``retry_after`` how long the server asked the caller
    to wait in seconds (its google.rpc.RetryInfo, else a Retry-After header;
    None without either), ``http_status`` the HTTP status (0 without an
    answer; for an item of a batch call, the status the Connect protocol
    gives its code, as the unary call would have answered) and ``rpc`` the
    method ("Claim"; for an item of a batch call, the unary call it stands
    for). ``value``, on an error that
    ``Client.do`` raises after the handler returned (a lost lease, say), is
    what the handler returned; None otherwise.
    """

    value: Optional[bytes] = None

    def __init__(self, message: str, *, code: str = "UNKNOWN", reason: str = "",
                 metadata: Optional[Mapping[str, str]] = None, retry_after: Optional[float] = None,
                 http_status: int = 0, rpc: str = "", transient: Optional[bool] = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.retry_after = retry_after
        self.http_status = http_status
        self.rpc = rpc
        if transient is None:
            transient = code in _TRANSIENT_CODES or (code == "RESOURCE_EXHAUSTED" and retry_after is not None)
        self._transient = transient

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed when sent again later:
        UNAVAILABLE, DEADLINE_EXCEEDED, and RESOURCE_EXHAUSTED with a retry
        delay (a tenant's rate limit; without one it is a message over a
        size limit, which no retry fixes). The client retries these itself."""
        return self._transient

    def __str__(self) -> str:
        tag = "/".join(t for t in (self.code, self.reason) if t)
        where = self.rpc + ": " if self.rpc else ""
        return f"idem: {where}{self.message}" + (f" ({tag})" if tag else "")


class InvalidArgumentError(IdemError):
    """INVALID_ARGUMENT (every INVALID_* reason, and MALFORMED_REQUEST and
    UNKNOWN_FIELD for a request the HTTP/JSON API could not read): a field
    is malformed, unknown or out of bounds; ``field`` names it and the
    message the bound. Nothing was written: fix the request. A batch call
    raises it with INVALID_BATCH_SIZE for a batch of no items or more than
    the server takes."""

    @property
    def field(self) -> str:
        """The request field that was refused ("key"), "" if not named."""
        return self.metadata.get("field", "")


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
    token. Raised by ``Client.do`` after the handler returned, ``value`` holds
    what it returned (the side effect may then have run twice, which is what
    the fencing token is for)."""


class NotFoundError(IdemError):
    """NOT_FOUND: no such record (never claimed, purged after its retention,
    or deleted by an operator)."""


class UnavailableError(IdemError):
    """UNAVAILABLE (STORE_UNAVAILABLE, CONTENTION) or no answer at all:
    nothing is known to have changed. The client retries these itself with
    backoff; this is raised when the retries ran out."""


class InternalError(IdemError):
    """INTERNAL: a bug in idemd; the cause is in idemd's log."""


class UnauthenticatedError(IdemError):
    """UNAUTHENTICATED: no bearer token, or one (or a client certificate)
    that names no tenant of idemd's config."""


class PermissionDeniedError(IdemError):
    """PERMISSION_DENIED (NAMESPACE_NOT_ALLOWED, NOT_ADMIN, NOT_OPERATOR): the
    tenant may not do this; ``metadata["field"]`` names the field for
    NOT_OPERATOR."""


class RateLimitedError(IdemError):
    """RESOURCE_EXHAUSTED / RATE_LIMITED: the tenant is over its rate limit;
    ``retry_after`` says how long to wait. The client waits and retries
    itself; this is raised when the retries ran out."""


class NotUnresolvedError(IdemError):
    """FAILED_PRECONDITION / NOT_UNRESOLVED (AdminService.ResolveRecord,
    ResolverService.Resolve): the record is not UNRESOLVED, so there is
    nothing to resolve: someone else decided first."""


class ResolvedByOperatorError(IdemError):
    """FAILED_PRECONDITION / RESOLVED_BY_OPERATOR: your result was not
    stored: the record was resolved by an operator (AdminService.
    ResolveRecord) while it was UNRESOLVED, and the operator's resolution
    stands. Do not treat the job as done by you; look the record up to see
    what the operator decided. Raised by ``Client.do`` after the handler
    returned, ``value`` holds what it returned."""

    def __str__(self) -> str:
        return ("idem: your result was not stored: the record was resolved by an operator"
                + (f" ({self.message})" if self.message else "")
                + (f" ({self.code}/{self.reason})" if self.reason else ""))


class StepAlreadyFinishedError(IdemError):
    """FAILED_PRECONDITION / STEP_ALREADY_FINISHED: the step is FINISHED with
    another result, or was started again after it finished. A FINISHED step
    never changes: use the result it holds (``Record.steps``)."""


class StepLimitError(IdemError):
    """RESOURCE_EXHAUSTED / TOO_MANY_STEPS or STEPS_TOO_LARGE: the job's steps
    would be more, or hold more bytes, than the server allows (--max-steps,
    --max-step-bytes). Nothing was written; no retry changes it."""


# REASON_ERRORS maps every reason of the proto enum idem.v1.ErrorReason to
# the class raised for it. A test checks the keys against error_reason.proto.
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
    "NOT_UNRESOLVED": NotUnresolvedError,
    "INVALID_RESOLUTION": InvalidArgumentError,
    "MALFORMED_REQUEST": InvalidArgumentError,
    "UNKNOWN_FIELD": InvalidArgumentError,
    "REQUEST_TOO_LARGE": IdemError,
    "RESOLVED_BY_OPERATOR": ResolvedByOperatorError,
    "INVALID_BATCH_SIZE": InvalidArgumentError,
    "INVALID_STEP_NAME": InvalidArgumentError,
    "STEP_ALREADY_FINISHED": StepAlreadyFinishedError,
    "TOO_MANY_STEPS": StepLimitError,
    "STEPS_TOO_LARGE": StepLimitError,
    "INVALID_RESOLVER": InvalidArgumentError,
    "INVALID_REASON": InvalidArgumentError,
}

# The class of an error whose reason is missing or unknown, by its code.
CODE_ERRORS: Dict[str, type] = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "NOT_FOUND": NotFoundError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "INTERNAL": InternalError,
    "UNAVAILABLE": UnavailableError,
    "DEADLINE_EXCEEDED": UnavailableError,
    "UNAUTHENTICATED": UnauthenticatedError,
}


def error_class(code: str, reason: str) -> type:
    """The class raised for an error with this code and reason."""
    if reason in REASON_ERRORS:
        return REASON_ERRORS[reason]
    return CODE_ERRORS.get(code, IdemError)


# ---------------------------------------------------------------------------
# Outcomes of Client.claim and Client.do that are not "done by you".


class InProgressError(IdemError):
    """Another worker holds a live lease on the job: do not perform the side
    effect; let the queue redeliver the job later (or pass ``wait``).
    ``retry_after`` is how long (seconds) until the holder's lease runs out;
    the holder usually finishes sooner. ``record`` is the record as the
    Claim saw it."""

    def __init__(self, record: "Record", retry_after: float):
        super().__init__(f"{record.namespace}/{record.key} is in progress in another worker; "
                         f"its lease runs out in {retry_after:.3f}s", code="", retry_after=retry_after,
                         rpc="Claim", transient=False)
        self.record = record


class UnresolvedError(IdemError):
    """The record is UNRESOLVED: its lease ran out under a policy with
    ``on_lease_expiry: hold``, so nobody knows whether the side effect
    happened. The handler was not called. Park the message (a dead-letter
    queue) until the late holder or an operator (``idem resolve``) resolves
    the record."""

    def __init__(self, record: "Record"):
        super().__init__(f"{record.namespace}/{record.key} is unresolved: its lease ran out under a hold "
                         "policy; park the message until it is resolved (idem resolve)",
                         code="", rpc="Claim", transient=False)
        self.record = record


class JobFailedError(IdemError):
    """The job failed permanently earlier (FAILED): the handler was not
    called. ``message`` is the error stored by the permanent Fail."""

    def __init__(self, record: "Record"):
        super().__init__(record.error, code="", rpc="Claim", transient=False)
        self.record = record

    def __str__(self) -> str:
        return f"idem: {self.record.namespace}/{self.record.key} failed permanently earlier: {self.message}"


class CompletionUnknownError(IdemError):
    """The handler returned but the Complete was not confirmed: it failed
    until the lease ran out, or idemd refused it (a result over the size
    limit, say). The side effect ran; whether idem recorded it is unknown, so
    a later delivery may run it again once the lease runs out. ``value`` is
    what the handler returned, ``record`` the record as acquired, and
    ``__cause__`` (also ``error``) the last Complete error, whose code and
    reason this error repeats."""

    def __init__(self, value: bytes, record: "Record", error: IdemError):
        super().__init__(f"{record.namespace}/{record.key} ran, but its completion was not confirmed: {error}",
                         code=error.code, reason=error.reason, metadata=error.metadata,
                         http_status=error.http_status, rpc="Complete", transient=False)
        self.value = value
        self.record = record
        self.error = error

    def __str__(self) -> str:
        return "idem: " + self.message


class FailureNotRecordedError(IdemError):
    """The handler raised, and its failure was not recorded: idemd refused
    the Fail (ALREADY_TERMINAL when the handler completed its own token
    first, LEASE_LOST when another worker took the job over), or it failed
    until the lease ran out. The handler's exception is never lost:
    ``handler_error`` is it (and ``__cause__``); ``fail_error`` is the last
    Fail error, whose code and reason this error repeats; ``record`` is the
    record as acquired."""

    def __init__(self, handler_error: BaseException, fail_error: IdemError, record: "Record"):
        handler_text = str(handler_error) or type(handler_error).__name__
        super().__init__(f"{record.namespace}/{record.key}: the handler failed ({handler_text}), and its failure "
                         f"was not recorded: {fail_error}", code=fail_error.code, reason=fail_error.reason,
                         metadata=fail_error.metadata, http_status=fail_error.http_status, rpc="Fail",
                         transient=False)
        self.handler_error = handler_error
        self.fail_error = fail_error
        self.record = record
        self.__cause__ = handler_error

    def __str__(self) -> str:
        return "idem: " + self.message


class Permanent(Exception):
    """Raise Permanent from a handler to fail the job for good: ``do()``
    records the failure with retryable=false, and every later ``do()`` for
    the key raises JobFailedError with its text, without calling the
    handler. Any other exception releases the job, so that the next delivery
    runs the handler again.

        raise idem.Permanent("card declined")
        raise idem.Permanent(err)          # wraps err; its text is recorded
        class CardDeclined(idem.Permanent): ...

    ``error`` is the wrapped exception, or None.
    """

    def __init__(self, error: "object" = "") -> None:
        super().__init__(error)
        self.error: Optional[BaseException] = error if isinstance(error, BaseException) else None
        if self.error is not None and self.__cause__ is None:
            self.__cause__ = self.error

    def __str__(self) -> str:
        if self.error is not None:
            return str(self.error) or type(self.error).__name__
        return super().__str__()


class Replayed(Exception):
    """Raised by ``with client.once(job)`` when the job completed earlier:
    a with-block cannot be skipped, so its entry raises instead. ``result``
    is the stored Result (``result.value``; ``result.replayed`` is true).
    It is not an IdemError: a replay means the job is done, so treat it as
    success (ack the message), never as a failure to retry. ``Client.do``
    and ``@client.idempotent`` return the replay instead."""

    def __init__(self, result: "object") -> None:
        super().__init__("the job completed earlier; its stored result is replayed")
        self.result = result
