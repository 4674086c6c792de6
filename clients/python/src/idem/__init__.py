"""idem's Python client: run a job's side effect at most once per
idempotency key across every worker, in any language.

It speaks the Connect protocol (JSON) to idemd's HTTP/JSON listener
(``idemd serve --json-listen``, by default http://127.0.0.1:7072) with the
standard library alone, on Python 3.8 or newer.

- ``Client.do(job, fn)`` (also ``@client.idempotent`` and ``with
  client.once(job)``) claims the job, runs fn while a thread heartbeats the
  lease, and records the result or the failure; later deliveries get the
  stored result back without running fn. It returns only when the job is
  done; every other outcome raises an IdemError. ``Client.do_batch(jobs,
  fn)`` is the same for a delivery of several jobs, in batch calls.
- ``Client.claim``, ``complete``, ``fail``, ``heartbeat``, ``lookup``,
  ``lookup_history``, ``start_step``, ``complete_step``, ``list_held`` and
  ``resolve``,
  their batch forms ``batch_claim`` … ``batch_lookup``, and
  ``Client.admin.list_records``, ``iter_records``, ``delete_record``,
  ``stats`` and ``resolve_record``, are the RPCs one to one.
- Errors are IdemError subclasses chosen by the google.rpc.ErrorInfo reason
  (LeaseLostError for LEASE_LOST, …); transient ones (UNAVAILABLE, a rate
  limit) are retried with backoff that honours google.rpc.RetryInfo and
  Retry-After.
- ``attempt.step(name, fn)`` runs one of a job's several side effects at
  most once across its attempts; ``attempt.step_key(name)`` is the key to
  pass downstream for it.
- ``Resolver(client, name, fn)`` decides held (UNRESOLVED) records by
  asking fn, which looks the effect up downstream.
- ``fingerprint_json(payload)`` is the Go SDK's client.FingerprintJSON, so
  that workers in every language fingerprint one payload alike.

    import idem

    client = idem.Client("http://127.0.0.1:7072", token=os.environ["IDEM_TOKEN"])
    job = idem.Job("process_payment", f"order-{order['id']}",
                   fingerprint=idem.fingerprint_json(order), lease_ttl=30)
    result = client.do(job, lambda attempt: charge(order, attempt.token))
"""

from ._client import DEFAULT_URL, AdminClient, Client
from ._do import MAX_ERROR_BYTES, Attempt, Job, Once, Result, current_attempt, do, idempotent, storable_text
from ._dobatch import do_batch
from ._errors import (REASON_ERRORS, AlreadyTerminalError, CompletionUnknownError, ErrorReason,
                      FailureNotRecordedError, FingerprintMismatchError, IdemError, InProgressError, InternalError, InvalidArgumentError,
                      JobFailedError, LeaseLostError, NotFoundError, NotUnresolvedError, PermissionDeniedError,
                      Permanent, RateLimitedError, Replayed, ResolvedByOperatorError, StepAlreadyFinishedError,
                      StepLimitError, UnauthenticatedError, UnavailableError, UnresolvedError)
from ._fingerprint import canonical_json, fingerprint, fingerprint_json
from ._resolver import Held, Resolution, Resolver
from ._retry import RetryPolicy
from ._step import step_key
from ._types import (MAX_WAIT, ClaimRequest, ClaimResult, CompleteRequest, FailRequest, HeartbeatRequest,
                     LookupRequest, Outcome, Record, RecordPage, State, StatsRow, Step, StepState, TimelineEntry,
                     TimelineEntryKind, Actor)
from ._version import __version__

__all__ = [
    # the client
    "Client", "AdminClient", "RetryPolicy", "DEFAULT_URL", "MAX_WAIT",
    # do()
    "Job", "Attempt", "Result", "Once", "do", "do_batch", "idempotent", "current_attempt", "Permanent", "Replayed",
    "storable_text", "MAX_ERROR_BYTES", "step_key",
    # resolvers
    "Resolver", "Resolution", "Held",
    # records
    "Record", "State", "Outcome", "ClaimResult", "RecordPage", "StatsRow", "Step", "StepState",
    "TimelineEntry", "TimelineEntryKind", "Actor",
    # the items of the batch calls
    "ClaimRequest", "CompleteRequest", "FailRequest", "HeartbeatRequest", "LookupRequest",
    # errors
    "IdemError", "ErrorReason", "REASON_ERRORS", "InvalidArgumentError", "FingerprintMismatchError",
    "AlreadyTerminalError", "LeaseLostError", "NotFoundError", "UnavailableError", "InternalError",
    "UnauthenticatedError", "PermissionDeniedError", "RateLimitedError", "NotUnresolvedError",
    "ResolvedByOperatorError", "InProgressError", "UnresolvedError", "JobFailedError", "CompletionUnknownError",
    "FailureNotRecordedError", "StepAlreadyFinishedError", "StepLimitError",
    # fingerprints
    "fingerprint", "fingerprint_json", "canonical_json",
    "__version__",
]
