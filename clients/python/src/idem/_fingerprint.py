"""Fingerprints: SHA-256 of a payload, or of its canonical JSON (RFC 8785),
so that workers in any language fingerprint one payload alike. The shared
vectors are client/testdata/fingerprint_vectors.json."""

import decimal
import hashlib
import json
import math
from typing import Any, List

__all__ = ["fingerprint", "fingerprint_json", "canonical_json"]


def fingerprint(payload: bytes) -> bytes:
    """The SHA-256 of payload (32 bytes), for Job.fingerprint and
    Client.claim(fingerprint=…)."""
    return hashlib.sha256(bytes(payload)).digest()


def fingerprint_json(value: Any) -> bytes:
    """The SHA-256 of canonical_json(value): the Go SDK's
    client.FingerprintJSON, so that a Go, a TypeScript and a Python worker
    claiming one job send one fingerprint. Pass parsed JSON (dict, list,
    str, int, float, bool, None); to fingerprint JSON text, json.loads it
    first."""
    return fingerprint(canonical_json(value).encode("utf-8"))


def canonical_json(value: Any) -> str:
    """The RFC 8785 (JSON Canonicalization Scheme) form of a JSON value, as
    the Go SDK writes it:

    - no whitespace; object members sorted by key, keys compared as sequences
      of UTF-16 code units (not code points: they differ between characters
      above U+FFFF and those in U+E000-U+FFFF); keys must be strings;
    - every number (int or float) read as an IEEE 754 double and written as
      JavaScript's Number.prototype.toString writes it: 100.0 and 1e2 are
      "100", 1e21 is "1e+21", -0.0 is "0"; integers beyond 2**53 lose
      precision as in JavaScript (send large ids as strings), and a number
      beyond a double's range, NaN or an infinity is a ValueError;
    - strings in UTF-8 with only \\" \\\\ \\b \\t \\n \\f \\r and \\u00xx
      (lowercase) for the other characters below U+0020 escaped; a lone
      surrogate becomes U+FFFD;
    - true, false, null. Tuples are arrays.
    """
    out: List[str] = []
    _write(out, value)
    return "".join(out)


def _write(out: List[str], v: Any) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        _write_string(out, v)
    elif isinstance(v, (int, float, decimal.Decimal)):
        out.append(_format_number(v))
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, e in enumerate(v):
            if i:
                out.append(",")
            _write(out, e)
        out.append("]")
    elif isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise TypeError(f"idem: fingerprint: an object key must be a string, not {type(k).__name__} {k!r}")
        out.append("{")
        for i, k in enumerate(sorted(v, key=lambda k: _surrogates_replaced(k).encode("utf-16-be"))):
            if i:
                out.append(",")
            _write_string(out, k)
            out.append(":")
            _write(out, v[k])
        out.append("}")
    else:
        raise TypeError(f"idem: fingerprint: {type(v).__name__} has no JSON form")


def _surrogates_replaced(s: str) -> str:
    if any("\ud800" <= c <= "\udfff" for c in s):
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)
    return s


# json.dumps escapes exactly RFC 8785's characters when ensure_ascii is off:
# " \ \b \t \n \f \r, and \u00xx in lowercase for the rest below U+0020.
def _write_string(out: List[str], s: str) -> None:
    out.append(json.dumps(_surrogates_replaced(s), ensure_ascii=False))


def _format_number(v: Any) -> str:
    """A number as ECMAScript's Number.prototype.toString writes the double
    nearest to it."""
    try:
        f = float(v)
    except OverflowError:
        raise ValueError(f"idem: fingerprint: the number {v} is beyond the range of a double") from None
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"idem: fingerprint: {v} has no JSON form (a number beyond the range of a double?)")
    if f == 0:
        return "0"  # also -0
    if f < 0:
        return "-" + _format_number(-f)
    # repr gives the shortest digits that read back as f; ECMAScript lays
    # them out by the decimal exponent n (f = 0.d1d2...dk * 10**n).
    _, digit_tuple, exp = decimal.Decimal(repr(f)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    k = len(digits)
    n = int(exp) + k
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{sign}{abs(e)}"
