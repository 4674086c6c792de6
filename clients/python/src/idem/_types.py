"""Records, states and outcomes, and their protobuf JSON forms.

On the wire (protobuf's JSON mapping) an int64 is a decimal string, bytes are
base64, a Duration is a decimal number of seconds followed by "s" ("1.5s"),
a Timestamp RFC 3339 in UTC, and an enum its value's name
("STATE_COMPLETED"). In Python a token is an int, bytes are bytes, a
duration is seconds as a float (a datetime.timedelta is taken too), a time
an aware datetime in UTC, and an enum an IntEnum whose values are the
proto's.
"""

import base64
import dataclasses
import datetime
import enum
import re
from typing import Any, List, Mapping, Optional, Tuple, Union

__all__ = ["MAX_WAIT", "State", "Outcome", "Record", "ClaimResult", "RecordPage", "StatsRow", "Seconds",
           "ClaimRequest", "CompleteRequest", "FailRequest", "HeartbeatRequest", "LookupRequest", "Step", "StepState",
           "TimelineEntryKind", "TimelineEntry", "Actor"]

# Copied from limits/limits.go in the Go module; limits/copies_test.go fails when a copy disagrees.
#: The longest Claim wait the server accepts, in seconds.
MAX_WAIT = 60.0

#: A duration: seconds, or a datetime.timedelta.
Seconds = Union[float, int, datetime.timedelta]


class State(enum.IntEnum):
    """Where a record is in its life; the values of idem.v1.State."""

    UNSPECIFIED = 0
    #: A worker holds the record under a lease.
    PROCESSING = 1
    #: Terminal success: the result is stored and replayed.
    COMPLETED = 2
    #: Terminal failure: the error is stored and replayed.
    FAILED = 3
    #: Given back by a retryable Fail: the next Claim acquires it.
    RELEASED = 4
    #: The lease ran out: the next Claim acquires it.
    EXPIRED = 5
    #: The lease ran out under a hold policy: no Claim acquires it until it
    #: is resolved.
    UNRESOLVED = 6

    def __str__(self) -> str:
        return self.name

    @property
    def wire(self) -> str:
        """The name protobuf's JSON mapping uses: "STATE_COMPLETED"."""
        return "STATE_" + self.name

    @classmethod
    def from_wire(cls, v: Any) -> "State":
        return _enum_from_wire(cls, "STATE_", v)


class Outcome(enum.IntEnum):
    """The answer to a Claim; the values of idem.v1.Outcome."""

    UNSPECIFIED = 0
    #: Perform the side effect, then Complete or Fail.
    ACQUIRED = 1
    #: Another worker holds a live lease.
    IN_PROGRESS = 2
    #: Done earlier: the record's result is the stored result.
    COMPLETED = 3
    #: Failed permanently earlier: the record's error is the stored error.
    FAILED = 4
    #: Held for resolution: do not run the job; park the message.
    UNRESOLVED = 5

    def __str__(self) -> str:
        return self.name

    @property
    def wire(self) -> str:
        return "OUTCOME_" + self.name

    @classmethod
    def from_wire(cls, v: Any) -> "Outcome":
        return _enum_from_wire(cls, "OUTCOME_", v)


class StepState(enum.IntEnum):
    """Where a step of a job is; the values of idem.v1.StepState."""

    UNSPECIFIED = 0
    #: StartStep said its effect was about to happen: it may or may not have.
    STARTED = 1
    #: CompleteStep recorded its result: its effect happened.
    FINISHED = 2

    def __str__(self) -> str:
        return self.name

    @property
    def wire(self) -> str:
        return "STEP_STATE_" + self.name

    @classmethod
    def from_wire(cls, v: Any) -> "StepState":
        return _enum_from_wire(cls, "STEP_STATE_", v)


@dataclasses.dataclass(frozen=True)
class Step:
    """One named step of a job (StartStep, CompleteStep), as a record
    carries it."""

    name: str = ""
    state: StepState = StepState.UNSPECIFIED
    #: The result CompleteStep recorded (FINISHED only).
    result: bytes = b""
    #: The token of the holder that last wrote the step.
    token: int = 0
    started_at: Optional[datetime.datetime] = None
    #: Unset while STARTED.
    finished_at: Optional[datetime.datetime] = None

    @classmethod
    def from_wire(cls, m: Optional[Mapping[str, Any]]) -> "Step":
        m = m or {}
        return cls(
            name=m.get("name") or "",
            state=StepState.from_wire(m.get("state")),
            result=bytes_from_wire(m.get("result")),
            token=int_from_wire(m.get("token")),
            started_at=time_from_wire(m.get("startedAt")),
            finished_at=time_from_wire(m.get("finishedAt")),
        )


def _enum_from_wire(cls: Any, prefix: str, v: Any) -> Any:
    # A value this package does not know yet (a newer server) reads as
    # UNSPECIFIED rather than failing the whole answer.
    if isinstance(v, int) and not isinstance(v, bool):
        try:
            return cls(v)
        except ValueError:
            return cls.UNSPECIFIED
    if isinstance(v, str) and v.startswith(prefix):
        return cls.__members__.get(v[len(prefix):], cls.UNSPECIFIED)
    return cls.UNSPECIFIED


@dataclasses.dataclass(frozen=True)
class Record:
    """The server's state for one (namespace, key). Times are aware
    datetimes in UTC from the database's clock, or None when unset."""

    namespace: str = ""
    key: str = ""
    state: State = State.UNSPECIFIED
    #: The fencing token of the latest acquisition.
    token: int = 0
    #: How many times the record was acquired since it was created.
    attempt: int = 0
    #: The claimant id sent with the latest acquiring Claim; "" if none.
    claimant: str = ""
    #: The fingerprint stored when the record was created; b"" if none.
    fingerprint: bytes = b""
    #: When the lease runs out: set while PROCESSING (kept when EXPIRED).
    lease_expires_at: Optional[datetime.datetime] = None
    #: The stored result (COMPLETED only).
    result: bytes = b""
    #: The stored error (FAILED and RELEASED only).
    error: str = ""
    created_at: Optional[datetime.datetime] = None
    updated_at: Optional[datetime.datetime] = None
    #: When the record became COMPLETED or FAILED.
    completed_at: Optional[datetime.datetime] = None
    #: When the record may be purged; unset while PROCESSING and UNRESOLVED.
    expires_at: Optional[datetime.datetime] = None
    #: The policy of idemd's config that applied when the record was last
    #: acquired (its namespace globs joined by commas); "" for none.
    policy: str = ""
    #: The tenant that owns the record: set in AdminService answers.
    tenant: str = ""
    #: True when that policy holds a lapsed lease for resolution
    #: (UNRESOLVED) instead of letting a Claim take it over.
    hold: bool = False
    #: The job's steps, in the order they were first recorded; empty in the
    #: answers of Complete, Fail and Heartbeat.
    steps: Tuple[Step, ...] = ()
    #: True when the policy of the latest step call holds a record with a
    #: STARTED step for resolution instead of letting a Claim take it over.
    hold_unfinished: bool = False

    @classmethod
    def from_wire(cls, m: Optional[Mapping[str, Any]]) -> "Record":
        m = m or {}
        return cls(
            namespace=m.get("namespace") or "",
            key=m.get("key") or "",
            state=State.from_wire(m.get("state")),
            token=int_from_wire(m.get("token")),
            attempt=int_from_wire(m.get("attempt")),
            claimant=m.get("claimant") or "",
            fingerprint=bytes_from_wire(m.get("fingerprint")),
            lease_expires_at=time_from_wire(m.get("leaseExpiresAt")),
            result=bytes_from_wire(m.get("result")),
            error=m.get("error") or "",
            created_at=time_from_wire(m.get("createdAt")),
            updated_at=time_from_wire(m.get("updatedAt")),
            completed_at=time_from_wire(m.get("completedAt")),
            expires_at=time_from_wire(m.get("expiresAt")),
            policy=m.get("policy") or "",
            tenant=m.get("tenant") or "",
            hold=bool(m.get("hold")),
            steps=tuple(Step.from_wire(st) for st in m.get("steps") or ()),
            hold_unfinished=bool(m.get("holdUnfinished")),
        )

    def to_json(self) -> dict:
        """The record as plain JSON values (for logs and ``python -m idem``):
        bytes as text when they are UTF-8, base64 otherwise."""
        out = _json_fields(self)
        out["steps"] = [_json_fields(st) for st in self.steps]
        return out


def _json_fields(obj: Any) -> dict:
    # Plain JSON values of a record's or step's fields.
    out: dict = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, (State, StepState)):
            v = v.name
        elif isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError:
                v = {"base64": base64.b64encode(v).decode("ascii")}
        elif isinstance(v, datetime.datetime):
            v = v.isoformat().replace("+00:00", "Z")
        out[f.name] = v
    out["token"] = str(obj.token)  # int64: exact in every JSON reader
    return out


class TimelineEntryKind(enum.IntEnum):
    """What a timeline entry records; the values of idem.v1.TimelineEntryKind."""

    UNSPECIFIED = 0
    #: A Claim acquired the record from an earlier attempt.
    TAKEN_OVER = 1
    #: The holder's permanent Fail.
    FAILED = 2
    #: The holder's retryable Fail.
    RELEASED = 3
    #: The lease ran out under a hold policy: the record became UNRESOLVED.
    HELD = 4
    #: A person or a resolver resolved the UNRESOLVED record.
    RESOLVED = 5
    #: An operator deleted the record.
    DELETED = 6
    #: A Claim with another fingerprint was refused.
    FINGERPRINT_MISMATCH = 7

    def __str__(self) -> str:
        return self.name

    @property
    def wire(self) -> str:
        return "TIMELINE_ENTRY_KIND_" + self.name

    @classmethod
    def from_wire(cls, v: Any) -> "TimelineEntryKind":
        return _enum_from_wire(cls, "TIMELINE_ENTRY_KIND_", v)


@dataclasses.dataclass(frozen=True)
class Actor:
    """Who made a call that a timeline entry records."""

    tenant: str = ""
    #: The name idemd's config gives the caller's token; "" for none.
    operator: str = ""
    #: The name a resolver gave (ResolverService.Resolve); "" for a person.
    resolver: str = ""


@dataclasses.dataclass(frozen=True)
class TimelineEntry:
    """One exception in the life of a record's key (``Client.lookup_history``):
    what happened, when, and who did it."""

    kind: TimelineEntryKind = TimelineEntryKind.UNSPECIFIED
    at: Optional[datetime.datetime] = None
    #: The record's token then; for TAKEN_OVER, the new one.
    token: int = 0
    #: The state it left the record in.
    state: State = State.UNSPECIFIED
    #: TAKEN_OVER: the token taken over.
    previous_token: int = 0
    previous_state: State = State.UNSPECIFIED
    claimant: str = ""
    previous_claimant: str = ""
    error: str = ""
    #: RESOLVED, DELETED: who made the call.
    actor: Actor = Actor()
    #: RESOLVED, DELETED: the reason the call gave.
    reason: str = ""
    #: FINGERPRINT_MISMATCH: the refused Claim's fingerprint.
    fingerprint: bytes = b""

    @classmethod
    def from_wire(cls, m: Optional[Mapping[str, Any]]) -> "TimelineEntry":
        m = m or {}
        a = m.get("actor") or {}
        return cls(
            kind=TimelineEntryKind.from_wire(m.get("kind")),
            at=time_from_wire(m.get("at")),
            token=int_from_wire(m.get("token")),
            state=State.from_wire(m.get("state")),
            previous_token=int_from_wire(m.get("previousToken")),
            previous_state=State.from_wire(m.get("previousState")),
            claimant=m.get("claimant") or "",
            previous_claimant=m.get("previousClaimant") or "",
            error=m.get("error") or "",
            actor=Actor(tenant=a.get("tenant") or "", operator=a.get("operator") or "",
                        resolver=a.get("resolver") or ""),
            reason=m.get("reason") or "",
            fingerprint=bytes_from_wire(m.get("fingerprint")),
        )


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    """The answer to ``Client.claim``: ACQUIRED, COMPLETED or FAILED (IN_PROGRESS
    and UNRESOLVED are raised as InProgressError and UnresolvedError)."""

    outcome: Outcome
    #: The record after the Claim.
    record: Record
    #: For IN_PROGRESS: seconds until the holder's lease runs out.
    retry_after: float = 0.0


# ---------------------------------------------------------------------------
# The items of the batch calls: the arguments of the unary call of the same
# name.


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """One Claim of ``Client.batch_claim``: the arguments of ``Client.claim``
    but wait (a batch answers at once). A claimant left "" is made a fresh
    UUID, as claim() does."""

    namespace: str
    key: str
    fingerprint: bytes = b""
    lease_ttl: Optional[Seconds] = None
    claimant: str = ""
    retention: Optional[Seconds] = None


@dataclasses.dataclass(frozen=True)
class CompleteRequest:
    """One Complete of ``Client.batch_complete``: the arguments of
    ``Client.complete``."""

    namespace: str
    key: str
    token: int
    result: bytes = b""


@dataclasses.dataclass(frozen=True)
class FailRequest:
    """One Fail of ``Client.batch_fail``: the arguments of ``Client.fail``."""

    namespace: str
    key: str
    token: int
    error: str
    retryable: bool


@dataclasses.dataclass(frozen=True)
class HeartbeatRequest:
    """One Heartbeat of ``Client.batch_heartbeat``: the arguments of
    ``Client.heartbeat``."""

    namespace: str
    key: str
    token: int
    lease_ttl: Optional[Seconds] = None


@dataclasses.dataclass(frozen=True)
class LookupRequest:
    """One Lookup of ``Client.batch_lookup``."""

    namespace: str
    key: str


@dataclasses.dataclass(frozen=True)
class RecordPage:
    """One page of ``AdminClient.list_records``."""

    records: List[Record]
    #: Pass it as page_token for the next page; "" when this page is the last.
    next_page_token: str = ""


@dataclasses.dataclass(frozen=True)
class StatsRow:
    """How many records of one namespace (of one tenant) are in one state."""

    namespace: str
    state: State
    count: int
    tenant: str = ""
    #: The earliest updated_at of these records (UTC): with PROCESSING, the
    #: claim that has gone longest without a Claim or heartbeat renewing its
    #: lease; with UNRESOLVED, the record held longest. None when the server
    #: does not say.
    oldest_updated_at: Optional[datetime.datetime] = None


# ---------------------------------------------------------------------------
# Wire forms


def int_from_wire(v: Any) -> int:
    """An int64 or int32: a decimal string or a JSON number."""
    if v is None or v == "":
        return 0
    return int(v)


def bytes_to_wire(b: bytes) -> str:
    return base64.b64encode(bytes(b)).decode("ascii")


def bytes_from_wire(s: Any) -> bytes:
    """Protobuf JSON bytes: standard or URL-safe base64, padded or not."""
    if not s:
        return b""
    s = str(s)
    s += "=" * (-len(s) % 4)
    if "-" in s or "_" in s:
        return base64.urlsafe_b64decode(s)
    return base64.b64decode(s)


def seconds(d: Optional[Seconds], field: str) -> Optional[float]:
    """A duration as seconds; None stays None. A negative one is refused
    here, naming the field, rather than sent."""
    if d is None:
        return None
    if isinstance(d, datetime.timedelta):
        d = d.total_seconds()
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise TypeError(f"idem: {field} must be seconds (a number) or a datetime.timedelta, not {type(d).__name__}")
    if d != d or d < 0:
        raise ValueError(f"idem: {field} is {d}; it must be a duration of 0 seconds or more")
    return float(d)


def duration_to_wire(d: Optional[float]) -> Optional[str]:
    """Seconds as a google.protobuf.Duration in JSON ("1.500s"); None and 0
    as None, which leaves the field unset so that the server's default
    applies."""
    if not d:
        return None
    nanos = round(d * 1e9)
    secs, frac = divmod(nanos, 1_000_000_000)
    if frac == 0:
        return f"{secs}s"
    # Protobuf writes 3, 6 or 9 fraction digits; every reader takes them.
    text = f"{frac:09d}"
    while text.endswith("000"):
        text = text[:-3]
    return f"{secs}.{text}s"


_DURATION = re.compile(r"^(-?)(\d+)(?:\.(\d{1,9}))?s$")


def duration_from_wire(s: Any) -> float:
    if not s:
        return 0.0
    m = _DURATION.match(str(s))
    if not m:
        raise ValueError(f"idem: {s!r} is not a protobuf JSON duration")
    sign, whole, frac = m.groups()
    v = int(whole) + (int((frac or "0").ljust(9, "0")) / 1e9)
    return -v if sign else v


_TIMESTAMP = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$")


def time_from_wire(s: Any) -> Optional[datetime.datetime]:
    """An RFC 3339 timestamp (0 to 9 fraction digits) as an aware datetime
    in UTC (datetime keeps microseconds; the rest is cut)."""
    if not s:
        return None
    m = _TIMESTAMP.match(str(s))
    if not m:
        raise ValueError(f"idem: {s!r} is not an RFC 3339 timestamp")
    day, clock, frac, zone = m.groups()
    t = datetime.datetime.strptime(f"{day}T{clock}", "%Y-%m-%dT%H:%M:%S")
    t = t.replace(microsecond=int((frac or "0")[:6].ljust(6, "0")))
    if zone in ("Z", "z"):
        tz = datetime.timezone.utc
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = datetime.timezone(sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    return t.replace(tzinfo=tz).astimezone(datetime.timezone.utc)
