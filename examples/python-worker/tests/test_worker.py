"""worker.py against a real idemd (on SQLite, in a temp dir), with the
idem-client package from clients/python/src. Workers run as separate
processes, so every race here is one between processes, as between real
queue consumers. IDEMD_BIN names a prebuilt idemd; without it the test
builds ./cmd/idemd."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(EXAMPLE))
PACKAGE_SRC = os.path.join(REPO, "clients", "python", "src")
TIMEOUT = 90

server = None


class Idemd:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="idem-python-worker-test-")
        binary = os.environ.get("IDEMD_BIN")
        if not binary:
            binary = os.path.join(self.dir, "idemd")
            subprocess.run(["go", "build", "-o", binary, "./cmd/idemd"], cwd=REPO, check=True, stdin=subprocess.DEVNULL)
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", os.path.join(self.dir, "data"), "--listen", "127.0.0.1:0",
             "--http-listen", "", "--json-listen", "127.0.0.1:0", "--log-format", "json"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        serving, self.log = {}, []
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                if not serving and '"msg":"idemd serving"' in line:
                    serving.update(json.loads(line))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(TIMEOUT) or not serving:
            self.stop()
            raise RuntimeError("idemd did not start:\n" + "".join(self.log[-20:]))
        self.url = "http://" + serving["json_listen"]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def setUpModule():
    global server
    server = Idemd()


def tearDownModule():
    if server is not None:
        server.stop()


class Worker:
    """A worker.py process whose JSON lines are collected as it prints them."""

    def __init__(self, *args, stdin=None):
        env = dict(os.environ, PYTHONPATH=PACKAGE_SRC, PYTHONDONTWRITEBYTECODE="1")
        env.pop("IDEM_JSON_URL", None)
        self.proc = subprocess.Popen([sys.executable, os.path.join(EXAMPLE, "worker.py"), "--url", server.url, *args],
                                     stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.lines, self.text = [], []
        self.cond = threading.Condition()
        self.eof = False
        if stdin is not None:
            self.proc.stdin.write(stdin)
            self.proc.stdin.close()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                try:
                    self.lines.append(json.loads(line))
                except ValueError:
                    self.text.append(line)
                self.cond.notify_all()
        self.proc.stdout.close()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_for(self, pred):
        with self.cond:
            if not self.cond.wait_for(lambda: any(pred(l) for l in self.lines) or self.eof, TIMEOUT):
                raise AssertionError(f"no matching line within {TIMEOUT}s: {self.lines}")
            return next(l for l in self.lines if pred(l))

    def results(self):
        self.proc.wait(TIMEOUT)
        with self.cond:
            self.cond.wait_for(lambda: self.eof, 30)
            return [l for l in self.lines if "outcome" in l]

    def result(self):
        out = self.results()
        if not out:
            raise AssertionError(f"worker exited ({self.proc.returncode}) without an outcome: {self.text}")
        return out[-1]


def fresh(name):
    return f"{name}-{uuid.uuid4().hex[:10]}", os.path.join(server.dir, f"effects-{name}-{uuid.uuid4().hex[:6]}")


def effects(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


class WorkerTest(unittest.TestCase):
    def test_help(self):
        w = Worker("--help")
        self.assertEqual((w.results(), w.proc.returncode), ([], 0))
        self.assertIn("usage: worker.py", "".join(w.text))

    def test_three_workers_given_one_job_at_once_perform_one_side_effect(self):
        key, file = fresh("concurrent")
        args = ["--key", key, "--payload", '{"order":"o-1","amount_cents":1250}', "--work", "0.8", "--effect-file", file]
        results = [w.result() for w in [Worker(*args), Worker(*args), Worker(*args)]]
        ran = [r for r in results if r["outcome"] == "ran"]
        self.assertEqual(len(ran), 1, results)
        for r in results:
            if r is not ran[0]:
                self.assertIn(r["outcome"], ("in_progress", "replayed"), r)
        self.assertEqual(effects(file), [f"python {key} {ran[0]['token']}"])
        # The same payload with its keys in another order: the same fingerprint.
        replay = Worker("--key", key, "--payload", '{"amount_cents":1250,"order":"o-1"}', "--effect-file", file).result()
        self.assertEqual((replay["outcome"], replay["value"]), ("replayed", ran[0]["value"]))
        self.assertEqual(len(effects(file)), 1)

    def test_jobs_from_stdin_with_duplicates(self):
        base, file = fresh("stdin")
        keys = [f"{base}-{i}" for i in range(4)]
        lines = "".join(json.dumps({"key": k, "payload": {"n": k[-1]}}) + "\n" for k in keys + keys[:2])
        w = Worker("--effect-file", file, stdin=lines)
        self.assertEqual([r["outcome"] for r in w.results()], ["ran"] * 4 + ["replayed"] * 2)
        self.assertEqual(w.proc.returncode, 0)
        self.assertEqual(sorted(line.split()[1] for line in effects(file)), sorted(keys))

    def test_a_permanent_failure_is_replayed_to_later_deliveries(self):
        key, file = fresh("declined")
        first = Worker("--key", key, "--fail", "card declined", "--effect-file", file).result()
        self.assertEqual((first["outcome"], first["error"]), ("fn_failed", "card declined"))
        again = Worker("--key", key, "--effect-file", file).result()
        self.assertEqual((again["outcome"], again["error"]), ("failed", "card declined"))
        self.assertEqual(effects(file), [])

    def test_a_worker_paused_past_its_lease_is_taken_over_and_performs_nothing(self):
        key, file = fresh("paused")
        slow = Worker("--key", key, "--lease", "1", "--work", "20", "--effect-file", file)
        acquired = slow.wait_for(lambda line: line.get("event") == "acquired")
        slow.proc.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM
        try:
            time.sleep(1.2)  # the lease runs out
            successor = Worker("--key", key, "--lease", "1", "--wait", "60", "--work", "0.05", "--effect-file", file).result()
            self.assertEqual((successor["outcome"], successor["attempt"]), ("ran", 2), successor)
            self.assertGreater(int(successor["token"]), int(acquired["token"]))
        finally:
            slow.proc.send_signal(signal.SIGCONT)
        lost = slow.result()
        self.assertEqual((lost["outcome"], lost["reason"], lost["code"], lost["http_status"]),
                         ("lease_lost", "LEASE_LOST", "ABORTED", 409), lost)
        self.assertEqual(len(effects(file)), 1, "only the successor performed the effect")


if __name__ == "__main__":
    unittest.main()
