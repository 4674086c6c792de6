// Tests of the parts that need no server: fingerprints against the shared
// vectors, SHA-256 against node:crypto, storable error text, durations,
// backoff, and the decoding of error details.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, it } from "node:test";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import {
  type BatchResult,
  canonicalJSON,
  CompletionUnknownError,
  FingerprintMismatchError,
  InProgressError,
  NotFoundError,
  State,
  statusError,
  UnresolvedError,
  ErrorReason,
  errorReason,
  IdemClient,
  IdemError,
  fingerprint,
  fingerprintJSON,
  isPermanent,
  isTransient,
  LeaseLostError,
  permanent,
  PermanentError,
  ResolvedByOperatorError,
  RpcError,
  storableText,
  stepKey,
  connectTransport,
} from "../src/index.js";
import { ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { type Status, StatusSchema } from "../src/gen/google/rpc/status_pb.js";
import { IdempotencyService, Outcome } from "../src/gen/idem/v1/idem_pb.js";
import { durationMs, durationOf } from "../src/record.js";
import { backoff, delay, retry, sleep, withDefaults } from "../src/retry.js";
import { sha256 } from "../src/sha256.js";
import { REPO } from "./harness.js";
import { grpcTransport } from "../src/node.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const text = (b: Uint8Array) => new TextDecoder().decode(b);
const utf8 = new TextEncoder();

describe("fingerprints", () => {
  const file = path.join(REPO, "client", "testdata", "fingerprint_vectors.json");
  const { vectors } = JSON.parse(readFileSync(file, "utf8")) as { vectors: { name: string; input: string; canonical: string; sha256: string }[] };

  it("has vectors to check", () => {
    assert.ok(vectors.length >= 8, `${file} has ${vectors.length} vectors`);
  });
  for (const v of vectors) {
    it(`vector "${v.name}": the canonical text and its SHA-256 are the Go SDK's`, () => {
      const value: unknown = JSON.parse(v.input);
      assert.equal(canonicalJSON(value), v.canonical);
      assert.equal(hex(fingerprintJSON(value)), v.sha256);
    });
  }

  it("fingerprint hashes bytes, and a string as its UTF-8", () => {
    assert.equal(hex(fingerprint("payload-1")), createHash("sha256").update("payload-1").digest("hex"));
    assert.equal(hex(fingerprint(utf8.encode("café"))), hex(fingerprint("café")));
  });

  it("sha256 agrees with node:crypto at every length around the block boundaries", () => {
    for (let n = 0; n <= 300; n++) {
      const data = randomBytes(n);
      assert.equal(hex(sha256(data)), createHash("sha256").update(data).digest("hex"), `length ${n}`);
    }
    const big = randomBytes(1 << 20);
    assert.equal(hex(sha256(big)), createHash("sha256").update(big).digest("hex"));
  });

  it("refuses values without a portable JSON form", () => {
    assert.throws(() => fingerprintJSON({ a: Number.NaN }), RangeError);
    assert.throws(() => fingerprintJSON({ a: 1n }), TypeError);
    assert.throws(() => fingerprintJSON(undefined), TypeError);
    assert.equal(canonicalJSON({ b: undefined, a: [undefined, () => 1], d: new Date(0) }), '{"a":[null,null],"d":"1970-01-01T00:00:00.000Z"}');
  });
});

describe("step keys", () => {
  const file = path.join(REPO, "clients", "scenarios", "scenarios.json");
  const { step_key_vectors: vectors } = JSON.parse(readFileSync(file, "utf8")) as {
    step_key_vectors: { namespace: string; key: string; step: string; step_key: string }[];
  };

  it("has vectors to check", () => {
    assert.ok(vectors.length >= 2, `${file} has ${vectors.length} step key vectors`);
  });
  for (const v of vectors) {
    it(`vector ${JSON.stringify([v.namespace, v.key, v.step])}: the key every SDK derives`, () => {
      assert.equal(stepKey(v.namespace, v.key, v.step), v.step_key);
    });
  }

  it("is idem- and 64 lowercase hex digits of SHA-256 over namespace, NUL, key, NUL, step, as node:crypto makes it", () => {
    for (const [ns, key, step] of [["a", "b", "c"], ["payments", "ключ/😀", "charge card"], ["n", "k", ""]] as const) {
      const got = stepKey(ns, key, step);
      assert.match(got, /^idem-[0-9a-f]{64}$/);
      assert.equal(got, "idem-" + createHash("sha256").update(`${ns}\0${key}\0${step}`, "utf8").digest("hex"));
    }
  });

  it("differs for each step, key and namespace, also where a NUL-less join would collide", () => {
    const keys = [stepKey("ns", "k", "a"), stepKey("ns", "k", "b"), stepKey("ns", "ka", ""), stepKey("nsk", "", "a")];
    assert.equal(new Set(keys).size, keys.length, keys.join(", "));
  });
});

describe("storableText", () => {
  const bytes = (s: string) => utf8.encode(s).length;

  it("leaves text that is fine as it is", () => {
    assert.equal(storableText("card declined"), "card declined");
    assert.equal(storableText("€".repeat(1365)), "€".repeat(1365)); // 4095 bytes
  });

  it("replaces NULs and lone surrogates with U+FFFD", () => {
    assert.equal(storableText("a\0b"), "a\uFFFDb");
    assert.equal(storableText("x\uD800y\uDC00z"), "x\uFFFDy\uFFFDz");
    assert.equal(storableText("ok \uD83D\uDE00"), "ok \uD83D\uDE00");
  });

  it("cuts to 4096 bytes of UTF-8 on a character boundary", () => {
    const s = "nul:\0:" + "€".repeat(2000);
    const got = storableText(s);
    assert.equal(got, "nul:\uFFFD:" + "€".repeat(1362));
    assert.equal(bytes(got), 4094);
    for (const [unit, size] of [["a", 1], ["é", 2], ["€", 3], ["😀", 4]] as const) {
      for (let pad = 0; pad < 4; pad++) {
        const t = storableText("x".repeat(pad) + unit.repeat(5000));
        assert.ok(bytes(t) <= 4096 && bytes(t) > 4096 - size, `${unit} after ${pad}: ${bytes(t)} bytes`);
        assert.ok(!t.includes("\uFFFD"), `${unit} after ${pad}: the cut split a character`);
      }
    }
    assert.equal(storableText("ab€", 4), "ab");
  });
});

describe("durations", () => {
  it("converts milliseconds both ways and leaves 0 unset", () => {
    assert.equal(durationOf(undefined, "f"), undefined);
    assert.equal(durationOf(0, "f"), undefined);
    const d = durationOf(1500.25, "f")!;
    assert.equal(d.seconds, 1n);
    assert.equal(d.nanos, 500_250_000);
    assert.equal(durationMs(d), 1500.25);
    assert.equal(durationMs(durationOf(90 * 86_400_000, "f")), 90 * 86_400_000);
  });

  it("refuses a negative or non-finite duration, naming the field", () => {
    assert.throws(() => durationOf(-1, "leaseTtlMs"), /leaseTtlMs is -1/);
    assert.throws(() => durationOf(Number.POSITIVE_INFINITY, "waitMs"), /waitMs is Infinity/);
  });
});

describe("backoff", () => {
  it("doubles from the base delay up to the cap, with jitter in the upper half", () => {
    const p = withDefaults();
    assert.deepEqual(p, { baseDelayMs: 100, maxDelayMs: 5000, maxAttempts: 10 });
    for (let n = 0; n < 40; n++) {
      const cap = Math.min(100 * 2 ** n, 5000);
      for (let i = 0; i < 20; i++) {
        const d = delay(p, n);
        assert.ok(d >= cap / 2 && d <= cap, `retry ${n}: ${d} ms`);
      }
    }
    assert.deepEqual(withDefaults({ baseDelayMs: 10_000 }), { baseDelayMs: 10_000, maxDelayMs: 10_000, maxAttempts: 10 });
  });

  it("refuses a field that is not a finite number or is above 2^31-1, naming it; 0 or less is the default", () => {
    assert.throws(() => withDefaults({ baseDelayMs: Number.POSITIVE_INFINITY }), /retry\.baseDelayMs is Infinity/);
    assert.throws(() => withDefaults({ maxDelayMs: 2 ** 31 }), /retry\.maxDelayMs is 2147483648; it must be a finite number at most 2147483647/);
    assert.throws(() => withDefaults({ maxAttempts: Number.NaN }), /retry\.maxAttempts is NaN/);
    assert.throws(() => withDefaults({ maxDelayMs: "5000" as unknown as number }), /retry\.maxDelayMs is 5000/);
    assert.throws(() => new IdemClient(createRouterTransport(() => {}), { retry: { maxDelayMs: Number.POSITIVE_INFINITY } }), /retry\.maxDelayMs is Infinity/);
    assert.deepEqual(withDefaults({ baseDelayMs: 0, maxDelayMs: -5, maxAttempts: -1 }), withDefaults());
    assert.deepEqual(withDefaults({ maxDelayMs: 2 ** 31 - 1 }).maxDelayMs, 2 ** 31 - 1);
  });

  it("waits at least what RetryInfo says", () => {
    const err = RpcError.from(rpcFailure(Code.ResourceExhausted, "RATE_LIMITED", 1200)) as RpcError;
    assert.equal(err.retryAfterMs, 1200);
    assert.ok(backoff(withDefaults(), 0, err) >= 1200);
  });

  it("sleeps at least the time it is given, by the clock, when the event loop's time lags", async () => {
    // Node starts a timer at the time the event loop read at the start of
    // its turn: work done in that turn (decoding an answer) makes a timer
    // alone end that much early.
    for (let i = 0; i < 50; i++) {
      await new Promise((r) => setImmediate(r));
      for (const busy = performance.now() + 3; performance.now() < busy; ) {
        // the turn's work
      }
      const start = performance.now();
      assert.equal(await sleep(10.5), true);
      const slept = performance.now() - start;
      assert.ok(slept >= 10.5, `sleep(10.5) returned after ${slept.toFixed(3)} ms`);
    }
  });
});

describe("retry with until", () => {
  it("makes one last try at until, each try timed by the deadline", async () => {
    const p = withDefaults({ baseDelayMs: 400, maxDelayMs: 400 }); // each backoff 200 to 400 ms
    const until = Date.now() + 100;
    const deadline = Date.now() + 5000;
    const tries: { at: number; timeoutMs?: number }[] = [];
    const unavailable = RpcError.from(rpcFailure(Code.Unavailable, "STORE_UNAVAILABLE"));
    await assert.rejects(
      retry(
        p,
        async (b) => {
          tries.push({ at: Date.now(), timeoutMs: b.timeoutMs });
          throw unavailable;
        },
        { until, deadline },
      ),
      (err) => err === unavailable,
    );
    assert.equal(tries.length, 2, "the first try at once, the last at until, none after");
    assert.ok(tries[1]!.at >= until - 5, `the last try went out ${until - tries[1]!.at} ms before until`);
    for (const t of tries) {
      assert.ok(t.timeoutMs !== undefined && t.timeoutMs > 4000, `a try got ${t.timeoutMs} ms, not what is left of the deadline`);
    }
  });

  it("sends the first try even when until has passed", async () => {
    let tries = 0;
    await assert.rejects(
      retry(
        withDefaults(),
        async () => {
          tries++;
          throw RpcError.from(rpcFailure(Code.Unavailable, "STORE_UNAVAILABLE"));
        },
        { until: Date.now() - 1000, deadline: Date.now() + 5000 },
      ),
    );
    assert.equal(tries, 1);
  });
});

describe("do()'s Complete", () => {
  /**
   * completesUntil runs do() with a lease of 1.5 s and a handler of 1 s
   * against a fake server whose Completes fail UNAVAILABLE and whose
   * heartbeats answer OK the first okBeats times, then fail UNAVAILABLE;
   * it returns when the Claim and the answered beats were received and
   * when each Complete was.
   */
  async function completesUntil(okBeats: number) {
    let claimAt = 0;
    const beatsAt: number[] = [];
    const completesAt: number[] = [];
    const transport = createRouterTransport(({ service }) => {
      service(IdempotencyService, {
        claim: () => {
          claimAt = Date.now();
          return { outcome: Outcome.ACQUIRED, record: { namespace: "ns", key: "k", token: 7n, attempt: 1 } };
        },
        heartbeat: () => {
          if (beatsAt.length >= okBeats) {
            throw rpcFailure(Code.Unavailable, "STORE_UNAVAILABLE");
          }
          beatsAt.push(Date.now());
          return { record: { namespace: "ns", key: "k", token: 7n, attempt: 1 } };
        },
        complete: () => {
          completesAt.push(Date.now());
          throw rpcFailure(Code.Unavailable, "STORE_UNAVAILABLE");
        },
      });
    });
    const c = new IdemClient(transport, { retry: { baseDelayMs: 10, maxDelayMs: 20 } });
    let returned = 0;
    await assert.rejects(
      c.do({ namespace: "ns", key: "k", leaseTtlMs: 1500 }, async () => {
        await new Promise((r) => setTimeout(r, 1000));
        returned = Date.now();
        return "R";
      }),
      (err) => err instanceof CompletionUnknownError,
    );
    assert.ok(completesAt.length > 0 && completesAt[0]! >= returned);
    return { claimAt, beatsAt, returned, lastComplete: completesAt[completesAt.length - 1]! };
  }

  it("is retried for the lease counted from the Claim when no heartbeat was answered, not from the handler's return", async () => {
    const { claimAt, returned, lastComplete } = await completesUntil(0);
    // The lease ran out at claim + 1.5 s; counted from the handler's
    // return it would end at claim + 2.5 s. (The fake server sees each
    // call a little after the client sent it.)
    assert.ok(lastComplete >= claimAt + 1500 - 100, `the last Complete went out ${lastComplete - claimAt} ms after the Claim; want a last try at the lease's end`);
    // The first try goes out even if the handler returned after the lease.
    const end = Math.max(claimAt + 1500, returned);
    assert.ok(lastComplete < end + 400, `a Complete went out ${lastComplete - end} ms after the lease (or the handler) ended`);
  });

  it("is retried for the lease counted from the last heartbeat answered", async () => {
    const { beatsAt, lastComplete } = await completesUntil(1);
    assert.equal(beatsAt.length, 1);
    assert.ok(lastComplete >= beatsAt[0]! + 1500 - 100, `the last Complete went out ${lastComplete - beatsAt[0]!} ms after the beat; want a last try at the lease's end`);
  });
});

/** rpcFailure is a ConnectError as idemd sends one: ErrorInfo, and RetryInfo when retryMs is given. */
function rpcFailure(code: Code, reason: string, retryMs?: number): ConnectError {
  const details: NonNullable<ConstructorParameters<typeof ConnectError>[3]> = [
    { desc: ErrorInfoSchema, value: { domain: "idem", reason, metadata: { field: "token" } } },
  ];
  if (retryMs !== undefined) {
    details.push({ desc: RetryInfoSchema, value: { retryDelay: durationOf(retryMs, "retry") } });
  }
  return new ConnectError("the message", code, undefined, details);
}

describe("errors", () => {
  it("decodes the reason, the metadata and the code into the class the reason names", () => {
    const err = RpcError.from(rpcFailure(Code.Aborted, "LEASE_LOST"));
    assert.ok(err instanceof LeaseLostError);
    assert.equal(err.code, Code.Aborted);
    assert.equal(err.codeName, "ABORTED");
    assert.equal(err.reason, ErrorReason.LEASE_LOST);
    assert.equal(err.reasonName, "LEASE_LOST");
    assert.deepEqual(err.metadata, { field: "token" });
    assert.equal(err.message, "idem: the message (ABORTED/LEASE_LOST)");
    assert.equal(errorReason(rpcFailure(Code.Aborted, "LEASE_LOST")), ErrorReason.LEASE_LOST);
  });

  it("says a result resolved by an operator was not stored", () => {
    const err = RpcError.from(rpcFailure(Code.FailedPrecondition, "RESOLVED_BY_OPERATOR"));
    assert.ok(err instanceof ResolvedByOperatorError);
    assert.match(err.message, /your result was not stored: the record was resolved by an operator/);
    assert.equal(err.reason, ErrorReason.RESOLVED_BY_OPERATOR);
  });

  it("keeps a reason it does not know by name", () => {
    const err = RpcError.from(rpcFailure(Code.FailedPrecondition, "SOMETHING_NEW")) as RpcError;
    assert.equal(err.reason, ErrorReason.UNSPECIFIED);
    assert.equal(err.reasonName, "SOMETHING_NEW");
  });

  it("tells a connection reset (ABORTED, no reason) from LEASE_LOST, and retries only the transient", () => {
    const reset = RpcError.from(new ConnectError("stream reset", Code.Aborted));
    assert.ok(!(reset instanceof LeaseLostError));
    assert.equal(isTransient(reset), true);
    assert.equal(isTransient(RpcError.from(rpcFailure(Code.Aborted, "LEASE_LOST"))), false);
    assert.equal(isTransient(RpcError.from(new ConnectError("down", Code.Unavailable))), true);
    assert.equal(isTransient(RpcError.from(rpcFailure(Code.ResourceExhausted, "RATE_LIMITED", 200))), true);
    assert.equal(isTransient(RpcError.from(new ConnectError("too large", Code.ResourceExhausted))), false);
    assert.equal(isTransient(RpcError.from(rpcFailure(Code.InvalidArgument, "INVALID_KEY"))), false);
    assert.equal(isTransient(new Error("not an RPC")), false);
    // How Node's HTTP/2 reports a server that died under the call.
    assert.equal(isTransient(RpcError.from(new ConnectError("http/2 stream closed with error code CANCEL (0x8)", Code.Canceled))), true);
    const epipe = Object.assign(new Error("write EPIPE"), { code: "EPIPE" });
    assert.equal(isTransient(RpcError.from(new ConnectError("write EPIPE", Code.Internal, undefined, undefined, epipe))), true);
    assert.equal(isTransient(RpcError.from(new ConnectError("cannot decode the answer", Code.Internal))), false);
    assert.equal(isTransient(RpcError.from(rpcFailure(Code.Internal, "INTERNAL"))), false);
  });

  it("throws an IdemError for a Claim outcome this version does not know", async () => {
    const transport = createRouterTransport(({ service }) => {
      service(IdempotencyService, { claim: () => ({ outcome: 99 as Outcome }) });
    });
    await assert.rejects(new IdemClient(transport).claim({ namespace: "ns", key: "k" }), (err) => err instanceof IdemError && /unknown outcome 99/.test(err.message));
  });

  it("passes what is not a ConnectError through", () => {
    const plain = new TypeError("x");
    assert.equal(RpcError.from(plain), plain);
  });

  it("marks permanent failures through the cause chain", () => {
    const inner = new Error("card declined");
    const p = permanent(inner);
    assert.ok(p instanceof PermanentError);
    assert.equal(p.message, "card declined");
    assert.equal(p.cause, inner);
    assert.equal(permanent(p), p);
    assert.equal(isPermanent(p), true);
    assert.equal(isPermanent(new Error("wrapped", { cause: p })), true);
    assert.equal(isPermanent(inner), false);
    assert.equal(isPermanent("text"), false);
  });
});

describe("transports", () => {
  it("refuse a token in plaintext to a host that is not a loopback address", () => {
    for (const make of [connectTransport, grpcTransport]) {
      assert.throws(() => make({ baseUrl: "http://idem.internal:7070", token: "t" }), /refusing to send the token in plaintext to idem.internal:7070/);
      for (const baseUrl of ["http://127.0.0.1:7070", "http://localhost:7070", "http://[::1]:7070", "https://idem.internal:7070"]) {
        const t = make({ baseUrl, token: "t" }) as { close?: () => void };
        t.close?.();
      }
    }
  });

  it("refuse a token that cannot be sent in a header, naming it", () => {
    for (const make of [connectTransport, grpcTransport]) {
      for (const token of ["idem_\nb", "idem_ключ", "idem_\tb", "idem_\0"]) {
        assert.throws(() => make({ baseUrl: "http://127.0.0.1:7070", token }), /idem: the token has a character .* at index 5; a bearer token is printable ASCII/);
      }
      const t = make({ baseUrl: "http://127.0.0.1:7070", token: "idem_abc\n" }) as { close?: () => void }; // read from a file
      t.close?.();
    }
  });

  it("refuse a base URL that is not http:// or https://", () => {
    assert.throws(() => connectTransport({ baseUrl: "idem.internal:7072" }), /must start with https:\/\/ \(TLS\) or http:\/\/ \(plaintext\)/);
    // Each hint names the listener its transport talks to.
    assert.throws(() => connectTransport({ baseUrl: "idem internal" }), /is not a URL; give idemd's --json-listen address, like "https:\/\/idem.internal:7072" \(TLS\) or "http:\/\/127.0.0.1:7072"/);
    assert.throws(() => grpcTransport({ baseUrl: "idem internal" }), /is not a URL; give idemd's --listen address, like "https:\/\/idem.internal:7070" \(TLS\) or "http:\/\/127.0.0.1:7070"/);
    assert.throws(() => grpcTransport({ baseUrl: "idem" }), /is not a URL/);
    assert.throws(() => grpcTransport({ baseUrl: "http://127.0.0.1:7070", tls: {} }), /tls options need an https:\/\/ baseUrl/);
  });

  it("refuse a timeout or ping interval that no timer can hold, naming it", () => {
    for (const bad of [0, -1, NaN, Infinity, 2 ** 31]) {
      for (const make of [connectTransport, grpcTransport]) {
        assert.throws(() => make({ baseUrl: "http://127.0.0.1:7070", timeoutMs: bad }), new RegExp(`timeoutMs is ${bad}; it must be .* above 0 and at most 2147483647`));
      }
      assert.throws(() => grpcTransport({ baseUrl: "http://127.0.0.1:7070", pingIntervalMs: bad }), /pingIntervalMs is .*; it must be/);
    }
    for (const make of [connectTransport, grpcTransport]) {
      const t = make({ baseUrl: "http://127.0.0.1:7070", timeoutMs: 2500 }) as { close?: () => void };
      t.close?.();
    }
  });
});

/** value is an ok BatchResult's value; it fails the test for any other. */
function value<T>(r: BatchResult<T> | undefined): T {
  assert.ok(r?.ok, `want ok, got ${r?.ok === false ? r.error.message : "nothing"}`);
  return r.value;
}

/** error is a failed BatchResult's error; it fails the test for any other. */
function error<T>(r: BatchResult<T> | undefined): IdemError {
  assert.ok(r !== undefined && !r.ok, "want an error");
  return r.error;
}

describe("batch calls", () => {
  const status = (code: Code, reason: string, retryMs?: number): Status =>
    create(StatusSchema, {
      code,
      message: "the message",
      details: [
        anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { domain: "idem", reason, metadata: { field: "token" } })),
        ...(retryMs === undefined ? [] : [anyPack(RetryInfoSchema, create(RetryInfoSchema, { retryDelay: durationOf(retryMs, "retry") }))]),
      ],
    });

  it("decode an item's google.rpc.Status into the error the unary call throws", () => {
    const lost = statusError(status(Code.Aborted, "LEASE_LOST"));
    const unary = RpcError.from(rpcFailure(Code.Aborted, "LEASE_LOST")) as RpcError;
    assert.ok(lost instanceof LeaseLostError);
    for (const f of ["code", "reason", "reasonName", "metadata", "retryAfterMs", "serverMessage", "message"] as const) {
      assert.deepEqual(lost[f], unary[f], f);
    }
    const limited = statusError(status(Code.ResourceExhausted, "RATE_LIMITED", 250));
    assert.equal(limited.retryAfterMs, 250);
    assert.equal(isTransient(limited), true);
    assert.equal(statusError(status(Code.InvalidArgument, "INVALID_BATCH_SIZE")).reason, ErrorReason.INVALID_BATCH_SIZE);
  });

  it("answer each item in order, the claim outcomes claim() throws as errors", async () => {
    const record = (key: string) => ({ namespace: "ns", key, token: 7n });
    const transport = createRouterTransport(({ service }) => {
      service(IdempotencyService, {
        batchClaim: (req) => {
          assert.equal(req.requests.length, 4);
          assert.equal(req.requests[1]!.leaseTtl?.seconds, 30n);
          return {
            results: [
              { result: { case: "response", value: { outcome: Outcome.ACQUIRED, record: record("a") } } },
              { result: { case: "response", value: { outcome: Outcome.IN_PROGRESS, record: record("b"), retryAfter: durationOf(1500, "r") } } },
              { result: { case: "error", value: status(Code.FailedPrecondition, "FINGERPRINT_MISMATCH") } },
              { result: { case: "response", value: { outcome: Outcome.UNRESOLVED, record: record("d") } } },
            ],
          };
        },
        batchLookup: () => ({ results: [{ result: { case: "error", value: status(Code.NotFound, "NOT_FOUND") } }, { result: { case: undefined } }] }),
        batchComplete: () => ({ results: [] }),
      });
    });
    const c = new IdemClient(transport);
    const got = await c.batchClaim(["a", "b", "c", "d"].map((key) => ({ namespace: "ns", key, leaseTtlMs: key === "b" ? 30_000 : undefined })));
    assert.equal(value(got[0]).outcome, Outcome.ACQUIRED);
    assert.equal(value(got[0]).record.key, "a");
    const busy = error(got[1]);
    assert.ok(busy instanceof InProgressError && busy.retryAfterMs === 1500);
    assert.ok(error(got[2]) instanceof FingerprintMismatchError);
    assert.ok(error(got[3]) instanceof UnresolvedError);

    const looked = await c.batchLookup([{ namespace: "ns", key: "a" }, { namespace: "ns", key: "b" }]);
    assert.ok(error(looked[0]) instanceof NotFoundError);
    assert.match(error(looked[1]).message, /neither a response nor an error/);
    await assert.rejects(c.batchComplete([{ namespace: "ns", key: "a", token: 1n }]), (err) => err instanceof IdemError && /answered 0 results for 1 requests/.test(err.message));
    await assert.rejects(c.batchClaim([{ namespace: "ns", key: "a" }, { namespace: "ns", key: "b", leaseTtlMs: -1 }]), /requests\[1\]\.leaseTtlMs is -1/);
    await assert.rejects(c.doBatch([{ namespace: "ns", key: "a" }, { namespace: "ns", key: "b", retentionMs: NaN }], () => "x"), /jobs\[1\]\.retentionMs is NaN/);
    await assert.rejects(c.doBatch([{ namespace: "ns", key: "a" }], () => "x", { concurrency: 0 }), /concurrency is 0/);
  });

  it("doBatch sends again only the items that failed transiently, each Claim under its first claimant", async () => {
    const claims: { key: string; claimant: string }[][] = [];
    const completes: string[][] = [];
    const rec = (key: string) => ({ namespace: "ns", key, token: 5n, attempt: 1 });
    const transport = createRouterTransport(({ service }) => {
      service(IdempotencyService, {
        batchClaim: (req) => {
          claims.push(req.requests.map((r) => ({ key: r.key, claimant: r.claimant })));
          return {
            results: req.requests.map((r) =>
              r.key === "b" && claims.length === 1
                ? { result: { case: "error" as const, value: status(Code.Unavailable, "STORE_UNAVAILABLE") } }
                : { result: { case: "response" as const, value: { outcome: Outcome.ACQUIRED, record: rec(r.key) } } },
            ),
          };
        },
        batchComplete: (req) => {
          completes.push(req.requests.map((r) => r.key));
          if (completes.length === 1) {
            throw new ConnectError("restarting", Code.Unavailable);
          }
          return { results: req.requests.map((r) => ({ result: { case: "response" as const, value: { record: { ...rec(r.key), state: 2 } } } })) };
        },
      });
    });
    const c = new IdemClient(transport, { retry: { baseDelayMs: 1, maxDelayMs: 2 } });
    const out = await c.doBatch([{ namespace: "ns", key: "a", leaseTtlMs: 60_000 }, { namespace: "ns", key: "b", leaseTtlMs: 60_000 }], (_a, i) => `v${i}`);
    assert.deepEqual(out.map((r) => r.ok && text(r.value.value)), ["v0", "v1"]);
    assert.deepEqual(claims.map((batch) => batch.map((r) => r.key)), [["a", "b"], ["b"]], "only b was claimed again");
    assert.equal(claims[1]![0]!.claimant, claims[0]![1]!.claimant, "under the claimant it was first sent with");
    assert.notEqual(claims[0]![0]!.claimant, claims[0]![1]!.claimant, "each job has a claimant of its own");
    assert.deepEqual(completes, [["a", "b"], ["a", "b"]], "a batch that failed as a whole is sent again whole");
  });

  it("read an item's error details from JSON over connectTransport", async () => {
    // What idemd's HTTP/JSON API answers: each detail an Any in protobuf's JSON mapping.
    const body = {
      results: [
        { response: { record: { namespace: "ns", key: "a", token: "9", state: "STATE_COMPLETED" } } },
        {
          error: {
            code: 10,
            message: "lease lost",
            details: [
              { "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "LEASE_LOST", domain: "idem", metadata: { field: "token" } },
              { "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: "0.300s" },
            ],
          },
        },
      ],
    };
    let sent: unknown;
    const fetch: typeof globalThis.fetch = async (_url, init) => {
      sent = JSON.parse(new TextDecoder().decode(init!.body as Uint8Array));
      return new Response(JSON.stringify(body), { status: 200, headers: { "Content-Type": "application/json" } });
    };
    const c = new IdemClient(connectTransport({ baseUrl: "http://127.0.0.1:7072", fetch }));
    const got = await c.batchComplete([
      { namespace: "ns", key: "a", token: 9n, result: "hi" },
      { namespace: "ns", key: "b", token: 3n },
    ]);
    assert.deepEqual(sent, { requests: [{ namespace: "ns", key: "a", token: "9", result: "aGk=" }, { namespace: "ns", key: "b", token: "3" }] });
    assert.equal(value(got[0]).token, 9n);
    assert.equal(value(got[0]).state, State.COMPLETED);
    const lost = error(got[1]);
    assert.ok(lost instanceof LeaseLostError);
    assert.equal(lost.retryAfterMs, 300);
    assert.deepEqual(lost.metadata, { field: "token" });
  });
});
