"""The scenarios and vectors of clients/scenarios/http.json for idem.web:
the WSGI middleware under wsgiref's server, reached with urllib.request,
and the ASGI middleware driven through scope, receive and send, each on a
real idemd on PostgreSQL and on SQLite (internal/testsupport/sdkharness).
The suite fails when the file has a scenario this file does not implement,
and when this file implements one the file no longer has."""

import asyncio
import base64
import concurrent.futures
import hashlib
import io
import json
import logging
import os
import socket
import socketserver
import threading
import time
import unittest
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from support import REPO, harness, idem

from idem import web

SPEC_FILE = os.path.join(REPO, "clients", "scenarios", "http.json")

with open(SPEC_FILE, encoding="utf-8") as f:
    SPEC = json.load(f)


def body_of(v: Dict[str, Any]) -> bytes:
    return v["body"].encode() if "body" in v else base64.b64decode(v.get("body_base64", ""))


def envelope_of(v: Dict[str, Any]) -> bytes:
    return v["envelope"].encode() if "envelope" in v else base64.b64decode(v["envelope_base64"])


class VectorTest(unittest.TestCase):
    def test_version(self):
        self.assertEqual(SPEC["version"], 1, f"{SPEC_FILE} is version {SPEC['version']}; this suite reads version 1")

    def test_keys(self):
        for v in SPEC["vectors"]["keys"]:
            if v["key"] is None:
                with self.assertRaises(ValueError, msg=f"parse_key({v['value']!r}) must refuse it"):
                    web.parse_key(v["value"])
            else:
                self.assertEqual(web.parse_key(v["value"]), v["key"], v["value"])

    def test_record_keys(self):
        for v in SPEC["vectors"]["record_keys"]:
            self.assertEqual(web.record_key(v["caller"], v["key"]), v["record_key"], (v["caller"], v["key"]))

    def test_fingerprints(self):
        for v in SPEC["vectors"]["fingerprints"]:
            headers = {k.lower(): val for k, val in v["headers"].items()}
            path, _, query = v["target"].partition("?")
            got = web.fingerprint(v["method"], web._percent_decode(path.encode("latin-1")), query.encode("latin-1"),
                                  headers.get, v["names"], v["body"].encode())
            self.assertEqual(got.hex(), v["fingerprint"], f"{v['method']} {v['target']}")

    def test_envelopes(self):
        for i, v in enumerate(SPEC["vectors"]["envelopes"]):
            s = web.Stored(v["status"], tuple((n, val) for n, val in v["headers"]),
                           b"" if v.get("omitted") else body_of(v), bool(v.get("omitted")))
            self.assertEqual(web.encode_envelope(s), envelope_of(v), f"envelope {i}")
            self.assertEqual(web.decode_envelope(envelope_of(v)), s, f"decode envelope {i}")

    def test_problems(self):
        self.assertEqual(web.PROBLEM_TYPE_PREFIX, SPEC["problem_type_prefix"])
        self.assertEqual([{"slug": p.slug, "status": p.status, "title": p.title} for p in web.PROBLEMS.values()],
                         SPEC["problems"])

    def test_decode_refuses(self):
        for bad in [b"not an envelope", b'{"idem_http":1,"status":201,"headers":[]}',
                    b'{"status":201,"headers":[]}\n', b'{"idem_http":2,"status":201,"headers":[]}\n',
                    b'{"idem_http":true,"status":201,"headers":[]}\n',
                    b'{"idem_http":1,"status":101,"headers":[]}\n', b'{"idem_http":1,"status":201,"headers":[["a"]]}\n',
                    b'{"idem_http":1,"status":201,"headers":[["a",1]]}\n',
                    '{"idem_http":1,"status":201,"headers":[["a","\u0100"]]}\n'.encode(),
                    b'{"idem_http":1,"status":201,"headers":[],"omitted":true}\nbody']:
            with self.assertRaises(ValueError, msg=repr(bad)):
                web.decode_envelope(bad)

    def test_bad_options(self):
        c = idem.Client("http://127.0.0.1:1")
        app = lambda environ, start_response: []  # noqa: E731
        caller = lambda r: ""  # noqa: E731
        for kw, want in [({}, "caller"), ({"caller": caller, "namespace": "Payments"}, "namespace 'Payments'"),
                         ({"caller": caller, "wait": -1}, "wait"),
                         ({"caller": caller, "max_body_bytes": 32 << 20}, "max_body_bytes is 33554432"),
                         ({"caller": caller, "lease_ttl": 0.01}, "lease_ttl is 0.01"),
                         ({"caller": caller, "retention": 1}, "retention is 1"),
                         ({"caller": caller, "methods": ["PO ST"]}, "methods has 'PO ST'"),
                         ({"caller": caller, "stored_headers": ["Bad:Name"]}, "stored_headers has 'Bad:Name'")]:
            with self.assertRaises((TypeError, ValueError), msg=str(kw)) as cm:
                web.WSGIMiddleware(app, c, **kw)
            self.assertIn(want, str(cm.exception))
        web.ASGIMiddleware(app, c, caller=caller)


# ---------------------------------------------------------------------------
# One handler, two servers


class Req:
    def __init__(self, method: str = "POST", path: str = "/payments", body: bytes = b"{}", key: Optional[str] = None,
                 headers: Optional[List[Tuple[str, str]]] = None, caller: Optional[str] = "alice"):
        self.method, self.path, self.body, self.key = method, path, body, key
        self.headers = list(headers or [])
        if caller is not None:
            self.headers.insert(0, ("X-Caller", caller))
        if key is not None:
            self.headers.append(("Idempotency-Key", json.dumps(key)))
        self.headers.append(("Content-Type", "application/json"))


class Res:
    def __init__(self, status: int, headers: List[Tuple[str, str]], body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def get(self, name: str) -> Optional[str]:
        values = [v for n, v in self.headers if n.lower() == name.lower()]
        return ", ".join(values) if values else None

    @property
    def replayed(self) -> bool:
        return self.get("Idempotent-Replayed") == "true"

    def __repr__(self) -> str:
        return f"Res({self.status}, {self.headers}, {self.body[:200]!r})"


class HReq:
    """What a handler sees of a request."""

    def __init__(self, method: str, path: str, headers: Dict[str, str], body: bytes):
        self.method, self.path, self.headers, self.body = method, path, headers, body


# A handler is a generator function of an HReq: it yields ("start", status,
# headers) once, then ("body", bytes) any number of times; it may block
# (the ASGI adapter runs each step in a thread) and may raise.
Handler = Callable[[HReq], Iterator[Tuple[Any, ...]]]


def wsgi_app(handler: Handler) -> Callable[..., Any]:
    def app(environ, start_response):
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        gen = handler(HReq(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), headers, body))
        first = next(gen)
        assert first[0] == "start"
        start_response(f"{first[1]} X", first[2])

        def rest():
            for item in gen:
                yield item[1]
        return rest()
    return app


def asgi_app(handler: Handler) -> Callable[..., Any]:
    async def app(scope, receive, send):
        loop = asyncio.get_running_loop()
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        gen = handler(HReq(scope["method"], scope["path"], headers, body))
        done = object()
        while True:
            item = await loop.run_in_executor(None, next, gen, done)
            if item is done:
                break
            if item[0] == "start":
                await send({"type": "http.response.start", "status": item[1],
                            "headers": [(n.encode("latin-1"), v.encode("latin-1")) for n, v in item[2]]})
            else:
                await send({"type": "http.response.body", "body": item[1], "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    return app


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass

    def log_error(self, *args):
        pass


class WSGIServerUnderTest:
    """The WSGI middleware under wsgiref's server, reached with urllib."""

    def __init__(self, middleware):
        self.server = make_server("127.0.0.1", 0, middleware, server_class=ThreadingWSGIServer,
                                  handler_class=QuietHandler)
        self.server.handle_error = lambda request, address: None  # the crash scenario's traceback
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def send(self, r: Req, on_chunk: Optional[Callable[[bytes], None]] = None) -> Res:
        req = urllib.request.Request(self.url + r.path, data=None if r.method == "GET" else r.body, method=r.method)
        for n, v in r.headers:
            req.add_header(n, v)
        try:
            resp = urllib.request.urlopen(req, timeout=60)
        except urllib.error.HTTPError as err:
            resp = err
        with resp:
            body = b""
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read()
                if not chunk:
                    break
                body += chunk
                if on_chunk is not None:
                    on_chunk(chunk)
            return Res(resp.status, list(resp.headers.items()), body)

    def send_raw_lines(self, lines: List[str], body: bytes) -> Res:
        """POST /payments with exactly these header lines, on a socket."""
        with socket.create_connection(self.server.server_address, timeout=60) as s:
            head = ["POST /payments HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
                    f"Content-Length: {len(body)}", *lines]
            s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            raw = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
        head_b, _, rest = raw.partition(b"\r\n\r\n")
        status_line, *header_lines = head_b.decode("latin-1").split("\r\n")
        headers = [(l.split(":", 1)[0], l.split(":", 1)[1].strip()) for l in header_lines]
        return Res(int(status_line.split(" ")[1]), headers, rest)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class ASGIDriver:
    """The ASGI middleware driven through scope, receive and send, on an event
    loop in a thread of its own; send() may be called from many threads."""

    def __init__(self, middleware):
        self.mw = middleware
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _drive(self, r: Req, on_chunk):
        path, _, query = r.path.partition("?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": r.method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
                 "root_path": "", "headers": [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in r.headers],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
        sent = [False]

        async def receive():
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": b"" if r.method == "GET" else r.body, "more_body": False}
            await asyncio.sleep(3600)  # a client that stays
            return {"type": "http.disconnect"}

        status, headers, body = [0], [], bytearray()

        async def send(m):
            if m["type"] == "http.response.start":
                status[0] = m["status"]
                headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in m.get("headers", []))
            elif m["type"] == "http.response.body":
                chunk = m.get("body", b"")
                body.extend(chunk)
                if chunk and on_chunk is not None:
                    await self.loop.run_in_executor(None, on_chunk, chunk)

        await self.mw(scope, receive, send)
        return Res(status[0], headers, bytes(body))

    def send(self, r: Req, on_chunk: Optional[Callable[[bytes], None]] = None) -> Res:
        return asyncio.run_coroutine_threadsafe(self._drive(r, on_chunk), self.loop).result(120)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class LogCapture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: List[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


class Counter:
    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()

    def run(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


def answer(run: int, status: int, body: bytes) -> Iterator[Tuple[Any, ...]]:
    """What the scenarios' handlers answer: status, a JSON body, Location and X-Unstored."""
    yield ("start", status, [("Content-Type", "application/json"), ("Location", f"/payments/{run}"),
                             ("X-Unstored", str(run))])
    yield ("body", body)


class Env:
    """One harness and one kind of server (wsgi or asgi)."""

    def __init__(self, t: unittest.TestCase, h: Any, kind: str):
        self.t, self.h, self.kind = t, h, kind
        self.plain = h.namespaces["plain"]
        self.client = h.client("worker")
        self.servers: List[Any] = []
        self.clients = [self.client]

    def serve(self, handler: Handler, client: Any = None, **options: Any):
        options.setdefault("namespace", self.plain)
        options.setdefault("caller", (lambda environ: _need(environ.get("HTTP_X_CALLER"))) if self.kind == "wsgi"
                           else (lambda scope: _need(dict(scope["headers"]).get(b"x-caller", b"").decode())))
        if "logger" not in options:
            options["logger"] = logging.getLogger(f"idem.web.test.{uuid.uuid4().hex}")
            options["logger"].propagate = False
            options["logger"].addHandler(logging.NullHandler())
        c = client or self.client
        if self.kind == "wsgi":
            s = WSGIServerUnderTest(web.WSGIMiddleware(wsgi_app(handler), c, **options))
        else:
            s = ASGIDriver(web.ASGIMiddleware(asgi_app(handler), c, **options))
        self.servers.append(s)
        return s

    def lookup(self, key: str):
        return self.client.lookup(self.plain, key)

    def claim_for(self, k: str):
        fp = web.fingerprint("POST", b"/payments", b"", lambda n: None, [], b"{}")
        return self.client._claim(self.plain, web.record_key("alice", k), fingerprint=fp,
                                  claimant="another-language").record

    def close(self):
        for s in self.servers:
            s.close()
        for c in self.clients:
            c.close()


def _need(caller: Optional[str]) -> str:
    if not caller:
        raise ValueError("no X-Caller header")
    return caller


def key(sid: str, part: str = "k") -> str:
    return f"{sid}-{part}-{uuid.uuid4().hex[:8]}"


class Scenarios:
    """The implementations, by scenario id, for either server."""

    def __init__(self, t: unittest.TestCase, e: Env):
        self.t, self.e = t, e

    def first(self, what: str, r: Res, status: int, body: bytes) -> None:
        self.t.assertEqual((r.status, r.body, r.replayed), (status, body, False), f"{what}: {r}")

    def replay(self, what: str, r: Res, first: Res) -> None:
        t = self.t
        t.assertTrue(r.replayed, f"{what}: not a replay: {r}")
        t.assertEqual((r.status, r.body), (first.status, first.body), f"{what}: {r}")
        for h in ("Content-Type", "Location"):
            t.assertEqual(r.get(h), first.get(h), f"{what}: {h}")
        t.assertIsNone(r.get("X-Unstored"), f"{what}: X-Unstored was replayed")

    def problem(self, what: str, r: Res, slug: str, status: int) -> Dict[str, Any]:
        t = self.t
        t.assertEqual((r.status, r.get("Content-Type")), (status, "application/problem+json"), f"{what}: {r}")
        doc = json.loads(r.body)
        t.assertEqual((doc["type"], doc["status"]), (web.PROBLEM_TYPE_PREFIX + slug, status), what)
        return doc

    def stored_envelope(self, status, headers, body=b"", omitted=False) -> bytes:
        return web.encode_envelope(web.Stored(status, tuple(headers), body, omitted))

    # ------------------------------------------------------------------

    def first_runs_repeat_replays(self, sid):
        t, e, runs = self.t, self.e, Counter()

        def h(req):
            run = runs.run()
            amount = json.loads(req.body)["amount"]
            yield from answer(run, 201, json.dumps({"id": f"pay_{run}", "amount": amount}, separators=(",", ":")).encode())

        s = e.serve(h)
        k = key(sid)
        first = s.send(Req(key=k, body=b'{"amount":1250}'))
        self.first("the first request", first, 201, b'{"id":"pay_1","amount":1250}')
        t.assertEqual((first.get("Location"), first.get("X-Unstored")), ("/payments/1", "1"))
        self.replay("the repeat", s.send(Req(key=k, body=b'{"amount":1250}')), first)
        t.assertEqual(runs.n, 1)
        rec = e.lookup(web.record_key("alice", k))
        t.assertEqual((rec.state, rec.attempt), (idem.State.COMPLETED, 1))
        t.assertEqual(rec.result, self.stored_envelope(201, [("content-type", "application/json"),
                                                             ("location", "/payments/1")], first.body))

    def concurrent_duplicates_conflict(self, sid):
        t, e, runs = self.t, self.e, Counter()
        started, release = threading.Event(), threading.Event()

        def h(req):
            runs.run()
            started.set()
            release.wait(10)
            yield ("start", 201, [("Content-Type", "application/json")])
            yield ("body", b'{"ok":true}')

        s = e.serve(h)
        k = key(sid)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(s.send, Req(key=k))
            t.assertTrue(started.wait(30), "the handler did not start")
            dup = s.send(Req(key=k))
            self.problem("the duplicate", dup, "key-in-flight", 409)
            t.assertGreaterEqual(int(dup.get("Retry-After") or 0), 1)
            release.set()
            first = fut.result(60)
        self.first("the first request", first, 201, b'{"ok":true}')
        self.replay("a repeat", s.send(Req(key=k)), first)
        t.assertEqual(runs.n, 1)

    def concurrent_duplicates_wait(self, sid):
        t, e, runs = self.t, self.e, Counter()

        def h(req):
            run = runs.run()
            time.sleep(0.2)
            yield from answer(run, 201, b'{"ok":true}')

        s = e.serve(h, wait=10)
        k = key(sid)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            out = list(pool.map(lambda _: s.send(Req(key=k)), range(3)))
        for r in out:
            t.assertEqual((r.status, r.body, r.get("Location")), (201, b'{"ok":true}', "/payments/1"), r)
        t.assertEqual(sum(1 for r in out if not r.replayed), 1)
        t.assertEqual(runs.n, 1)

    def other_request_rejected(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 201, b"{}"), fingerprint_headers=["X-Account"])
        k = key(sid)
        base = dict(key=k, body=b'{"amount":1}', headers=[("X-Account", "a1")])
        first = s.send(Req(**base))
        self.first("the first request", first, 201, b"{}")
        for what, r in [("another body", Req(**{**base, "body": b'{"amount":2}'})),
                        ("another path", Req(**base, path="/refunds")),
                        ("another method", Req(**base, method="PATCH")),
                        ("another X-Account", Req(**{**base, "headers": [("X-Account", "a2")]})),
                        ("a query", Req(**base, path="/payments?x=1"))]:
            self.problem(what, s.send(r), "key-reused", 422)
        self.replay("the same request", s.send(Req(**base)), first)
        t.assertEqual(runs.n, 1)

    def missing_key(self, sid):
        t, e, runs = self.t, self.e, Counter()
        h = lambda req: answer(runs.run(), 201, b"{}")  # noqa: E731
        required = e.serve(h, require_key=True)
        self.problem("no key, required", required.send(Req()), "key-missing", 400)
        t.assertEqual(runs.n, 0)
        optional = e.serve(h)
        for i in range(2):
            self.first(f"no key, optional ({i + 1})", optional.send(Req()), 201, b"{}")
        t.assertEqual(runs.n, 2)

    def malformed_key(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 201, b"{}"))
        for v in SPEC["vectors"]["keys"]:
            if v["key"] is None:
                doc = self.problem(f"Idempotency-Key: {v['value']}", s.send(Req(headers=[("Idempotency-Key", v["value"])])),
                                   "key-malformed", 400)
                t.assertIn("Idempotency-Key", doc.get("detail", ""))
        if e.kind == "wsgi":
            twice = s.send_raw_lines(["X-Caller: alice", 'Idempotency-Key: "a"', 'Idempotency-Key: "b"'], b"{}")
        else:
            twice = s.send(Req(headers=[("Idempotency-Key", '"a"'), ("Idempotency-Key", '"b"')]))
        self.problem("two Idempotency-Key lines", twice, "key-malformed", 400)
        t.assertEqual(runs.n, 0)

    def server_error_releases(self, sid):
        t, e, runs = self.t, self.e, Counter()

        def h(req):
            run = runs.run()
            if run == 1:
                yield from answer(run, 503, b'{"error":"busy"}')
            else:
                yield from answer(run, 201, b'{"ok":true}')

        s = e.serve(h)
        k = key(sid)
        self.first("the first request", s.send(Req(key=k)), 503, b'{"error":"busy"}')
        second = s.send(Req(key=k))
        self.first("the retry", second, 201, b'{"ok":true}')
        self.replay("a repeat", s.send(Req(key=k)), second)
        rec = e.lookup(web.record_key("alice", k))
        t.assertEqual((rec.state, rec.attempt), (idem.State.COMPLETED, 2))

    def handler_crash_releases(self, sid):
        t, e, runs = self.t, self.e, Counter()

        class Crash(Exception):
            pass

        def h(req):
            run = runs.run()
            if run == 1:
                raise Crash("the handler crashed")
            yield from answer(run, 201, b'{"ok":true}')

        s = e.serve(h)
        k = key(sid)
        if e.kind == "wsgi":
            r = s.send(Req(key=k))
            t.assertGreaterEqual(r.status, 500, r)
        else:
            with t.assertRaises(Crash):
                s.send(Req(key=k))
        self.first("the retry", s.send(Req(key=k)), 201, b'{"ok":true}')
        t.assertEqual(runs.n, 2)

    def client_error_stored(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 402, b'{"error":"card_declined"}'))
        k = key(sid)
        first = s.send(Req(key=k))
        self.first("the first request", first, 402, b'{"error":"card_declined"}')
        self.replay("the repeat", s.send(Req(key=k)), first)
        t.assertEqual(runs.n, 1)

    def callers_separate(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 201, json.dumps({"caller": req.headers["x-caller"]},
                                                                     separators=(",", ":")).encode()))
        k = key(sid)
        alice = s.send(Req(key=k))
        self.first("alice", alice, 201, b'{"caller":"alice"}')
        self.first("bob", s.send(Req(key=k, caller="bob")), 201, b'{"caller":"bob"}')
        self.replay("alice again", s.send(Req(key=k)), alice)
        self.problem("no caller", s.send(Req(key=k, caller=None)), "caller-unidentified", 401)
        t.assertEqual(runs.n, 2)

    def unguarded_method(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 200, b"{}"))
        k = key(sid)
        for m in ("GET", "GET", "PUT", "PUT"):
            self.first(m, s.send(Req(method=m, key=k)), 200, b"{}")
        t.assertEqual(runs.n, 4)
        with t.assertRaises(idem.NotFoundError):
            e.lookup(web.record_key("alice", k))

    def large_body_unstored(self, sid):
        t, e, runs = self.t, self.e, Counter()
        big = b"x" * 3000
        s = e.serve(lambda req: answer(runs.run(), 201, big), max_body_bytes=1024)
        k = key(sid)
        self.first("the first request", s.send(Req(key=k)), 201, big)
        r = s.send(Req(key=k))
        t.assertEqual((r.status, r.body, r.replayed, r.get("Idempotent-Body-Omitted"), r.get("Location"),
                       r.get("Content-Type")), (201, b"", True, "true", "/payments/1", None), r)
        t.assertEqual(runs.n, 1)
        rec = e.lookup(web.record_key("alice", k))
        t.assertEqual(rec.state, idem.State.COMPLETED)
        t.assertEqual(rec.result, self.stored_envelope(201, [("content-type", "application/json"),
                                                             ("location", "/payments/1")], omitted=True))

    def stored_response_refused(self, sid):
        t, e, runs = self.t, self.e, Counter()
        big = b"x" * 100000
        s = e.serve(lambda req: answer(runs.run(), 201, big), max_body_bytes=200000)
        k = key(sid)
        self.first("the first request", s.send(Req(key=k)), 201, big)
        r = s.send(Req(key=k))
        t.assertEqual((r.status, r.body, r.replayed, r.get("Idempotent-Body-Omitted")), (201, b"", True, "true"), r)
        t.assertEqual(runs.n, 1)
        rec = e.lookup(web.record_key("alice", k))
        t.assertEqual(rec.state, idem.State.COMPLETED)
        t.assertEqual(rec.result, self.stored_envelope(201, [("content-type", "application/json"),
                                                             ("location", "/payments/1")], omitted=True))

    def streamed_response(self, sid):
        t, e, runs = self.t, self.e, Counter()
        read = threading.Event()

        def h(req):
            runs.run()
            yield ("start", 200, [("Content-Type", "text/event-stream")])
            yield ("body", b"data: 1\n\n")
            read.wait(10)
            yield ("body", b"data: 2\n\n")

        s = e.serve(h)
        k = key(sid)
        seen = []

        def on_chunk(chunk):
            seen.append(chunk)
            if b"".join(seen) == b"data: 1\n\n":
                read.set()  # the client read the first event before the handler wrote the second

        r = s.send(Req(key=k, path="/events"), on_chunk=on_chunk)
        t.assertEqual(r.body, b"data: 1\n\ndata: 2\n\n")
        t.assertTrue(read.is_set(), "the client never saw the first event alone")
        again = s.send(Req(key=k, path="/events"))
        t.assertEqual((again.replayed, again.status, again.body, again.get("Content-Type")),
                      (True, 200, b"data: 1\n\ndata: 2\n\n", "text/event-stream"), again)
        t.assertEqual(runs.n, 1)

    def request_too_large(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 201, b"{}"), max_request_bytes=1024)
        self.problem("a 2048-byte body", s.send(Req(key=key(sid), body=b"x" * 2048)), "request-too-large", 413)
        t.assertEqual(runs.n, 0)

    def long_key_hashed(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 201, b"{}"))
        k = key(sid)
        k2 = k + "x" * (300 - len(k))
        k3 = k2[:-1] + "y"
        first = s.send(Req(key=k2))
        self.first("K2", first, 201, b"{}")
        self.replay("K2 again", s.send(Req(key=k2)), first)
        self.first("K3", s.send(Req(key=k3)), 201, b"{}")
        rec = e.lookup("#" + hashlib.sha256(("alice/" + k2).encode()).hexdigest())
        t.assertEqual(rec.state, idem.State.COMPLETED)
        t.assertEqual(runs.n, 2)

    def stored_envelope_replayed(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 201, b"{}"))
        for i, v in enumerate(SPEC["vectors"]["envelopes"]):
            k = key(sid, str(i))
            rec = e.claim_for(k)
            e.client._complete(rec.namespace, rec.key, rec.token, envelope_of(v))
            r = s.send(Req(key=k))
            omitted = bool(v.get("omitted"))
            t.assertTrue(r.replayed, f"envelope {i}: {r}")
            t.assertEqual((r.status, r.body), (v["status"], b"" if omitted else body_of(v)), f"envelope {i}")
            t.assertEqual(r.get("Idempotent-Body-Omitted"), "true" if omitted else None, f"envelope {i}")
            want: Dict[str, List[str]] = {}
            for n, val in v["headers"]:
                if not omitted or not n.startswith("content-"):
                    want.setdefault(n, []).append(val)
            for n, vals in want.items():
                t.assertEqual(r.get(n), ", ".join(vals), f"envelope {i}: {n}")
            if "content-type" not in want:
                t.assertIsNone(r.get("Content-Type"), f"envelope {i}: Content-Type")
        t.assertEqual(runs.n, 0)

    def unreadable_or_failed_record(self, sid):
        t, e, runs = self.t, self.e, Counter()
        s = e.serve(lambda req: answer(runs.run(), 201, b"{}"))
        k1, k2 = key(sid, "1"), key(sid, "2")
        rec = e.claim_for(k1)
        e.client._complete(rec.namespace, rec.key, rec.token, b"not an envelope")
        self.problem("a record without an envelope", s.send(Req(key=k1)), "record-unreadable", 500)
        rec = e.claim_for(k2)
        e.client._fail(rec.namespace, rec.key, rec.token, "declined by an operator", retryable=False)
        doc = self.problem("a FAILED record", s.send(Req(key=k2)), "request-failed", 500)
        t.assertEqual(doc["detail"], "declined by an operator")
        t.assertEqual(runs.n, 0)

    def idem_unreachable(self, sid):
        t, e, runs = self.t, self.e, Counter()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
        sock.close()
        c = idem.Client(dead, token=e.h.tokens["worker"], retry=idem.RetryPolicy(max_attempts=3, base_delay=0.02))
        e.clients.append(c)
        h = lambda req: answer(runs.run(), 201, b"{}")  # noqa: E731
        k = key(sid)
        r = e.serve(h, client=c).send(Req(key=k))
        self.problem("fail closed", r, "idem-unavailable", 503)
        t.assertIsNotNone(r.get("Retry-After"))
        t.assertEqual(runs.n, 0)
        logger = logging.getLogger(f"idem.web.test.{uuid.uuid4().hex}")
        logger.propagate = False
        captured = LogCapture()
        logger.addHandler(captured)
        self.first("fail open", e.serve(h, client=c, fail_open=True, logger=logger).send(Req(key=k)), 201, b"{}")
        t.assertEqual(runs.n, 1)
        t.assertTrue(any(rec.levelno == logging.WARNING and web.record_key("alice", k) in rec.getMessage()
                         for rec in captured.records), [rec.getMessage() for rec in captured.records])

    def restart_before_stored(self, sid):
        t, e, runs = self.t, self.e, Counter()

        def h(req):
            run = runs.run()
            e.h.control("/restart?down_ms=1500")
            yield from answer(run, 201, b'{"ok":true}')

        s = e.serve(h)
        k = key(sid)
        first = s.send(Req(key=k))
        self.first("the first request", first, 201, b'{"ok":true}')
        self.replay("the repeat", s.send(Req(key=k)), first)
        t.assertEqual(e.lookup(web.record_key("alice", k)).state, idem.State.COMPLETED)
        t.assertEqual(runs.n, 1)


def impl_name(sid: str) -> str:
    return sid.replace("-", "_")


class ScenarioFileTest(unittest.TestCase):
    def test_every_scenario_implemented(self):
        ids = [s["id"] for s in SPEC["scenarios"]]
        for sid in ids:
            self.assertTrue(hasattr(Scenarios, impl_name(sid)),
                            f"scenario {sid} of {SPEC_FILE} has no Python implementation: add it to tests/test_http.py")
        implemented = {n for n in vars(Scenarios) if not n.startswith("_") and callable(getattr(Scenarios, n))
                       and n not in ("first", "replay", "problem", "stored_envelope")}
        for n in implemented:
            self.assertIn(n.replace("_", "-"), ids,
                          f"tests/test_http.py implements {n}, which {SPEC_FILE} no longer has: remove it")


class _HTTPScenarios:
    store = ""
    kind = ""

    def test_scenarios(self):
        h = harness(self.store)
        specs = SPEC["scenarios"]
        errors: Dict[str, BaseException] = {}

        def run(s):
            e = Env(self, h, self.kind)
            try:
                getattr(Scenarios(self, e), impl_name(s["id"]))(s["id"])
            finally:
                e.close()

        # The scenarios that leave idemd alone run at once; the exclusive
        # ones, which restart it, one at a time after them.
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = {pool.submit(run, s): s["id"] for s in specs if not s.get("exclusive")}
            for fut, sid in futures.items():
                try:
                    fut.result()
                except BaseException as err:  # noqa: BLE001: reported below, with the others
                    errors[sid] = err
        for s in specs:
            if s.get("exclusive"):
                try:
                    run(s)
                except BaseException as err:  # noqa: BLE001
                    errors[s["id"]] = err
                finally:
                    h.control("/ready")
        if errors:
            self.fail("\n".join(f"{sid}: {type(err).__name__}: {err}" for sid, err in errors.items()))


class WSGIClosedUnreadTest(unittest.TestCase):
    """A WSGI server may close a streamed response's iterable before it reads
    a chunk (its client went away): the record is completed all the same,
    and its lease not kept on forever."""

    def test_closed_before_the_first_chunk(self):
        h = harness("sqlite")
        client = h.client("worker")
        self.addCleanup(client.close)

        def app(environ, start_response):
            start_response("200 OK", [("Content-Type", "text/event-stream")])
            return iter([b"data: 1\n\n"])

        mw = web.WSGIMiddleware(app, client, namespace=h.namespaces["plain"], caller=lambda environ: "alice")
        k = key("closed-unread")
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/events", "QUERY_STRING": "", "CONTENT_LENGTH": "0",
                   "wsgi.input": io.BytesIO(b""), "HTTP_IDEMPOTENCY_KEY": json.dumps(k)}
        result = mw(environ, lambda status, headers, exc_info=None: None)
        result.close()
        rec = client.lookup(h.namespaces["plain"], web.record_key("alice", k))
        self.assertEqual(rec.state, idem.State.COMPLETED)


class WSGIPostgresTest(_HTTPScenarios, unittest.TestCase):
    store, kind = "postgres", "wsgi"


class WSGISQLiteTest(_HTTPScenarios, unittest.TestCase):
    store, kind = "sqlite", "wsgi"


class ASGIPostgresTest(_HTTPScenarios, unittest.TestCase):
    store, kind = "postgres", "asgi"


class ASGISQLiteTest(_HTTPScenarios, unittest.TestCase):
    store, kind = "sqlite", "asgi"


if __name__ == "__main__":
    unittest.main()
