"""python -m idem against a real idemd (the SQLite harness): the idem
CLI's commands, flags and exit codes, so a shell worker runs with either."""

import json
import os
import subprocess
import sys
import time
import unittest

from support import PACKAGE_ROOT, fresh, harness, idem

h = None


def setUpModule():
    global h
    h = harness("sqlite")


def cli(*args, token=None, stdin=b"", env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
    environ.update(PYTHONPATH=os.path.join(PACKAGE_ROOT, "src"), IDEM_JSON_URL=h.url,
                   IDEM_TOKEN=h.tokens["worker"] if token is None else token, **(env or {}))
    env = environ
    res = subprocess.run([sys.executable, "-m", "idem", *args], env=env, input=stdin, capture_output=True, timeout=120)
    return res.returncode, res.stdout.decode(), res.stderr.decode()


class ExitCodeTest(unittest.TestCase):
    def test_a_record_resolved_by_an_operator_is_already_terminal(self):
        from idem.__main__ import EXIT_ALREADY_TERMINAL, exit_code
        err = idem.ResolvedByOperatorError("your result was not stored: the record was resolved by an operator",
                                           code="FAILED_PRECONDITION", reason="RESOLVED_BY_OPERATOR")
        self.assertEqual(exit_code(err), EXIT_ALREADY_TERMINAL)


class CLITest(unittest.TestCase):
    def test_claim_complete_replay_lookup(self):
        ns, k = h.namespaces["plain"], fresh("cli")
        code, out, _ = cli("claim", "-n", ns, "-k", k, "--lease-ttl", "30s", "--fingerprint-of", "-", stdin=b"payload")
        self.assertEqual(code, 0)
        token = int(out)
        self.assertEqual(cli("claim", "-n", ns, "-k", k)[0], 10, "in progress")
        code, _, err = cli("claim", "-n", ns, "-k", k, "--fingerprint", "00ff")
        self.assertEqual(code, 15, err)
        self.assertEqual(cli("complete", "-n", ns, "-k", k, "--lease-token", str(token + 99), "--result", "x")[0], 14)
        self.assertEqual(cli("heartbeat", "-n", ns, "-k", k, "--lease-token", str(token), "--lease-ttl", "1m")[0], 0)
        self.assertEqual(cli("complete", "-n", ns, "-k", k, "--lease-token", str(token), "--result-file", "-",
                             stdin=b"ch_1")[0], 0)
        code, out, _ = cli("claim", "-n", ns, "-k", k, "--result-out", "-")
        self.assertEqual((code, out), (11, "ch_1"))
        code, out, _ = cli("lookup", "-n", ns, "-k", k)
        rec = json.loads(out)
        self.assertEqual((code, rec["state"], rec["result"], rec["token"]), (0, "COMPLETED", "ch_1", str(token)))
        self.assertEqual(cli("lookup", "-n", ns, "-k", fresh("none"))[0], 13)

    def test_failures_and_held_records(self):
        ns, k = h.namespaces["plain"], fresh("cli-fail")
        token = cli("claim", "-n", ns, "-k", k)[1].strip()
        self.assertEqual(cli("fail", "-n", ns, "-k", k, "--lease-token", token, "--error", "busy", "--retryable")[0], 0)
        token = cli("claim", "-n", ns, "-k", k)[1].strip()
        self.assertEqual(cli("fail", "-n", ns, "-k", k, "--lease-token", token, "--error", "card declined")[0], 0)
        code, _, err = cli("claim", "-n", ns, "-k", k)
        self.assertEqual(code, 12)
        self.assertIn("card declined", err)
        self.assertEqual(cli("heartbeat", "-n", ns, "-k", k, "--lease-token", token)[0], 16, "already terminal")

        held = fresh("cli-held")
        self.assertEqual(cli("claim", "-n", h.namespaces["held"], "-k", held, "--lease-ttl", "1s")[0], 0)
        time.sleep(1.5)
        self.assertEqual(cli("claim", "-n", h.namespaces["held"], "-k", held)[0], 20, "unresolved")

    def test_usage_and_credentials(self):
        self.assertEqual(cli("lookup", "-n", "jobs", "-k", "k", token="wrong")[0], 18)
        self.assertEqual(cli("claim", "-n", "jobs", "-k", "k" * 300)[0], 17)
        code, _, err = cli("complete", "-n", "jobs", "-k", "k")
        self.assertEqual(code, 1)
        self.assertIn("--lease-token", err)
        code, out, _ = cli("--help")
        self.assertEqual(code, 0)
        self.assertIn("exit codes", out)
        code, _, err = cli("claim", "-n", "jobs", "-k", "k", "--lease-ttl", "soon")
        self.assertEqual(code, 1, "a bad flag exits 1, as the idem CLI's does: " + err)
        self.assertIn("--lease-ttl", err)

    def test_connection_flags_go_before_or_after_the_command(self):
        # As with the idem CLI: `idem claim -n … -k … --token …` works.
        ns, k = h.namespaces["plain"], fresh("cli-flags")
        code, _, err = cli("lookup", "-n", ns, "-k", k, "--timeout", "5s", "--url", h.url)
        self.assertEqual(code, 13, err)
        code, _, err = cli("lookup", "-n", ns, "-k", k, "--token", "wrong")
        self.assertEqual(code, 18, "the token after the command is the one sent: " + err)
        code, _, err = cli("--token", "wrong", "lookup", "-n", ns, "-k", k)
        self.assertEqual(code, 18, err)

    def test_a_bad_lease_token_is_a_usage_error(self):
        ns, k = h.namespaces["plain"], fresh("cli-bad")
        bad_env = {"IDEM_LEASE_TOKEN": "abc"}
        code, _, err = cli("lookup", "-n", ns, "-k", k, env=bad_env)
        self.assertEqual(code, 13, "a command without a lease token does not read IDEM_LEASE_TOKEN: " + err)
        code, _, err = cli("complete", "-n", ns, "-k", k, env=bad_env)
        self.assertEqual(code, 1, err)
        self.assertIn("IDEM_LEASE_TOKEN", err)
        self.assertNotIn("Traceback", err)
        code, _, err = cli("complete", "-n", ns, "-k", k, "--lease-token", "abc")
        self.assertEqual(code, 1, err)
        self.assertIn("--lease-token", err)
        token = cli("claim", "-n", ns, "-k", k)[1].strip()
        code, _, err = cli("complete", "-n", ns, "-k", k, "--result", "ok", env={"IDEM_LEASE_TOKEN": token})
        self.assertEqual(code, 0, "a good IDEM_LEASE_TOKEN is the token: " + err)

    def test_an_unreadable_ca_file_is_named(self):
        ns, k = h.namespaces["plain"], fresh("cli-bad")
        missing = os.path.join(PACKAGE_ROOT, "no-such-ca.pem")
        code, _, err = cli("--tls-ca", missing, "--url", "https://127.0.0.1:1", "lookup", "-n", ns, "-k", k)
        self.assertEqual(code, 1, err)
        self.assertIn("ca_file", err)
        self.assertIn(missing, err)

    def test_errors_have_one_prefix(self):
        ns, k = h.namespaces["plain"], fresh("cli-bad")
        code, _, err = cli("--timeout", "0", "lookup", "-n", ns, "-k", k)
        self.assertEqual(code, 1, err)
        self.assertTrue(err.startswith("idem: timeout"), "one prefix: " + err)


if __name__ == "__main__":
    unittest.main()
