"""fingerprint_json must agree with the Go SDK's client.FingerprintJSON
(and the TypeScript package's) on every shared vector, or workers in two
languages claiming one job would get FINGERPRINT_MISMATCH."""

import hashlib
import json
import os
import unittest

from support import REPO, idem

with open(os.path.join(REPO, "client", "testdata", "fingerprint_vectors.json"), encoding="utf-8") as f:
    VECTORS = json.load(f)["vectors"]


class FingerprintTest(unittest.TestCase):
    def test_the_shared_vectors_exist(self):
        self.assertGreaterEqual(len(VECTORS), 10)

    def test_vectors(self):
        for v in VECTORS:
            with self.subTest(v["name"]):
                value = json.loads(v["input"])
                self.assertEqual(idem.canonical_json(value), v["canonical"])
                self.assertEqual(idem.fingerprint_json(value).hex(), v["sha256"])

    def test_fingerprint_is_sha256_of_the_bytes(self):
        self.assertEqual(idem.fingerprint(b"payload"), hashlib.sha256(b"payload").digest())
        self.assertEqual(len(idem.fingerprint(bytearray(b""))), 32)

    def test_integer_like_keys_sort_as_strings(self):
        self.assertEqual(idem.canonical_json({"9": "a", "10": "b", "x": 1}), '{"10":"b","9":"a","x":1}')

    def test_one_payload_built_in_another_order_fingerprints_alike(self):
        a = idem.fingerprint_json({"order": "o-1", "amount_cents": 1250, "items": [{"sku": "x", "qty": 2}]})
        b = idem.fingerprint_json(json.loads('{"items":[{"qty":2.0,"sku":"x"}],"amount_cents":1.25e3,"order":"o-1"}'))
        self.assertEqual(a, b)

    def test_python_values(self):
        # ints are doubles, as in JavaScript; tuples are arrays.
        self.assertEqual(idem.canonical_json([2 ** 53 + 1, 1e300 * 10, -0.0, (True, None)]),
                         "[9007199254740992,1e+301,0,[true,null]]")
        self.assertEqual(idem.canonical_json({"a": 0.1 + 0.2}), '{"a":0.30000000000000004}')

    def test_values_without_a_json_form_are_refused(self):
        for bad in ([float("inf")], [float("nan")], json.loads("[1e400]"), [10 ** 400]):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError):
                    idem.canonical_json(bad)
        with self.assertRaises(TypeError):
            idem.canonical_json({1: "a"})
        with self.assertRaises(TypeError):
            idem.canonical_json({"a": {1, 2}})
        with self.assertRaises(TypeError):
            idem.fingerprint_json(b"bytes are not JSON")


if __name__ == "__main__":
    unittest.main()
