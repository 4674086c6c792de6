"""worker.py against a real idemd on a fresh PostgreSQL schema. Workers run
as separate processes, so every race here is a race between processes, as
between real queue consumers; one of them is the Go SDK's client.Do."""

import json
import os
import signal
import time
import unittest

from harness import Idemd, Worker, effects, go_once_bin

server = None


def setUpModule():
    global server
    server = Idemd()
    go_once_bin()  # built before any race starts, so both racers start alike


def tearDownModule():
    if server is not None:
        server.stop()


_n = [0]


def fresh(name):
    _n[0] += 1
    return f"{name}-{_n[0]}-{time.monotonic_ns()}", os.path.join(server.dir, f"effects-{name}-{_n[0]}")


def python(*args, stdin=None):
    return Worker("python", server, list(args), stdin=stdin)


class WorkerTest(unittest.TestCase):
    def test_help(self):
        w = python("--help")
        self.assertEqual(w.results(), [])
        self.assertEqual(w.proc.returncode, 0)
        self.assertIn("usage: worker.py", "".join(w.text))

    def test_three_workers_given_one_job_at_once_perform_one_side_effect(self):
        key, file = fresh("concurrent")
        args = ["--key", key, "--payload", '{"order":"o-1","amount_cents":1250}', "--work", "0.8", "--effect-file", file]
        results = [w.result() for w in [python(*args), python(*args), python(*args)]]
        ran = [r for r in results if r["outcome"] == "ran"]
        self.assertEqual(len(ran), 1, results)
        for r in results:
            if r is not ran[0]:
                self.assertIn(r["outcome"], ("in_progress", "replayed"), r)
        self.assertEqual(effects(file), [f"python {key} {ran[0]['token']}"])

        replay = python(*args).result()
        self.assertEqual((replay["outcome"], replay["value"], replay["token"]), ("replayed", ran[0]["value"], ran[0]["token"]))
        self.assertEqual(len(effects(file)), 1)

    def test_jobs_from_stdin_with_duplicates(self):
        _, file = fresh("stdin")
        base, _ = fresh("job")
        keys = [f"{base}-{i}" for i in range(4)]
        lines = "".join(json.dumps({"key": k, "payload": {"n": k[-1]}}) + "\n" for k in keys + keys[:2])
        out = python("--effect-file", file, stdin=lines).results()
        self.assertEqual([r["outcome"] for r in out], ["ran"] * 4 + ["replayed"] * 2)
        self.assertEqual(sorted(line.split()[1] for line in effects(file)), sorted(keys))
        self.assertEqual({r["exit_code"] for r in out}, {0})

    def test_a_permanent_failure_is_replayed_to_later_deliveries(self):
        key, file = fresh("declined")
        first = python("--key", key, "--fail", "card declined", "--effect-file", file).result()
        self.assertEqual((first["outcome"], first["error"]), ("fn_failed", "card declined"))
        again = python("--key", key, "--effect-file", file).result()
        self.assertEqual((again["outcome"], again["error"]), ("failed", "card declined"))
        self.assertEqual(effects(file), [])

    def test_heartbeats_keep_the_lease_while_the_work_outlasts_it(self):
        key, file = fresh("long")
        # Work for two and a half leases. Without heartbeats (every 0.67 s)
        # the waiting worker would take the job over after one lease and
        # perform the effect a second time.
        holder = python("--key", key, "--lease", "2", "--work", "5", "--effect-file", file)
        holder.wait_for(lambda line: line.get("event") == "acquired")
        waiter = python("--key", key, "--lease", "2", "--wait", "60", "--effect-file", file).result()
        held = holder.result()
        self.assertEqual(held["outcome"], "ran", held)
        self.assertEqual((waiter["outcome"], waiter["value"]), ("replayed", held["value"]))
        self.assertEqual(len(effects(file)), 1)

    def test_a_worker_paused_past_its_lease_is_taken_over_and_performs_nothing(self):
        key, file = fresh("paused")
        slow = python("--key", key, "--lease", "1", "--work", "20", "--effect-file", file)
        acquired = slow.wait_for(lambda line: line.get("event") == "acquired")
        slow.proc.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM
        try:
            time.sleep(1.2)  # the lease runs out
            successor = python("--key", key, "--lease", "1", "--wait", "60", "--work", "0.05", "--effect-file", file).result()
            self.assertEqual((successor["outcome"], successor["attempt"]), ("ran", 2), successor)
            self.assertGreater(int(successor["token"]), int(acquired["token"]), "the takeover has a greater fencing token")
        finally:
            slow.proc.send_signal(signal.SIGCONT)
        lost = slow.result()
        self.assertEqual((lost["outcome"], lost["reason"], lost["code"], lost["http_status"]),
                         ("lease_lost", "LEASE_LOST", "ABORTED", 409), lost)
        self.assertEqual(len(effects(file)), 1, "only the successor performed the effect")

    def test_a_go_worker_and_a_python_worker_racing_on_one_key(self):
        # The same payload written in two key orders: the fingerprints must
        # agree, or the loser would get FINGERPRINT_MISMATCH instead.
        rounds = 4
        file = os.path.join(server.dir, "effects-race")
        winners = {"go": 0, "python": 0}
        base, _ = fresh("race")
        for i in range(rounds):
            key = f"{base}-{i}"
            py = python("--namespace", "polyglot", "--key", key, "--payload", f'{{"order":"{key}","amount_cents":500}}',
                        "--work", "0.3", "--lease", "2", "--effect-file", file)
            go = Worker("go", server, ["-namespace", "polyglot", "-key", key, "-payload", f'{{"amount_cents":5e2,"order":"{key}"}}',
                                       "-work", "300ms", "-effect-file", file])
            results = [py.result(), go.result()]
            ran = [r for r in results if r["outcome"] == "ran"]
            self.assertEqual(len(ran), 1, results)
            other = [r for r in results if r["outcome"] != "ran"][0]
            self.assertIn(other["outcome"], ("in_progress", "replayed"), results)
            winners[ran[0]["worker"]] += 1
            self.assertEqual([line for line in effects(file) if line.split()[1] == key],
                             [f"{ran[0]['worker']} {key} {ran[0]['token']}"])

            # Each language replays what the other stored.
            payload = f'{{"order":"{key}","amount_cents":500}}'
            replays = [python("--namespace", "polyglot", "--key", key, "--payload", payload).result(),
                       Worker("go", server, ["-namespace", "polyglot", "-key", key, "-payload", payload]).result()]
            for r in replays:
                self.assertEqual((r["outcome"], r["value"]), ("replayed", ran[0]["value"]), r)
        self.assertEqual(len(effects(file)), rounds)
        # Which language wins is up to the scheduler; both taking part is enough.
        self.assertEqual(sum(winners.values()), rounds)


if __name__ == "__main__":
    unittest.main()
