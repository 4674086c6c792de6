"""The Connect JSON wire, against a scripted HTTP server: what each call
sends, how answers and errors are read, what is retried, kept-alive
connections, TLS and tokens."""

import json
import os
import shutil
import ssl
import tempfile
import time
import unittest

from support import ACQUIRED, Scripted, connect_error, err, free_port, idem, ok, record, self_signed_cert

FAST = idem.RetryPolicy(base_delay=0.01, max_delay=0.05, max_attempts=4)
ONCE = idem.RetryPolicy(max_attempts=1)


class WireTest(unittest.TestCase):
    def serve(self, handler, **kw):
        s = Scripted(handler, **kw)
        self.addCleanup(s.close)
        return s

    def client(self, s, **kw):
        kw.setdefault("retry", FAST)
        kw.setdefault("url", s.url)
        c = idem.Client(**kw)
        self.addCleanup(c.close)
        return c

    def test_claim_sends_connect_json(self):
        s = self.serve(lambda r: ACQUIRED)
        res = self.client(s, token="tok").claim("ns", "k/1:2", fingerprint=b"\x00\xff", lease_ttl=1.5, claimant="c-1",
                                                retention=3600, wait=2.25)
        self.assertEqual((res.outcome, res.record.token, res.record.state), (idem.Outcome.ACQUIRED, 3, idem.State.PROCESSING))
        r = s.requests[0]
        self.assertEqual((r.method, r.path), ("POST", "/idem.v1.IdempotencyService/Claim"))
        self.assertEqual(r.headers["Content-Type"], "application/json")
        self.assertEqual(r.headers["Connect-Protocol-Version"], "1")
        self.assertEqual(r.headers["Authorization"], "Bearer tok")
        self.assertGreaterEqual(int(r.headers["Connect-Timeout-Ms"]), 12250, "a waiting Claim's deadline includes the wait")
        self.assertEqual(r.json(), {"namespace": "ns", "key": "k/1:2", "fingerprint": "AP8=", "leaseTtl": "1.500s",
                                    "claimant": "c-1", "retention": "3600s", "wait": "2.250s"})

    def test_claim_makes_up_a_claimant_and_omits_defaults(self):
        s = self.serve(lambda r: ACQUIRED)
        self.client(s).claim("ns", "k")
        body = s.requests[0].json()
        self.assertEqual(set(body), {"namespace", "key", "claimant"})
        self.assertEqual(len(body["claimant"]), 36, "a UUID")

    def test_int64_tokens_are_decimal_strings_both_ways(self):
        big = 2 ** 63 - 1
        s = self.serve(lambda r: ok({"record": record(state="STATE_COMPLETED", token=big, result="aGk=")}))
        rec = self.client(s).complete("ns", "k", big, b"hi")
        self.assertEqual(s.requests[0].json(), {"namespace": "ns", "key": "k", "token": str(big), "result": "aGk="})
        self.assertEqual((rec.token, rec.result, rec.state), (big, b"hi", idem.State.COMPLETED))

    def test_every_rpc_goes_to_its_route(self):
        answers = {"Claim": ACQUIRED, "ListRecords": ok({"records": [record()], "nextPageToken": "p2"}),
                   "Stats": ok({"rows": [{"namespace": "ns", "state": "STATE_FAILED", "count": "7", "tenant": "t"}]})}
        s = self.serve(lambda r: answers.get(r.rpc, ok({"record": record()})))
        c = self.client(s)
        c.claim("ns", "k")
        c.complete("ns", "k", 3)
        c.fail("ns", "k", 3, "boom", retryable=True)
        c.heartbeat("ns", "k", 3, lease_ttl=30)
        c.lookup("ns", "k")
        page = c.admin.list_records("ns", state=idem.State.PROCESSING, older_than=0, page_size=10, tenant="t")
        c.admin.delete_record("ns", "k", tenant="t")
        rows = c.admin.stats(all_tenants=True)
        c.admin.resolve_record("ns", "k", completed=b"")
        c.admin.resolve_record("ns", "k", failed="no")
        c.admin.resolve_record("ns", "k", released=True)
        self.assertEqual([r.path for r in s.requests], [
            "/idem.v1.IdempotencyService/Claim", "/idem.v1.IdempotencyService/Complete",
            "/idem.v1.IdempotencyService/Fail", "/idem.v1.IdempotencyService/Heartbeat",
            "/idem.v1.IdempotencyService/Lookup", "/idem.v1.AdminService/ListRecords",
            "/idem.v1.AdminService/DeleteRecord", "/idem.v1.AdminService/Stats",
            "/idem.v1.AdminService/ResolveRecord", "/idem.v1.AdminService/ResolveRecord",
            "/idem.v1.AdminService/ResolveRecord"])
        bodies = [r.json() for r in s.requests]
        self.assertEqual(bodies[2], {"namespace": "ns", "key": "k", "token": "3", "error": "boom", "retryable": True})
        self.assertEqual(bodies[3], {"namespace": "ns", "key": "k", "token": "3", "leaseTtl": "30s"})
        self.assertEqual(bodies[5], {"namespace": "ns", "state": "STATE_PROCESSING", "olderThan": "0s", "pageSize": 10,
                                     "tenant": "t"})
        self.assertEqual(bodies[7], {"allTenants": True})
        self.assertEqual(bodies[8:], [{"namespace": "ns", "key": "k", "completed": {}},
                                      {"namespace": "ns", "key": "k", "failed": {"error": "no"}},
                                      {"namespace": "ns", "key": "k", "released": {}}])
        self.assertEqual((len(page.records), page.next_page_token), (1, "p2"))
        self.assertEqual(rows, [idem.StatsRow("ns", idem.State.FAILED, 7, "t")])
        with self.assertRaises(ValueError):
            c.admin.resolve_record("ns", "k", completed=b"x", released=True)

    def test_iter_records_follows_page_tokens(self):
        pages = {"": ok({"records": [record(key="a")], "nextPageToken": "t1"}),
                 "t1": ok({"records": [], "nextPageToken": "t2"}),
                 "t2": ok({"records": [record(key="b"), record(key="c")]})}
        s = self.serve(lambda r: pages[r.json().get("pageToken", "")])
        self.assertEqual([rec.key for rec in self.client(s).admin.iter_records("ns")], ["a", "b", "c"])

    def test_a_url_path_is_a_prefix(self):
        s = self.serve(lambda r: ok({"record": record()}))
        self.client(s, url=s.url + "/idem/").lookup("ns", "k")
        self.assertEqual(s.requests[0].path, "/idem/idem.v1.IdempotencyService/Lookup")

    def test_the_raw_call_sends_the_body_as_given(self):
        s = self.serve(lambda r: err("invalid_argument", "unknown field leaseTTL", ""))
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            self.client(s).call("IdempotencyService", "Claim", {"namespace": "ns", "key": "k", "leaseTTL": "5s"})
        self.assertEqual(s.requests[0].json(), {"namespace": "ns", "key": "k", "leaseTTL": "5s"})
        self.assertEqual((cm.exception.code, cm.exception.http_status), ("INVALID_ARGUMENT", 400))
        self.assertEqual(len(s.requests), 1, "the raw call is not retried")

    # ------------------------------------------------------------------
    # Errors

    def test_errors_are_read_from_the_protobuf_details(self):
        # Only "value" (protobuf) is required of a Connect server; debug is
        # optional, so the client must not depend on it.
        body = connect_error("invalid_argument", "key has a NUL", "INVALID_KEY",
                             metadata={"field": "key", "problem": "NUL_CHARACTER"}, debug=False)
        s = self.serve(lambda r: (400, {}, body))
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            self.client(s).lookup("ns", "k")
        e = cm.exception
        self.assertEqual((e.code, e.reason, e.field, e.metadata["problem"], e.http_status, e.rpc, e.transient),
                         ("INVALID_ARGUMENT", "INVALID_KEY", "key", "NUL_CHARACTER", 400, "Lookup", False))
        self.assertEqual(str(e), "idem: Lookup: key has a NUL (INVALID_ARGUMENT/INVALID_KEY)")

    def test_classes_by_reason(self):
        cases = [("aborted", "LEASE_LOST", idem.LeaseLostError), ("failed_precondition", "FINGERPRINT_MISMATCH",
                 idem.FingerprintMismatchError), ("failed_precondition", "ALREADY_TERMINAL", idem.AlreadyTerminalError),
                 ("failed_precondition", "RESOLVED_BY_OPERATOR", idem.ResolvedByOperatorError),
                 ("failed_precondition", "NOT_UNRESOLVED", idem.NotUnresolvedError),
                 ("not_found", "NOT_FOUND", idem.NotFoundError), ("unavailable", "CONTENTION", idem.UnavailableError),
                 ("unauthenticated", "UNAUTHENTICATED", idem.UnauthenticatedError),
                 ("permission_denied", "NOT_ADMIN", idem.PermissionDeniedError),
                 ("internal", "INTERNAL", idem.InternalError),
                 # A reason newer than the package: the class of its code.
                 ("unavailable", "SOMETHING_NEW", idem.UnavailableError),
                 ("failed_precondition", "SOMETHING_NEW", idem.IdemError)]
        for code, reason, cls in cases:
            with self.subTest(reason=reason):
                s = self.serve(lambda r: err(code, "m", reason))
                with self.assertRaises(idem.IdemError) as cm:
                    self.client(s, retry=ONCE).lookup("ns", "k")
                self.assertIs(type(cm.exception), cls)
                self.assertEqual(cm.exception.reason, reason)

    def test_resolved_by_operator_says_the_result_was_not_stored(self):
        s = self.serve(lambda r: err("failed_precondition", "the record was resolved by an operator", "RESOLVED_BY_OPERATOR"))
        with self.assertRaises(idem.ResolvedByOperatorError) as cm:
            self.client(s).complete("ns", "k", 3, b"B")
        self.assertIn("your result was not stored: the record was resolved by an operator", str(cm.exception))
        self.assertEqual(len(s.requests), 1, "not retried")

    def test_a_reason_of_another_domain_is_not_idems(self):
        body = connect_error("aborted", "m", "LEASE_LOST")
        body["details"][0]["debug"]["domain"] = "other"
        body["details"][0]["value"] = "CgpMRUFTRV9MT1NUEgVvdGhlcg"  # reason LEASE_LOST, domain "other"
        s = self.serve(lambda r: (409, {}, body))
        with self.assertRaises(idem.IdemError) as cm:
            self.client(s).lookup("ns", "k")
        self.assertEqual((type(cm.exception), cm.exception.reason, cm.exception.code), (idem.IdemError, "", "ABORTED"))

    def test_answers_that_are_not_connect_errors(self):
        cases = [(502, b"<html>Bad Gateway</html>", idem.UnavailableError, "UNAVAILABLE", True),
                 (404, b"not here", idem.IdemError, "UNIMPLEMENTED", False),
                 (400, b"", idem.InternalError, "INTERNAL", False)]
        for status, body, cls, code, transient in cases:
            with self.subTest(status=status):
                s = self.serve(lambda r: (status, {"Content-Type": "text/html"}, body))
                with self.assertRaises(idem.IdemError) as cm:
                    self.client(s, retry=ONCE).lookup("ns", "k")
                self.assertEqual((type(cm.exception), cm.exception.code, cm.exception.transient, cm.exception.http_status),
                                 (cls, code, transient, status))

    def test_an_answer_that_is_not_a_json_object(self):
        s = self.serve(lambda r: ok(["not", "an", "object"]))
        with self.assertRaises(idem.IdemError) as cm:
            self.client(s).lookup("ns", "k")
        self.assertEqual((cm.exception.code, cm.exception.transient, len(s.requests)), ("UNKNOWN", False, 1))

    # ------------------------------------------------------------------
    # Retries

    def test_unavailable_is_retried_with_the_same_request(self):
        answers = [err("unavailable", "db down", "STORE_UNAVAILABLE"), err("unavailable", "db down", "STORE_UNAVAILABLE"), ACQUIRED]
        s = self.serve(lambda r: answers.pop(0))
        res = self.client(s).claim("ns", "k", lease_ttl=2)
        self.assertEqual(res.outcome, idem.Outcome.ACQUIRED)
        self.assertEqual(len({r.body for r in s.requests}), 1, "a retried Claim sends the same claimant")
        self.assertEqual(len(s.requests), 3)

    def test_unavailable_gives_up_after_max_attempts(self):
        s = self.serve(lambda r: err("unavailable", "db down", "STORE_UNAVAILABLE"))
        with self.assertRaises(idem.UnavailableError) as cm:
            self.client(s).lookup("ns", "k")
        self.assertEqual((cm.exception.reason, cm.exception.transient), ("STORE_UNAVAILABLE", True))
        self.assertEqual(len(s.requests), FAST.max_attempts)

    def test_the_default_policy_is_the_go_clients(self):
        # client/retry.go: 10 tries from 100 ms doubling to 5 s, enough to
        # ride out a restart of idemd (the restart-mid-claim scenario).
        p = idem.RetryPolicy()
        self.assertEqual((p.base_delay, p.max_delay, p.max_attempts), (0.1, 5.0, 10))

    def test_retry_info_sets_the_wait(self):
        # RetryInfo (milliseconds) wins over Retry-After (whole seconds,
        # rounded up): the retry comes after 0.3 s, well before 1 s.
        answers = [(429, {"Retry-After": "1"}, connect_error("resource_exhausted", "slow down", "RATE_LIMITED", retry_delay=0.3)),
                   ok({"record": record()})]
        s = self.serve(lambda r: answers.pop(0))
        self.client(s).lookup("ns", "k")
        gap = s.requests[1].time - s.requests[0].time
        self.assertGreaterEqual(gap, 0.3, "the retry came before RetryInfo's delay")
        self.assertLess(gap, 1.0, "Retry-After won over RetryInfo")

    def test_retry_after_counts_without_retry_info(self):
        answers = [(429, {"Retry-After": "1"}, connect_error("resource_exhausted", "slow down", "RATE_LIMITED")),
                   ok({"record": record()})]
        s = self.serve(lambda r: answers.pop(0))
        self.client(s).lookup("ns", "k")
        self.assertGreaterEqual(s.requests[1].time - s.requests[0].time, 1.0)

    def test_rate_limited_without_retries_left(self):
        s = self.serve(lambda r: err("resource_exhausted", "slow down", "RATE_LIMITED", retry_delay=2.5))
        with self.assertRaises(idem.RateLimitedError) as cm:
            self.client(s, retry=ONCE).lookup("ns", "k")
        self.assertEqual((cm.exception.retry_after, cm.exception.transient, cm.exception.http_status), (2.5, True, 429))

    def test_resource_exhausted_without_a_delay_is_not_retried(self):
        # A request over the size limit: no retry fixes it.
        s = self.serve(lambda r: err("resource_exhausted", "the request body is 99999999 bytes; the limit is 120000"))
        with self.assertRaises(idem.IdemError) as cm:
            self.client(s).lookup("ns", "k")
        self.assertEqual((cm.exception.transient, len(s.requests)), (False, 1))

    def test_lease_lost_is_not_retried(self):
        s = self.serve(lambda r: err("aborted", "lease lost", "LEASE_LOST"))
        with self.assertRaises(idem.LeaseLostError):
            self.client(s).heartbeat("ns", "k", 4)
        self.assertEqual(len(s.requests), 1)

    def test_no_answer_is_unavailable_and_retried(self):
        c = idem.Client(f"http://127.0.0.1:{free_port()}", retry=FAST)
        with self.assertRaises(idem.UnavailableError) as cm:
            c.lookup("ns", "k")
        self.assertEqual((cm.exception.code, cm.exception.reason, cm.exception.transient, cm.exception.http_status),
                         ("UNAVAILABLE", "", True, 0))

    def test_a_slow_answer_is_deadline_exceeded(self):
        def slow(r):
            time.sleep(1.0)
            return ok({"record": record()})

        s = self.serve(slow)
        with self.assertRaises(idem.UnavailableError) as cm:
            self.client(s, timeout=0.2, retry=ONCE).lookup("ns", "k")
        self.assertEqual((cm.exception.code, cm.exception.transient), ("DEADLINE_EXCEEDED", True))

    def test_a_waiting_claim_outlasts_the_request_timeout(self):
        # The server may hold a Claim with a wait for the whole wait: the
        # client's timeout must count from its end.
        def waiting(r):
            time.sleep(0.6)
            return ok({"outcome": "OUTCOME_COMPLETED", "record": record(state="STATE_COMPLETED", result="eA==")})

        s = self.serve(waiting)
        res = self.client(s, timeout=0.3, retry=ONCE).claim("ns", "k", wait=5)
        self.assertEqual((res.outcome, res.record.result), (idem.Outcome.COMPLETED, b"x"))

    # ------------------------------------------------------------------
    # Connections

    def test_connections_are_kept_alive(self):
        s = self.serve(lambda r: ok({"record": record()}))
        c = self.client(s)
        for _ in range(5):
            c.lookup("ns", "k")
        self.assertEqual({r.conn_id for r in s.requests}, {s.requests[0].conn_id}, "five calls, one connection")

    def test_a_connection_the_server_dropped_is_replaced(self):
        # The server closes each connection after its answer without saying
        # so: the next call finds the kept connection dead and must send
        # again on a new one, even with retries off.
        s = self.serve(lambda r: (200, {"X-Close": "1"}, {"record": record()}))
        c = self.client(s, retry=ONCE)
        c.lookup("ns", "k")
        time.sleep(0.1)  # the close reaches the client
        c.lookup("ns", "k")
        c.lookup("ns", "k")
        self.assertEqual(len(s.requests), 3)
        self.assertEqual(len({r.conn_id for r in s.requests}), 3)

    def test_threads_share_a_client(self):
        import threading
        s = self.serve(lambda r: ok({"record": record()}))
        c = self.client(s)
        errors = []

        def work():
            try:
                for _ in range(20):
                    c.lookup("ns", "k")
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual((errors, len(s.requests)), ([], 80))

    # ------------------------------------------------------------------
    # Tokens and TLS

    def test_a_token_is_never_sent_in_plaintext_off_the_machine(self):
        with self.assertRaises(ValueError) as cm:
            idem.Client("http://idem.example.com:7072", token="secret")
        self.assertIn("plaintext", str(cm.exception))
        idem.Client("https://idem.example.com", token="secret")
        idem.Client("http://127.0.0.1:7072", token="secret")
        idem.Client("http://localhost:7072", token="secret")
        with self.assertRaises(ValueError):
            idem.Client("ftp://idem.example.com")
        with self.assertRaises(ValueError):
            idem.Client("http://127.0.0.1:7072", ca_file="/nonexistent.pem")

    def test_a_token_no_header_can_carry_is_refused_at_once(self):
        for token in ("idem_\nb", "idem_ключ", "idem_\tb", "idem_\0"):
            with self.assertRaises(ValueError) as cm:
                idem.Client("http://127.0.0.1:7072", token=token)
            self.assertIn("the token has a character that cannot be sent in an HTTP header", str(cm.exception))
            self.assertIn("at index 5", str(cm.exception))
        # Whitespace around it is dropped: a token read from a file works.
        s = self.serve(lambda r: ACQUIRED)
        self.client(s, token=" tok\n").claim("ns", "k")
        self.assertEqual(s.requests[0].headers["Authorization"], "Bearer tok")

    def test_tls_with_a_ca_file(self):
        d = tempfile.mkdtemp(prefix="idem-python-tls-")
        self.addCleanup(shutil.rmtree, d, True)
        cert, key = self_signed_cert(d)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        s = self.serve(lambda r: ok({"record": record()}), ssl_context=ctx)
        rec = self.client(s, ca_file=cert, token="tok").lookup("ns", "k")
        self.assertEqual(rec.token, 3)
        self.assertEqual(s.requests[0].headers["Authorization"], "Bearer tok")
        with self.assertRaises(idem.IdemError) as cm:
            self.client(s).lookup("ns", "k")  # the system's CAs do not know it
        self.assertIn("certificate", str(cm.exception))
        self.assertFalse(cm.exception.transient, "retrying does not make a certificate trusted")
        self.assertEqual(len(s.requests), 1)


def status(code, message="m", reason="", metadata=None, retry_delay=None):
    """A google.rpc.Status of a batch item, in protobuf's JSON mapping, as
    idemd's HTTP/JSON API writes it."""
    details = []
    if reason:
        details.append({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "idem",
                        **({"metadata": metadata} if metadata else {})})
    if retry_delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_delay:.3f}s"})
    return {"error": {"code": code, "message": message, **({"details": details} if details else {})}}


def response(body):
    return {"response": body}


class BatchWireTest(unittest.TestCase):
    """The batch calls on the wire: one entry per request, each the unary
    call's answer or exception, and the unary calls' retries per item."""

    serve = WireTest.serve
    client = WireTest.client

    def test_batch_claim_answers_each_item_as_claim_would(self):
        s = self.serve(lambda r: ok({"results": [
            response({"outcome": "OUTCOME_ACQUIRED", "record": record(key="a")}),
            response({"outcome": "OUTCOME_IN_PROGRESS", "record": record(key="b"), "retryAfter": "12.5s"}),
            status(9, "fingerprint differs", "FINGERPRINT_MISMATCH"),
            response({"outcome": "OUTCOME_UNRESOLVED", "record": record(key="d", state="STATE_UNRESOLVED")}),
        ]}))
        got = self.client(s).batch_claim([
            idem.ClaimRequest("ns", "a", fingerprint=b"\x01", lease_ttl=1.5, claimant="c-1", retention=60),
            idem.Job("ns", "b", lease_ttl=30), idem.ClaimRequest("ns", "c"), idem.ClaimRequest("ns", "d")])
        r = s.requests[0]
        self.assertEqual(r.path, "/idem.v1.IdempotencyService/BatchClaim")
        sent = r.json()["requests"]
        self.assertEqual(sent[0], {"namespace": "ns", "key": "a", "fingerprint": "AQ==", "leaseTtl": "1.500s",
                                   "claimant": "c-1", "retention": "60s"})
        self.assertEqual(sent[1]["leaseTtl"], "30s")
        self.assertEqual([len(b["claimant"]) for b in sent[1:]], [36, 36, 36], "a fresh UUID each")
        self.assertEqual(len({b["claimant"] for b in sent}), 4)
        self.assertIsInstance(got[0], idem.ClaimResult)
        self.assertEqual((got[0].outcome, got[0].record.key), (idem.Outcome.ACQUIRED, "a"))
        self.assertIsInstance(got[1], idem.InProgressError)
        self.assertEqual((got[1].retry_after, got[1].record.key), (12.5, "b"))
        self.assertIsInstance(got[2], idem.FingerprintMismatchError)
        self.assertEqual((got[2].code, got[2].reason, got[2].http_status, got[2].rpc),
                         ("FAILED_PRECONDITION", "FINGERPRINT_MISMATCH", 400, "Claim"))
        self.assertIsInstance(got[3], idem.UnresolvedError)
        self.assertEqual(len(s.requests), 1, "no item was transient: one call")

    def test_batch_token_calls_and_lookup(self):
        answers = {
            "BatchComplete": [response({"record": record(state="STATE_COMPLETED", result="aGk=")}),
                              status(10, "lease lost", "LEASE_LOST", {"field": "token"})],
            "BatchFail": [response({"record": record(state="STATE_RELEASED", error="e")}),
                          status(9, "done already", "ALREADY_TERMINAL")],
            "BatchHeartbeat": [status(5, "no such record", "NOT_FOUND"), response({"record": record()})],
            "BatchLookup": [response({"record": record()}), status(5, "no such record", "NOT_FOUND")],
        }
        s = self.serve(lambda r: ok({"results": answers[r.rpc]}))
        c = self.client(s)
        done = c.batch_complete([idem.CompleteRequest("ns", "k", 3, b"hi"), idem.CompleteRequest("ns", "k", 9)])
        self.assertEqual(done[0].result, b"hi")
        self.assertIsInstance(done[1], idem.LeaseLostError)
        self.assertEqual((done[1].code, done[1].http_status, done[1].metadata, done[1].rpc),
                         ("ABORTED", 409, {"field": "token"}, "Complete"))
        self.assertEqual(s.requests[0].json(), {"requests": [
            {"namespace": "ns", "key": "k", "token": "3", "result": "aGk="}, {"namespace": "ns", "key": "k", "token": "9"}]})
        failed = c.batch_fail([idem.FailRequest("ns", "k", 3, "e", retryable=True),
                               idem.FailRequest("ns", "k", 3, "f", retryable=False)])
        self.assertEqual(failed[0].state, idem.State.RELEASED)
        self.assertIsInstance(failed[1], idem.AlreadyTerminalError)
        self.assertEqual(s.requests[1].json()["requests"], [
            {"namespace": "ns", "key": "k", "token": "3", "error": "e", "retryable": True},
            {"namespace": "ns", "key": "k", "token": "3", "error": "f"}])
        beats = c.batch_heartbeat([idem.HeartbeatRequest("ns", "gone", 3), idem.HeartbeatRequest("ns", "k", 3, 20)])
        self.assertIsInstance(beats[0], idem.NotFoundError)
        self.assertEqual(beats[1].token, 3)
        self.assertEqual(s.requests[2].json()["requests"][1]["leaseTtl"], "20s")
        looked = c.batch_lookup([idem.LookupRequest("ns", "k"), idem.LookupRequest("ns", "gone")])
        self.assertEqual(looked[0].token, 3)
        self.assertIsInstance(looked[1], idem.NotFoundError)
        self.assertEqual(s.rpcs(), ["BatchComplete", "BatchFail", "BatchHeartbeat", "BatchLookup"])

    def test_transient_items_are_sent_again_alone_and_in_order(self):
        rounds = [
            [response({"outcome": "OUTCOME_ACQUIRED", "record": record(key="a")}),
             status(14, "store down", "STORE_UNAVAILABLE"),
             status(9, "fingerprint differs", "FINGERPRINT_MISMATCH"),
             status(8, "slow down", "RATE_LIMITED", retry_delay=0.05)],
            [status(8, "slow down", "RATE_LIMITED", retry_delay=0.05),
             response({"outcome": "OUTCOME_ACQUIRED", "record": record(key="d")})],
            [response({"outcome": "OUTCOME_ACQUIRED", "record": record(key="b")})],
        ]
        s = self.serve(lambda r: ok({"results": rounds[len(s.requests) - 1]}))
        start = time.monotonic()
        got = self.client(s).batch_claim([idem.ClaimRequest("ns", k) for k in "abcd"])
        self.assertGreaterEqual(time.monotonic() - start, 0.1, "each round waited what RetryInfo said")
        self.assertEqual([r.json()["requests"] for r in s.requests][1:],
                         [[s.requests[0].json()["requests"][i] for i in (1, 3)],
                          [s.requests[0].json()["requests"][1]]],
                         "only the transient items are sent again, as they were (their claimants kept)")
        self.assertEqual([g.record.key if isinstance(g, idem.ClaimResult) else type(g) for g in got],
                         ["a", "b", idem.FingerprintMismatchError, "d"])

    def test_a_transient_item_keeps_its_error_when_the_retries_run_out(self):
        s = self.serve(lambda r: ok({"results": [status(14, "store down", "STORE_UNAVAILABLE")
                                                  for _ in r.json()["requests"]]}))
        got = self.client(s).batch_lookup([idem.LookupRequest("ns", "a"), idem.LookupRequest("ns", "b")])
        self.assertEqual(len(s.requests), FAST.max_attempts)
        self.assertTrue(all(isinstance(g, idem.UnavailableError) and g.reason == "STORE_UNAVAILABLE" for g in got))
        s2 = self.serve(lambda r: ok({"results": [status(14, "store down", "STORE_UNAVAILABLE")]}))
        self.assertIsInstance(self.client(s2, retry=ONCE).batch_lookup([idem.LookupRequest("ns", "a")])[0],
                              idem.UnavailableError)
        self.assertEqual(len(s2.requests), 1, "max_attempts=1 turns the retries off")

    def test_the_batch_as_a_whole(self):
        s = self.serve(lambda r: err("invalid_argument", "the batch holds 0 items; it must hold 1 to 500",
                                     "INVALID_BATCH_SIZE", metadata={"field": "requests"}))
        with self.assertRaises(idem.InvalidArgumentError) as cm:
            self.client(s).batch_claim([])
        self.assertEqual((cm.exception.reason, cm.exception.field, len(s.requests)),
                         ("INVALID_BATCH_SIZE", "requests", 1))
        self.assertEqual(s.requests[0].json(), {"requests": []})

        answers = [err("unavailable", "restarting"), ok({"results": [response({"record": record()})]})]
        s = self.serve(lambda r: answers[len(s.requests) - 1])
        self.assertEqual(self.client(s).batch_lookup([idem.LookupRequest("ns", "k")])[0].token, 3,
                         "a batch that failed transiently is sent again")

        # A round after the first that fails keeps the answers of the earlier
        # ones and gives the rest its error.
        answers = [ok({"results": [response({"record": record()}), status(14, "store down", "STORE_UNAVAILABLE")]}),
                   err("unauthenticated", "token revoked", "UNAUTHENTICATED")]
        s = self.serve(lambda r: answers[len(s.requests) - 1])
        got = self.client(s).batch_lookup([idem.LookupRequest("ns", "k"), idem.LookupRequest("ns", "j")])
        self.assertEqual((got[0].token, type(got[1])), (3, idem.UnauthenticatedError))

        s = self.serve(lambda r: ok({"results": []}))
        with self.assertRaises(idem.IdemError) as cm:
            self.client(s).batch_lookup([idem.LookupRequest("ns", "k")])
        self.assertIn("0 results for 1 requests", str(cm.exception))

    def test_do_batch_sends_again_only_what_is_owed_an_answer(self):
        completes = []

        def answer(r):
            items = r.json()["requests"]
            if r.rpc == "BatchClaim":
                first = len(s.of("BatchClaim")) == 1
                return ok({"results": [status(14, "store down", "STORE_UNAVAILABLE") if first and b["key"] == "b"
                                       else response({"outcome": "OUTCOME_ACQUIRED", "record": record(key=b["key"])})
                                       for b in items]})
            completes.append([b["key"] for b in items])
            if len(completes) == 1:
                return err("unavailable", "restarting")
            return ok({"results": [response({"record": record(key=b["key"], state="STATE_COMPLETED")}) for b in items]})

        s = self.serve(answer)
        out = self.client(s).do_batch([idem.Job("ns", "a", lease_ttl=60), idem.Job("ns", "b", lease_ttl=60)],
                                      lambda attempt, i: f"v{i}")
        self.assertEqual([r.value for r in out], [b"v0", b"v1"])
        claims = [r.json()["requests"] for r in s.of("BatchClaim")]
        self.assertEqual([[b["key"] for b in c] for c in claims], [["a", "b"], ["b"]], "only b was claimed again")
        self.assertEqual(claims[1][0]["claimant"], claims[0][1]["claimant"], "under the claimant it was first sent with")
        self.assertNotEqual(claims[0][0]["claimant"], claims[0][1]["claimant"])
        self.assertEqual(completes, [["a", "b"], ["a", "b"]], "a batch that failed as a whole is sent again whole")

    def test_items_are_checked_before_anything_is_sent(self):
        s = self.serve(lambda r: ok({"results": []}))
        c = self.client(s)
        with self.assertRaises(ValueError) as cm:
            c.batch_claim([idem.ClaimRequest("ns", "a"), idem.ClaimRequest("ns", "b", lease_ttl=-1)])
        self.assertIn("requests[1].lease_ttl", str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            c.batch_complete([idem.LookupRequest("ns", "a")])
        self.assertIn("requests[0] is a LookupRequest", str(cm.exception))
        with self.assertRaises(TypeError):
            c.batch_complete([idem.CompleteRequest("ns", "a", 1, "text, not bytes")])
        self.assertEqual(s.requests, [])


if __name__ == "__main__":
    unittest.main()
