"""Idempotency-Key middleware for WSGI and ASGI applications, on idem: a
POST that a client retries after a timeout runs its handler once, and the
retry gets the response the first one got. Standard library only.

    import idem
    from idem.web import WSGIMiddleware

    client = idem.Client("http://127.0.0.1:7072", token=...)
    app = WSGIMiddleware(app, client, namespace="payments-api",
                         caller=lambda environ: environ["REMOTE_USER"])

``ASGIMiddleware(app, client, caller=lambda scope: ...)`` is the same for an
ASGI application (its caller may be a coroutine function).

For the methods it guards (POST and PATCH by default) the middleware reads
the Idempotency-Key header (an RFC 8941 string), claims the record
(namespace, caller/key) with a fingerprint of the request, runs the
application with its response held back, stores the status, the headers
named in ``stored_headers`` and the body, and then sends it. A repeat gets
the stored response with ``Idempotent-Replayed: true``; a repeat while the
first runs gets 409 (or waits, with ``wait``), the key with another request
422, a missing key 400 with ``require_key``. An application that answers
5xx or raises gives the key back; other statuses are stored. The errors are
RFC 9457 problems (application/problem+json). When idemd cannot be reached
before the application runs, the request is answered 503 and the
application does not run, unless ``fail_open``.

It behaves as idem's Go (client/idemhttp) and TypeScript
(@idemhq/idem/express) middleware do, and stores responses in the same form,
so that a response one of them stored is replayed by the others:
docs/idempotent-http.md in the idem repository describes them, and
clients/scenarios/http.json holds the rules all three pass.
"""

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import http
import inspect
import io
import json
import logging
import re
from typing import Any, Awaitable, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ._do import Job, Result, _acquire, _finish, _Lease
from ._errors import (AlreadyTerminalError, CompletionUnknownError, FailureNotRecordedError, FingerprintMismatchError,
                      IdemError, InProgressError, JobFailedError, UnresolvedError)
from ._types import Seconds, seconds

__all__ = [
    "WSGIMiddleware", "ASGIMiddleware", "Stored", "parse_key", "record_key", "fingerprint", "encode_envelope",
    "decode_envelope", "PROBLEM_TYPE_PREFIX", "PROBLEMS", "DEFAULT_STORED_HEADERS", "DEFAULT_METHODS",
]

log = logging.getLogger("idem.web")

#: The response headers stored and replayed by default: what the body is and where the resource went.
DEFAULT_STORED_HEADERS = ("Content-Type", "Content-Encoding", "Content-Language", "Location", "ETag", "Link")
#: The methods guarded by default: those HTTP does not define as idempotent.
DEFAULT_METHODS = ("POST", "PATCH")

# Copied from limits/limits.go in the Go module; limits/copies_test.go fails when a copy disagrees.
_MAX_KEY_BYTES = 256
_MIN_LEASE_TTL = 1.0
_MAX_LEASE_TTL = 24 * 3600.0
_MIN_RETENTION = 60.0
_MAX_RETENTION = 90 * 24 * 3600.0
_RESULT_BYTES_CEILING = 16 * 1024 * 1024


# ---------------------------------------------------------------------------
# What every language computes alike


class _SfParser:
    def __init__(self, s: str):
        self.s = s
        self.i = 0

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def string(self) -> str:
        """An sf-string: printable ASCII in double quotes, with \\" and \\\\ its only escapes."""
        self.i += 1
        out = []
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 1
            if c == "\\":
                nxt = self.peek()
                if nxt not in ('"', "\\") or nxt == "":
                    raise ValueError('a backslash in the string escapes only " or \\')
                out.append(nxt)
                self.i += 1
            elif c == '"':
                return "".join(out)
            elif c < " " or c > "~":
                raise ValueError("the string holds a character that is not printable ASCII")
            else:
                out.append(c)
        raise ValueError("the string has no closing quote")

    def parameters(self) -> None:
        """Parses and drops *( ";" *SP key [ "=" bare-item ] )."""
        while self.peek() == ";":
            self.i += 1
            while self.peek() == " ":
                self.i += 1
            if not re.fullmatch(r"[a-z*]", self.peek()):
                raise ValueError("a parameter's name must start with a lowercase letter or *")
            while re.fullmatch(r"[a-z0-9_\-.*]", self.peek()):
                self.i += 1
            if self.peek() == "=":
                self.i += 1
                self.bare_item()

    def bare_item(self) -> None:
        c = self.peek()
        if c == '"':
            self.string()
        elif c == "-" or c.isdigit() and c.isascii():
            self.number()
        elif c == ":":
            self.i += 1
            while re.fullmatch(r"[A-Za-z0-9+/=]", self.peek()):
                self.i += 1
            if self.peek() != ":":
                raise ValueError("a parameter's byte sequence has no closing colon")
            self.i += 1
        elif c == "?":
            self.i += 1
            if self.peek() not in ("0", "1") or self.peek() == "":
                raise ValueError("a parameter's boolean must be ?0 or ?1")
            self.i += 1
        elif re.fullmatch(r"[A-Za-z*]", c):
            while re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z:/]", self.peek()):
                self.i += 1
        else:
            raise ValueError("a parameter's value is not an RFC 8941 bare item")

    def number(self) -> None:
        if self.peek() == "-":
            self.i += 1

        def digits() -> int:
            n = 0
            while re.fullmatch(r"[0-9]", self.peek()):
                self.i += 1
                n += 1
            return n

        whole = digits()
        if whole == 0:
            raise ValueError("a parameter's number has no digits")
        if self.peek() != ".":
            if whole > 15:
                raise ValueError("a parameter's integer has more than 15 digits")
            return
        self.i += 1
        frac = digits()
        if whole > 12 or not 1 <= frac <= 3:
            raise ValueError("a parameter's decimal must have at most 12 digits, a dot and 1 to 3 digits")


def parse_key(value: str) -> str:
    """The key of an Idempotency-Key header: an RFC 8941 Item whose bare item
    is a String, parameters allowed and ignored. Several field lines are one
    value joined with ", ", and so malformed; so is an empty string. Raises
    ValueError saying what is wrong."""
    p = _SfParser(value.strip(" \t"))
    if p.s == "":
        raise ValueError("the value is empty")
    if p.peek() != '"':
        raise ValueError('the value must be a quoted string (RFC 8941), like "8e03978e-40d5-43e8-bc93-6894a57f9324"')
    key = p.string()
    p.parameters()
    if p.i != len(p.s):
        raise ValueError("the value has more than one quoted string (RFC 8941): one key per request")
    if key == "":
        raise ValueError("the key is empty; it must be at least 1 character")
    return key


def record_key(caller: str, key: str) -> str:
    """The key of the record of the request that caller sent with key: the
    caller with '%', '/', '#' and control characters percent-encoded, a '/',
    and the key; when that is longer than idem's 256 bytes, "#" and the hex
    SHA-256 of it instead."""
    escaped = "".join("%%%02X" % ord(c) if c in "%/#" or ord(c) < 0x20 or ord(c) == 0x7F else c for c in caller)
    composed = escaped + "/" + key
    raw = composed.encode("utf-8")
    if len(raw) <= _MAX_KEY_BYTES:
        return composed
    return "#" + hashlib.sha256(raw).hexdigest()


def _percent_decode(path: bytes) -> bytes:
    """Decodes each %XX of path to its byte, and leaves any other % as it is."""
    return re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), path)


def _fingerprint_names(names: Iterable[str]) -> List[str]:
    return sorted({n.lower() for n in names})


def fingerprint(method: str, path: bytes, query: bytes, header: Callable[[str], Optional[str]],
                names: Iterable[str], body: bytes) -> bytes:
    """The SHA-256 every language's middleware stores as the fingerprint of a
    request: of the netstrings of "idem-http-1", the method, the path
    (percent-decoded: WSGI's and ASGI's already are), the query as sent, then
    for each of names (lowercased, sorted, each once) that the request has
    the name and its value (header(name), None when absent), and last the
    body."""
    h = hashlib.sha256()

    def netstring(b: bytes) -> None:
        h.update(b"%d:" % len(b))
        h.update(b)
        h.update(b",")

    netstring(b"idem-http-1")
    netstring(method.encode("latin-1"))
    netstring(path)
    netstring(query)
    for name in _fingerprint_names(names):
        v = header(name)
        if v is not None:
            netstring(name.encode("latin-1"))
            netstring(v.encode("latin-1"))
    netstring(body)
    return h.digest()


_ENVELOPE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Stored:
    """A response as a record holds it: ``headers`` are (name, value) pairs,
    names in lowercase, values as Latin-1 text; ``body`` is empty when
    ``omitted`` (the body was over the bound and was not stored)."""

    status: int
    headers: Tuple[Tuple[str, str], ...]
    body: bytes = b""
    omitted: bool = False


def encode_envelope(s: Stored) -> bytes:
    """The record's result for a response: one line of JSON
    ({"idem_http":1,"status":S,"headers":[[name,value],...]}, with
    "omitted":true when the body was not stored), a newline, and the body."""
    dump = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    headers = ",".join(f"[{dump(n)},{dump(v)}]" for n, v in s.headers)
    head = f'{{"idem_http":{_ENVELOPE_VERSION},"status":{s.status},"headers":[{headers}]'
    head += ',"omitted":true}' if s.omitted else "}"
    return head.encode("utf-8") + b"\n" + (b"" if s.omitted else s.body)


def decode_envelope(b: bytes) -> Stored:
    """Reads an envelope; raises ValueError saying why it is not one."""
    line, nl, body = bytes(b).partition(b"\n")
    if not nl:
        raise ValueError("not a stored response: no newline after its first line")
    try:
        head = json.loads(line.decode("utf-8"))
    except ValueError as err:
        raise ValueError(f"not a stored response: its first line: {err}") from None
    if not isinstance(head, dict) or "idem_http" not in head:
        raise ValueError("not a stored response: its first line has no idem_http")
    if head["idem_http"] != _ENVELOPE_VERSION or isinstance(head["idem_http"], bool):
        raise ValueError(f"not a stored response: it is version {head['idem_http']!r} of the format; "
                         f"this version reads {_ENVELOPE_VERSION}")
    status = head.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599:
        raise ValueError(f"not a stored response: status {status!r} is not a final status (200 to 599)")
    omitted = head.get("omitted") is True
    if omitted and body:
        raise ValueError("not a stored response: a body follows a head that says it was omitted")
    headers = []
    for pair in head.get("headers") or []:
        if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise ValueError("not a stored response: a header is not a [name, value] pair of strings")
        for x in pair:
            if any(ord(c) > 0xFF for c in x):
                raise ValueError(f"not a stored response: a header holds {x!r}, which is not Latin-1")
        headers.append((pair[0], pair[1]))
    return Stored(status=status, headers=tuple(headers), body=body, omitted=omitted)


#: Starts the type URI of every problem; the rest is its slug, a heading of docs/http-api.md.
PROBLEM_TYPE_PREFIX = "https://github.com/idemhq/idem/blob/main/docs/http-api.md#"


@dataclasses.dataclass(frozen=True)
class _Problem:
    slug: str
    status: int
    title: str


#: The problems, as clients/scenarios/http.json lists them for every language.
PROBLEMS = {
    "key_missing": _Problem("key-missing", 400, "Idempotency-Key is missing"),
    "key_malformed": _Problem("key-malformed", 400, "Idempotency-Key is malformed"),
    "caller_unidentified": _Problem("caller-unidentified", 401, "The caller is not identified"),
    "request_too_large": _Problem("request-too-large", 413, "The request body is too large to fingerprint"),
    "key_in_flight": _Problem("key-in-flight", 409, "A request with this Idempotency-Key is being processed"),
    "key_unresolved": _Problem("key-unresolved", 409,
                               "The request with this Idempotency-Key awaits an operator's resolution"),
    "key_reused": _Problem("key-reused", 422, "Idempotency-Key was used for another request"),
    "request_failed": _Problem("request-failed", 500, "The request with this Idempotency-Key failed for good"),
    "record_unreadable": _Problem("record-unreadable", 500, "The stored response cannot be read"),
    "idem_unavailable": _Problem("idem-unavailable", 503, "Idempotency keys cannot be checked now"),
}

# The Retry-After of a key in flight and of idem unavailable: the holder of
# a key usually finishes within a request's time.
_RETRY_AFTER_SECONDS = 1


def _problem(p: _Problem, detail: str) -> Tuple[int, List[Tuple[str, str]], bytes]:
    doc: Dict[str, Any] = {"type": PROBLEM_TYPE_PREFIX + p.slug, "title": p.title, "status": p.status}
    if detail:
        doc["detail"] = detail
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    headers = [("Content-Type", "application/problem+json"), ("Content-Length", str(len(body)))]
    if p in (PROBLEMS["key_in_flight"], PROBLEMS["idem_unavailable"]):
        headers.append(("Retry-After", str(_RETRY_AFTER_SECONDS)))
    return p.status, headers, body


def _display(name: str) -> str:
    """A header name as it is usually written (Content-Type), for a replay of
    the lowercase name a record holds."""
    return "-".join(part[:1].upper() + part[1:] for part in name.split("-"))


def _status_line(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def _body_allowed(status: int) -> bool:
    return status not in (204, 304) and not 100 <= status <= 199


def _is_event_stream(content_type: Optional[str]) -> bool:
    return content_type is not None and content_type.split(";")[0].strip().lower() == "text/event-stream"


# ---------------------------------------------------------------------------
# Options, shared by both middlewares

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


class _Options:
    def __init__(self, caller: Any, namespace: str, methods: Sequence[str], require_key: bool,
                 fingerprint_headers: Sequence[str], fingerprint: Optional[Callable[..., bytes]],
                 stored_headers: Sequence[str], release: Optional[Callable[[int], bool]], wait: Seconds,
                 max_request_bytes: int, max_body_bytes: int, lease_ttl: Seconds, retention: Optional[Seconds],
                 fail_open: bool, logger: Optional[logging.Logger]):
        if not callable(caller):
            raise TypeError("idem: the middleware needs caller: the identity of a request's caller, so that no caller "
                            "gets another's response (return a constant for an API with one caller)")
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ValueError(f"idem: namespace {namespace!r} is not a namespace: 1 to 64 characters of a-z, 0-9, "
                             "'_', '.', '-', starting with a letter or digit")

        def names(field: str, values: Sequence[str], what: str) -> List[str]:
            if isinstance(values, str):
                raise TypeError(f"idem: {field} must be a list of names, not a string")
            for v in values:
                if not isinstance(v, str) or not _TOKEN.fullmatch(v):
                    raise ValueError(f"idem: {field} has {v!r}, which is not {what}")
            return list(values)

        def count(field: str, v: Any, lo: float, hi: float, unit: str = "") -> float:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise ValueError(f"idem: {field} is {v!r}; it must be {lo:g} to {hi:g}{unit}")
            return v

        self.caller = caller
        self.namespace = namespace
        self.methods = frozenset(names("methods", methods, "a method"))
        self.require_key = bool(require_key)
        self.fingerprint_headers = _fingerprint_names(names("fingerprint_headers", fingerprint_headers, "a header name"))
        self.fingerprint = fingerprint
        self.stored_headers = [n.lower() for n in names("stored_headers", stored_headers, "a header name")]
        self.release = release if release is not None else (lambda status: status >= 500)
        self.wait = seconds(wait, "wait") or 0.0
        self.max_request_bytes = int(count("max_request_bytes", max_request_bytes, 0, float("inf")))
        self.max_body_bytes = int(count("max_body_bytes", max_body_bytes, 0, _RESULT_BYTES_CEILING))
        self.lease_ttl = count("lease_ttl", seconds(lease_ttl, "lease_ttl"), _MIN_LEASE_TTL, _MAX_LEASE_TTL, " seconds")
        self.retention = None if retention is None else count(
            "retention", seconds(retention, "retention"), _MIN_RETENTION, _MAX_RETENTION, " seconds")
        self.fail_open = bool(fail_open)
        self.log = logger if logger is not None else log

    def job(self, caller: str, key: str, fp: bytes) -> Job:
        if len(fp) > 64:
            fp = hashlib.sha256(fp).digest()
        return Job(self.namespace, record_key(caller, key), fingerprint=fp, lease_ttl=self.lease_ttl,
                   retention=self.retention)


class _Release(Exception):
    """What the job raises for a response whose status gives the key back."""

    def __init__(self, status: int):
        super().__init__(f"the application answered {status}: released for a retry")
        self.status = status


def _before(o: _Options, job: Job, err: IdemError) -> Optional[Tuple[int, List[Tuple[str, str]], bytes]]:
    """The answer to a Claim that did not acquire, or None to run the
    application unguarded (fail_open)."""
    if isinstance(err, InProgressError):
        return _problem(PROBLEMS["key_in_flight"], "another request with this key has not finished; "
                                                   "retry after a moment")
    if isinstance(err, FingerprintMismatchError):
        return _problem(PROBLEMS["key_reused"], "this key was used for a request with another method, path, query, "
                                                "body or fingerprinted header; use a new key for a new request")
    if isinstance(err, JobFailedError):
        return _problem(PROBLEMS["request_failed"], err.message)
    if isinstance(err, UnresolvedError):
        return _problem(PROBLEMS["key_unresolved"], "the outcome of the first request with this key is not known; "
                                                    "an operator resolves it")
    if o.fail_open:
        o.log.warning("idem: idem is unreachable; running the application without an idempotency check "
                      "(fail_open): namespace=%s key=%s error=%s", job.namespace, job.key, err)
        return None
    o.log.error("idem: idem is unreachable; the request is refused (503) and its application not run: "
                "namespace=%s key=%s error=%s", job.namespace, job.key, err)
    return _problem(PROBLEMS["idem_unavailable"], "the API cannot check this Idempotency-Key now; retry in a moment")


def _replayed(o: _Options, job: Job, envelope: bytes) -> Tuple[int, List[Tuple[str, str]], bytes]:
    """The response that replays a completed record."""
    try:
        s = decode_envelope(envelope)
    except ValueError as err:
        o.log.error("idem: a completed record holds no stored response this version reads: namespace=%s key=%s "
                    "error=%s", job.namespace, job.key, err)
        return _problem(PROBLEMS["record_unreadable"], str(err))
    headers = [(_display(n), v) for n, v in s.headers if not s.omitted or not n.startswith("content-")]
    headers.append(("Idempotent-Replayed", "true"))
    if s.omitted:
        headers.append(("Idempotent-Body-Omitted", "true"))
    if _body_allowed(s.status):
        headers.append(("Content-Length", str(len(s.body))))
    return s.status, headers, s.body


class _Capture:
    """A response held back while the application writes it. From the moment
    it is a text/event-stream, or its body goes over max_body, it is passed
    through (``passing``), the body still kept while it fits."""

    def __init__(self, max_body: int):
        self.max_body = max_body
        self.status = 0
        self.headers: List[Tuple[str, str]] = []
        self.chunks: List[bytes] = []
        self.size = 0
        self.passing = False
        self.omitted = False

    def header(self, name: str) -> Optional[str]:
        for n, v in self.headers:
            if n.lower() == name:
                return v
        return None

    def add(self, data: bytes) -> List[bytes]:
        """Takes a piece of the body, and returns what must go out now: nothing
        while the response is held; data once it is passed through; and
        everything held so far with data when data takes it over the
        bound."""
        if not self.omitted and self.size + len(data) > self.max_body:
            out = [data] if self.passing else self.chunks + [data]
            self.passing, self.omitted, self.chunks, self.size = True, True, [], 0
            return out
        if not self.omitted and data:
            self.chunks.append(data)
            self.size += len(data)
        return [data] if self.passing and data else []

    def pass_through(self) -> List[bytes]:
        """Passes the response through from now on; returns what was held."""
        if self.passing:
            return []
        self.passing = True
        return list(self.chunks)

    def body(self) -> bytes:
        return b"".join(self.chunks)

    def envelope(self, stored: Sequence[str]) -> bytes:
        headers = tuple((n.lower(), v) for name in stored for n, v in self.headers if n.lower() == name)
        return encode_envelope(Stored(self.status, headers, b"" if self.omitted else self.body(), self.omitted))

    def held_headers(self) -> List[Tuple[str, str]]:
        """The headers of the held response, with its Content-Length."""
        headers = [(n, v) for n, v in self.headers if n.lower() != "content-length"]
        if _body_allowed(self.status):
            headers.append(("Content-Length", str(self.size)))
        return headers


def _record(o: _Options, client: Any, lease: _Lease, job: Job, cap: _Capture, exc: Optional[BaseException]) -> None:
    """Ends the lease after the application: a Fail that releases the key
    (a raised exc is raised again), or a Complete with the stored response.
    What goes wrong after the application ran is logged, not raised: its
    response goes out whatever happened to its record, since the effect
    happened. A Complete that was not confirmed (idemd refused the stored
    response for its size, or could not be reached until the lease ran out)
    is made once more with the body omitted, so that a repeat gets the
    status instead of running the application again."""
    if exc is not None:
        _finish(lease, exc, None)  # records the release and raises exc
    try:
        if o.release(cap.status):
            try:
                _finish(lease, _Release(cap.status), None)
            except _Release:
                pass  # released
            except FailureNotRecordedError as err:
                if not isinstance(err.handler_error, _Release):
                    raise
                o.log.error("idem: the key could not be given back after a response that releases it; a retry "
                            "waits for its lease to run out: namespace=%s key=%s error=%s", job.namespace,
                            job.key, err.fail_error)
            return
        _finish(lease, None, cap.envelope(o.stored_headers))
    except CompletionUnknownError as err:
        cap.omitted = True
        try:
            client._complete(job.namespace, job.key, err.record.token, cap.envelope(o.stored_headers))
        except AlreadyTerminalError:
            return  # the first Complete was stored after all; its answer was lost
        except IdemError as err2:
            o.log.error("idem: the response was sent but not stored; a repeat of the request may run the "
                        "application again once its lease runs out: namespace=%s key=%s error=%s; %s",
                        job.namespace, job.key, err, err2)
            return
        o.log.warning("idem: idem did not store the response; its record keeps the status with the body omitted "
                      "(for a response too large, raise idemd's --max-result-bytes or lower max_body_bytes): "
                      "namespace=%s key=%s error=%s", job.namespace, job.key, err)
    except IdemError as err:
        o.log.error("idem: the response was sent but its record was not completed; a repeat of the request may run "
                    "the application again: namespace=%s key=%s error=%s", job.namespace, job.key, err)


class _TooLarge(Exception):
    pass


def _options(caller: Any, namespace: str = "http", methods: Sequence[str] = DEFAULT_METHODS,
             require_key: bool = False, fingerprint_headers: Sequence[str] = (),
             fingerprint: Optional[Callable[..., bytes]] = None,
             stored_headers: Sequence[str] = DEFAULT_STORED_HEADERS, release: Optional[Callable[[int], bool]] = None,
             wait: Seconds = 0, max_request_bytes: int = 1 << 20, max_body_bytes: int = 60 << 10,
             lease_ttl: Seconds = 30, retention: Optional[Seconds] = None, fail_open: bool = False,
             logger: Optional[logging.Logger] = None) -> _Options:
    return _Options(caller, namespace, methods, require_key, fingerprint_headers, fingerprint, stored_headers,
                    release, wait, max_request_bytes, max_body_bytes, lease_ttl, retention, fail_open, logger)


_OPTIONS_DOC = """
    Options (keyword only); ``caller`` is required:

    - ``caller(request)``: the identity of the request's caller (the API
      key's account, the authenticated user), from the WSGI environ or the
      ASGI scope. Each caller's keys name records of their own, so that no
      caller gets another's response. Raising answers 401
      (caller-unidentified) with the exception's text; put the
      authentication in front so that it never does. An API whose callers
      are all one may return a constant.
    - ``namespace``: the namespace of the records, "http" by default; give
      each API its own.
    - ``methods``: the methods guarded, POST and PATCH by default.
    - ``require_key``: answer 400 (key-missing) to a guarded request without
      a key; by default it passes through unguarded.
    - ``fingerprint_headers``: request headers the fingerprint covers,
      besides the method, path, query and body; none by default.
    - ``fingerprint(request, body)``: replaces the fingerprint (bytes; over
      64 is hashed with SHA-256); by default the one every language computes
      alike.
    - ``stored_headers``: the response headers stored and replayed,
      DEFAULT_STORED_HEADERS by default.
    - ``release(status)``: whether a status gives the key back (a retry runs
      the application again) instead of being stored; status >= 500 by
      default. An application that raises always releases it.
    - ``wait`` (seconds): how long a request that finds its key in flight
      waits for the first and gets its response; 0, the default, answers 409
      at once.
    - ``max_request_bytes``: the request body is read whole to fingerprint
      it; a larger one is 413. 1 MiB by default.
    - ``max_body_bytes``: the largest response body stored. A larger one goes
      out as the application writes it, and the record keeps the status and
      headers with the body omitted: a repeat gets them, an empty body and
      Idempotent-Body-Omitted: true, and the application does not run again.
      60 KiB by default: with its head it fits the 64 KiB of result idemd
      accepts unless configured otherwise (--max-result-bytes).
    - ``lease_ttl`` (seconds): how long a record is held without a heartbeat
      while the application runs, and so how long a server that died
      mid-request keeps the key from being retried; 30 by default.
    - ``retention`` (seconds): how long a stored response is replayed; None
      means the namespace's retention in idemd.
    - ``fail_open``: run the application unguarded, with a warning logged,
      when idemd cannot be reached before it runs; by default the request
      is answered 503 (idem-unavailable) and the application does not run.
    - ``logger``: a logging.Logger for what the client is not told; the
      "idem.web" logger by default.
"""


# ---------------------------------------------------------------------------
# WSGI


class WSGIMiddleware:
    """Idempotency-Key middleware around a WSGI application (PEP 3333).

    It reads the request body whole before the application runs, and gives
    the application the same bytes in a new ``wsgi.input``. The
    application's response is held back until its record is complete, and
    its iterable is run to the end (and closed) within the middleware's
    call, unless the response is passed through (see max_body_bytes and
    text/event-stream), in which case the iterable the server gets streams
    it and completes the record at its end. Its options are below.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]], client: Any, **options: Any):
        self.app = app
        self.client = client
        self.o = _options(**options)

    def __call__(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        o = self.o
        if environ.get("REQUEST_METHOD", "") not in o.methods:
            return self.app(environ, start_response)

        def answer(resp: Tuple[int, List[Tuple[str, str]], bytes]) -> List[bytes]:
            start_response(_status_line(resp[0]), resp[1])
            return [resp[2]] if resp[2] else []

        value = environ.get("HTTP_IDEMPOTENCY_KEY")
        if value is None:
            if o.require_key:
                return answer(_problem(PROBLEMS["key_missing"], 'this request needs an Idempotency-Key header with a '
                                       'key unique to it, like Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"'))
            return self.app(environ, start_response)
        try:
            key = parse_key(value)
        except ValueError as err:
            return answer(_problem(PROBLEMS["key_malformed"], f"Idempotency-Key: {err}"))
        try:
            caller = o.caller(environ)
        except Exception as err:  # noqa: BLE001: the application's own identification failed
            return answer(_problem(PROBLEMS["caller_unidentified"], str(err)))
        try:
            body = self._read_body(environ)
        except _TooLarge:
            return answer(_problem(PROBLEMS["request_too_large"], f"the body is over {o.max_request_bytes} bytes, the "
                                   "most this API reads to fingerprint a request with an Idempotency-Key"))
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))

        if o.fingerprint is not None:
            fp = o.fingerprint(environ, body)
        else:
            path = (environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")).encode("latin-1")
            fp = fingerprint(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", "").encode("latin-1"),
                             lambda name: _environ_header(environ, name), o.fingerprint_headers, body)
        job = o.job(caller, key, fp)
        try:
            got = _acquire(self.client, job, o.wait)
        except IdemError as err:
            resp = _before(o, job, err)
            return self.app(environ, start_response) if resp is None else answer(resp)
        if isinstance(got, Result):
            return answer(_replayed(o, job, got.value))
        lease = _Lease(self.client, job, *got)
        return self._run(environ, start_response, lease, job)

    def _read_body(self, environ: Dict[str, Any]) -> bytes:
        limit = self.o.max_request_bytes
        stream = environ.get("wsgi.input")
        try:
            length = int(environ.get("CONTENT_LENGTH") or -1)
        except ValueError:
            length = -1
        if stream is None or length == 0:
            return b""
        if length > limit:
            raise _TooLarge()
        if length > 0:
            return stream.read(length)
        if not environ.get("wsgi.input_terminated"):
            return b""  # no length, and a stream that may not end: PEP 3333 says read none
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise _TooLarge()
        return body

    def _run(self, environ: Dict[str, Any], start_response: Callable[..., Any], lease: _Lease,
             job: Job) -> Iterable[bytes]:
        o = self.o
        cap = _Capture(o.max_body_bytes)
        out: List[bytes] = []  # what goes out next, once the response is passed through

        def app_start_response(status: str, headers: List[Tuple[str, str]],
                               exc_info: Any = None) -> Callable[[bytes], None]:
            if exc_info is not None and cap.passing:
                raise exc_info[1].with_traceback(exc_info[2])  # PEP 3333: the headers went out
            cap.status = int(status.split(" ", 1)[0])
            cap.headers = list(headers)
            if _is_event_stream(cap.header("content-type")):
                out.extend(cap.pass_through())
            return write

        def write(data: bytes) -> None:
            out.extend(cap.add(bytes(data)))

        try:
            result = self.app(environ, app_start_response)
        except BaseException as exc:
            _record(o, self.client, lease, job, cap, exc)  # releases the key and raises exc
            raise
        it = iter(result)
        try:
            while not cap.passing:
                write(next(it))
        except StopIteration:
            pass
        except BaseException as exc:
            _close(result)
            _record(o, self.client, lease, job, cap, exc)
            raise
        if not cap.passing:
            _close(result)
            _record(o, self.client, lease, job, cap, None)
            start_response(_status_line(cap.status), cap.held_headers())
            return [cap.body()] if cap.size and _body_allowed(cap.status) else []
        start_response(_status_line(cap.status), cap.headers)
        return _Passing(self._stream(result, it, cap, out, lease, job),
                        lambda: (_close(result), _record(o, self.client, lease, job, cap, None)))

    def _stream(self, result: Iterable[bytes], it: Iterator[bytes], cap: _Capture, out: List[bytes],
                lease: _Lease, job: Job) -> Iterator[bytes]:
        """The body of a response passed through: what is due, then the rest as
        the application writes it; the record completes at its end."""
        o = self.o
        try:
            while True:
                while out:
                    yield out.pop(0)
                try:
                    chunk = next(it)
                except StopIteration:
                    break
                out.extend(cap.add(bytes(chunk)))
        except GeneratorExit:
            # The server stopped reading (the client went away): the
            # application ran, so record what it answered.
            _close(result)
            _record(o, self.client, lease, job, cap, None)
            raise
        except BaseException as exc:
            _close(result)
            _record(o, self.client, lease, job, cap, exc)
            raise
        _close(result)
        _record(o, self.client, lease, job, cap, None)


WSGIMiddleware.__doc__ = (WSGIMiddleware.__doc__ or "") + _OPTIONS_DOC


class _Passing:
    """The iterable of a response passed through: its generator, and a
    close() that ends the record even when the server closes it before it
    took a single chunk (a generator closed unstarted runs nothing)."""

    def __init__(self, gen: Iterator[bytes], unstarted: Callable[[], Any]):
        self.gen = gen
        self.unstarted: Optional[Callable[[], Any]] = unstarted

    def __iter__(self) -> Iterator[bytes]:
        self.unstarted = None
        return self.gen

    def close(self) -> None:
        if self.unstarted is not None:
            self.unstarted, end = None, self.unstarted
            end()
        self.gen.close()


def _close(result: Any) -> None:
    close = getattr(result, "close", None)
    if close is not None:
        close()


def _environ_header(environ: Dict[str, Any], name: str) -> Optional[str]:
    key = name.upper().replace("-", "_")
    if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        v = environ.get(key)
        return v if v else None
    return environ.get("HTTP_" + key)


# ---------------------------------------------------------------------------
# ASGI


class ASGIMiddleware:
    """Idempotency-Key middleware around an ASGI application (its "http"
    scopes; the others pass through).

    It reads the request body whole before the application runs and gives
    the application the same bytes in one http.request message. idem's
    calls, which block, run in threads of its own (at most 64 at once); the
    lease is kept by a thread. The response is held back until its record is
    complete, unless it is passed through (see max_body_bytes and
    text/event-stream): then its messages go out as the application sends
    them, and the last one once the record is complete. ``caller`` takes the
    scope and may be a coroutine function. Its options are below.
    """

    def __init__(self, app: Callable[..., Awaitable[None]], client: Any, **options: Any):
        self.app = app
        self.client = client
        self.o = _options(**options)
        # idem's calls block, and a Claim with a wait blocks for up to the
        # wait: they get threads of their own rather than the loop's default
        # executor, which has a few per core.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="idem-web")

    async def __call__(self, scope: Dict[str, Any], receive: Callable[[], Awaitable[Dict[str, Any]]],
                       send: Callable[[Dict[str, Any]], Awaitable[None]]) -> None:
        o = self.o
        if scope.get("type") != "http" or scope.get("method") not in o.methods:
            await self.app(scope, receive, send)
            return

        async def answer(resp: Tuple[int, List[Tuple[str, str]], bytes]) -> None:
            await send({"type": "http.response.start", "status": resp[0],
                        "headers": [(n.encode("latin-1"), v.encode("latin-1")) for n, v in resp[1]]})
            await send({"type": "http.response.body", "body": resp[2]})

        def header(name: str) -> Optional[str]:
            values = [v.decode("latin-1") for k, v in scope.get("headers") or [] if k.decode("latin-1").lower() == name]
            return ", ".join(values) if values else None

        value = header("idempotency-key")
        if value is None:
            if o.require_key:
                await answer(_problem(PROBLEMS["key_missing"], 'this request needs an Idempotency-Key header with a '
                                      'key unique to it, like Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"'))
            else:
                await self.app(scope, receive, send)
            return
        try:
            key = parse_key(value)
        except ValueError as err:
            await answer(_problem(PROBLEMS["key_malformed"], f"Idempotency-Key: {err}"))
            return
        try:
            caller = o.caller(scope)
            if inspect.isawaitable(caller):
                caller = await caller
        except Exception as err:  # noqa: BLE001: the application's own identification failed
            await answer(_problem(PROBLEMS["caller_unidentified"], str(err)))
            return
        try:
            body = await self._read_body(receive)
        except _TooLarge:
            await answer(_problem(PROBLEMS["request_too_large"], f"the body is over {o.max_request_bytes} bytes, the "
                                  "most this API reads to fingerprint a request with an Idempotency-Key"))
            return
        given = [False]

        async def replay_receive() -> Dict[str, Any]:
            if not given[0]:
                given[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if o.fingerprint is not None:
            fp = o.fingerprint(scope, body)
        else:
            raw = scope.get("raw_path")
            path = _percent_decode(raw) if raw else scope.get("path", "").encode("utf-8")
            fp = fingerprint(scope["method"], path, scope.get("query_string", b""), header, o.fingerprint_headers, body)
        job = o.job(caller, key, fp)
        loop = asyncio.get_running_loop()
        try:
            got = await loop.run_in_executor(self._executor, _acquire, self.client, job, o.wait)
        except IdemError as err:
            resp = _before(o, job, err)
            if resp is None:
                await self.app(scope, replay_receive, send)
            else:
                await answer(resp)
            return
        if isinstance(got, Result):
            await answer(_replayed(o, job, got.value))
            return
        lease = _Lease(self.client, job, *got)
        cap = _Capture(o.max_body_bytes)
        started = [False]

        async def go_out(chunks: List[bytes]) -> None:
            if not started[0]:
                started[0] = True
                await send({"type": "http.response.start", "status": cap.status,
                            "headers": [(n.encode("latin-1"), v.encode("latin-1")) for n, v in cap.headers]})
            for c in chunks:
                await send({"type": "http.response.body", "body": c, "more_body": True})

        async def capture_send(message: Dict[str, Any]) -> None:
            kind = message.get("type")
            if kind == "http.response.start":
                cap.status = int(message["status"])
                cap.headers = [(bytes(k).decode("latin-1"), bytes(v).decode("latin-1"))
                               for k, v in message.get("headers") or []]
                if _is_event_stream(cap.header("content-type")):
                    await go_out(cap.pass_through())
            elif kind == "http.response.body":
                out = cap.add(bytes(message.get("body", b"")))
                if cap.passing:
                    await go_out(out)
            else:
                await send(message)  # an extension's message

        try:
            await self.app(scope, replay_receive, capture_send)
            if cap.status == 0:
                cap.status = 500  # an application that answered nothing, as servers answer it
        except BaseException as exc:
            await loop.run_in_executor(self._executor, _record, o, self.client, lease, job, cap, exc)  # raises exc
            raise
        await loop.run_in_executor(self._executor, _record, o, self.client, lease, job, cap, None)
        if cap.passing:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await send({"type": "http.response.start", "status": cap.status,
                    "headers": [(n.encode("latin-1"), v.encode("latin-1")) for n, v in cap.held_headers()]})
        await send({"type": "http.response.body", "body": cap.body() if _body_allowed(cap.status) else b""})

    async def _read_body(self, receive: Callable[[], Awaitable[Dict[str, Any]]]) -> bytes:
        limit = self.o.max_request_bytes
        chunks, size = [], 0
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                return b"".join(chunks)  # http.disconnect: what came
            data = message.get("body", b"")
            size += len(data)
            if size > limit:
                raise _TooLarge()
            chunks.append(data)
            if not message.get("more_body", False):
                return b"".join(chunks)


ASGIMiddleware.__doc__ = (ASGIMiddleware.__doc__ or "") + _OPTIONS_DOC
