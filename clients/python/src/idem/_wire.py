"""The Connect protocol's unary JSON calls over HTTP/1.1.

A call is ``POST <url>/idem.v1.<Service>/<Method>`` with a JSON body and
``Content-Type: application/json``; the answer is the response message in
JSON (200), or a Connect error: ``{"code": "aborted", "message": …,
"details": [{"type": "google.rpc.ErrorInfo", "value": <base64 protobuf>,
"debug": {…}}]}``. The details are read from their protobuf ``value`` (the
part every Connect server sends), falling back to ``debug``.

Connections are kept open and reused (HTTP/1.1 keep-alive) from a small pool
shared by the threads of one Client; urllib.request would open one per call.
Proxies are taken from the environment as urllib does (``https_proxy``,
``http_proxy``, ``no_proxy``), except for loopback addresses.
"""

import base64
import http.client
import json
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._errors import IdemError, error_class
from ._version import __version__

ERROR_DOMAIN = "idem"
USER_AGENT = f"idem-client-python/{__version__}"

# Connect's code for an HTTP status when the body is not a Connect error (a
# proxy's page): the table of the Connect protocol's specification.
_HTTP_CODES = {400: "INTERNAL", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "UNIMPLEMENTED",
               429: "UNAVAILABLE", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "UNAVAILABLE"}

# The errors of a kept-alive connection that the server closed while it sat
# in the pool: the request never reached a server that would answer it.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)

_MAX_IDLE = 8


def is_loopback(host: str) -> bool:
    return host == "localhost" or host == "::1" or host.startswith("127.")


class Transport:
    """One idemd's HTTP/JSON listener, safe to share between threads."""

    def __init__(self, url: str, *, token: str = "", ssl_context: Optional[ssl.SSLContext] = None,
                 allow_plaintext_token: bool = False):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"idem: url {url!r} is not an http:// or https:// URL")
        if parts.query or parts.fragment:
            raise ValueError(f"idem: url {url!r} has a query or fragment; give the listener's base URL")
        self.url = url.rstrip("/")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        # A header value holds printable ASCII; the whitespace around a
        # token (one read from a file) is dropped, as fetch's Headers does.
        token = token.strip(" \t\r\n")
        bad = next((i for i, c in enumerate(token) if not " " <= c <= "~"), -1)
        if bad >= 0:
            raise ValueError(f"idem: the token has a character that cannot be sent in an HTTP header "
                             f"({token[bad]!r}) at index {bad}; a bearer token is printable ASCII")
        if token and not self.https and not is_loopback(self.host) and not allow_plaintext_token:
            raise ValueError(f"idem: refusing to send the token in plaintext to {self.host}: use an https:// url, "
                             "or a loopback address")
        self.token = token
        self.ssl_context = ssl_context
        if self.https and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        self._proxy = None if is_loopback(self.host) else _proxy_for(parts.scheme, self.host)
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for c in idle:
            c.close()

    # ------------------------------------------------------------------

    def call(self, service: str, method: str, body: Mapping[str, Any], timeout: float) -> Dict[str, Any]:
        """Sends one call and returns the answer's JSON object, or raises an
        IdemError. A kept-alive connection that turns out to be closed is
        replaced and the call sent again once at once; every other failure
        is raised (the caller's RetryPolicy decides)."""
        data = json.dumps(dict(body), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        path = f"{self.prefix}/{service}/{method}"
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Connect-Protocol-Version": "1",
            "Connect-Timeout-Ms": str(max(int(timeout * 1000), 1)),
            "User-Agent": USER_AGENT,
        }
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        for fresh_only in (False, True):
            conn, reused = self._take(timeout, fresh_only)
            try:
                status, resp_headers, text, keep = self._roundtrip(conn, path, data, headers)
            except _STALE as err:
                conn.close()
                if reused:
                    continue
                raise self._no_answer(method, err) from err
            except (OSError, http.client.HTTPException) as err:
                conn.close()
                raise self._no_answer(method, err) from err
            if keep:
                self._give_back(conn)
            else:
                conn.close()
            if status == 200:
                try:
                    answer = json.loads(text or b"{}")
                except ValueError:
                    answer = None
                if not isinstance(answer, dict):
                    raise IdemError(f"HTTP 200 with a body that is not a JSON object: {text[:200]!r}",
                                    code="UNKNOWN", http_status=200, rpc=method, transient=False)
                return answer
            raise decode_error(method, status, resp_headers, text)
        raise AssertionError("unreachable")  # pragma: no cover

    def _roundtrip(self, conn: http.client.HTTPConnection, path: str, data: bytes,
                   headers: Dict[str, str]) -> Tuple[int, http.client.HTTPMessage, bytes, bool]:
        target = path
        if self._proxy is not None and not self.https:
            target = f"http://{self.host}:{self.port}{path}"  # a plain HTTP proxy takes the absolute URI
        try:
            conn.request("POST", target, body=data, headers=headers)
        except OSError as err:
            # A server that refuses a body before reading it (413, a batch
            # over its read limit) answers and closes while the body is
            # still going out: its answer is there to be read. A connection
            # that was never made, or was already closed, has none, and its
            # error stands.
            if conn.sock is None:
                raise
            try:
                resp = conn.getresponse()
                text = resp.read()
            except (OSError, http.client.HTTPException):
                raise err from None
            return resp.status, resp.headers, text, False
        resp = conn.getresponse()
        text = resp.read()
        return resp.status, resp.headers, text, not resp.will_close

    def _take(self, timeout: float, fresh_only: bool) -> Tuple[http.client.HTTPConnection, bool]:
        if not fresh_only:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is not None:
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                conn.timeout = timeout
                return conn, True
        return self._connect(timeout), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._proxy is None:
            if self.https:
                return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context)
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        phost, pport, pauth = self._proxy
        headers = {"Proxy-Authorization": pauth} if pauth else None
        if self.https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                phost, pport, timeout=timeout, context=self.ssl_context)
            conn.set_tunnel(self.host, self.port, headers=headers)
            return conn
        conn = _ProxiedHTTPConnection(phost, pport, timeout=timeout)
        conn.proxy_authorization = pauth
        return conn

    def _no_answer(self, method: str, err: BaseException) -> IdemError:
        # No answer: idemd is down, restarting, or too slow. Nothing is known
        # to have changed, and every idem call is safe to send again (a Claim
        # with the same claimant, the others with the same token).
        if isinstance(err, ssl.SSLCertVerificationError):
            return IdemError(f"TLS: {err.verify_message or err} (the server's certificate is not trusted: pass "
                             "ca_file or ssl_context)", code="UNAVAILABLE", rpc=method, transient=False)
        if isinstance(err, (socket.timeout, TimeoutError)):
            return error_class("DEADLINE_EXCEEDED", "")(f"no answer from {self.url} in time: {err}",
                                                       code="DEADLINE_EXCEEDED", rpc=method)
        return error_class("UNAVAILABLE", "")(f"no answer from {self.url}: {err}", code="UNAVAILABLE", rpc=method)


class _ProxiedHTTPConnection(http.client.HTTPConnection):
    proxy_authorization: Optional[str] = None

    def putrequest(self, method: str, url: str, *args: Any, **kw: Any) -> None:
        super().putrequest(method, url, *args, **kw)
        if self.proxy_authorization:
            self.putheader("Proxy-Authorization", self.proxy_authorization)


def _proxy_for(scheme: str, host: str) -> Optional[Tuple[str, int, Optional[str]]]:
    """The proxy urllib would use for scheme://host, as (host, port,
    Proxy-Authorization), or None."""
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    p = urllib.parse.urlsplit(proxy)
    if not p.hostname:
        return None
    auth = None
    if p.username is not None:
        creds = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
        auth = "Basic " + base64.b64encode(creds.encode("utf-8")).decode("ascii")
    return p.hostname, p.port or 80, auth


# ---------------------------------------------------------------------------
# Errors


def decode_error(rpc: str, status: int, headers: Any, body: bytes) -> IdemError:
    """Turns an error answer into an IdemError of the class its reason
    names: the Connect error body, its ErrorInfo and RetryInfo details, and
    the Retry-After header."""
    code = _HTTP_CODES.get(status, "UNKNOWN")
    message = f"HTTP {status}"
    reason = ""
    metadata: Dict[str, str] = {}
    retry_delay: Optional[float] = None
    try:
        st = json.loads(body) if body else None
    except ValueError:
        st = None
    if isinstance(st, dict) and isinstance(st.get("code"), str):
        code = st["code"].upper()
        message = st.get("message") or code.lower()
        for d in st.get("details") or []:
            if not isinstance(d, dict):
                continue
            kind = str(d.get("type", ""))
            if kind == "google.rpc.ErrorInfo":
                info = _error_info(d)
                if info is not None and info[1] == ERROR_DOMAIN:
                    reason, metadata = info[0], info[2]
            elif kind == "google.rpc.RetryInfo":
                delay = _retry_info(d)
                if delay is not None:
                    retry_delay = delay
    elif body:
        message = f"HTTP {status}: {body[:200].decode('utf-8', 'replace').strip()}"
    if retry_delay is None and headers is not None:
        retry_delay = _retry_after_header(headers.get("Retry-After"))
    cls = error_class(code, reason)
    return cls(message, code=code, reason=reason, metadata=metadata, retry_after=retry_delay,
               http_status=status, rpc=rpc)


# The names of the status codes, by number, as the Connect protocol spells
# them (upper-cased, as decode_error reads them), and the HTTP status it
# answers each with.
_CODE_NAMES = ["OK", "CANCELED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
               "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
               "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]
_CODE_HTTP = {"CANCELED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504, "NOT_FOUND": 404,
              "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
              "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
              "INTERNAL": 500, "UNAVAILABLE": 503, "DATA_LOSS": 500, "UNAUTHENTICATED": 401}


def decode_status(rpc: str, st: Any) -> IdemError:
    """Turns one item's google.rpc.Status of a batch answer, in protobuf's
    JSON mapping ({"code": 10, "message": …, "details": [{"@type":
    "type.googleapis.com/google.rpc.ErrorInfo", "reason": …}]}), into the
    IdemError the unary call rpc raises for the same status: the same
    class, code, reason, metadata, retry delay and HTTP status."""
    if not isinstance(st, dict):
        return IdemError(f"a batch item's error is not a google.rpc.Status: {st!r:.200}", code="UNKNOWN", rpc=rpc,
                         transient=False)
    number = st.get("code", 0)
    if isinstance(number, str):  # a reader may write the enum's name
        code = number.upper()
    else:
        code = _CODE_NAMES[number] if isinstance(number, int) and 0 <= number < len(_CODE_NAMES) else "UNKNOWN"
    message = st.get("message") or code.lower()
    reason, metadata, retry_delay = "", {}, None
    for d in st.get("details") or []:
        if not isinstance(d, dict):
            continue
        kind = str(d.get("@type", ""))
        kind = kind[kind.rfind("/") + 1:]
        if kind == "google.rpc.ErrorInfo" and d.get("domain") == ERROR_DOMAIN:
            reason = str(d.get("reason") or "")
            md = d.get("metadata")
            metadata = {str(k): str(v) for k, v in md.items()} if isinstance(md, dict) else {}
        elif kind == "google.rpc.RetryInfo":
            from ._types import duration_from_wire
            try:
                retry_delay = max(duration_from_wire(d.get("retryDelay")), 0.0)
            except ValueError:
                pass
    return error_class(code, reason)(message, code=code, reason=reason, metadata=metadata, retry_after=retry_delay,
                                     http_status=_CODE_HTTP.get(code, 500), rpc=rpc)


def _retry_after_header(v: Optional[str]) -> Optional[float]:
    if not v:
        return None
    try:
        return max(float(v), 0.0)
    except ValueError:
        return None  # an HTTP date: not something idemd sends


def _detail_value(d: Mapping[str, Any]) -> Optional[bytes]:
    v = d.get("value")
    if not isinstance(v, str):
        return None
    try:
        v += "=" * (-len(v) % 4)
        return base64.urlsafe_b64decode(v) if ("-" in v or "_" in v) else base64.b64decode(v)
    except ValueError:
        return None


def _error_info(d: Mapping[str, Any]) -> Optional[Tuple[str, str, Dict[str, str]]]:
    """(reason, domain, metadata) of a google.rpc.ErrorInfo detail."""
    raw = _detail_value(d)
    if raw is not None:
        try:
            reason, domain, metadata = "", "", {}
            for num, val in _fields(raw):
                if num == 1 and isinstance(val, bytes):
                    reason = val.decode("utf-8")
                elif num == 2 and isinstance(val, bytes):
                    domain = val.decode("utf-8")
                elif num == 3 and isinstance(val, bytes):
                    entry = dict((n, v) for n, v in _fields(val) if isinstance(v, bytes))
                    metadata[entry.get(1, b"").decode("utf-8")] = entry.get(2, b"").decode("utf-8")
            return reason, domain, metadata
        except ValueError:
            pass
    debug = d.get("debug")
    if isinstance(debug, dict):
        md = debug.get("metadata")
        return (str(debug.get("reason", "")), str(debug.get("domain", "")),
                {str(k): str(v) for k, v in md.items()} if isinstance(md, dict) else {})
    return None


def _retry_info(d: Mapping[str, Any]) -> Optional[float]:
    """The retry_delay of a google.rpc.RetryInfo detail, in seconds."""
    raw = _detail_value(d)
    if raw is not None:
        try:
            for num, val in _fields(raw):
                if num == 1 and isinstance(val, bytes):
                    secs, nanos = 0, 0
                    for n, v in _fields(val):
                        if n == 1 and isinstance(v, int):
                            secs = _signed(v, 64)
                        elif n == 2 and isinstance(v, int):
                            nanos = _signed(v, 32)
                    return max(secs + nanos / 1e9, 0.0)
            return 0.0
        except ValueError:
            pass
    debug = d.get("debug")
    if isinstance(debug, dict) and debug.get("retryDelay"):
        from ._types import duration_from_wire
        try:
            return max(duration_from_wire(debug["retryDelay"]), 0.0)
        except ValueError:
            return None
    return None


def _fields(buf: bytes) -> List[Tuple[int, Any]]:
    """The (field number, value) pairs of a protobuf message: an int for a
    varint or fixed field, bytes for a length-delimited one. ValueError when
    buf is not a message."""
    out: List[Tuple[int, Any]] = []
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
        elif wire == 1:
            if i + 8 > n:
                raise ValueError("truncated fixed64")
            v, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > n:
                raise ValueError("truncated field")
            v, i = buf[i:i + size], i + size
        elif wire == 5:
            if i + 4 > n:
                raise ValueError("truncated fixed32")
            v, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((num, v))
    return out


def _varint(buf: bytes, i: int) -> Tuple[int, int]:
    v, shift = 0, 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v & ((1 << 64) - 1), i


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v
