#!/usr/bin/env python3
"""A Python worker that handles job deliveries through idem, the way a queue
consumer would: for each job, run its side effect once (append a line to
--effect-file, after --work seconds of "work") with idem-client's do().

Jobs are JSON lines, {"key": "order-1", "payload": {...}}, read from the
FILEs named or from stdin; --key handles one job instead. Each job's outcome
is printed as one JSON line on stdout:

  {"worker": "python", "key": "order-1", "outcome": "ran", "token": "7", "attempt": 1, "value": "{...}"}

outcome is one of
  ran          this worker acquired the job and performed the side effect
  replayed     the job completed earlier: value is the stored result
  in_progress  another worker holds it (a queue would redeliver it later)
  failed       the job failed for good earlier: error is the stored error
  fn_failed    this worker's work failed (--fail): recorded as a permanent failure
  unresolved   its lease ran out under a hold policy: parked for a person
  lease_lost   another worker took the job over (reason LEASE_LOST)
  error        anything else (code, reason, error); the exit status is then 1

Before working it prints {"event": "acquired", ...}. With --wait, idemd
holds a delivery of a job in progress elsewhere until that job is done.

  python3 worker.py --key order-1 --payload '{"amount_cents": 500}' --effect-file /tmp/charges
  printf '%s\\n' '{"key":"a"}' '{"key":"b"}' '{"key":"a"}' | python3 worker.py --effect-file /tmp/charges
"""

import argparse
import json
import os
import sys

import idem


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="worker.py",
        description="Handle job deliveries through idem's HTTP/JSON API: each job's side effect happens once "
                    "across every worker. Jobs are JSON lines {\"key\": ..., \"payload\": ...} from FILEs or stdin, "
                    "or one job from --key.",
        epilog="Outcomes are printed as JSON lines on stdout; see the top of worker.py.")
    p.add_argument("files", nargs="*", metavar="FILE", help="files of JSON-lines jobs (default: stdin; - is stdin)")
    p.add_argument("--url", default=os.environ.get("IDEM_JSON_URL", idem.DEFAULT_URL),
                   help="idemd's HTTP/JSON API, its --json-listen (env IDEM_JSON_URL; default %(default)s)")
    p.add_argument("--token", default=os.environ.get("IDEM_TOKEN", ""),
                   help="bearer token, when idemd runs with --config (env IDEM_TOKEN)")
    p.add_argument("--namespace", default="python_worker", help="the jobs' namespace (default %(default)s)")
    p.add_argument("--key", help="handle this one job instead of reading jobs")
    p.add_argument("--payload", default="{}", help="the --key job's payload, JSON text; fingerprinted (default {})")
    p.add_argument("--lease", type=float, default=30.0, help="the lease, in seconds; heartbeats every third (default 30)")
    p.add_argument("--work", type=float, default=0.1, help="seconds of work before the side effect (default 0.1)")
    p.add_argument("--effect-file", help="the side effect appends 'python KEY TOKEN' to this file")
    p.add_argument("--fail", metavar="MESSAGE", help="fail every job this worker acquires, for good, with MESSAGE")
    p.add_argument("--wait", type=float, default=0.0,
                   help="seconds to wait for a job that another worker holds (default 0: report in_progress)")
    return p.parse_args(argv)


def jobs(args):
    """Yields (key, payload) for each job to handle."""
    if args.key is not None:
        yield args.key, json.loads(args.payload)
        return
    for name in args.files or ["-"]:
        f = sys.stdin if name == "-" else open(name, encoding="utf-8")
        try:
            for line in f:
                if line.strip():
                    job = json.loads(line)
                    yield job["key"], job.get("payload")
        finally:
            if f is not sys.stdin:
                f.close()


def emit(key, **fields):
    print(json.dumps({"worker": "python", "key": key, **fields}), flush=True)


def handle(client, args, key, payload):
    """Runs one job through client.do and prints its outcome; returns False
    for an error."""

    def charge(attempt):
        # The side effect: the "charge" is a line in the effect file, written
        # only after the work and only while the lease is ours.
        emit(key, event="acquired", token=str(attempt.token), attempt=attempt.number)
        attempt.sleep(args.work)  # raises LeaseLostError once a heartbeat found the lease gone
        if args.fail:
            raise idem.Permanent(args.fail)
        attempt.check()
        if args.effect_file:
            with open(args.effect_file, "a", encoding="utf-8") as f:
                f.write(f"python {key} {attempt.token}\n")
        return {"charged_by": "python", "token": str(attempt.token), "payload": payload}

    job = idem.Job(args.namespace, key, fingerprint=idem.fingerprint_json(payload), lease_ttl=args.lease)
    try:
        res = client.do(job, charge, wait=args.wait)
    except idem.InProgressError as err:
        emit(key, outcome="in_progress", retry_after_ms=round(err.retry_after * 1000))
    except idem.JobFailedError as err:
        emit(key, outcome="failed", error=err.message)
    except idem.UnresolvedError:
        emit(key, outcome="unresolved")
    except idem.Permanent as err:
        emit(key, outcome="fn_failed", error=str(err))
    except idem.LeaseLostError as err:
        emit(key, outcome="lease_lost", reason=err.reason, code=err.code, http_status=err.http_status)
    except idem.IdemError as err:
        emit(key, outcome="error", code=err.code, reason=err.reason, error=str(err))
        return False
    else:
        emit(key, outcome="replayed" if res.replayed else "ran", token=str(res.record.token),
             attempt=res.record.attempt, value=res.text())
    return True


def main(argv=None):
    args = parse_args(argv)
    try:
        client = idem.Client(args.url, token=args.token)
    except ValueError as err:
        print(f"worker.py: {err}", file=sys.stderr)
        return 2
    ok = True
    with client:
        for key, payload in jobs(args):
            ok = handle(client, args, key, payload) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
