"""The duplicate-delivery test kit: run a worker's handler (the function it
passes to ``Client.do``) through the deliveries a real queue produces,
against a real idemd, count its side effect with a counter the test
provides, and fail, for each case that did not make the effect exactly once
inside the handler, with the window it ran twice (or was lost) in and the
remedy. Its cases and words are those of
the Go kit (idemtest.CheckHandler).

    import unittest
    import idem
    from idem import testkit

    class ChargeTest(unittest.TestCase):
        def test_charge_is_exactly_once(self):
            provider = FakeProvider()  # counts the charges it applied
            testkit.check_handler(
                lambda job: lambda attempt: provider.charge(1250, f"{job.namespace}/{job.key}"),
                lambda: provider.charges_applied,
                job=idem.Job("payments", "order-1042"))

check_handler raises AssertionError (unittest's and pytest's failure) with
the report of every failed case; inspect_handler returns the Report
without raising. The kit starts an idemd of its own on SQLite in a
temporary directory (``idemd=``, IDEMD_BIN, or idemd on the PATH), or uses
one the test points at (``server=``, its HTTP/JSON URL).

A handler that records steps (attempt.step) is also interrupted between two
steps and inside one; an effect that ran twice there is named by its step,
with the remedy (pass the step key downstream, or record the effect as a
step). With ``resolver=``, the function of a resolver of yours, a job held
inside a step is left to it, and the kit checks that it decided right.

The windows are driven by controls, not timing: a 1 s lease (the server's
minimum) whose heartbeats are held, a Claim that waits on the server for
the lease to lapse, a Complete that is not sent, a Complete whose answer is
dropped after the server applied it. The faults live in the kit's clients
(a wrapper of each client's transport); idemd is the one you run in
production.
"""

import contextvars
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional

from ._client import Client
from ._do import Attempt, Job, Result
from ._errors import (CompletionUnknownError, FailureNotRecordedError, IdemError, InProgressError, LeaseLostError,
                      UnavailableError, UnresolvedError)
from ._resolver import Held, Resolution, Resolver
from ._retry import RetryPolicy
from ._testkit_words import WORDS
from ._types import MAX_WAIT, Record, State

__all__ = ["TWICE_IN_SEQUENCE", "CONCURRENT", "CRASH_AFTER_EFFECT", "CRASH_AFTER_COMPLETE", "LEASE_LAPSED",
           "COMPLETE_ANSWER_LOST", "RETRYABLE_FAILURE", "STEPS_CRASH_BETWEEN_STEPS", "STEPS_CRASH_INSIDE_STEP",
           "STEP_CASES", "STEPS_HELD_RESOLVER", "ALL_CASES", "CaseReport", "Report", "check_handler",
           "inspect_handler", "worker_client", "Idemd", "start_idemd"]

#: The job delivered, and once it completed, delivered again: the second
#: delivery replays.
TWICE_IN_SEQUENCE = "twice-in-sequence"
#: The job delivered several times at once, then again each copy that found
#: it in progress.
CONCURRENT = "concurrent"
#: The handler runs under a 1 s lease with heartbeats held; the worker
#: "dies" before Complete; a redelivery waits for the lease to lapse.
CRASH_AFTER_EFFECT = "crash-after-effect"
#: The worker "dies" as soon as a Complete of the record is applied: the
#: handler's own (sent through worker_client() while it runs) or do()'s;
#: what the handler does after that is not counted; the job is delivered
#: again.
CRASH_AFTER_COMPLETE = "crash-after-complete"
#: The handler is held before it starts, with its heartbeats, while its 1 s
#: lease lapses and a second delivery takes over; then it runs.
LEASE_LAPSED = "lease-lapsed"
#: The first Complete reaches the server and its answer is dropped; the
#: worker retries it; the job is delivered again.
COMPLETE_ANSWER_LOST = "complete-answer-lost"
#: The first delivery fails after the handler returned (its effect made); a
#: second delivery runs it again.
RETRYABLE_FAILURE = "retryable-failure"
#: The handler runs under a 1 s lease with heartbeats held; the worker dies
#: between two of the job's effects: at the first step call (attempt.step)
#: after a step was recorded, or before Complete; a redelivery waits for
#: the lease to lapse. A recorded step is not run again; an effect made
#: outside every step is.
STEPS_CRASH_BETWEEN_STEPS = "steps-crash-between-steps"
#: As STEPS_CRASH_BETWEEN_STEPS, but the worker dies inside the first step,
#: after its effect and before its CompleteStep (before Complete when the
#: handler records no step): the step stays STARTED, and the namespace's
#: on_unfinished_step policy says what the redelivery does.
STEPS_CRASH_INSIDE_STEP = "steps-crash-inside-step"
#: The cases that interrupt a job's steps.
STEP_CASES = (STEPS_CRASH_BETWEEN_STEPS, STEPS_CRASH_INSIDE_STEP)
#: Every case the kit runs, in its order.
ALL_CASES = (TWICE_IN_SEQUENCE, CONCURRENT, CRASH_AFTER_EFFECT, CRASH_AFTER_COMPLETE, LEASE_LAPSED,
             COMPLETE_ANSWER_LOST, RETRYABLE_FAILURE) + STEP_CASES
#: Run after ALL_CASES when the test gives a resolver function
#: (``resolver=``): the worker dies inside the first step (before Complete
#: when the handler records no step) in a namespace whose policy holds the
#: job, the redelivery finds it UNRESOLVED, the resolver runs until it
#: decided the record (10 s at most), and the job is delivered again. A
#: resolver that releases a job whose effect happened makes the effect
#: twice; one that cannot tell leaves it held.
STEPS_HELD_RESOLVER = "steps-held-resolver"

# This package's names for what the remedies point at.
_TERMS = {
    "takeover": "attempt.takeover",
    "token_field": "attempt.token",
    "permanent": "raise idem.Permanent(err)",
    "lost_check": "attempt.check()",
    "worker_client": "idem.testkit.worker_client()",
    "step_call": "attempt.step(name, fn)",
    "step_key_call": "attempt.step_key(name)",
}

# How long steps-held-resolver waits for the resolver's decision.
_RESOLVER_WAIT = 10.0

# How long a case whose effect counter did not move waits for an effect that
# comes after the handler returned, before it reports none.
_LATE_WAIT = 1.0

_worker: "contextvars.ContextVar[Optional[Client]]" = contextvars.ContextVar("idem_testkit_worker", default=None)


def worker_client() -> Client:
    """The client of the worker that runs the current delivery of
    check_handler or inspect_handler, for a handler that calls idem itself
    (a Complete of its own token, say) as a worker's handler calls it with
    the worker's client: the kit's faults apply to those calls, and the
    crash-after-complete case stops the worker right after such a Complete.
    Raises RuntimeError outside a delivery."""
    c = _worker.get()
    if c is None:
        raise RuntimeError("idem.testkit.worker_client() is only set while the kit builds or runs a handler")
    return c

_MESSAGES: Dict[str, str] = WORDS["messages"]


def _fill(s: str, **values: str) -> str:
    """s with each {name} replaced by values[name]."""
    for k, v in values.items():
        s = s.replace("{" + k + "}", v)
    return s


def _case_words(case: str) -> Dict[str, str]:
    for cw in WORDS["cases"]:
        if cw["id"] == case:
            return cw
    raise KeyError(f"idem testkit: the words have no case {case}")


class CaseReport:
    """What one case found: ``case``, ``title``, ``job`` (with the case's own
    key), ``effects`` (how much the counter went up, or for a second after
    the case when it had not moved by its end, leaving out what a handler did
    after its worker died), ``outside`` (how many of them happened while the
    handler of a delivery was being built, before do() claimed the job),
    ``late`` (how many happened after the handler that made them returned),
    ``runs`` (how often the handler ran), ``deliveries`` (what each did),
    ``record`` (the record afterwards, or None), ``window`` and ``remedy``
    (when the effect ran more than once, or not at all after the handler's
    own Complete, in a window the case opens), ``held`` (how
    on_lease_expiry: hold kept the effect at one), ``finding`` (what is wrong
    otherwise) and ``error`` (why the case could not run). For a handler
    that records steps (attempt.step), ``step_effects`` is how much the
    counter went up inside each step, by name, and outside every step
    (""), and ``repeated_step`` names the step whose effect ran more than
    once, or ``repeated_unrecorded`` says an effect outside every step
    did; such a handler makes one effect per step."""

    def __init__(self, case: str, job: Job):
        self.case = case
        self.job = job
        self.title = ""
        self.effects = 0
        self.outside = 0
        self.late = 0
        self.runs = 0
        self.deliveries: List[str] = []
        self.record: Optional[Record] = None
        self.window = ""
        self.remedy = ""
        self.held = ""
        self.finding = ""
        self.error: Optional[str] = None
        self.step_effects: Optional[Dict[str, int]] = None
        self.repeated_step = ""
        self.repeated_unrecorded = False

    @property
    def ok(self) -> bool:
        """True when the case ran and made the effect exactly once (each
        step's, for a handler that records steps), inside the handler."""
        if self.error is not None or self.outside or self.late or self.finding:
            return False
        if self.step_effects is not None:
            return self.effects >= 1 and not self.repeated_step and not self.repeated_unrecorded
        return self.effects == 1

    def __str__(self) -> str:
        m = _MESSAGES
        effects = self.effects
        if self.step_effects is not None and (self.repeated_step or self.repeated_unrecorded):
            effects = self.step_effects.get(self.repeated_step, 0)
        if self.error is not None:
            head = _fill(m["error"], id=self.case, error=self.error)
        elif self.late > 0 and self.outside == 0:
            head = _fill(m["late"], id=self.case)
        elif self.ok or self.effects == 1:
            head = _fill(m["ok"], id=self.case)
        elif self.effects > 1:
            head = _fill(m["more"], id=self.case, effects=str(effects))
        elif self.window:
            head = _fill(m["lost"], id=self.case)
        else:
            head = _fill(m["none"], id=self.case)
        lines = [self.title] + self.deliveries
        if self.record is not None:
            lines.append(_fill(m["record"], state=self.record.state.name, attempt=str(self.record.attempt),
                               token=str(self.record.token)))
        if self.window:
            lines += [_fill(m["window"], text=self.window), _fill(m["remedy"], text=self.remedy)]
        if self.held:
            lines.append(_fill(m["held"], text=self.held))
        if self.finding:
            lines.append(self.finding)
        return "\n  ".join([head] + lines)

    def __repr__(self) -> str:
        return f"<CaseReport {self.case}: effects={self.effects} ok={self.ok}>"


class Report:
    """What the kit found, case by case (``cases``)."""

    def __init__(self, cases: List[CaseReport]):
        self.cases = cases

    def case(self, case: str) -> Optional[CaseReport]:
        """The report of one case, or None."""
        for c in self.cases:
            if c.case == case:
                return c
        return None

    def failed(self) -> List[CaseReport]:
        """The reports of the cases that did not make the effect once."""
        return [c for c in self.cases if not c.ok]

    def __str__(self) -> str:
        return "\n".join(str(c) for c in self.cases)


def check_handler(make_handler: Callable[[Job], Callable[[Attempt], Any]], effects: Callable[[], int], *,
                  job: Optional[Job] = None, server: Optional[str] = None, token: str = "",
                  idemd: Optional[str] = None, config: Optional[str] = None, concurrency: int = 8,
                  resolver: Optional[Callable[[Held], Resolution]] = None,
                  log: Optional[Callable[[str], None]] = None) -> Report:
    """Runs every case against the handlers make_handler makes, each
    delivery through ``Client.do`` on a client of its own (a worker process
    of its own), and raises AssertionError with the report of each case
    where the effect did not happen exactly once: the count, what every
    delivery did and the window and the remedy, or what else is wrong. Returns the Report when every case passed.

    - ``make_handler(job)`` returns the handler a worker passes to do() for
      one delivery of job, built the way the worker builds it from the
      message it got. Take the key from ``job.key``: each case runs on a key
      of its own (``job.key + "." + case``; on a ``server`` of the test's,
      with a run id between them), so that what one case leaves downstream
      cannot answer another's.
    - ``effects()`` counts the side effect as the downstream knows it
      (charges a fake provider applied, rows in your table); the kit reads
      it before and after each case, and while it runs (around the building
      of each delivery's handler, around each run of it, when a worker
      dies), to tell an effect made outside the handler or after it
      returned. A handler that calls idem itself does so through
      ``worker_client()``.
    - ``job``: its namespace (whose policy applies), fingerprint, lease and
      retention; default namespace "jobs", key "job-1". Deliveries whose
      lease must lapse get a 1 s lease instead.
    - ``server``: the HTTP/JSON URL of a running idemd to use instead of
      starting one; ``token``: a tenant's token.
    - ``idemd``: the idemd binary to start (default IDEMD_BIN, or idemd on
      the PATH); ``config``: the YAML of an idemd config file (tenants,
      policies such as on_lease_expiry: hold) for it.
    - ``concurrency``: deliveries at once in the concurrent case (8).
    - ``resolver``: the function a resolver of yours runs (idem.Resolver):
      adds the case steps-held-resolver, which checks that it decides a
      held job of the handler right (completed when its effect happened,
      release when it did not). The job's namespace must be held
      (on_unfinished_step: hold or on_lease_expiry: hold, in ``config``).
    - ``log``: receives the report of each case that passed.
    """
    report = inspect_handler(make_handler, effects, job=job, server=server, token=token, idemd=idemd, config=config,
                             concurrency=concurrency, resolver=resolver)
    for c in report.cases:
        if c.ok and log is not None:
            log(str(c))
    failed = report.failed()
    if failed:
        raise AssertionError("\n".join(str(c) for c in failed))
    return report


def inspect_handler(make_handler: Callable[[Job], Callable[[Attempt], Any]], effects: Callable[[], int], *,
                    job: Optional[Job] = None, server: Optional[str] = None, token: str = "",
                    idemd: Optional[str] = None, config: Optional[str] = None, concurrency: int = 8,
                    resolver: Optional[Callable[[Held], Resolution]] = None) -> Report:
    """Runs the cases of check_handler and returns the Report without
    raising for what it found, for a test that asserts what the kit finds.
    It raises only for a bad argument or when idemd cannot be started."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int):
        raise TypeError(f"idem testkit: concurrency is {concurrency!r}; it must be a whole number of deliveries "
                        "(2 or more; 8 by default)")
    job = job or Job("jobs", "job-1")
    proc = None
    run = ""
    if server is None:
        proc = start_idemd(bin=idemd, config=config)
        server = proc.json_url
    else:
        # A server the test points at keeps the records of earlier runs (for
        # the retention, a day by default): a run of its own keeps their keys
        # apart.
        run = "." + uuid.uuid4().hex[:8]
    try:
        kit = _Kit(server, token, make_handler, effects, job, max(concurrency, 2), run, resolver)
        try:
            cases = ALL_CASES + ((STEPS_HELD_RESOLVER,) if resolver is not None else ())
            return Report([kit.run(c) for c in cases])
        finally:
            kit.close()
    finally:
        if proc is not None:
            proc.stop()


class Idemd:
    """An idemd process the kit started: ``grpc_addr``, ``json_url``, and
    stop(), which stops it and removes its data directory."""

    def __init__(self, proc: "subprocess.Popen[bytes]", reader: threading.Thread, data_dir: str, grpc_addr: str,
                 json_url: str):
        self.proc = proc
        self.data_dir = data_dir
        self.grpc_addr = grpc_addr
        self.json_url = json_url
        self._reader = reader

    def stop(self) -> None:
        _stop(self.proc, self._reader)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "Idemd":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _stop(proc: "subprocess.Popen[bytes]", reader: threading.Thread) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    reader.join(10)  # it reads to the end of idemd's log, then ends
    if proc.stderr is not None:
        proc.stderr.close()


_GIVE_IDEMD = "give idemd=, set IDEMD_BIN, or put idemd on the PATH."
# idemd has no release to download yet: a clone builds it.
_GET_IDEMD = ("To get idemd: in a clone of https://github.com/idemhq/idem, `make install` (it says where it puts "
              "idemd) or `make build` (bin/idemd).")


def start_idemd(*, bin: Optional[str] = None, config: Optional[str] = None, timeout: float = 60.0) -> Idemd:
    """Starts idemd on SQLite in a new temporary directory, on loopback ports
    the system picks, and returns once it serves. The IDEM_* variables of
    the environment do not reach it, so it never runs on the database of a
    developer's shell."""
    exe = bin or os.environ.get("IDEMD_BIN") or shutil.which("idemd")
    if not exe:
        raise RuntimeError(f"idem testkit: no idemd to start: {_GIVE_IDEMD} {_GET_IDEMD}")
    data_dir = tempfile.mkdtemp(prefix="idem-testkit-")
    args = [exe, "serve", "--data-dir", data_dir, "--listen", "127.0.0.1:0", "--http-listen", "",
            "--json-listen", "127.0.0.1:0", "--sweep-interval", "0", "--log-format", "json"]
    if config is not None:
        path = os.path.join(data_dir, "idemd.yaml")
        with open(path, "w") as f:
            f.write(config)
        args += ["--config", path]
    env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
    try:
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
    except OSError as err:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise RuntimeError(f"idem testkit: cannot start {exe}: {err}; {_GIVE_IDEMD} {_GET_IDEMD}") from err
    log: "deque[str]" = deque(maxlen=200)
    served: Dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        # Read every line while idemd runs, so that its log never fills the pipe.
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            log.append(line)
            if not ready.is_set():
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if isinstance(m, dict) and m.get("msg") == "idemd serving" and m.get("listen") and m.get("json_listen"):
                    served.update(listen=m["listen"], json_listen=m["json_listen"])
                    ready.set()
        ready.set()  # exited

    reader = threading.Thread(target=read, name="idem-testkit idemd log", daemon=True)
    reader.start()
    ready.wait(timeout)
    if not served:
        _stop(proc, reader)
        shutil.rmtree(data_dir, ignore_errors=True)
        how = f"exited ({proc.returncode})" if proc.returncode is not None else f"did not serve within {timeout:g} s"
        raise RuntimeError(f"idem testkit: {exe} {how}:\n" + "\n".join(log))
    return Idemd(proc, reader, data_dir, served["listen"], "http://" + served["json_listen"])


class _AfterEffect(Exception):
    """The error the retryable-failure case's first delivery raises after
    the handler returned."""


class _Faults:
    """What the kit does to one worker's calls, in its transport: the server
    sees only what a real worker sent. Once the worker died, it sends
    nothing more."""

    def __init__(self, hold_heartbeats: bool = False, die_before_complete: bool = False,
                 lose_complete_answer: bool = False, die_after_complete: bool = False,
                 die_between_steps: bool = False, die_in_step: bool = False):
        self.hold_heartbeats = hold_heartbeats
        #: The worker dies between two of the job's effects: at the first
        #: StartStep, CompleteStep or Complete after a CompleteStep was
        #: applied, or at Complete when none was.
        self.die_between_steps = die_between_steps
        #: The worker dies inside a step, after its effect: its first
        #: CompleteStep never goes out (nor, when the handler records no
        #: step, its Complete).
        self.die_in_step = die_in_step
        # What the effect counter saw while the handler ran, by the step
        # that was open then ("" outside every step), in the order they
        # were first seen.
        self.step_done = False  # a CompleteStep was applied
        self.steps_seen = False
        self._open_step = ""
        self._mark = 0
        self._step_effects: Dict[str, int] = {}
        #: The worker dies before its first Complete (the handler's own, or
        #: do()'s) goes out.
        self.die_before_complete = die_before_complete
        self.lose_complete_answer = lose_complete_answer
        #: The worker dies as soon as its first Complete is applied, before
        #: it hears the answer.
        self.die_after_complete = die_after_complete
        #: The effect counter, read when the worker dies.
        self.effects: Callable[[], int] = lambda: 0
        #: Set once the handler returned: a held heartbeat gives up then.
        self.handler_returned = threading.Event()
        self.running = False  # the handler runs
        self.own_call = False  # the handler sent a Complete or Fail of its own through the worker
        self.died = False
        self.died_in = False  # the worker died while the handler ran
        self.at_death = 0  # the effect counter when the worker died
        self.answer_lost = False
        self._lock = threading.Lock()

    def die(self, in_handler: bool) -> None:
        at = self.effects()
        with self._lock:
            if in_handler:
                self._attribute(at)
            self.died, self.died_in, self.at_death = True, in_handler, at

    def set_running(self, running: bool) -> None:
        at = self.effects()
        with self._lock:
            if running:
                self._mark = at
            elif not self.died:
                self._attribute(at)
            self.running = running

    def _attribute(self, at: int) -> None:
        """Charges what the effect counter saw since the last mark to the
        open step. The lock must be held."""
        moved = at - self._mark
        if moved and self.running:
            self._step_effects[self._open_step] = self._step_effects.get(self._open_step, 0) + moved
        self._mark = at

    def open_step(self, name: str) -> None:
        """What the counter sees from now on is step name's effect."""
        at = self.effects()
        with self._lock:
            if self._open_step != name:
                self._attribute(at)
            self._open_step, self.steps_seen = name, True

    def close_step(self) -> None:
        """Closes the open step once its CompleteStep was applied."""
        at = self.effects()
        with self._lock:
            self._attribute(at)
            self._open_step, self.step_done = "", True

    def steps(self) -> Dict[str, int]:
        """What the counter saw by step ("" outside every step)."""
        with self._lock:
            return dict(self._step_effects)


class _FaultyTransport:
    """A client's transport with the kit's faults in front of it."""

    def __init__(self, inner: Any, faults: _Faults):
        self._inner = inner
        self._faults = faults
        self.url = inner.url

    def close(self) -> None:
        self._inner.close()

    def call(self, service: str, method: str, body: Any, timeout: float) -> Dict[str, Any]:
        f = self._faults
        with f._lock:
            dead, running = f.died, f.running
            if running and method in ("Complete", "Fail"):
                f.own_call = True
        if dead:
            # Not transient: do() would retry it.
            raise IdemError("idem testkit: the worker is dead and sends nothing", code="UNKNOWN", rpc=method,
                            transient=False)
        if method in ("StartStep", "CompleteStep"):
            return self._step(service, method, body, timeout)
        if method == "Heartbeat" and f.hold_heartbeats:
            # Held: it never reaches the server, and gives up when the
            # handler returns (or the call's timeout would have passed).
            f.handler_returned.wait(timeout)
            raise UnavailableError("idem testkit: the heartbeat was held", code="UNAVAILABLE", rpc=method,
                                   transient=True)
        if method == "Complete":
            if f.die_before_complete or f.die_between_steps or f.die_in_step:
                f.die(running)
                raise IdemError("idem testkit: the worker died before its Complete went out", code="UNKNOWN",
                                rpc=method, transient=False)
            if f.die_after_complete:
                self._inner.call(service, method, body, timeout)  # not applied: it raises, and the worker lives on
                f.die(running)
                raise IdemError("idem testkit: the worker died once its Complete was applied", code="UNKNOWN",
                                rpc=method, transient=False)
            with f._lock:
                lose = f.lose_complete_answer and not f.answer_lost
            if lose:
                answer = self._inner.call(service, method, body, timeout)  # not applied: the next try loses it
                del answer
                with f._lock:
                    f.answer_lost = True
                raise UnavailableError("idem testkit: the server applied the Complete, and its answer was lost",
                                       code="UNAVAILABLE", rpc=method, transient=True)
        return self._inner.call(service, method, body, timeout)


    def _step(self, service: str, method: str, body: Any, timeout: float) -> Dict[str, Any]:
        """A step call, counted by step, and the step faults: the worker dies
        before a step call once a step was recorded, or before a
        CompleteStep."""
        f = self._faults
        f.open_step(str(body.get("step", "")))
        if (method == "CompleteStep" and f.die_in_step) or (f.die_between_steps and f.step_done):
            f.die(f.running)
            raise IdemError(f"idem testkit: the worker died before its {method} went out", code="UNKNOWN",
                            rpc=method, transient=False)
        answer = self._inner.call(service, method, body, timeout)
        if method == "CompleteStep":
            f.close_step()
        return answer


class _Delivery:
    """One delivery of a job to a worker of its own, and what became of it."""

    def __init__(self, job: Job, faults: _Faults, stall: Optional[Callable[[Attempt], None]] = None,
                 fail_after: bool = False):
        self.job = job
        self.faults = faults
        self.stall = stall
        self.fail_after = fail_after
        self.client: Optional[Client] = None
        self.handler: Optional[Callable[[Attempt], Any]] = None
        # What the effect counter saw while the handler was built, while it
        # ran (until its worker died, when it died in it), and after that.
        self.built = 0
        self.during = 0
        self.zombie = 0
        # The state the handler left the record in when it ended the record
        # itself through a client the kit does not see.
        self.ended = ""
        self.ran: Optional[Attempt] = None
        self.result: Optional[Result] = None
        self.error: Optional[BaseException] = None

    def outcome(self) -> str:
        err = self.error
        if self.faults.died and self.ran is not None:
            return "died"
        if err is None:
            return "replayed" if self.result is not None and self.result.replayed else "completed"
        if isinstance(err, InProgressError):
            return "in_progress"
        if isinstance(err, UnresolvedError):
            return "unresolved"
        if isinstance(err, LeaseLostError) or isinstance(getattr(err, "fail_error", None), LeaseLostError):
            return "lease_lost"  # the Complete, or the Fail of the handler's error, was refused
        if self.fail_after and isinstance(err, FailureNotRecordedError) and isinstance(err.handler_error, _AfterEffect):
            return "not_released"
        if self.fail_after and isinstance(err, _AfterEffect):
            return "released"
        return "failed"

    def lost_at_own_complete(self) -> bool:
        """The worker died right after the handler's own Complete was
        applied, before the handler made its effect."""
        f = self.faults
        return f.died and f.died_in and f.die_after_complete and self.during <= 0

    def line(self) -> str:
        m = _MESSAGES
        ran = ""
        if self.ran is not None:
            ran = _fill(m["ran_stalled" if self.stall else "ran"], attempt=str(self.ran.number),
                        token=str(self.ran.token))
        o = self.outcome()
        if o in ("replayed", "in_progress", "unresolved"):
            return m[o]
        if o == "completed":
            end = m["answer_lost"] if self.faults.answer_lost else m["late_complete"] if self.stall else m["completed"]
        elif o == "died":
            f = self.faults
            end = m["died_after_own_complete" if f.died_in else "died_after_complete"] if f.die_after_complete \
                else m["died"]
        elif o == "not_released":
            assert isinstance(self.error, FailureNotRecordedError)
            end = _fill(m["not_released"], reason=self.error.fail_error.reason or str(self.error.fail_error))
        elif o in ("lease_lost", "released"):
            end = m[o]
        else:
            end = _fill(m["failed"], error=_message(self.error))
        return f"{ran}; {end}" if ran else end


_ORDER = ["completed", "replayed", "in_progress", "unresolved", "lease_lost", "died", "released", "not_released",
          "failed"]


def _message(err: Optional[BaseException]) -> str:
    if err is None:
        return ""
    return str(err) or type(err).__name__


class _Kit:
    """Runs the cases of one check_handler call."""

    def __init__(self, server: str, token: str, make_handler: Callable[[Job], Callable[[Attempt], Any]],
                 effects: Callable[[], int], job: Job, concurrency: int, run: str,
                 resolver: Optional[Callable[[Held], Resolution]]):
        self.server = server
        self.token = token
        self.make_handler = make_handler
        self.effects = effects
        self.job = job
        self.concurrency = concurrency
        self.run_id = run
        self.resolver = resolver
        self.lookups = Client(server, token=token)

    def close(self) -> None:
        self.lookups.close()

    def deliver(self, job: Job, faults: Optional[_Faults] = None, *, stall: Optional[Callable[[Attempt], None]] = None,
                fail_after: bool = False, wait: float = 0) -> _Delivery:
        """Builds the handler of a delivery of job and sends it."""
        return self.send(self.build(_Delivery(job, faults or _Faults(), stall, fail_after)), wait=wait)

    def build(self, d: _Delivery) -> _Delivery:
        """Makes d's worker (a client of its own, with d's faults in its
        transport) and builds its handler, as a worker builds it from the
        message it got, counting what the effect counter saw meanwhile: an
        effect made there happens on every delivery, outside do()."""
        # Quick retries: the answer-lost case's retried Complete need not
        # wait the production backoff.
        client = Client(self.server, token=self.token, retry=RetryPolicy(base_delay=0.01, max_delay=0.2))
        client._transport = _FaultyTransport(client._transport, d.faults)
        d.client = client
        d.faults.effects = self.effects
        before = self.effects()
        token = _worker.set(client)
        try:
            d.handler = self.make_handler(d.job)
        except Exception as err:
            d.error = err
        finally:
            _worker.reset(token)
        d.built = self.effects() - before
        return d

    def send(self, d: _Delivery, *, wait: float = 0) -> _Delivery:
        """Delivers d's job to its worker, which runs the handler through
        do()."""
        client, faults, handler, stall = d.client, d.faults, d.handler, d.stall
        assert client is not None
        if handler is None:
            client.close()
            return d  # building it raised: d.error says what

        def fn(attempt: Attempt) -> Any:
            try:
                if stall is not None:
                    stall(attempt)
                d.ran = attempt
                start = self.effects()
                faults.set_running(True)
                try:
                    value = handler(attempt)
                finally:
                    faults.set_running(False)
                    returned = self.effects()
                    if faults.died and faults.died_in:
                        d.during, d.zombie = faults.at_death - start, returned - faults.at_death
                    else:
                        d.during = returned - start
                    d.ended = self._ended_unseen(d.job, attempt, faults)
                if d.fail_after:
                    raise _AfterEffect(_MESSAGES["injected_failure"])
                return value
            finally:
                faults.handler_returned.set()

        token = _worker.set(client)
        try:
            d.result = client.do(d.job, fn, wait=wait)
        except Exception as err:
            d.error = err
        finally:
            _worker.reset(token)
            client.close()
        return d

    def _ended_unseen(self, job: Job, attempt: Attempt, faults: _Faults) -> str:
        """The state the handler of attempt left job's record in, when it
        ended the record itself (Complete or Fail with its token) through a
        client other than its worker's; "" otherwise."""
        if faults.own_call:
            return ""
        try:
            rec = self.lookups.lookup(job.namespace, job.key)
        except IdemError:
            return ""
        return rec.state.name if rec.token == attempt.token and rec.state != State.PROCESSING else ""

    def resolve(self, job: Job) -> bool:
        """Runs the test's resolver until it decided job's held record, for
        _RESOLVER_WAIT at most; says whether it did."""
        assert self.resolver is not None
        r = Resolver(self.lookups, "idem.testkit", self.resolver, namespaces=[job.namespace], poll_interval=0.02)
        thread = r.start()
        try:
            deadline = time.monotonic() + _RESOLVER_WAIT
            while time.monotonic() < deadline:
                try:
                    if self.lookups.lookup(job.namespace, job.key).state != State.UNRESOLVED:
                        return True
                except IdemError:
                    pass
                time.sleep(0.02)
            return False
        finally:
            r.stop()
            thread.join()

    def _await_late_effects(self, end: int) -> int:
        """Waits up to _LATE_WAIT for the effect counter to move past end, and
        returns by how much it did."""
        deadline = time.monotonic() + _LATE_WAIT
        while True:
            moved = self.effects() - end
            if moved > 0 or time.monotonic() >= deadline:
                return max(moved, 0)
            time.sleep(0.01)

    def run(self, case: str) -> CaseReport:
        cw = _case_words(case)
        job = dataclasses.replace(self.job, key=f"{self.job.key}{self.run_id}.{case}")
        cr = CaseReport(case, job)
        cr.title = _fill(cw["title"], n=str(self.concurrency))
        # The deliveries whose lease must lapse hold it for the server's
        # minimum, and their heartbeats do not get through.
        lapsing = dataclasses.replace(job, lease_ttl=1)

        before = self.effects()
        ds: List[_Delivery] = []
        decided = False  # by the resolver of steps-held-resolver
        if case == TWICE_IN_SEQUENCE:
            ds.append(self.deliver(job))
            ds.append(self.deliver(job))
        elif case == CONCURRENT:
            # Built one after the other before any is sent, so that what
            # building one makes is counted as its own.
            built = [self.build(_Delivery(job, _Faults())) for _ in range(self.concurrency)]
            start = threading.Barrier(self.concurrency)

            def at_once(d: _Delivery) -> _Delivery:
                start.wait()
                return self.send(d)

            with ThreadPoolExecutor(self.concurrency) as pool:
                ds = list(pool.map(at_once, built))
            ds.sort(key=lambda d: _ORDER.index(d.outcome()))
            for d in ds[:self.concurrency]:
                if d.outcome() == "in_progress":
                    ds.append(self.deliver(job))  # the queue redelivers it
        elif case == CRASH_AFTER_EFFECT:
            ds.append(self.deliver(lapsing, _Faults(hold_heartbeats=True, die_before_complete=True)))
            ds.append(self.deliver(job, wait=MAX_WAIT))
        elif case == CRASH_AFTER_COMPLETE:
            # A lapsing lease, so that a record the dead worker left
            # PROCESSING is taken over by the redelivery.
            ds.append(self.deliver(lapsing, _Faults(die_after_complete=True)))
            ds.append(self.deliver(job, wait=MAX_WAIT))
        elif case == LEASE_LAPSED:
            acquired, resume, first_done = threading.Event(), threading.Event(), threading.Event()
            first: List[_Delivery] = []

            def stall(attempt: Attempt) -> None:
                acquired.set()
                while not resume.wait(0.05):
                    attempt.check()

            stalled = self.build(_Delivery(lapsing, _Faults(hold_heartbeats=True), stall))

            def deliver_first() -> None:
                try:
                    first.append(self.send(stalled))
                finally:
                    first_done.set()
                    acquired.set()

            t = threading.Thread(target=deliver_first, name="idem-testkit stalled worker", daemon=True)
            t.start()
            acquired.wait()
            second = None
            if not first_done.is_set():
                second = self.deliver(job, wait=MAX_WAIT)
            resume.set()
            t.join()
            ds += first
            if second is not None:
                ds.append(second)
        elif case == COMPLETE_ANSWER_LOST:
            ds.append(self.deliver(job, _Faults(lose_complete_answer=True)))
            ds.append(self.deliver(job))
        elif case == RETRYABLE_FAILURE:
            ds.append(self.deliver(job, fail_after=True))
            ds.append(self.deliver(job))
        elif case in STEP_CASES or case == STEPS_HELD_RESOLVER:
            between = case == STEPS_CRASH_BETWEEN_STEPS
            ds.append(self.deliver(lapsing, _Faults(hold_heartbeats=True, die_between_steps=between,
                                                    die_in_step=not between)))
            ds.append(self.deliver(job, wait=MAX_WAIT))
            if case == STEPS_HELD_RESOLVER and ds[1].outcome() == "unresolved":
                decided = self.resolve(job)
                ds.append(self.deliver(job))
        end = self.effects()

        # What the counter saw, by when it moved: while a handler was built,
        # while one ran (before its worker died), after a dead worker's, and
        # the rest, which came after the handler that made it returned.
        cr.outside = sum(d.built for d in ds)
        during = sum(d.during for d in ds)
        zombie = sum(d.zombie for d in ds)
        lost = any(d.lost_at_own_complete() for d in ds)
        cr.effects = end - before - zombie
        cr.late = max(cr.effects - cr.outside - during, 0)
        cr.runs = sum(1 for d in ds if d.ran is not None)
        cr.deliveries = _describe(ds)
        cr.step_effects = _step_effects(ds)
        try:
            cr.record = self.lookups.lookup(job.namespace, job.key)
        except IdemError:
            pass
        cr.error = _case_error(case, ds)
        if cr.error is not None:
            return cr
        if cr.runs > 0 and cr.effects <= 0 and not lost:
            moved = self._await_late_effects(end)
            cr.effects += moved
            cr.late += moved

        values = dict(namespace=job.namespace, key=job.key, effects=str(cr.effects), runs=str(cr.runs),
                      deliveries=str(len(ds)), outside=str(cr.outside), late=str(cr.late), **_TERMS)
        held = any(d.outcome() == "unresolved" for d in ds)
        if cr.outside > 0:
            cr.finding = _fill(_MESSAGES["outside_effects"], **values)
        elif cr.late > 0:
            cr.finding = _fill(_MESSAGES["late_effect"], **values)
        elif lost and cr.effects <= 0:
            cr.window, cr.remedy = _fill(cw["window"], **values), _fill(cw["remedy"], **values)
        elif cr.effects <= 0:
            cr.finding = _fill(_MESSAGES["no_effect"], **values)
        elif case == STEPS_HELD_RESOLVER:
            _judge_resolver(cr, cw, values, held, decided)
        elif cr.step_effects is not None:
            _judge_steps(cr, cw, values, held)
        elif cr.effects > cr.runs:
            cr.finding = _fill(_MESSAGES["extra_effects"], **values)
        elif cr.effects > 1 and (not cw.get("window") or case == CRASH_AFTER_COMPLETE):
            cr.finding = _fill(_MESSAGES["extra_runs"], **values)
        elif cr.effects > 1:
            # A handler that records no step: the effect was made outside one.
            cr.window = _fill(cw.get("window_unrecorded") or cw["window"], **values)
            cr.remedy = _fill(cw.get("remedy_unrecorded") or cw["remedy"], **values)
        elif held and cw.get("held"):
            cr.held = _fill(cw["held"], **values)
        return cr


def _step_effects(ds: List[_Delivery]) -> Optional[Dict[str, int]]:
    """What the deliveries' handlers made inside each step and outside them
    (""), in the order the steps were first seen; None when no handler
    sent a step call. A handler whose steps were all FINISHED sends none,
    and what it made counts as made outside them."""
    if not any(d.faults.steps_seen for d in ds):
        return None
    total: Dict[str, int] = {}
    for d in ds:
        for name, n in d.faults.steps().items():
            total[name] = total.get(name, 0) + n
    return total


def _judge_resolver(cr: CaseReport, cw: Dict[str, str], values: Dict[str, str], held: bool, decided: bool) -> None:
    """Reports steps-held-resolver: the record was not held, the resolver
    left it held, or an effect ran twice after its decision."""
    if not held:
        cr.finding = _fill(cw["not_held"], **values)
        return
    if not decided:
        cr.finding = _fill(cw["undecided"], **values)
        return
    repeated = cr.step_effects is None and cr.effects > 1
    for name, n in (cr.step_effects or {}).items():
        if n > 1:
            cr.repeated_step, cr.repeated_unrecorded, repeated = name, name == "", True
            break
    if repeated:
        cr.window, cr.remedy = _fill(cw["window"], **values), _fill(cw["remedy"], **values)


def _judge_steps(cr: CaseReport, cw: Dict[str, str], values: Dict[str, str], held: bool) -> None:
    """Names, for a handler that records steps, the first step whose effect
    ran more than once, or the effect outside every step that did, with
    the case's window and remedy for it."""
    assert cr.step_effects is not None
    for name, n in cr.step_effects.items():
        if name and n > 1:
            cr.repeated_step = name
            named = dict(values, step=name)
            # A step run again is closed by its key, whatever the window;
            # between steps, one runs again only when its name changed.
            remedy = cw["remedy"] if cw["id"] == STEPS_CRASH_BETWEEN_STEPS \
                else _case_words(STEPS_CRASH_INSIDE_STEP)["remedy"]
            if not cw.get("window"):
                cr.finding = _fill(_MESSAGES["extra_runs"], **named)
                return
            cr.window, cr.remedy = _fill(cw["window"], **named), _fill(remedy, **named)
            return
    if cr.step_effects.get("", 0) > 1:
        cr.repeated_unrecorded = True
        if not cw.get("window"):
            cr.finding = _fill(_MESSAGES["extra_runs"], **values)
            return
        cr.window = _fill(cw.get("window_unrecorded") or cw["window"], **values)
        cr.remedy = _fill(cw.get("remedy_unrecorded") or _case_words(STEPS_CRASH_BETWEEN_STEPS)["remedy_unrecorded"],
                          **values)
        return
    if held and cw.get("held"):
        cr.held = _fill(cw["held"], **values)


def _case_error(case: str, ds: List[_Delivery]) -> Optional[str]:
    """Why the case could not run as designed, or None."""
    for d in ds:
        # A record ended where the kit cannot see it explains a failure that
        # follows, and leaves the crash-after-complete case blind.
        if d.ended and (case == CRASH_AFTER_COMPLETE or d.outcome() == "failed"):
            return _fill(_MESSAGES["ended_unseen"], state=d.ended, worker_client=_TERMS["worker_client"])
    for d in ds:
        if d.outcome() == "failed":
            if d.ran is not None and not isinstance(d.error, CompletionUnknownError):
                return _fill(_MESSAGES["handler_failed"], error=_message(d.error))
            return _message(d.error)
    first = ds[0]
    if case == CRASH_AFTER_EFFECT and not first.faults.died:
        return "the first delivery did not reach its Complete"
    if (case in STEP_CASES or case == STEPS_HELD_RESOLVER) and not first.faults.died:
        return "the first delivery did not reach the step call or the Complete its worker dies at"
    if case == CRASH_AFTER_COMPLETE and not first.faults.died:
        return "no Complete of the first delivery was applied"
    if case == COMPLETE_ANSWER_LOST and not first.faults.answer_lost:
        return "the first delivery's Complete was not applied"
    if case == LEASE_LAPSED and len(ds) < 2:
        return "the first delivery did not acquire the job"
    if ds[-1].outcome() == "in_progress":
        return f"the last delivery still found the job in progress (after waiting up to {MAX_WAIT:g}s for a lease to lapse)"
    return None


def _describe(ds: List[_Delivery]) -> List[str]:
    """The report's lines for ds: one per delivery, or one for a run of
    deliveries that did the same."""
    out: List[str] = []
    i = 0
    while i < len(ds):
        what = ds[i].line()
        j = i + 1
        while j < len(ds) and ds[j].line() == what:
            j += 1
        if j - i == 1:
            out.append(_fill(_MESSAGES["delivery"], i=str(i + 1), what=what))
        else:
            out.append(_fill(_MESSAGES["deliveries"], i=str(i + 1), to=str(j), what=what))
        i = j
    return out
