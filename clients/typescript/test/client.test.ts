// The typed calls of both services over both transports, the errors the
// server sends decoded from their details, and the parts of do() the
// scenarios do not pin: lost responses retried under the same claimant and
// token, heartbeats past the lease, a Complete that cannot be confirmed, a
// result the server refuses, cancellation, and TLS. Against the harness of
// internal/testsupport/sdkharness on SQLite, and an idemd with TLS of the test's own.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import {
  AlreadyTerminalError,
  type BatchResult,
  CompletionUnknownError,
  connectTransport,
  ErrorReason,
  IdemClient,
  InProgressError,
  JobFailedError,
  LeaseLostError,
  NotFoundError,
  Outcome,
  permanent,
  RpcError,
  State,
  StepState,
  UnresolvedError,
  cantTell,
  completed,
  runResolver,
} from "../src/index.js";
import { grpcTransport } from "../src/node.js";
import { PACKAGE_DIR, startHarness, type Harness } from "./harness.js";

const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** value is an ok BatchResult's value; it fails the test for any other. */
function value<T>(r: BatchResult<T, unknown> | undefined): T {
  assert.ok(r !== undefined, "no item");
  assert.ok(r.ok, `${String(r.ok ? "" : r.error)}; want no error`);
  return r.value;
}

/** error is a failed BatchResult's error; it fails the test for any other. */
function error(r: BatchResult<unknown, unknown> | undefined): unknown {
  assert.ok(r !== undefined && !r.ok, "succeeded; want an error");
  return r.error;
}

/** within resolves with p, or rejects when it has not settled after ms. */
function within<T>(what: string, p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
    }),
  ]);
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Kind = "grpc" | "connect";

function makeClient(h: Harness, kind: Kind, tenant: keyof Harness["tokens"] | null = "worker", interceptors: Interceptor[] = []) {
  const token = tenant === null ? undefined : h.tokens[tenant];
  return new IdemClient(
    kind === "grpc"
      ? grpcTransport({ baseUrl: `http://${h.grpc_addr}`, token, interceptors })
      : connectTransport({ baseUrl: h.http_url, token, interceptors }),
  );
}

async function rejects(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  assert.fail("resolved; want an error");
}

describe("against idemd", { timeout: 300_000 }, () => {
  let h: Harness;
  const clients: IdemClient[] = [];
  const client = (kind: Kind, tenant?: keyof Harness["tokens"] | null, interceptors?: Interceptor[]) => {
    const c = makeClient(h, kind, tenant, interceptors);
    clients.push(c);
    return c;
  };
  const key = (name: string) => `${name}-${randomBytes(4).toString("hex")}`;

  before(async () => {
    h = await startHarness("sqlite");
  });
  after(async () => {
    for (const c of clients) {
      c.close();
    }
    await h?.stop();
  });

  for (const kind of ["grpc", "connect"] as const) {
    describe(`typed calls over ${kind}`, () => {
      it("claim, heartbeat, complete, lookup, and the outcomes claim returns or throws", async () => {
        const c = client(kind);
        const ns = h.namespaces.plain;
        const k = key("calls");
        const got = await c.claim({ namespace: ns, key: k, leaseTtlMs: 5000, claimant: "me", retentionMs: 3_600_000 });
        assert.equal(got.outcome, Outcome.ACQUIRED);
        assert.equal(typeof got.record.token, "bigint");
        assert.equal(got.record.state, State.PROCESSING);
        assert.equal(got.record.claimant, "me");
        assert.ok(got.record.leaseExpiresAt instanceof Date);
        const again = await c.claim({ namespace: ns, key: k, claimant: "me" });
        assert.equal(again.record.token, got.record.token, "the same claimant gets the same token back");

        const busy = await rejects(c.claim({ namespace: ns, key: k, claimant: "someone else" }));
        assert.ok(busy instanceof InProgressError);
        assert.ok(busy.retryAfterMs > 0 && busy.retryAfterMs <= 5000);

        const beat = await c.heartbeat({ namespace: ns, key: k, token: got.record.token, leaseTtlMs: 20_000 });
        assert.ok(beat.leaseExpiresAt!.getTime() > got.record.leaseExpiresAt!.getTime() + 10_000, "the heartbeat extended the lease");

        const done = await c.complete({ namespace: ns, key: k, token: got.record.token, result: "done" });
        assert.equal(done.state, State.COMPLETED);
        assert.equal(text(done.result), "done");
        assert.ok(done.completedAt instanceof Date && done.expiresAt instanceof Date);
        const replay = await c.claim({ namespace: ns, key: k });
        assert.equal(replay.outcome, Outcome.COMPLETED);
        assert.equal(text(replay.record.result), "done");
        const looked = await c.lookup({ namespace: ns, key: k });
        assert.deepEqual(looked, done);
      });

      it("fail: retryable releases, permanent is replayed as FAILED", async () => {
        const c = client(kind);
        const ns = h.namespaces.plain;
        const k = key("fail");
        const first = await c.claim({ namespace: ns, key: k });
        const released = await c.fail({ namespace: ns, key: k, token: first.record.token, error: "try later", retryable: true });
        assert.equal(released.state, State.RELEASED);
        const second = await c.claim({ namespace: ns, key: k });
        assert.equal(second.outcome, Outcome.ACQUIRED);
        assert.equal(second.record.attempt, 2);
        assert.ok(second.record.token > first.record.token);
        await c.fail({ namespace: ns, key: k, token: second.record.token, error: "declined", retryable: false });
        const failed = await c.claim({ namespace: ns, key: k });
        assert.equal(failed.outcome, Outcome.FAILED);
        assert.equal(failed.record.error, "declined");
      });

      it("decodes the reason, the code and the field of the server's errors", async () => {
        const c = client(kind);
        const ns = h.namespaces.plain;
        const k = key("errors");
        const bad = await rejects(c.claim({ namespace: "Not A Namespace", key: k }));
        assert.ok(bad instanceof RpcError);
        assert.equal(bad.code, Code.InvalidArgument);
        assert.equal(bad.reason, ErrorReason.INVALID_NAMESPACE);
        assert.equal(bad.metadata.field, "namespace");
        assert.match(bad.message, /^idem: .*\(INVALID_ARGUMENT\/INVALID_NAMESPACE\)$/);

        const got = await c.claim({ namespace: ns, key: k });
        const lost = await rejects(c.complete({ namespace: ns, key: k, token: got.record.token + 1000n, result: "x" }));
        assert.ok(lost instanceof LeaseLostError);
        assert.equal(lost.code, Code.Aborted);
        await c.complete({ namespace: ns, key: k, token: got.record.token, result: "x" });
        const terminal = await rejects(c.heartbeat({ namespace: ns, key: k, token: got.record.token }));
        assert.ok(terminal instanceof AlreadyTerminalError);
        assert.equal(terminal.code, Code.FailedPrecondition);
        const missing = await rejects(c.lookup({ namespace: ns, key: key("never") }));
        assert.ok(missing instanceof NotFoundError);

        const anonymous = await rejects(client(kind, null).lookup({ namespace: ns, key: k }));
        assert.ok(anonymous instanceof RpcError);
        assert.equal(anonymous.reason, ErrorReason.UNAUTHENTICATED);
        const notAdmin = await rejects(c.admin.stats());
        assert.ok(notAdmin instanceof RpcError);
        assert.equal(notAdmin.reason, ErrorReason.NOT_ADMIN);
        assert.equal(notAdmin.code, Code.PermissionDenied);

        const raw = await rejects(c.raw.idempotency.lookup({ namespace: ns, key: key("never") }));
        assert.ok(raw instanceof ConnectError, "the raw client's errors are ConnectErrors");
        assert.ok(RpcError.from(raw) instanceof NotFoundError);
      });

      it("admin: list (paged), stats, delete and resolve, for another tenant as the operator", async () => {
        const c = client(kind);
        const op = client(kind, "operator");
        const ns = `admin-${kind}-${randomBytes(3).toString("hex")}`;
        const keys = ["a", "b", "c"];
        for (const k of keys) {
          await c.claim({ namespace: ns, key: k });
        }
        const seen: string[] = [];
        let pageToken = "";
        let pages = 0;
        do {
          const page = await op.admin.listRecords({ tenant: "worker", namespace: ns, pageSize: 2, pageToken });
          seen.push(...page.records.map((r) => r.key));
          for (const r of page.records) {
            assert.equal(r.tenant, "worker");
          }
          pageToken = page.nextPageToken;
          pages++;
        } while (pageToken !== "");
        assert.deepEqual(seen, keys);
        assert.equal(pages, 2);
        const processing = await op.admin.listRecords({ tenant: "worker", namespace: ns, state: State.PROCESSING, olderThanMs: 0 });
        assert.equal(processing.records.length, 3);

        await c.claim({ namespace: ns, key: "other" });
        const byPrefix = await op.admin.listRecords({ tenant: "worker", namespace: ns, keyPrefix: "o" });
        assert.deepEqual(byPrefix.records.map((r) => r.key), ["other"]);
        const badPrefix = await rejects(op.admin.listRecords({ tenant: "worker", namespace: ns, keyPrefix: "a\tb" }));
        assert.ok(badPrefix instanceof RpcError && badPrefix.code === Code.InvalidArgument && /key_prefix/.test(badPrefix.message), String(badPrefix));
        await op.admin.deleteRecord({ tenant: "worker", namespace: ns, key: "other" });

        const rows = await op.admin.stats({ tenant: "worker", namespace: ns });
        const oldest = (await op.admin.listRecords({ tenant: "worker", namespace: ns, pageSize: 1 })).records[0]!.updatedAt;
        assert.ok(oldest instanceof Date);
        assert.deepEqual(rows, [{ namespace: ns, state: State.PROCESSING, count: 3n, tenant: "worker", oldestUpdatedAt: oldest }]);

        const deleted = await op.admin.deleteRecord({ tenant: "worker", namespace: ns, key: "a" });
        assert.equal(deleted.key, "a");
        assert.ok((await rejects(c.lookup({ namespace: ns, key: "a" }))) instanceof NotFoundError);

        // resolveRecord needs an UNRESOLVED record: a held namespace whose lease ran out.
        const held = h.namespaces.held;
        const k = key("resolve");
        await c.claim({ namespace: held, key: k, leaseTtlMs: 1000 });
        await sleep(1500);
        assert.ok((await rejects(c.claim({ namespace: held, key: k }))) instanceof UnresolvedError);
        await assert.rejects(op.admin.resolveRecord({ tenant: "worker", namespace: held, key: k }), /exactly one of completed, failed and released; got none/);
        await assert.rejects(op.admin.resolveRecord({ tenant: "worker", namespace: held, key: k, failed: "x", released: true }), /got failed, released/);
        const released = await op.admin.resolveRecord({ tenant: "worker", namespace: held, key: k, released: true });
        assert.equal(released.state, State.RELEASED);
        const retaken = await c.claim({ namespace: held, key: k });
        assert.equal(retaken.outcome, Outcome.ACQUIRED);
      });

      it("batch calls answer each item as its unary call would, in order, one item's error leaving its neighbours alone", async () => {
        const c = client(kind);
        const ns = h.namespaces.plain;
        const [a, b, done, never] = ["a", "b", "done", "never"].map((p) => key(`batch-${p}`)) as [string, string, string, string];
        const holder = await c.claim({ namespace: ns, key: b, claimant: "holder", leaseTtlMs: 30_000 });
        const earlier = await c.claim({ namespace: ns, key: done });
        await c.complete({ namespace: ns, key: done, token: earlier.record.token, result: "earlier" });

        const claims = await c.batchClaim([
          { namespace: ns, key: a, leaseTtlMs: 20_000, claimant: "batch" },
          { namespace: ns, key: b, claimant: "batch" },
          { namespace: ns, key: done },
          { namespace: "Not A Namespace", key: a },
          { namespace: ns, key: a, waitMs: 1000 },
        ]);
        assert.equal(claims.length, 5);
        const got = value(claims[0]);
        assert.equal(got.outcome, Outcome.ACQUIRED);
        assert.equal(got.record.claimant, "batch");
        assert.equal(got.record.leaseExpiresAt!.getTime() - got.record.updatedAt!.getTime(), 20_000);
        const busy = error(claims[1]);
        assert.ok(busy instanceof InProgressError && busy.retryAfterMs > 0 && busy.retryAfterMs <= 30_000, String(busy));
        const replay = value(claims[2]);
        assert.equal(replay.outcome, Outcome.COMPLETED);
        assert.equal(text(replay.record.result), "earlier");
        const badNs = error(claims[3]);
        const unaryBadNs = await rejects(c.claim({ namespace: "Not A Namespace", key: a }));
        assert.ok(badNs instanceof RpcError && unaryBadNs instanceof RpcError);
        for (const f of ["constructor", "code", "reason", "metadata", "serverMessage"] as const) {
          assert.deepEqual(badNs[f], unaryBadNs[f], `the item's ${f} is the unary call's`);
        }
        assert.equal(badNs.reason, ErrorReason.INVALID_NAMESPACE);
        const wait = error(claims[4]);
        assert.ok(wait instanceof RpcError && wait.reason === ErrorReason.INVALID_WAIT, String(wait));

        const token = got.record.token;
        const beats = await c.batchHeartbeat([
          { namespace: ns, key: a, token, leaseTtlMs: 25_000 },
          { namespace: ns, key: b, token: holder.record.token + 1000n },
          { namespace: ns, key: never, token },
        ]);
        assert.ok(value(beats[0]).leaseExpiresAt!.getTime() > got.record.leaseExpiresAt!.getTime());
        assert.ok(error(beats[1]) instanceof LeaseLostError);
        assert.ok(error(beats[2]) instanceof NotFoundError);

        const completes = await c.batchComplete([
          { namespace: ns, key: b, token, result: "not mine" },
          { namespace: ns, key: a, token, result: "ra" },
          { namespace: ns, key: done, token: earlier.record.token, result: "other bytes" },
        ]);
        const lost = error(completes[0]);
        assert.ok(lost instanceof LeaseLostError && lost.code === Code.Aborted && lost.reason === ErrorReason.LEASE_LOST, String(lost));
        assert.equal(value(completes[1]).state, State.COMPLETED);
        assert.ok(error(completes[2]) instanceof AlreadyTerminalError);

        const fails = await c.batchFail([
          { namespace: ns, key: b, token: holder.record.token, error: "give it back", retryable: true },
          { namespace: ns, key: a, token, error: "too late", retryable: false },
        ]);
        assert.equal(value(fails[0]).state, State.RELEASED);
        assert.ok(error(fails[1]) instanceof AlreadyTerminalError);

        const looked = await c.batchLookup([{ namespace: ns, key: a }, { namespace: ns, key: never }, { namespace: ns, key: b }]);
        assert.deepEqual(value(looked[0]), await c.lookup({ namespace: ns, key: a }));
        assert.equal(text(value(looked[0]).result), "ra");
        assert.ok(error(looked[1]) instanceof NotFoundError);
        assert.equal(value(looked[2]).state, State.RELEASED);
      });

      it("batch calls refuse a batch of no items, or more than the server takes, as a whole, and change nothing", async () => {
        const c = client(kind);
        const ns = h.namespaces.plain;
        const empty = await rejects(c.batchClaim([]));
        assert.ok(empty instanceof RpcError, String(empty));
        assert.equal(empty.code, Code.InvalidArgument);
        assert.equal(empty.reason, ErrorReason.INVALID_BATCH_SIZE);
        const keys = Array.from({ length: 501 }, (_, i) => key(`too-many-${i}`));
        const many = await rejects(c.batchClaim(keys.map((k) => ({ namespace: ns, key: k }))));
        assert.ok(many instanceof RpcError && many.reason === ErrorReason.INVALID_BATCH_SIZE, String(many));
        assert.match(many.message, /501/);
        assert.ok(error((await c.batchLookup([{ namespace: ns, key: keys[0]! }]))[0]) instanceof NotFoundError, "nothing was claimed");
        // Just over the server's 4 MiB: a gRPC server refuses much more
        // before idem sees it, without a reason.
        const largest = new Uint8Array(64 << 10);
        const big = await rejects(c.batchComplete(Array.from({ length: 64 }, () => ({ namespace: ns, key: keys[0]!, token: 1n, result: largest }))));
        assert.ok(big instanceof RpcError && big.code === Code.ResourceExhausted && big.reason === ErrorReason.REQUEST_TOO_LARGE, String(big));
      });
    });
  }

  /** lossy is an interceptor that loses the answer of the first call of method (after the server applied it). */
  const lossy = (method: string, seen: unknown[]): Interceptor => {
    let lost = false;
    return (next) => async (req) => {
      if (req.method.name === method) {
        seen.push(req.message);
      }
      const res = await next(req);
      if (req.method.name === method && !lost) {
        lost = true;
        throw new ConnectError("connection reset after the call", Code.Unavailable);
      }
      return res;
    };
  };

  describe("do()", () => {
    it("retries a Claim whose answer was lost under the same claimant, and still acquires", async () => {
      const claims: { claimant: string }[] = [];
      const c = client("grpc", "worker", [lossy("Claim", claims)]);
      let calls = 0;
      const res = await c.do({ namespace: h.namespaces.plain, key: key("lost-claim") }, () => {
        calls++;
        return "R";
      });
      assert.equal(text(res.value), "R");
      assert.equal(calls, 1);
      assert.equal(res.record.attempt, 1);
      assert.equal(claims.length, 2);
      assert.ok(claims[0]!.claimant.length > 0);
      assert.equal(claims[1]!.claimant, claims[0]!.claimant);
    });

    it("retries a Complete whose answer was lost with the same token, and returns the value", async () => {
      const completes: { token: bigint }[] = [];
      const c = client("connect", "worker", [lossy("Complete", completes)]);
      const res = await c.do({ namespace: h.namespaces.plain, key: key("lost-complete") }, () => "R");
      assert.equal(text(res.value), "R");
      assert.equal(res.replayed, false);
      assert.equal(res.record.state, State.COMPLETED);
      assert.equal(completes.length, 2);
      assert.equal(completes[1]!.token, completes[0]!.token);
    });

    it("heartbeats while the handler outlasts its lease, so a waiting delivery gets the replay", async () => {
      let beats = 0;
      const counting: Interceptor = (next) => async (req) => {
        const res = await next(req);
        if (req.method.name === "Heartbeat") {
          beats++;
        }
        return res;
      };
      const c = client("grpc", "worker", [counting]);
      const job = { namespace: h.namespaces.plain, key: key("long"), leaseTtlMs: 1200 };
      let effects = 0;
      let acquired!: () => void;
      const started = new Promise<void>((r) => (acquired = r));
      const holder = c.do(job, async (a) => {
        acquired();
        await sleep(3000); // two and a half leases
        a.signal.throwIfAborted();
        effects++;
        return "long";
      });
      await started;
      const waiter = await c.do(job, () => {
        effects++;
        return "second";
      }, { waitMs: 20_000 });
      const held = await holder;
      assert.equal(text(held.value), "long");
      assert.equal(text(waiter.value), "long");
      assert.equal(waiter.replayed, true);
      assert.equal(effects, 1);
      assert.ok(beats >= 2, `${beats} heartbeats in three seconds with a lease of 1.2 s`);
    });

    for (const kind of ["grpc", "connect"] as const) {
      it(`reads its result as text and as JSON, run and replayed, over ${kind}`, async () => {
        const c = client(kind);
        const job = { namespace: h.namespaces.plain, key: key(`result-helpers-${kind}`) };
        const ran = await c.do(job, () => JSON.stringify({ charge: "ch_1", cents: 1250, note: "été 💳" }));
        const replayed = await c.do(job, () => assert.fail("the handler ran for a completed job"));
        for (const res of [ran, replayed]) {
          assert.equal(res.text(), '{"charge":"ch_1","cents":1250,"note":"été 💳"}');
          assert.deepEqual(res.json(), { charge: "ch_1", cents: 1250, note: "été 💳" });
          assert.equal(res.json<{ charge: string }>().charge, "ch_1");
        }
        assert.equal(replayed.replayed, true);

        // As Python's Result.text() and .json(): a UTF-8 BOM is kept as text and skipped as JSON.
        const bom = await c.do({ namespace: h.namespaces.plain, key: key(`result-bom-${kind}`) }, () => new Uint8Array([0xef, 0xbb, 0xbf, 0x5b, 0x31, 0x5d]));
        assert.equal(bom.text(), "\ufeff[1]");
        assert.deepEqual(bom.json(), [1]);
        const empty = await c.do({ namespace: h.namespaces.plain, key: key(`result-empty-${kind}`) }, () => undefined);
        assert.equal(empty.text(), "");
        assert.throws(() => empty.json(), (err: unknown) => err instanceof SyntaxError && /^the result \(0 bytes\) is not JSON: /.test(err.message));

        const bytes = await c.do({ namespace: h.namespaces.plain, key: key(`result-bytes-${kind}`) }, () => new Uint8Array([0x7b, 0xff, 0x7d]));
        for (const read of [() => bytes.text(), () => bytes.json()]) {
          assert.throws(read, (err: unknown) => err instanceof TypeError && /^the result \(3 bytes\) is not UTF-8 text; its bytes are in \.value$/.test(err.message));
        }
        const plain = await c.do({ namespace: h.namespaces.plain, key: key(`result-text-${kind}`) }, () => "ok");
        assert.equal(plain.text(), "ok");
        assert.throws(() => plain.json(), (err: unknown) => err instanceof SyntaxError && /^the result \(2 bytes\) is not JSON: .*; read it with \.text\(\)$/.test(err.message));
      });
    }

    it("throws CompletionUnknownError, with the value, when the Complete cannot be confirmed within the lease", async () => {
      const c = client("grpc");
      const job = { namespace: h.namespaces.plain, key: key("unknown"), leaseTtlMs: 1500 };
      const started = Date.now();
      try {
        const err = await rejects(
          c.do(job, async () => {
            await h.control("/unavailable?ms=4000"); // on SQLite: idemd is stopped
            return "ran";
          }),
        );
        assert.ok(err instanceof CompletionUnknownError, `${String(err)}; want CompletionUnknownError`);
        assert.equal(text(err.value), "ran");
        assert.ok(err.cause instanceof RpcError && err.cause.code === Code.Unavailable, String(err.cause));
        assert.ok(Date.now() - started < 4000, "it gave up once the lease was over, not later");
      } finally {
        await h.control("/ready");
      }
      // The record is still PROCESSING: a later delivery may run it again.
      const rec = await c.lookup(job);
      assert.equal(rec.state, State.PROCESSING);
    });

    it("throws CompletionUnknownError at once for a result the server refuses", async () => {
      const c = client("connect");
      const started = Date.now();
      const err = await rejects(c.do({ namespace: h.namespaces.plain, key: key("too-large") }, () => new Uint8Array(70_000)));
      assert.ok(err instanceof CompletionUnknownError, String(err));
      assert.ok(err.cause instanceof RpcError && err.cause.reason === ErrorReason.INVALID_RESULT, String(err.cause));
      assert.ok(Date.now() - started < 2000, "a refused Complete is not retried");
    });

    it("refuses a handler value that is not bytes or text, and records the failure", async () => {
      const c = client("grpc");
      const job = { namespace: h.namespaces.plain, key: key("object") };
      const err = await rejects(c.do(job, (() => ({ not: "bytes" })) as unknown as () => string));
      assert.ok(err instanceof TypeError);
      assert.match(err.message, /return a Uint8Array or a string/);
      assert.equal((await c.lookup(job)).state, State.RELEASED);
    });

    it("stops waiting when its signal is aborted, without calling the handler", async () => {
      const c = client("grpc");
      const k = key("abort");
      await c.claim({ namespace: h.namespaces.plain, key: k, leaseTtlMs: 30_000, claimant: "holder" });
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(), 300);
      const started = Date.now();
      const err = await rejects(c.do({ namespace: h.namespaces.plain, key: k }, () => assert.fail("the handler ran"), { waitMs: 20_000, signal: ctl.signal }));
      assert.ok(err instanceof RpcError && err.code === Code.Canceled, String(err));
      assert.ok(Date.now() - started < 5000);
    });

    it("aborts the handler's signal when its own is aborted, and releases the job", async () => {
      const c = client("connect");
      const job = { namespace: h.namespaces.plain, key: key("abort-handler") };
      const ctl = new AbortController();
      const err = await rejects(
        c.do(
          job,
          async (a) => {
            setTimeout(() => ctl.abort(new Error("shutting down")), 100);
            await new Promise((_, reject) => a.signal.addEventListener("abort", () => reject(a.signal.reason)));
            return "never";
          },
          { signal: ctl.signal },
        ),
      );
      assert.match(String(err), /shutting down/);
      const rec = await c.lookup(job);
      assert.equal(rec.state, State.RELEASED);
      assert.equal(rec.error, "shutting down");
    });
  });

  describe("steps", () => {
    it("doBatch gives each job's handler its steps: a takeover replays a finished step, a fresh job runs it", async () => {
      const c = client("grpc");
      const ns = h.namespaces.plain;
      const [taken, fresh] = [key("steps-batch-taken"), key("steps-batch-fresh")];
      const t1 = (await c.claim({ namespace: ns, key: taken, claimant: "holder", leaseTtlMs: 1000 })).record.token;
      await c.completeStep({ namespace: ns, key: taken, token: t1, step: "charge", result: JSON.stringify({ id: "ch_1" }) });
      await sleep(1500);
      const ran: string[] = [];
      const out = await c.doBatch([taken, fresh].map((k) => ({ namespace: ns, key: k })), async (a, i) => {
        const charge = await a.step("charge", (sk) => {
          ran.push(`${i}:${sk === a.stepKey("charge") ? "key" : "other key"}`);
          return JSON.stringify({ id: `ch_${i}` });
        });
        return charge.json<{ id: string }>().id;
      });
      assert.deepEqual(ran, ["1:key"], "only the fresh job's step ran, with its step key");
      assert.equal(text(value(out[0]).value), "ch_1", "the takeover got the recorded result");
      assert.equal(text(value(out[1]).value), "ch_1");
      const rec = await c.lookup({ namespace: ns, key: fresh });
      assert.equal(rec.steps.length, 1);
      assert.equal(rec.steps[0]!.state, StepState.FINISHED);
    });

    for (const kind of ["grpc", "connect"] as const) {
      it(`leaves a step whose function threw STARTED, and does not call a function twice in one attempt (${kind})`, async () => {
        const c = client(kind);
        const job = { namespace: h.namespaces.plain, key: key("steps-threw") };
        let runs = 0;
        const err = await rejects(
          c.do(job, async (a) => {
            const first = await a.step("once", () => {
              runs++;
              return "1";
            });
            const again = await a.step("once", () => {
              runs++;
              return "2";
            });
            assert.equal(again.text(), first.text());
            assert.equal(again.replayed, true);
            assert.equal(a.steps.length, 1, "the attempt's steps include its own");
            await a.step("boom", () => {
              throw new Error("downstream said no");
            });
          }),
        );
        assert.match(String(err), /downstream said no/);
        assert.equal(runs, 1);
        const rec = await c.lookup(job);
        assert.equal(rec.state, State.RELEASED);
        assert.deepEqual(
          rec.steps.map((s) => [s.name, s.state]),
          [["once", StepState.FINISHED], ["boom", StepState.STARTED]],
        );
      });

      it(`throws a refused StartStep from step() without calling the function (${kind})`, async () => {
        const c = client(kind);
        const job = { namespace: h.namespaces.plain, key: key("steps-refused") };
        let runs = 0;
        const err = await rejects(
          c.do(job, async (a) => {
            await a.step("bad\u0001name", () => {
              runs++;
              return "x";
            });
          }),
        );
        assert.ok(err instanceof RpcError && err.reason === ErrorReason.INVALID_STEP_NAME, String(err));
        assert.equal(runs, 0);
      });
    }
  });

  describe("runResolver()", () => {
    for (const kind of ["grpc", "connect"] as const) {
      it(`logs a function that throws and asks again after the retry interval (${kind})`, async () => {
        const c = client(kind);
        const ns = h.namespaces.held;
        const k = key("resolver-throws");
        await c.claim({ namespace: ns, key: k, claimant: "holder", leaseTtlMs: 1000 });
        await sleep(1500);
        await rejects(c.claim({ namespace: ns, key: k, claimant: "probe" })); // UNRESOLVED now
        let asked = 0;
        const logged: string[] = [];
        const stop = new AbortController();
        const loop = runResolver(
          c,
          { name: "thrower", namespaces: [ns], retryIntervalMs: 300, pollIntervalMs: 100, signal: stop.signal, log: (m) => logged.push(m) },
          (held) => {
            if (held.key !== k) {
              return cantTell();
            }
            if (++asked === 1) {
              throw new Error("lookup failed");
            }
            return completed("found later");
          },
        );
        const deadline = Date.now() + 10_000;
        while ((await c.lookup({ namespace: ns, key: k })).state === State.UNRESOLVED) {
          assert.ok(Date.now() < deadline, `still UNRESOLVED after 10 s; asked ${asked} times; logged ${logged.join("; ")}`);
          await sleep(100);
        }
        stop.abort();
        await within("the resolver's return", loop, 10_000);
        assert.equal(asked, 2);
        assert.ok(logged.some((m) => m.includes(k) && m.includes("threw")), logged.join("; "));
        assert.equal(text((await c.lookup({ namespace: ns, key: k })).result), "found later");
      });

      it(`ends with INVALID_RESOLVER when its name is refused, and returns at once when stopped before it starts (${kind})`, async () => {
        const c = client(kind);
        const ns = h.namespaces.held;
        const k = key("resolver-bad-name");
        await c.claim({ namespace: ns, key: k, claimant: "holder", leaseTtlMs: 1000 });
        await sleep(1500);
        await rejects(c.claim({ namespace: ns, key: k, claimant: "probe" }));
        const err = await rejects(
          within(
            "the loop's end",
            runResolver(c, { name: "bad\u0001name", namespaces: [ns], pollIntervalMs: 100, log: () => {} }, (held) => (held.key === k ? completed("x") : cantTell())),
            10_000,
          ),
        );
        assert.ok(err instanceof RpcError && err.reason === ErrorReason.INVALID_RESOLVER, String(err));
        assert.equal((await c.lookup({ namespace: ns, key: k })).state, State.UNRESOLVED);
        await within("a stopped loop's return", runResolver(c, { name: "r", signal: AbortSignal.abort() }, () => cantTell()), 5000);
      });
    }
  });

  describe("doBatch()", () => {
    it("runs each acquired job once, replays and refuses the others, and records each outcome", async () => {
      const c = client("grpc");
      const ns = h.namespaces.plain;
      const [fresh, replayed, failed, busy, retryable, permanentKey] = ["fresh", "replayed", "failed", "busy", "retryable", "permanent"].map((p) => key(`dobatch-${p}`)) as [
        string, string, string, string, string, string,
      ];
      await c.do({ namespace: ns, key: replayed }, () => "stored");
      await assert.rejects(c.do({ namespace: ns, key: failed }, () => { throw permanent(new Error("declined")); }));
      await c.claim({ namespace: ns, key: busy, claimant: "holder", leaseTtlMs: 30_000 });

      const ran: number[] = [];
      const out = await c.doBatch(
        [fresh, replayed, failed, busy, retryable, permanentKey].map((k) => ({ namespace: ns, key: k, leaseTtlMs: 10_000 })),
        (attempt, i) => {
          ran.push(i);
          assert.equal(attempt.number, 1);
          if (i === 4) throw new Error("try later");
          if (i === 5) throw permanent(new Error("never"));
          return `value-${i}`;
        },
      );
      assert.deepEqual(ran.sort(), [0, 4, 5], "the handler ran for the acquired jobs only");
      assert.equal(out.length, 6);
      const first = value(out[0]);
      assert.equal(text(first.value), "value-0");
      assert.equal(first.replayed, false);
      assert.equal(first.record.state, State.COMPLETED);
      const second = value(out[1]);
      assert.equal(text(second.value), "stored");
      assert.equal(second.replayed, true);
      assert.equal(first.text(), "value-0", "a run item's result reads as text");
      assert.equal(second.text(), "stored", "a replayed item's result reads as text");
      const third = error(out[2]);
      assert.ok(third instanceof JobFailedError && third.storedError === "declined", String(third));
      assert.ok(error(out[3]) instanceof InProgressError);
      assert.match(String(error(out[4])), /try later/);
      assert.equal((await c.lookup({ namespace: ns, key: retryable })).state, State.RELEASED);
      assert.match(String(error(out[5])), /never/);
      assert.equal((await c.lookup({ namespace: ns, key: permanentKey })).state, State.FAILED);
      assert.deepEqual(await c.doBatch([], () => "x"), [], "no jobs, no RPC");
    });

    it("aborts the handler of a job whose lease is lost and records nothing for it, while its neighbours complete", async () => {
      const c = client("grpc");
      const op = client("grpc", "operator");
      const ns = h.namespaces.plain;
      const [gone, kept] = [key("dobatch-gone"), key("dobatch-kept")];
      const out = await c.doBatch([{ namespace: ns, key: gone, leaseTtlMs: 1500 }, { namespace: ns, key: kept, leaseTtlMs: 1500 }], async (attempt, i) => {
        if (i === 0) {
          await op.admin.deleteRecord({ tenant: "worker", namespace: ns, key: gone }); // the next heartbeat finds no record
          await within("the abort", new Promise((r) => attempt.signal.addEventListener("abort", r)), 10_000);
          return "too late";
        }
        await sleep(1200); // past the first beats
        return "kept";
      });
      const lost = error(out[0]);
      assert.ok(lost instanceof NotFoundError, String(lost));
      assert.equal(text(lost.value!), "too late", "the error carries the handler's value");
      assert.ok((await rejects(c.lookup({ namespace: ns, key: gone }))) instanceof NotFoundError, "nothing was recorded for it");
      assert.equal(text(value(out[1]).value), "kept");
      assert.equal((await c.lookup({ namespace: ns, key: kept })).state, State.COMPLETED);
    });

    it("halves a delivery larger than the server takes in one batch", async () => {
      const calls: number[] = [];
      const counting: Interceptor = (next) => async (req) => {
        if (req.method.name === "BatchClaim") {
          calls.push((req.message as unknown as { requests: unknown[] }).requests.length);
        }
        return next(req);
      };
      const c = client("connect", "worker", [counting]);
      const jobs = Array.from({ length: 501 }, (_, i) => ({ namespace: h.namespaces.plain, key: key(`dobatch-many-${i}`) }));
      let ran = 0;
      const out = await c.doBatch(jobs, (_a, i) => {
        ran++;
        return `v${i}`;
      });
      assert.equal(ran, 501);
      out.forEach((r, i) => assert.equal(text(value(r).value), `v${i}`));
      assert.deepEqual(calls, [501, 250, 251], "refused whole, then sent in halves");
    });

    it("sends again only the items over the tenant's rate limit, after what RetryInfo says", async () => {
      // The limited tenant: 5 calls a second, burst 1, counted per item.
      const sizes: Record<string, number[]> = {};
      const counting: Interceptor = (next) => async (req) => {
        (sizes[req.method.name] ??= []).push((req.message as unknown as { requests: unknown[] }).requests.length);
        return next(req);
      };
      const c = client("grpc", "limited", [counting]);
      const jobs = [0, 1, 2].map((i) => ({ namespace: h.namespaces.plain, key: key(`dobatch-limited-${i}`), leaseTtlMs: 10_000 }));
      const out = await c.doBatch(jobs, (_a, i) => `v${i}`);
      out.forEach((r, i) => assert.equal(text(value(r).value), `v${i}`));
      for (const method of ["BatchClaim", "BatchComplete"]) {
        const sent = sizes[method]!;
        assert.equal(sent[0], 3, method);
        assert.ok(sent.length > 1, `${method} was not limited: ${sent}`);
        // Each try carries the items still refused, never one answered.
        assert.ok(sent.every((n, k) => k === 0 || n <= sent[k - 1]!), `${method}: ${sent}`);
      }
      assert.ok(sizes.BatchClaim!.at(-1)! < 3, `the Claims were let through one by one: ${sizes.BatchClaim}`);
    });

    for (const kind of ["grpc", "connect"] as const) {
      it(`halves a BatchComplete larger than the server reads (${kind})`, async () => {
        const calls: number[] = [];
        const counting: Interceptor = (next) => async (req) => {
          if (req.method.name === "BatchComplete") {
            calls.push((req.message as unknown as { requests: unknown[] }).requests.length);
          }
          return next(req);
        };
        const c = client(kind, "worker", [counting]);
        const jobs = Array.from({ length: 80 }, (_, i) => ({ namespace: h.namespaces.plain, key: key(`dobatch-big-${i}`) }));
        const out = await c.doBatch(jobs, (_a, i) => new Uint8Array(64 << 10).fill(i));
        out.forEach((r, i) => assert.equal(value(r).value[0], i));
        assert.deepEqual(calls, [80, 40, 40], "80 results of 64 KiB are over 4 MiB; 40 are not");
      });
    }
  });

  it("connectTransport sends its calls through the fetch it is given", async () => {
    let fetched = 0;
    const c = new IdemClient(
      connectTransport({
        baseUrl: h.http_url,
        token: h.tokens.worker,
        fetch: (input, init) => {
          fetched++;
          return fetch(input, init);
        },
      }),
    );
    const got = await c.claim({ namespace: h.namespaces.plain, key: key("fetch") });
    assert.equal(got.outcome, Outcome.ACQUIRED);
    assert.equal(fetched, 1);
  });
});

describe("gRPC over TLS", { timeout: 120_000 }, () => {
  let dir: string;
  let stop: () => Promise<void> = async () => {};
  let port = "";
  const token = "idem_tls_test_token";

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "idem-ts-tls-"));
    // A self-signed certificate for the name idem.test only, so that the
    // connection works only with the CA and the servername given.
    execFileSync("openssl", [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
      "-subj", "/CN=idem.test", "-addext", "subjectAltName=DNS:idem.test",
      "-keyout", path.join(dir, "key.pem"), "-out", path.join(dir, "cert.pem"),
    ], { stdio: "ignore" });
    const hash = createHash("sha256").update(token).digest("hex");
    writeFileSync(path.join(dir, "idem.yaml"), `tenants:\n  - name: tls\n    tokens: ["sha256:${hash}"]\n`);
    const idemd = spawn(
      process.env.IDEMD_BIN ?? path.join(PACKAGE_DIR, "build", "idemd"),
      ["serve", "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", "", "--data-dir", path.join(dir, "data"),
        "--config", path.join(dir, "idem.yaml"), "--tls-cert", path.join(dir, "cert.pem"), "--tls-key", path.join(dir, "key.pem"), "--log-format", "json"],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    // Whatever ends this process ends idemd too.
    const killIdemd = () => idemd.kill("SIGKILL");
    process.once("exit", killIdemd);
    stop = () =>
      new Promise((resolve) => {
        process.removeListener("exit", killIdemd);
        if (idemd.exitCode !== null) {
          resolve();
          return;
        }
        idemd.once("exit", () => resolve());
        idemd.kill("SIGTERM");
      });
    port = await new Promise<string>((resolve, reject) => {
      const lines: string[] = [];
      readline.createInterface({ input: idemd.stderr! }).on("line", (line) => {
        lines.push(line);
        if (line.includes('"msg":"idemd serving"')) {
          resolve(String((JSON.parse(line) as { listen: string }).listen).split(":").pop()!);
        }
      });
      idemd.once("exit", (code) => reject(new Error(`idemd exited (${code}) before serving:\n${lines.join("\n")}`)));
    });
  });
  after(async () => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("connects with the CA and server name given, and sends the token", async () => {
    const ca = (await import("node:fs")).readFileSync(path.join(dir, "cert.pem"));
    const c = new IdemClient(grpcTransport({ baseUrl: `https://127.0.0.1:${port}`, token, tls: { ca, servername: "idem.test" } }));
    try {
      const got = await c.claim({ namespace: "tls", key: "k" });
      assert.equal(got.outcome, Outcome.ACQUIRED);
    } finally {
      c.close();
    }
  });

  it("refuses a server whose certificate it cannot verify", async () => {
    const c = new IdemClient(grpcTransport({ baseUrl: `https://127.0.0.1:${port}`, token, tls: { servername: "idem.test" } }));
    try {
      const err = await rejects(c.lookup({ namespace: "tls", key: "k" }));
      assert.ok(err instanceof RpcError, String(err));
      assert.equal(err.reasonName, "");
      assert.match(err.message, /certificate/i);
    } finally {
      c.close();
    }
  });
});
