// The console's formatting: how results, times and bytes are shown.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { pb, State } from "@idemhq/idem";
import { actorName, decodeBytes, hexDump, indentJSON, MAX_REASON_BYTES, reasonProblem, relative, stepStateName, tellEntry, utc } from "../src/format.js";
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

test("who made a call is named by the token's name or the resolver's, then the tenant", () => {
  const actor = (a: MessageInitShape<typeof pb.ActorSchema>) => create(pb.ActorSchema, a);
  assert.equal(actorName(actor({ tenant: "ops", operator: "alice@example.com" })), "alice@example.com (tenant ops)");
  assert.equal(actorName(actor({ tenant: "acme", resolver: "refunds-bot" })), "resolver refunds-bot (tenant acme)");
  assert.equal(actorName(actor({ tenant: "acme" })), "tenant acme", "a token without a name is its tenant");
  assert.equal(actorName(undefined), "someone unknown");
});

test("each kind of timeline entry is told in words, with the reason of a decision", () => {
  const K = pb.TimelineEntryKind;
  const entry = (e: MessageInitShape<typeof pb.TimelineEntrySchema>) => create(pb.TimelineEntrySchema, e);
  const takeover = tellEntry(
    entry({ kind: K.TAKEN_OVER, token: 5n, previousToken: 4n, previousState: State.PROCESSING, claimant: "w-2", previousClaimant: "w-1", state: State.PROCESSING }),
  );
  assert.deepEqual(takeover, { kind: "taken over", headline: "Taken over from PROCESSING: token 4 (claimant w-1) → token 5 (claimant w-2)", details: [] });
  const resolved = tellEntry(entry({ kind: K.RESOLVED, token: 5n, state: State.FAILED, error: "declined", reason: "the bank said no", actor: { tenant: "ops", operator: "alice" } }));
  assert.deepEqual(resolved, { kind: "resolved", headline: "Resolved as FAILED by alice (tenant ops)", details: ["Reason: the bank said no", "Error: declined"] });
  const deleted = tellEntry(entry({ kind: K.DELETED, token: 2n, previousState: State.COMPLETED, actor: { tenant: "acme" } }));
  assert.equal(deleted.headline, "Deleted by tenant acme; it was COMPLETED, token 2");
  assert.deepEqual(deleted.details, ["No reason was given."]);
  assert.equal(tellEntry(entry({ kind: K.HELD, token: 3n, claimant: "w" })).headline, "Held for resolution: the lease of token 3 (claimant w) ran out under a hold policy");
  assert.deepEqual(tellEntry(entry({ kind: K.FINGERPRINT_MISMATCH, token: 3n, fingerprint: new Uint8Array([0xab, 0x01]) })).details, ["Its fingerprint: ab01"]);
  assert.deepEqual(tellEntry(entry({ kind: K.FAILED, token: 1n, error: "boom" })).details, ["Error: boom"]);
  assert.equal(tellEntry(entry({ kind: K.RELEASED, token: 1n })).kind, "released");
});

test("a reason is required, and bounded as the API bounds it", () => {
  assert.match(reasonProblem(""), /^Write why/);
  assert.match(reasonProblem("  \n "), /^Write why/, "blank is no reason");
  assert.equal(reasonProblem("checked the ledger"), "");
  assert.equal(reasonProblem("é".repeat(MAX_REASON_BYTES / 2)), "", "the limit is in bytes, and reaching it is allowed");
  assert.equal(reasonProblem("é".repeat(MAX_REASON_BYTES / 2 + 1)), `The reason is ${MAX_REASON_BYTES + 2} bytes; the limit is ${MAX_REASON_BYTES}.`);
  assert.match(reasonProblem("a\u0000b"), /NUL/);
});

test("a step's state is named without its prefix", () => {
  assert.equal(stepStateName(pb.StepState.STARTED), "STARTED");
  assert.equal(stepStateName(pb.StepState.FINISHED), "FINISHED");
  assert.equal(stepStateName(9 as pb.StepState), "STEP_STATE_9");
});
