"""REASON_ERRORS must name every reason of the proto enum
idem.v1.ErrorReason (proto/idem/v1/error_reason.proto), and errors must be
decoded from the REST and the Connect error bodies alike."""

import os
import re
import unittest

from harness import REPO, idem

PROTO = os.path.join(REPO, "proto", "idem", "v1", "error_reason.proto")


def proto_reasons():
    """The reasons of enum ErrorReason: value names without ERROR_REASON_."""
    with open(PROTO, encoding="utf-8") as f:
        text = f.read()
    body = re.search(r"enum ErrorReason \{(.*?)\n\}", text, re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    names = re.findall(r"\b(ERROR_REASON_[A-Z0-9_]+)\s*=\s*\d+\s*;", body)
    return {n[len("ERROR_REASON_"):] for n in names if n != "ERROR_REASON_UNSPECIFIED"}


class ReasonTest(unittest.TestCase):
    def test_every_reason_of_the_proto_enum_is_mapped(self):
        reasons = proto_reasons()
        self.assertGreaterEqual(len(reasons), 20, "the enum was not read")
        self.assertEqual(set(), reasons - set(idem.REASON_ERRORS), "reasons of the proto that idem.py does not map")
        self.assertEqual(set(), set(idem.REASON_ERRORS) - reasons, "reasons idem.py maps that the proto lacks")
        for reason, cls in idem.REASON_ERRORS.items():
            self.assertTrue(issubclass(cls, idem.IdemError), reason)

    def test_classes_a_worker_branches_on(self):
        self.assertIs(idem.REASON_ERRORS["LEASE_LOST"], idem.LeaseLostError)
        self.assertIs(idem.REASON_ERRORS["FINGERPRINT_MISMATCH"], idem.FingerprintMismatchError)
        self.assertIs(idem.REASON_ERRORS["ALREADY_TERMINAL"], idem.AlreadyTerminalError)
        self.assertIs(idem.REASON_ERRORS["NOT_FOUND"], idem.NotFoundError)
        self.assertIs(idem.REASON_ERRORS["RATE_LIMITED"], idem.RateLimitedError)
        for reason, cls in idem.REASON_ERRORS.items():
            if reason.startswith("INVALID_"):
                self.assertIs(cls, idem.InvalidArgumentError, reason)

    def test_a_rest_error_body(self):
        body = (b'{"code":10,"message":"lease lost: ...","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",'
                b'"reason":"LEASE_LOST","domain":"idem","metadata":{}}]}')
        err = idem._decode_error("Complete", 409, {}, body)
        self.assertIsInstance(err, idem.LeaseLostError)
        self.assertEqual((err.code, err.reason, err.http_status, err.transient), ("ABORTED", "LEASE_LOST", 409, False))

    def test_a_connect_error_body(self):
        body = (b'{"code":"failed_precondition","message":"...","details":[{"type":"google.rpc.ErrorInfo","value":"x",'
                b'"debug":{"reason":"FINGERPRINT_MISMATCH","domain":"idem"}}]}')
        err = idem._decode_error("Claim", 400, {}, body)
        self.assertIsInstance(err, idem.FingerprintMismatchError)
        self.assertEqual(err.code, "FAILED_PRECONDITION")

    def test_an_unknown_reason_is_raised_by_its_code(self):
        body = b'{"code":14,"message":"m","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"NEW_ONE","domain":"idem"}]}'
        err = idem._decode_error("Claim", 503, {}, body)
        self.assertIsInstance(err, idem.UnavailableError)
        self.assertEqual(err.reason, "NEW_ONE")
        self.assertTrue(err.transient)

    def test_a_reason_of_another_domain_is_not_idems(self):
        body = b'{"code":9,"message":"m","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"LEASE_LOST","domain":"other"}]}'
        err = idem._decode_error("Claim", 400, {}, body)
        self.assertEqual(type(err), idem.IdemError)
        self.assertEqual(err.reason, "")

    def test_a_proxy_answer_without_a_status(self):
        err = idem._decode_error("Claim", 502, {}, b"<html>Bad Gateway</html>")
        self.assertIsInstance(err, idem.UnavailableError)
        self.assertTrue(err.transient)
        err = idem._decode_error("Claim", 413, {}, b"too large")
        self.assertEqual(err.code, "RESOURCE_EXHAUSTED")
        self.assertFalse(err.transient, "413 is not worth retrying")

    def test_rate_limited_with_retry_after_is_transient(self):
        body = (b'{"code":8,"message":"slow down","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",'
                b'"reason":"RATE_LIMITED","domain":"idem","metadata":{"tenant":"t"}}]}')
        err = idem._decode_error("Lookup", 429, {"Retry-After": "2"}, body)
        self.assertIsInstance(err, idem.RateLimitedError)
        self.assertEqual((err.retry_after, err.transient, err.metadata), (2.0, True, {"tenant": "t"}))


if __name__ == "__main__":
    unittest.main()
