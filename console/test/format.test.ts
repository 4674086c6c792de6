// The console's formatting: how results, times and bytes are shown.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { decodeBytes, hexDump, indentJSON, relative, utc } from "../src/format.js";
import { CONSOLE_DIR } from "./idemd.js";

const utf8 = (s: string) => new TextEncoder().encode(s);

test("a result is shown as JSON, text or hex, by what its bytes are", () => {
  assert.deepEqual(decodeBytes(new Uint8Array()), { kind: "empty", text: "" });
  assert.deepEqual(decodeBytes(utf8('{"a":[1,2],"b":{}}')), { kind: "json", text: '{\n  "a": [\n    1,\n    2\n  ],\n  "b": {}\n}' });
  assert.equal(decodeBytes(utf8("charged card ending 4242\nok")).kind, "text");
  assert.equal(decodeBytes(utf8("{not json")).kind, "text");
  assert.equal(decodeBytes(utf8("42")).kind, "text", "a bare JSON number reads as text");
  const binary = decodeBytes(new Uint8Array([0xff, 0x00, 0x41]));
  assert.equal(binary.kind, "binary", "invalid UTF-8 is shown as hex");
  assert.equal(binary.text, "00000000  ff 00 41" + " ".repeat(39) + "  ..A");
  assert.equal(decodeBytes(utf8("a\u0000b")).kind, "binary", "UTF-8 with a NUL is shown as hex");
});

test("a response an Idempotency-Key middleware stored shows its status and body", () => {
  // The stored form every middleware writes (clients/scenarios/http.json):
  // a line of JSON with the status and headers, then the body.
  const spec = JSON.parse(readFileSync(path.join(CONSOLE_DIR, "..", "clients", "scenarios", "http.json"), "utf8")) as {
    vectors: { envelopes: Array<{ status: number; body?: string; envelope?: string }> };
  };
  const v = spec.vectors.envelopes.find((e) => e.envelope !== undefined && e.body)!;
  const shown = decodeBytes(utf8(v.envelope!));
  assert.equal(shown.kind, "text");
  assert.ok(shown.text.includes(`"status":${v.status}`), shown.text);
  assert.ok(shown.text.endsWith("\n" + v.body!), shown.text);
});

test("JSON is re-indented without changing a value", () => {
  const big = '{"id":12345678901234567890,"s":"a,b:{c}\\"]","n":1.50e3}';
  const out = indentJSON(big);
  assert.match(out, /"id": 12345678901234567890,/, "a number past 2^53 keeps its digits");
  assert.match(out, /"s": "a,b:\{c\}\\"\]",/, "a string keeps its commas, colons, brackets and escapes");
  assert.match(out, /"n": 1\.50e3/);
  assert.deepEqual(JSON.parse(out), JSON.parse(big));
  assert.equal(indentJSON("[ ]"), "[]");
});

test("times are shown in UTC and relative to now", () => {
  const now = new Date("2026-12-01T12:00:00.500Z");
  assert.equal(utc(now), "2026-12-01 12:00:00 UTC");
  assert.equal(relative(new Date("2026-12-01T12:00:00.000Z"), now), "just now");
  assert.equal(relative(new Date("2026-12-01T11:59:18.000Z"), now), "42 s ago");
  assert.equal(relative(new Date("2026-12-01T11:57:00.000Z"), now), "3 min ago");
  assert.equal(relative(new Date("2026-12-01T17:00:01.000Z"), now), "in 5 h");
  assert.equal(relative(new Date("2026-11-29T12:00:00.000Z"), now), "2 d ago");
});

test("a hex dump has offsets and the printable bytes", () => {
  const lines = hexDump(utf8("0123456789abcdefXY")).split("\n");
  assert.equal(lines.length, 2);
  assert.match(lines[0]!, /^00000000  30 31 32 .* 66  0123456789abcdef$/);
  assert.match(lines[1]!, /^00000010  58 59 +XY$/);
});
