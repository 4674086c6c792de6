"""Test support: the package from src/, a real idemd on SQLite, and a
scripted HTTP server.

The package under test is imported from ../src (tests of the installed wheel
are in test_package.py). IDEMD_BIN names a prebuilt idemd; without it idemd
is built from ./cmd/idemd once per run with `go build`.

An Idemd runs with the tenants of the shared scenario harness
(internal/testsupport/sdkharness): worker (admin, and namespaces held* under a hold
policy), operator (operator: true) and limited (5 calls per second, burst 1).
"""

import atexit
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PACKAGE_ROOT))
sys.path.insert(0, os.path.join(PACKAGE_ROOT, "src"))

import idem  # noqa: E402

# Generous: the tests share a busy 2-core machine with the Go tests in CI.
START_TIMEOUT = 120.0

_bins: Dict[str, str] = {}
_bin_lock = threading.Lock()


def build(pkg: str, name: str, env_var: str) -> str:
    """The path of a Go binary: $env_var, or pkg built once per run into a
    directory per checkout that outlives the run, so that a run with nothing
    changed neither compiles nor links (go build leaves an up-to-date binary
    alone)."""
    if os.environ.get(env_var):
        return os.environ[env_var]
    with _bin_lock:
        if name not in _bins:
            out_dir = os.path.join(tempfile.gettempdir(), f"idem-python-client-{os.getuid()}",
                                   hashlib.sha256(REPO.encode()).hexdigest()[:12])
            os.makedirs(out_dir, mode=0o700, exist_ok=True)
            out = os.path.join(out_dir, name)
            with open(os.path.join(out_dir, ".lock"), "w") as lock:
                import fcntl
                fcntl.flock(lock, fcntl.LOCK_EX)  # another run of this checkout may build it too
                subprocess.run(["go", "build", "-o", out, pkg], cwd=REPO, check=True, stdin=subprocess.DEVNULL)
            _bins[name] = out
        return _bins[name]


def idemd_bin() -> str:
    return build("./cmd/idemd", "idemd", "IDEMD_BIN")


def harness_bin() -> str:
    return build("./internal/testsupport/sdkharness", "sdkharness", "SDKHARNESS_BIN")


class Harness:
    """internal/testsupport/sdkharness: a real idemd on one store ("postgres" or
    "sqlite") with the scenarios' tenants, and control endpoints that
    restart it or cut it off its store (clients/scenarios/README.md). One
    per store and test run: see harness()."""

    def __init__(self, store: str, max_result_bytes: Optional[int] = None):
        self.store = store
        args = [harness_bin(), "--store", store, "--idemd-bin", idemd_bin()]
        if max_result_bytes is not None:
            args += ["--max-result-bytes", str(max_result_bytes)]
        self.proc = subprocess.Popen(args, cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.log: List[str] = []
        assert self.proc.stderr is not None and self.proc.stdout is not None
        threading.Thread(target=self._read_log, daemon=True).start()
        line: List[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(START_TIMEOUT)
        if not line or not line[0].strip():
            self.close()
            raise RuntimeError(f"sdkharness --store {store} printed no line within {START_TIMEOUT}s:\n"
                               + "\n".join(self.log[-30:]))
        self.info = json.loads(line[0])
        self.url: str = self.info["http_url"]
        self.tokens: Dict[str, str] = self.info["tokens"]
        self.namespaces: Dict[str, str] = self.info["namespaces"]

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for l in self.proc.stderr:
            self.log.append(l.rstrip("\n"))

    def client(self, tenant: str = "worker", **kw: Any) -> "idem.Client":
        kw.setdefault("token", self.tokens[tenant])
        return idem.Client(self.url, **kw)

    def control(self, path: str) -> str:
        """POSTs to a control endpoint and returns its answer's text."""
        import urllib.request
        req = urllib.request.Request(self.info["control_url"] + path, data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.read().decode()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: the harness stops idemd and cleans up
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


_harnesses: Dict[Tuple[str, Optional[int]], Harness] = {}


def harness(store: str, max_result_bytes: Optional[int] = None) -> Harness:
    """The harness of store (with idemd's --max-result-bytes when given),
    started on first use and closed at exit."""
    with _bin_lock:
        h = _harnesses.get((store, max_result_bytes))
    if h is None:
        h = Harness(store, max_result_bytes)
        with _bin_lock:
            _harnesses[(store, max_result_bytes)] = h
        atexit.register(h.close)
    return h


TOKENS = {"worker": "worker-token-" + uuid.uuid4().hex, "operator": "operator-token-" + uuid.uuid4().hex,
          "limited": "limited-token-" + uuid.uuid4().hex}
NAMESPACES = {"plain": "jobs", "held": "held-jobs"}


def _sha(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


CONFIG = f"""
tenants:
  - name: worker
    tokens: ["{_sha(TOKENS['worker'])}"]
    admin: true
    policies:
      - namespaces: ["held*"]
        on_lease_expiry: hold
  - name: operator
    tokens: ["{_sha(TOKENS['operator'])}"]
    operator: true
  - name: limited
    tokens: ["{_sha(TOKENS['limited'])}"]
    rate_limit: {{per_second: 5, burst: 1}}
"""


class Idemd:
    """A real idemd on SQLite in a temp dir, on free loopback ports that it
    picks itself and reports in its "idemd serving" line; restart() brings
    it back on the same ports and data."""

    def __init__(self, config: str = CONFIG, extra_args: Optional[List[str]] = None, scheme: str = "http"):
        self.dir = tempfile.mkdtemp(prefix="idem-python-client-test-")
        self.config_path = os.path.join(self.dir, "idem.yaml")
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(config)
        self.extra_args = list(extra_args or [])
        self.scheme = scheme
        self.proc: Optional[subprocess.Popen] = None
        self.log: List[str] = []
        self.grpc_addr = "127.0.0.1:0"
        self.json_addr = "127.0.0.1:0"
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.json_addr}"

    def _start(self) -> None:
        cmd = [idemd_bin(), "serve", "--data-dir", os.path.join(self.dir, "data"), "--config", self.config_path,
               "--listen", self.grpc_addr, "--http-listen", "", "--json-listen", self.json_addr,
               "--sweep-interval", "1s", "--log-format", "json", *self.extra_args]
        # A developer's own IDEM_* settings must not leak in: every flag has
        # an env twin.
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        serving = threading.Event()
        found: Dict[str, Any] = {}
        proc = self.proc

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line.rstrip("\n"))
                if not found and '"msg":"idemd serving"' in line:
                    found.update(json.loads(line))
                    serving.set()
            serving.set()  # exited

        threading.Thread(target=read, daemon=True).start()
        if not serving.wait(START_TIMEOUT) or not found:
            raise RuntimeError(f"idemd did not log \"idemd serving\" within {START_TIMEOUT}s:\n" + "\n".join(self.log[-30:]))
        self.grpc_addr, self.json_addr = found["listen"], found["json_listen"]

    def client(self, tenant: str = "worker", **kw: Any) -> "idem.Client":
        kw.setdefault("token", TOKENS[tenant])
        return idem.Client(self.url, **kw)

    def down(self) -> None:
        """Stops idemd (SIGTERM) and waits until it has exited."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def up(self) -> None:
        """Starts idemd again on the same ports and data; the old ports may
        take a moment to free."""
        deadline = time.monotonic() + 30
        while True:
            try:
                self._start()
                return
            except RuntimeError:
                if time.monotonic() > deadline or not any("address already in use" in l for l in self.log[-5:]):
                    raise
                time.sleep(0.1)

    def restart_later(self, down_s: float) -> threading.Thread:
        """Stops idemd now and starts it again after down_s seconds, in a
        thread; returns once idemd is down."""
        self.down()

        def later() -> None:
            time.sleep(down_s)
            self.up()

        t = threading.Thread(target=later, daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.down()
        shutil.rmtree(self.dir, ignore_errors=True)


def fresh(name: str) -> str:
    """A key no other test uses."""
    return f"{name}-{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------------
# A scripted HTTP server


class Request:
    def __init__(self, method: str, path: str, headers: Any, body: bytes, conn_id: int):
        self.time = time.monotonic()
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.conn_id = conn_id  # which TCP connection carried it

    @property
    def rpc(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def json(self) -> Any:
        return json.loads(self.body)


Answer = Tuple[int, Dict[str, str], Any]


class Scripted:
    """An HTTP/1.1 server (keep-alive) that answers each request with
    handler(request) -> (status, headers, JSON body or bytes), and records
    every request. A header "X-Close": "1" in an answer closes the
    connection after it without saying so (as a server that drops an idle
    connection does)."""

    def __init__(self, handler: Callable[[Request], Answer], ssl_context: Any = None):
        self.handler = handler
        self.requests: List[Request] = []
        self.lock = threading.Lock()
        outer = self
        conn_ids = iter(range(1, 1 << 30))

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.conn_id = next(conn_ids)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = Request(self.command, self.path, self.headers, body, self.conn_id)
                with outer.lock:
                    outer.requests.append(req)
                status, headers, answer = outer.handler(req)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                close = headers.pop("X-Close", None) == "1"
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Type" not in headers:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                if close:
                    self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        # A client that gave up on an answer closes its end: not the
        # server's error to print.
        self.server.handle_error = lambda request, address: None  # type: ignore[assignment]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def rpcs(self) -> List[str]:
        with self.lock:
            return [r.rpc for r in self.requests]

    def of(self, rpc: str) -> List[Request]:
        with self.lock:
            return [r for r in self.requests if r.rpc == rpc]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def connect_error(code: str, message: str, reason: str = "", metadata: Optional[Dict[str, str]] = None,
                  retry_delay: Optional[float] = None, debug: bool = True) -> Dict[str, Any]:
    """A Connect error body as idemd writes it: ErrorInfo (and RetryInfo)
    details as protobuf in base64, with their JSON under debug."""
    details = []
    if reason:
        raw = _pb_str(1, reason) + _pb_str(2, "idem")
        for k, v in (metadata or {}).items():
            raw += _pb_bytes(3, _pb_str(1, k) + _pb_str(2, v))
        d: Dict[str, Any] = {"type": "google.rpc.ErrorInfo", "value": _b64(raw)}
        if debug:
            d["debug"] = {"reason": reason, "domain": "idem", **({"metadata": metadata} if metadata else {})}
        details.append(d)
    if retry_delay is not None:
        secs, nanos = int(retry_delay), round((retry_delay - int(retry_delay)) * 1e9)
        dur = (_pb_varint_field(1, secs) if secs else b"") + (_pb_varint_field(2, nanos) if nanos else b"")
        d = {"type": "google.rpc.RetryInfo", "value": _b64(_pb_bytes(1, dur))}
        if debug:
            d["debug"] = {"retryDelay": f"{retry_delay:.3f}s"}
        details.append(d)
    return {"code": code, "message": message, **({"details": details} if details else {})}


def _b64(b: bytes) -> str:
    import base64
    return base64.b64encode(b).decode().rstrip("=")  # Connect sends it unpadded


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _pb_varint_field(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v)


def _pb_bytes(num: int, b: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(b)) + b


def _pb_str(num: int, s: str) -> bytes:
    return _pb_bytes(num, s.encode())


HTTP_OF = {"aborted": 409, "failed_precondition": 400, "invalid_argument": 400, "not_found": 404,
           "unavailable": 503, "resource_exhausted": 429, "internal": 500, "unauthenticated": 401}


def err(code: str, message: str = "m", reason: str = "", **kw: Any) -> Answer:
    """An error answer with the HTTP status Connect uses for code."""
    return HTTP_OF.get(code, 500), {}, connect_error(code, message, reason, **kw)


def record(state: str = "STATE_PROCESSING", token: int = 3, **fields: Any) -> Dict[str, Any]:
    r = {"namespace": "ns", "key": "k", "state": state, "token": str(token), "attempt": 1,
         "leaseExpiresAt": "2030-01-01T00:00:30Z", "updatedAt": "2030-01-01T00:00:00Z"}
    r.update(fields)
    return r


def ok(body: Any) -> Answer:
    return 200, {}, body


ACQUIRED = ok({"outcome": "OUTCOME_ACQUIRED", "record": record()})


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def self_signed_cert(directory: str) -> Tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and localhost, made with the
    openssl command: (cert.pem, key.pem)."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    if shutil.which("openssl") is None:
        raise RuntimeError("the TLS tests need the openssl command (apt-get install openssl)")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=idem test",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return cert, key
