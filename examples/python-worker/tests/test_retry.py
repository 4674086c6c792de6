"""Retries, against a scripted HTTP server on a free loopback port: UNAVAILABLE
(503, or no answer) is retried with backoff, 429 after its Retry-After, and
nothing else is retried."""

import http.server
import json
import socket
import threading
import time
import unittest

from harness import idem

FAST = idem.RetryPolicy(base_delay=0.01, max_delay=0.05, max_attempts=4)

LEASE_LOST = {"code": 10, "message": "lease lost", "details": [
    {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "LEASE_LOST", "domain": "idem", "metadata": {}}]}
UNAVAILABLE = {"code": 14, "message": "the database is unreachable", "details": [
    {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "STORE_UNAVAILABLE", "domain": "idem"}]}
RATE_LIMITED = {"code": 8, "message": "over the rate limit", "details": [
    {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMITED", "domain": "idem"}]}
ACQUIRED = {"outcome": "OUTCOME_ACQUIRED", "record": {"namespace": "ns", "key": "k", "state": "STATE_PROCESSING",
                                                      "token": "3", "attempt": 1}, "retryAfter": None}


class Scripted:
    """An HTTP server that answers each request with the next (status,
    headers, body) of its script and records what it received."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []  # (time, method, path, body)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((time.monotonic(), self.command, self.path, body))
                status, headers, answer = outer.script.pop(0) if outer.script else (500, {}, {"code": 13, "message": "script ran out"})
                data = json.dumps(answer).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class RetryTest(unittest.TestCase):
    def serve(self, *script):
        s = Scripted(script)
        self.addCleanup(s.close)
        return s

    def test_unavailable_is_retried_with_the_same_request(self):
        s = self.serve((503, {}, UNAVAILABLE), (503, {}, UNAVAILABLE), (200, {}, ACQUIRED))
        res = idem.Client(s.url, retry=FAST).claim("ns", "k", claimant="c-1", lease_ttl=1.5)
        self.assertEqual((res.outcome, res.record.token), ("OUTCOME_ACQUIRED", 3))
        self.assertEqual(len(s.requests), 3)
        bodies = {r[3] for r in s.requests}
        self.assertEqual(len(bodies), 1, "a retried Claim must send the same claimant")
        self.assertEqual(json.loads(bodies.pop()), {"claimant": "c-1", "leaseTtl": "1.5s"})
        self.assertEqual(s.requests[0][2], "/v1/namespaces/ns/records/k:claim")

    def test_unavailable_gives_up_after_max_attempts(self):
        s = self.serve(*[(503, {}, UNAVAILABLE)] * 10)
        with self.assertRaises(idem.UnavailableError) as cm:
            idem.Client(s.url, retry=FAST).lookup("ns", "k")
        self.assertEqual(cm.exception.reason, "STORE_UNAVAILABLE")
        self.assertEqual(len(s.requests), FAST.max_attempts)

    def test_429_is_retried_after_retry_after(self):
        s = self.serve((429, {"Retry-After": "1"}, RATE_LIMITED), (200, {}, {"record": {"token": "9"}}))
        rec = idem.Client(s.url, retry=FAST).complete("ns", "k", 9, b"ok")
        self.assertEqual(rec.token, 9)
        self.assertEqual(len(s.requests), 2)
        self.assertGreaterEqual(s.requests[1][0] - s.requests[0][0], 0.95, "the retry came before Retry-After")

    def test_429_without_retries_left_is_rate_limited(self):
        s = self.serve((429, {"Retry-After": "3"}, RATE_LIMITED))
        with self.assertRaises(idem.RateLimitedError) as cm:
            idem.Client(s.url, retry=idem.RetryPolicy(max_attempts=1)).lookup("ns", "k")
        self.assertEqual((cm.exception.retry_after, cm.exception.http_status), (3.0, 429))

    def test_lease_lost_is_not_retried(self):
        s = self.serve((409, {}, LEASE_LOST), (200, {}, {"record": {}}))
        with self.assertRaises(idem.LeaseLostError):
            idem.Client(s.url, retry=FAST).heartbeat("ns", "k", 4)
        self.assertEqual(len(s.requests), 1)

    def test_no_answer_is_unavailable_and_retried(self):
        # A port nobody listens on: bind one, then close it.
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        start = time.monotonic()
        with self.assertRaises(idem.UnavailableError) as cm:
            idem.Client(f"http://127.0.0.1:{port}", retry=FAST).lookup("ns", "k")
        self.assertEqual((cm.exception.code, cm.exception.reason), ("UNAVAILABLE", ""))
        self.assertTrue(cm.exception.transient)
        self.assertLess(time.monotonic() - start, 30)

    def test_an_answer_that_is_not_json_is_an_error(self):
        s = self.serve((200, {}, ["not", "an", "object"]))
        with self.assertRaises(idem.IdemError) as cm:
            idem.Client(s.url, retry=FAST).lookup("ns", "k")
        self.assertEqual((cm.exception.code, cm.exception.transient), ("UNKNOWN", False))

    def test_an_interrupt_in_fn_releases_the_job_and_propagates(self):
        s = self.serve((200, {}, ACQUIRED), (200, {}, {"record": {"state": "STATE_RELEASED"}}))

        def interrupted(attempt):
            raise KeyboardInterrupt()

        with self.assertRaises(KeyboardInterrupt):
            idem.Client(s.url, retry=FAST).do(idem.Job("ns", "k", lease_ttl=30), interrupted)
        self.assertEqual([r[2] for r in s.requests], ["/v1/namespaces/ns/records/k:claim", "/v1/namespaces/ns/records/k:fail"])
        self.assertEqual(json.loads(s.requests[1][3]),
                         {"token": "3", "error": "interrupted: KeyboardInterrupt()", "retryable": True})

    def test_an_unresolved_job_is_not_run(self):
        s = self.serve((200, {}, {"outcome": "OUTCOME_UNRESOLVED",
                                  "record": {"namespace": "ns", "key": "k", "state": "STATE_UNRESOLVED"}}))
        ran = []
        with self.assertRaises(idem.UnresolvedError) as cm:
            idem.Client(s.url, retry=FAST).do(idem.Job("ns", "k"), ran.append)
        self.assertEqual((ran, cm.exception.record.state), ([], "STATE_UNRESOLVED"))
        self.assertEqual([r[2] for r in s.requests], ["/v1/namespaces/ns/records/k:claim"])

    def test_keys_are_one_path_segment(self):
        s = self.serve((200, {}, {"record": {}}))
        idem.Client(s.url, retry=FAST).lookup("ns", "invoice/2024:17 100% ключ")
        self.assertEqual(s.requests[0][2],
                         "/v1/namespaces/ns/records/invoice%2F2024%3A17%20100%25%20%D0%BA%D0%BB%D1%8E%D1%87")

    def test_a_token_is_never_sent_in_plaintext_off_the_machine(self):
        with self.assertRaises(ValueError):
            idem.Client("http://idem.example.com:7072", token="secret")
        idem.Client("https://idem.example.com", token="secret")
        idem.Client("http://127.0.0.1:7072", token="secret")


if __name__ == "__main__":
    unittest.main()
