"""Wire forms (durations, timestamps, int64, bytes, enums), records, the
reasons of error_reason.proto, and storable error text."""

import datetime
import os
import re
import unittest

from support import REPO, idem
from idem import _types

PROTO = os.path.join(REPO, "proto", "idem", "v1")

def proto_enum(file, enum, prefix):
    """The value names of a proto enum, without prefix, by number."""
    with open(os.path.join(PROTO, file), encoding="utf-8") as f:
        text = f.read()
    body = re.search(r"enum " + enum + r" \{(.*?)\n\}", text, re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    return {int(n): name[len(prefix):] for name, n in re.findall(r"\b(" + prefix + r"[A-Z0-9_]+)\s*=\s*(\d+)\s*;", body)}


class ProtoTest(unittest.TestCase):
    def test_error_reasons_are_the_protos(self):
        reasons = set(proto_enum("error_reason.proto", "ErrorReason", "ERROR_REASON_").values()) - {"UNSPECIFIED"}
        self.assertGreaterEqual(len(reasons), 29, "the enum was not read")
        ours = {r.value for r in idem.ErrorReason}
        self.assertEqual(reasons - ours, set(), "reasons of the proto that idem.ErrorReason lacks")
        self.assertEqual(ours - reasons, set(), "reasons idem.ErrorReason has that the proto lacks")
        self.assertEqual(set(idem.REASON_ERRORS), ours, "REASON_ERRORS and ErrorReason name the same reasons")
        for reason, cls in idem.REASON_ERRORS.items():
            self.assertTrue(issubclass(cls, idem.IdemError), reason)
            if reason.startswith("INVALID_") or reason in ("MALFORMED_REQUEST", "UNKNOWN_FIELD"):
                self.assertIs(cls, idem.InvalidArgumentError, reason)

    def test_states_and_outcomes_are_the_protos(self):
        self.assertEqual(proto_enum("idem.proto", "State", "STATE_"), {s.value: s.name for s in idem.State})
        self.assertEqual(proto_enum("idem.proto", "Outcome", "OUTCOME_"), {o.value: o.name for o in idem.Outcome})
        self.assertEqual(proto_enum("idem.proto", "StepState", "STEP_STATE_"), {s.value: s.name for s in idem.StepState})

    def test_record_reads_its_steps(self):
        rec = idem.Record.from_wire({"token": "7", "holdUnfinished": True, "steps": [
            {"name": "charge", "state": "STEP_STATE_FINISHED", "result": "Y2hfMQ==", "token": "6",
             "startedAt": "2026-12-01T22:00:25Z", "finishedAt": "2026-12-01T22:00:26Z"},
            {"name": "receipt", "state": "STEP_STATE_STARTED", "token": "7", "startedAt": "2026-12-01T22:00:27Z"}]})
        self.assertTrue(rec.hold_unfinished)
        self.assertEqual([(s.name, s.state, s.result, s.token) for s in rec.steps],
                         [("charge", idem.StepState.FINISHED, b"ch_1", 6), ("receipt", idem.StepState.STARTED, b"", 7)])
        self.assertIsNone(rec.steps[1].finished_at)
        self.assertEqual(rec.to_json()["steps"][0]["result"], "ch_1")
        self.assertEqual(idem.Record.from_wire({}).steps, ())

    def test_timeline_entries_are_the_protos(self):
        self.assertEqual(proto_enum("idem.proto", "TimelineEntryKind", "TIMELINE_ENTRY_KIND_"),
                         {k.value: k.name for k in idem.TimelineEntryKind})
        e = idem.TimelineEntry.from_wire({
            "kind": "TIMELINE_ENTRY_KIND_RESOLVED", "at": "2026-12-01T22:00:25Z", "token": "9",
            "state": "STATE_FAILED", "previousState": "STATE_UNRESOLVED", "error": "no charge",
            "actor": {"tenant": "worker", "resolver": "charges-resolver"}, "reason": "none found",
            "fingerprint": "AQI="})
        self.assertEqual((e.kind, e.token, e.state, e.previous_state, e.error, e.reason, e.fingerprint),
                         (idem.TimelineEntryKind.RESOLVED, 9, idem.State.FAILED, idem.State.UNRESOLVED, "no charge",
                          "none found", b"\x01\x02"))
        self.assertEqual(e.actor, idem.Actor(tenant="worker", resolver="charges-resolver"))
        self.assertEqual(e.at, datetime.datetime(2026, 12, 1, 22, 0, 25, tzinfo=datetime.timezone.utc))
        self.assertEqual(idem.TimelineEntry.from_wire({"kind": "TIMELINE_ENTRY_KIND_NEWER"}).kind,
                         idem.TimelineEntryKind.UNSPECIFIED)

    def test_step_and_resolver_refusals_are_typed(self):
        self.assertIs(idem.REASON_ERRORS["STEP_ALREADY_FINISHED"], idem.StepAlreadyFinishedError)
        self.assertIs(idem.REASON_ERRORS["TOO_MANY_STEPS"], idem.StepLimitError)
        self.assertIs(idem.REASON_ERRORS["STEPS_TOO_LARGE"], idem.StepLimitError)
        self.assertIs(idem.REASON_ERRORS["NOT_UNRESOLVED"], idem.NotUnresolvedError)

    def test_record_has_every_field_of_the_proto(self):
        with open(os.path.join(PROTO, "idem.proto"), encoding="utf-8") as f:
            text = f.read()
        body = re.search(r"message Record \{(.*?)\n\}", text, re.S).group(1)
        body = re.sub(r"//[^\n]*", "", body)
        fields = re.findall(r"^\s*(?:repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+\s*;", body, re.M)
        self.assertGreaterEqual(len(fields), 17)
        self.assertEqual(fields, [f.name for f in __import__("dataclasses").fields(idem.Record)])


class WireFormTest(unittest.TestCase):
    def test_durations(self):
        for secs, wire in [(None, None), (0, None), (1, "1s"), (1.5, "1.500s"), (0.001, "0.001s"), (2.25, "2.250s"),
                           (0.0000015, "0.000001500s"), (86400, "86400s"), (59.9999, "59.999900s")]:
            self.assertEqual(_types.duration_to_wire(secs), wire, secs)
        for wire, secs in [("1s", 1.0), ("1.5s", 1.5), ("0.189s", 0.189), ("4.986370s", 4.98637), (None, 0.0),
                           ("-2s", -2.0), ("0.000000001s", 1e-9)]:
            self.assertAlmostEqual(_types.duration_from_wire(wire), secs, places=9)
        with self.assertRaises(ValueError):
            _types.duration_from_wire("5m")
        self.assertEqual(_types.seconds(datetime.timedelta(minutes=2), "lease_ttl"), 120.0)
        with self.assertRaises(ValueError) as cm:
            _types.seconds(-1, "lease_ttl")
        self.assertIn("lease_ttl", str(cm.exception))
        with self.assertRaises(TypeError):
            _types.seconds("30s", "wait")

    def test_timestamps(self):
        utc = datetime.timezone.utc
        self.assertEqual(_types.time_from_wire("2026-12-01T22:00:25.872970123Z"),
                         datetime.datetime(2026, 12, 1, 22, 0, 25, 872970, tzinfo=utc))
        self.assertEqual(_types.time_from_wire("2026-12-01T22:00:25Z"), datetime.datetime(2026, 12, 1, 22, 0, 25, tzinfo=utc))
        self.assertEqual(_types.time_from_wire("2026-12-01T23:30:00.5+01:30"),
                         datetime.datetime(2026, 12, 1, 22, 0, 0, 500000, tzinfo=utc))
        self.assertIsNone(_types.time_from_wire(None))
        with self.assertRaises(ValueError):
            _types.time_from_wire("yesterday")

    def test_bytes(self):
        self.assertEqual(_types.bytes_from_wire("AP8="), b"\x00\xff")
        self.assertEqual(_types.bytes_from_wire("AP8"), b"\x00\xff", "unpadded")
        self.assertEqual(_types.bytes_from_wire("AP-_"), b"\x00\xff\xbf", "URL-safe")
        self.assertEqual(_types.bytes_from_wire(""), b"")

    def test_a_whole_record(self):
        utc = datetime.timezone.utc
        rec = idem.Record.from_wire({
            "namespace": "held-jobs", "key": "k", "state": "STATE_UNRESOLVED", "token": "9223372036854775807",
            "attempt": 3, "claimant": "c", "fingerprint": "AQI=", "leaseExpiresAt": "2026-01-01T00:00:30Z",
            "result": "", "error": "", "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:31Z",
            "completedAt": None, "expiresAt": None, "policy": "held*", "tenant": "worker", "hold": True,
            "aFieldFromANewerServer": 1})
        self.assertEqual(rec, idem.Record(
            namespace="held-jobs", key="k", state=idem.State.UNRESOLVED, token=2 ** 63 - 1, attempt=3, claimant="c",
            fingerprint=b"\x01\x02", lease_expires_at=datetime.datetime(2026, 1, 1, 0, 0, 30, tzinfo=utc),
            created_at=datetime.datetime(2026, 1, 1, tzinfo=utc),
            updated_at=datetime.datetime(2026, 1, 1, 0, 0, 31, tzinfo=utc), policy="held*", tenant="worker", hold=True))
        self.assertEqual(rec.to_json()["token"], "9223372036854775807")
        self.assertEqual(rec.to_json()["state"], "UNRESOLVED")

    def test_enums_a_newer_server_may_send(self):
        self.assertEqual(idem.State.from_wire("STATE_SOMETHING_NEW"), idem.State.UNSPECIFIED)
        self.assertEqual(idem.State.from_wire(6), idem.State.UNRESOLVED)
        self.assertEqual(idem.Outcome.from_wire("OUTCOME_ACQUIRED"), idem.Outcome.ACQUIRED)
        self.assertEqual(str(idem.State.COMPLETED), "COMPLETED")
        self.assertEqual(idem.State.COMPLETED.wire, "STATE_COMPLETED")
        self.assertEqual(idem.ErrorReason.LEASE_LOST, "LEASE_LOST")
        self.assertEqual(str(idem.ErrorReason.LEASE_LOST), "LEASE_LOST")


class StorableTextTest(unittest.TestCase):
    def test_fine_text_is_unchanged(self):
        for s in ["", "card declined", "é" * 2048, "x" * 4096]:
            self.assertIs(idem.storable_text(s), s)

    def test_nul_and_lone_surrogates_become_replacement_characters(self):
        self.assertEqual(idem.storable_text("a\0b\ud800c"), "a\ufffdb\ufffdc")

    def test_cut_on_a_character_boundary(self):
        # 4095 bytes of ASCII, then a 2-byte character: it does not fit.
        s = "x" * 4095 + "é" + "tail"
        out = idem.storable_text(s)
        self.assertEqual(out, "x" * 4095)
        # With NULs and 3- and 4-byte characters near the cut.
        s = "\0" * 10 + "€" * 1360 + "😀" * 10
        out = idem.storable_text(s)
        b = out.encode("utf-8")
        self.assertLessEqual(len(b), 4096)
        self.assertGreater(len(b), 4096 - 4)
        self.assertNotIn("\0", out)
        self.assertTrue(out.startswith("\ufffd" * 10 + "€"))
        self.assertEqual(b.decode("utf-8"), out)

    def test_a_long_text_is_cut_without_reading_all_of_it(self):
        out = idem.storable_text("é" * 10_000_000)
        self.assertEqual(len(out.encode("utf-8")), 4096)


if __name__ == "__main__":
    unittest.main()
