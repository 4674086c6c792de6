"""Test harness: a real idemd on a fresh PostgreSQL schema of its own, and
helpers that run workers (Python, and Go for the cross-language race) as
separate processes.

IDEM_TEST_DATABASE_URL names the database, as for the Go tests (default: the
local Postgres; `make test-python` finds or starts one). The tests fail, and
say why, when none answers. IDEMD_BIN and GO_ONCE_BIN name prebuilt
binaries; without them the harness builds them with `go build`, once per run.
"""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(EXAMPLE))
WORKER = os.path.join(EXAMPLE, "worker.py")

sys.path.insert(0, EXAMPLE)
import idem  # noqa: E402

# Generous: the tests share a busy 2-core machine with the Go tests in CI.
START_TIMEOUT = 90.0
RESULT_TIMEOUT = 90.0

_bin_dir = None
_bins = {}
_bin_lock = threading.Lock()


def _build(pkg, name, env_var):
    """Returns the path of a binary: $env_var, or pkg built once per run."""
    global _bin_dir
    if os.environ.get(env_var):
        return os.environ[env_var]
    with _bin_lock:
        if name not in _bins:
            if _bin_dir is None:
                _bin_dir = tempfile.mkdtemp(prefix="idem-python-test-bin-")
                atexit.register(shutil.rmtree, _bin_dir, True)
            out = os.path.join(_bin_dir, name)
            subprocess.run(["go", "build", "-o", out, pkg], cwd=REPO, check=True, stdin=subprocess.DEVNULL)
            _bins[name] = out
        return _bins[name]


def go_once_bin():
    return _build("./examples/node-worker/go-once", "go-once", "GO_ONCE_BIN")


def _schema(*args):
    """Runs the testschema helper (Python has no PostgreSQL client)."""
    tool = _build("./examples/python-worker/testschema", "testschema", "TESTSCHEMA_BIN")
    res = subprocess.run([tool, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(res.stderr.strip() or f"testschema {' '.join(args)} exited with {res.returncode}")
    return res.stdout.strip()


class Idemd:
    """A real idemd on a schema of its own, listening on free loopback ports
    that it picks itself (port 0) and reports in its "idemd serving" line.

    config, when given, is the text of an idemd config file (--config).
    """

    def __init__(self, config=None):
        self.dir = tempfile.mkdtemp(prefix="idem-python-test-")
        self.db_url = None
        self.proc = None
        self._reader = None
        self.log = []  # idemd's stderr lines, for failure messages
        try:
            idemd_bin = _build("./cmd/idemd", "idemd", "IDEMD_BIN")
            self.db_url = _schema("create")
            cmd = [idemd_bin, "serve", "--listen", "127.0.0.1:0", "--http-listen", "",
                   "--json-listen", "127.0.0.1:0", "--database-url", self.db_url,
                   "--sweep-interval", "1s", "--log-format", "json"]
            if config is not None:
                path = os.path.join(self.dir, "idem.yaml")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(config)
                cmd += ["--config", path]
            # A developer's own IDEM_* settings must not leak in: every flag
            # has an env twin.
            env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
            self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True)
            serving = threading.Event()
            self._serving = None

            def read():
                for line in self.proc.stderr:
                    self.log.append(line.rstrip("\n"))
                    if self._serving is None and '"msg":"idemd serving"' in line:
                        self._serving = json.loads(line)
                        serving.set()
                serving.set()  # exited

            self._reader = threading.Thread(target=read, daemon=True)
            self._reader.start()
            if not serving.wait(START_TIMEOUT) or self._serving is None:
                raise RuntimeError(f"idemd did not log \"idemd serving\" within {START_TIMEOUT}s:\n" + "\n".join(self.log))
            self.grpc_addr = self._serving["listen"]
            self.json_url = "http://" + self._serving["json_listen"]
        except BaseException:
            self.stop()
            raise

    def client(self, **kw):
        return idem.Client(self.json_url, **kw)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            if self._reader is not None:
                self._reader.join(10)
            self.proc.stderr.close()
        if self.db_url is not None:
            _schema("drop", self.db_url)
            self.db_url = None
        shutil.rmtree(self.dir, ignore_errors=True)


class Worker:
    """A worker process (kind "python" or "go") whose JSON lines are
    collected as it prints them."""

    def __init__(self, kind, idemd, args, stdin=None):
        if kind == "python":
            cmd = [sys.executable, WORKER, "--url", idemd.json_url, *args]
        else:
            cmd = [go_once_bin(), "-addr", idemd.grpc_addr, *args]
        self.kind = kind
        self.args = args
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, text=True)
        self.lines = []  # the JSON lines it printed
        self.text = []  # the other lines
        self._eof = False
        self._cond = threading.Condition()
        if stdin is not None:
            self.proc.stdin.write(stdin)
            self.proc.stdin.close()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for line in self.proc.stdout:
                with self._cond:
                    try:
                        self.lines.append(json.loads(line))
                    except ValueError:
                        self.text.append(line)  # --help
                    self._cond.notify_all()
        finally:
            self.proc.stdout.close()
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def wait_for(self, pred, timeout=RESULT_TIMEOUT):
        """Returns the first printed line that pred accepts."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if pred(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:
                    raise AssertionError(f"{self.kind} worker printed no matching line within {timeout}s: {self.lines}")
                self._cond.wait(left)

    def results(self, timeout=RESULT_TIMEOUT):
        """Waits for the process to exit; returns its outcome lines, each
        with the exit code."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.kind} worker {self.args} did not exit within {timeout}s: {self.lines}")
        with self._cond:
            if not self._cond.wait_for(lambda: self._eof, 30):
                raise AssertionError(f"{self.kind} worker {self.args} exited but its stdout did not end")
            return [dict(line, exit_code=self.proc.returncode) for line in self.lines if "outcome" in line]

    def result(self, timeout=RESULT_TIMEOUT):
        """The outcome of a one-job worker."""
        out = self.results(timeout)
        if not out:
            raise AssertionError(f"{self.kind} worker {self.args} exited ({self.proc.returncode}) without an outcome")
        return out[-1]


def effects(path):
    """The lines of an effect file: one per side effect performed."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line for line in f.read().split("\n") if line]
    except FileNotFoundError:
        return []
