// The scenarios of clients/scenarios/scenarios.json, run against the harness
// of internal/testsupport/sdkharness on both stores and over both transports (gRPC from
// Node, and the Connect protocol over fetch). A scenario id in the file with
// no implementation here fails the suite, and so does an implementation of
// an id the file no longer has.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";
import { Code, type Interceptor } from "@connectrpc/connect";
import {
  AlreadyTerminalError,
  type BatchResult,
  CompletionUnknownError,
  connectTransport,
  FailureNotRecordedError,
  ErrorReason,
  fingerprint,
  FingerprintMismatchError,
  IdemClient,
  InProgressError,
  JobFailedError,
  LeaseLostError,
  NotFoundError,
  NotUnresolvedError,
  Outcome,
  permanent,
  ResolvedByOperatorError,
  RpcError,
  State,
  StepAlreadyFinishedError,
  StepState,
  stepKey,
  TimelineEntryKind,
  UnresolvedError,
  cantTell,
  completed,
  failed,
  release,
  runResolver,
  type Attempt,
  type Held,
  type JobRecord,
  type JobStep,
} from "../src/index.js";
import { grpcTransport } from "../src/node.js";
import { REPO, startHarness, type Harness } from "./harness.js";

const SCENARIO_FILE = path.join(REPO, "clients", "scenarios", "scenarios.json");

interface StepKeyVector {
  namespace: string;
  key: string;
  step: string;
  step_key: string;
}

interface ScenarioSpec {
  id: string;
  title: string;
  steps: string;
  expect: string;
  exclusive?: boolean;
}

function loadScenarios(): ScenarioSpec[] {
  const file = JSON.parse(readFileSync(SCENARIO_FILE, "utf8")) as { version: number; scenarios: ScenarioSpec[] };
  assert.equal(file.version, 1, `${SCENARIO_FILE} is version ${file.version}; this suite reads version 1`);
  return file.scenarios;
}

type TransportKind = "grpc" | "connect";
type Tenant = "worker" | "operator" | "limited";

/** RpcCall is one RPC a client sent, as a scenario observes the SDK. */
interface RpcCall {
  method: string;
  start: number;
  end: number;
  error?: RpcError;
}

/** RpcLog records a client's RPCs; onBeat is told of each heartbeat answered OK. */
class RpcLog {
  readonly calls: RpcCall[] = [];
  onBeat: (() => void) | undefined;

  readonly interceptor: Interceptor = (next) => async (req) => {
    const start = performance.now();
    try {
      const res = await next(req);
      this.calls.push({ method: req.method.name, start, end: performance.now() });
      if (req.method.name === "Heartbeat") {
        this.onBeat?.();
      }
      return res;
    } catch (err) {
      this.calls.push({ method: req.method.name, start, end: performance.now(), error: RpcError.from(err) as RpcError });
      throw err;
    }
  };

  count(method: string): number {
    return this.calls.filter((c) => c.method === method).length;
  }
}

/** Env is one harness, one transport and what the scenarios reach them with. */
class Env {
  readonly #clients: IdemClient[] = [];
  constructor(
    readonly h: Harness,
    readonly transport: TransportKind,
  ) {}

  get plain(): string {
    return this.h.namespaces.plain;
  }
  get held(): string {
    return this.h.namespaces.held;
  }
  get stepHeld(): string {
    return this.h.namespaces.step_held;
  }

  /** client is a client for the tenant with the SDK's defaults, logging into log when given. */
  client(tenant: Tenant = "worker", log?: RpcLog): IdemClient {
    const token = this.h.tokens[tenant];
    const interceptors = log ? [log.interceptor] : [];
    const transport =
      this.transport === "grpc"
        ? grpcTransport({ baseUrl: `http://${this.h.grpc_addr}`, token, interceptors })
        : connectTransport({ baseUrl: this.h.http_url, token, interceptors });
    const c = new IdemClient(transport);
    this.#clients.push(c);
    return c;
  }

  /** key is a key of the scenario's own, fresh for each run. */
  key(id: string, part: string): string {
    return `${id}-${part}-${this.transport}-${randomBytes(4).toString("hex")}`;
  }

  close(): void {
    for (const c of this.#clients.splice(0)) {
      c.close();
    }
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** leaseLapse is how long the scenarios wait for a 1 s lease to run out. */
const leaseLapse = 1500;

/** Calls counts a handler's calls. */
class Calls {
  n = 0;
  returns(v: string) {
    return () => {
      this.n++;
      return v;
    };
  }
  /** mustNotRun is a handler that fails the scenario if it is called. */
  mustNotRun() {
    return () => {
      this.n++;
      throw new Error("the handler ran; it must not");
    };
  }
}

const text = (b: Uint8Array) => new TextDecoder().decode(b);

function wantValue(step: string, res: { value: Uint8Array; replayed: boolean }, value: string, replayed: boolean) {
  assert.equal(text(res.value), value, `${step}: value`);
  assert.equal(res.replayed, replayed, `${step}: replayed`);
}

function wantCodeReason(step: string, err: unknown, code: Code, reason: ErrorReason) {
  assert.ok(err instanceof RpcError, `${step}: ${String(err)}; want an RpcError`);
  assert.equal(err.code, code, `${step}: ${err.message}: code`);
  assert.equal(err.reason, reason, `${step}: ${err.message}: reason`);
}

/** caught is what p rejected with; it fails when p resolves. */
async function caught(step: string, p: Promise<unknown>): Promise<unknown> {
  try {
    const v = await p;
    assert.fail(`${step}: resolved with ${JSON.stringify(v, (_, x) => (typeof x === "bigint" ? String(x) : x))}; want an error`);
  } catch (err) {
    if (err instanceof assert.AssertionError) {
      throw err;
    }
    return err;
  }
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

/** okValue is an ok BatchResult's value; it fails the step for any other. */
function okValue<T>(step: string, r: BatchResult<T, unknown> | undefined): T {
  assert.ok(r !== undefined, `${step}: no item`);
  assert.ok(r.ok, `${step}: ${String(r.ok ? "" : r.error)}; want no error`);
  return r.value;
}

/** itemError is a failed BatchResult's error; it fails the step for any other. */
function itemError(step: string, r: BatchResult<unknown, unknown> | undefined): unknown {
  assert.ok(r !== undefined, `${step}: no item`);
  assert.ok(!r.ok, `${step}: succeeded; want an error`);
  return r.error;
}

/** wantStep checks one of a record's steps. */
function wantStep(step: string, s: JobStep | undefined, name: string, state: StepState, result: string, token: bigint) {
  assert.ok(s !== undefined, `${step}: no step ${name}`);
  assert.equal(s.name, name, `${step}: the step's name`);
  assert.equal(s.state, state, `${step}: ${name}'s state`);
  assert.equal(text(s.result), result, `${step}: ${name}'s result`);
  assert.equal(s.token, token, `${step}: ${name}'s token`);
}

/**
 * untilHeld makes a held record whose lease has lapsed UNRESOLVED: a Claim
 * that finds the lease run out does so at once, where idemd's sweeper would
 * take up to its interval (10 s).
 */
async function untilHeld(c: IdemClient, namespace: string, key: string): Promise<JobRecord> {
  const err = await caught(`a Claim of ${key}`, c.claim({ namespace, key, claimant: "probe" }));
  assert.ok(err instanceof UnresolvedError, `a Claim of ${key}: ${String(err)}; want Unresolved`);
  const rec = await c.lookup({ namespace, key });
  assert.equal(rec.state, State.UNRESOLVED, `${key}'s state`);
  return rec;
}

/** until polls cond until it holds, for at most ms. */
async function until(what: string, cond: () => Promise<boolean> | boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    assert.ok(Date.now() < end, `${what} did not happen within ${ms} ms`);
    await sleep(100);
  }
}

/** resolverLog collects what a resolver logs, so that a scenario's output stays quiet. */
const resolverLog = (into: string[]) => (message: string, err: unknown) => into.push(`${message}: ${String(err)}`);

type Scenario = (e: Env, id: string) => Promise<void>;

/** scenarios are the TypeScript implementations of the file's scenarios, by id. */
const scenarios: Record<string, Scenario> = {
  async "claim-complete-replay"(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    const r = `result-${k}`;
    let calls = 0;
    const handler = (a: Attempt) => {
      calls++;
      assert.equal(a.number, 1);
      assert.equal(a.takeover, false);
      return r;
    };
    const job = { namespace: e.plain, key: k };
    wantValue("step 1", await c.do(job, handler), r, false);
    wantValue("step 2", await c.do(job, handler), r, true);
    assert.equal(calls, 1, "the handler's calls");
    const rec = await c.lookup(job);
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), r);
    assert.equal(rec.attempt, 1);
  },

  async "concurrent-deliveries"(e, id) {
    const c = e.client();
    // Which delivery did which: the one that ran returned a value not replayed.
    const split = <T extends { replayed: boolean }>(out: PromiseSettledResult<T>[]) => {
      const first = out[0]!;
      return first.status === "fulfilled" && !first.value.replayed ? [first, out[1]!] : [out[1]!, first];
    };

    // Part A: the winner's handler holds the job until the other delivery returned.
    let callsA = 0;
    let otherReturned!: () => void;
    const returned = new Promise<void>((r) => (otherReturned = r));
    const handlerA = async () => {
      callsA++;
      await within("the other delivery's return", returned, 10_000);
      return "R-a";
    };
    const jobA = { namespace: e.plain, key: e.key(id, "a") };
    const outA = await Promise.allSettled([0, 1].map(() => c.do(jobA, handlerA).finally(() => otherReturned())));
    const [winA, otherA] = split(outA);
    assert.equal(winA!.status, "fulfilled", `part A: ${String((winA as PromiseRejectedResult).reason)}`);
    wantValue("part A, the delivery that ran", (winA as PromiseFulfilledResult<{ value: Uint8Array; replayed: boolean }>).value, "R-a", false);
    const busy = (otherA as PromiseRejectedResult).reason;
    assert.ok(busy instanceof InProgressError, `part A, the other delivery: ${String(busy)}; want InProgress`);
    assert.ok(busy.retryAfterMs > 0, `retry_after ${busy.retryAfterMs}`);
    assert.equal(callsA, 1, "part A: the handler's calls");

    // Part B: both wait; the one that does not run gets the replay.
    let callsB = 0;
    const handlerB = async () => {
      callsB++;
      await sleep(200);
      return "R-b";
    };
    const jobB = { namespace: e.plain, key: e.key(id, "b") };
    const outB = await Promise.allSettled([0, 1].map(() => c.do(jobB, handlerB, { waitMs: 10_000 })));
    for (const o of outB) {
      assert.equal(o.status, "fulfilled", `part B: ${String((o as PromiseRejectedResult).reason)}`);
    }
    const [winB, otherB] = split(outB) as PromiseFulfilledResult<{ value: Uint8Array; replayed: boolean }>[];
    wantValue("part B, the delivery that ran", winB!.value, "R-b", false);
    wantValue("part B, the delivery that waited", otherB!.value, "R-b", true);
    assert.equal(callsB, 1, "part B: the handler's calls");
  },

  async "in-progress-retry-after"(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    const held = await c.claim({ namespace: e.plain, key: k, leaseTtlMs: 30_000, claimant: "holder" });
    assert.equal(held.outcome, Outcome.ACQUIRED);
    const calls = new Calls();
    const err = await caught("do()", c.do({ namespace: e.plain, key: k }, calls.mustNotRun()));
    assert.ok(err instanceof InProgressError, `do(): ${String(err)}; want InProgress`);
    assert.ok(err.retryAfterMs > 0 && err.retryAfterMs <= 30_000, `retry_after ${err.retryAfterMs} ms`);
    assert.equal(calls.n, 0);
    const rec = await c.lookup({ namespace: e.plain, key: k });
    assert.equal(rec.state, State.PROCESSING);
    assert.equal(rec.token, held.record.token);
  },

  async "fingerprint-mismatch"(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    const f1 = fingerprint("payload-1");
    const f2 = fingerprint("payload-2");
    const calls = new Calls();
    wantValue("step 1", await c.do({ namespace: e.plain, key: k, fingerprint: f1 }, calls.returns("R")), "R", false);
    const err = await caught("step 2", c.do({ namespace: e.plain, key: k, fingerprint: f2 }, calls.mustNotRun()));
    wantCodeReason("step 2", err, Code.FailedPrecondition, ErrorReason.FINGERPRINT_MISMATCH);
    assert.ok(err instanceof FingerprintMismatchError);
    wantValue("step 3", await c.do({ namespace: e.plain, key: k, fingerprint: f1 }, calls.mustNotRun()), "R", true);
    assert.equal(calls.n, 1);
    const rec = await c.lookup({ namespace: e.plain, key: k });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), "R");
    assert.deepEqual(rec.fingerprint, f1);
  },

  async "lease-lost-mid-job"(e, id) {
    const k = e.key(id, "k");
    const log = new RpcLog();
    const holder = e.client("worker", log);
    const other = e.client();
    const operator = e.client("operator");

    let firstBeat!: () => void;
    const beat = new Promise<void>((r) => (firstBeat = r));
    log.onBeat = () => firstBeat();
    let started!: (token: bigint) => void;
    const startedP = new Promise<bigint>((r) => (started = r));
    let toldToStop = false;
    const handler = async (a: Attempt) => {
      started(a.token);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 10_000);
        a.signal.addEventListener("abort", () => {
          toldToStop = true;
          clearTimeout(timer);
          resolve();
        });
      });
      return "late";
    };
    const done = holder.do({ namespace: e.plain, key: k, leaseTtlMs: 3000 }, handler).then(
      (v) => ({ ok: true as const, v }),
      (err: unknown) => ({ ok: false as const, err }),
    );
    const t1 = await within("the handler's start", startedP, 60_000);
    await within("do()'s first heartbeat", beat, 60_000);
    await operator.admin.deleteRecord({ tenant: "worker", namespace: e.plain, key: k });
    const succ = await other.claim({ namespace: e.plain, key: k, leaseTtlMs: 30_000, claimant: "successor" });
    assert.equal(succ.outcome, Outcome.ACQUIRED);
    const t2 = succ.record.token;
    assert.ok(t2 > t1, `the successor's token ${t2} is not above the holder's ${t1}`);
    const out = await within("do()'s return", done, 60_000);
    assert.ok(toldToStop, "the handler was not told to stop (its signal was not aborted within 10 s)");
    assert.ok(!out.ok, `do() returned ${out.ok && text(out.v.value)}; want LeaseLost`);
    assert.ok(out.err instanceof LeaseLostError && !(out.err instanceof CompletionUnknownError), `do(): ${String(out.err)}; want LeaseLost`);
    wantCodeReason("do()", out.err, Code.Aborted, ErrorReason.LEASE_LOST);
    assert.equal(text(out.err.value ?? new Uint8Array()), "late", "the handler's value rides on the error");
    const rec = await other.lookup({ namespace: e.plain, key: k });
    assert.equal(rec.state, State.PROCESSING);
    assert.equal(rec.token, t2);
    assert.equal(rec.claimant, "successor");
    assert.equal(rec.result.length, 0);
  },

  async "retryable-failure"(e, id) {
    const c = e.client();
    const job = { namespace: e.plain, key: e.key(id, "k") };
    const transient = new Error("transient: try again");
    const err = await caught("step 1", c.do(job, () => Promise.reject(transient)));
    assert.equal(err, transient, "step 1: do() throws the handler's error itself");
    let rec = await c.lookup(job);
    assert.equal(rec.state, State.RELEASED);
    assert.equal(rec.error, "transient: try again");
    assert.equal(rec.attempt, 1);
    const res = await c.do(job, (a) => {
      assert.equal(a.number, 2);
      assert.equal(a.takeover, true);
      return "R";
    });
    wantValue("step 3", res, "R", false);
    rec = await c.lookup(job);
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), "R");
    assert.equal(rec.attempt, 2);
  },

  async "permanent-failure"(e, id) {
    const c = e.client();
    const job = { namespace: e.plain, key: e.key(id, "k") };
    const declined = permanent(new Error("card declined"));
    const err = await caught("step 1", c.do(job, () => Promise.reject(declined)));
    assert.equal(err, declined, "step 1: do() throws the handler's error itself");
    const rec = await c.lookup(job);
    assert.equal(rec.state, State.FAILED);
    assert.equal(rec.error, "card declined");
    const calls = new Calls();
    const failed = await caught("step 3", c.do(job, calls.mustNotRun()));
    assert.ok(failed instanceof JobFailedError, `step 3: ${String(failed)}; want JobFailed`);
    assert.equal(failed.storedError, "card declined");
    assert.equal(calls.n, 0);
  },

  async "fail-after-own-complete"(e, id) {
    const c = e.client();
    const r = "completed-by-handler";
    // The handler of step 1: a raw Complete of its own token, then an error of its own.
    const completesThenFails = (key: string, handlerError: Error) => async (a: Attempt) => {
      await c.complete({ namespace: e.plain, key, token: a.token, result: r });
      throw handlerError;
    };
    const wantBoth = (step: string, err: unknown, handlerError: Error) => {
      assert.ok(err instanceof FailureNotRecordedError, `${step}: ${String(err)}; want FailureNotRecorded`);
      assert.equal(err.handlerError, handlerError, `${step}: the handler's error itself`);
      assert.equal(err.cause, handlerError, `${step}: the cause is the handler's error`);
      assert.ok(err.failError instanceof AlreadyTerminalError, `${step}: the fail error ${String(err.failError)}; want AlreadyTerminal`);
      wantCodeReason(step, err.failError, Code.FailedPrecondition, ErrorReason.ALREADY_TERMINAL);
      assert.match(err.message, /failed after completing/, `${step}: the message has the handler's text`);
      assert.match(err.message, /ALREADY_TERMINAL/, `${step}: the message has the refusal's reason`);
    };

    const k = e.key(id, "k");
    const handlerError = new Error("failed after completing");
    wantBoth("step 1", await caught("step 1", c.do({ namespace: e.plain, key: k }, completesThenFails(k, handlerError))), handlerError);
    const rec = await c.lookup({ namespace: e.plain, key: k });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), r);
    assert.equal(rec.attempt, 1);
    assert.equal(rec.error, "");
    const calls = new Calls();
    wantValue("step 3", await c.do({ namespace: e.plain, key: k }, calls.mustNotRun()), r, true);
    assert.equal(calls.n, 0);

    const k2 = e.key(id, "k2");
    const handlerError2 = new Error("failed after completing");
    const out = await c.doBatch([{ namespace: e.plain, key: k2 }], completesThenFails(k2, handlerError2));
    assert.equal(out.length, 1);
    wantBoth("step 4", itemError("step 4", out[0]), handlerError2);
    const rec2 = await c.lookup({ namespace: e.plain, key: k2 });
    assert.equal(rec2.state, State.COMPLETED);
    assert.equal(text(rec2.result), r);
  },

  async unresolved(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    const held = await c.claim({ namespace: e.held, key: k, leaseTtlMs: 1000, claimant: "holder" });
    assert.equal(held.outcome, Outcome.ACQUIRED);
    await sleep(leaseLapse);
    const calls = new Calls();
    const err = await caught("do()", c.do({ namespace: e.held, key: k }, calls.mustNotRun()));
    assert.ok(err instanceof UnresolvedError, `do(): ${String(err)}; want Unresolved`);
    assert.equal(calls.n, 0);
    const rec = await c.lookup({ namespace: e.held, key: k });
    assert.equal(rec.state, State.UNRESOLVED);
    assert.equal(rec.hold, true);
    assert.equal(rec.token, held.record.token);
    assert.equal(rec.policy, "held*");
  },

  async "resolved-by-operator"(e, id) {
    const c = e.client();
    const operator = e.client("operator");
    const k = e.key(id, "k");
    const ns = e.held;
    const held = await c.claim({ namespace: ns, key: k, leaseTtlMs: 1000, claimant: "holder" });
    assert.equal(held.outcome, Outcome.ACQUIRED);
    const token = held.record.token;
    await sleep(leaseLapse);
    const unresolved = await caught("step 2", c.claim({ namespace: ns, key: k, claimant: "other" }));
    assert.ok(unresolved instanceof UnresolvedError, `step 2: ${String(unresolved)}; want Unresolved`);
    const resolved = await operator.admin.resolveRecord({ tenant: "worker", namespace: ns, key: k, completed: "resolved-by-operator" });
    assert.equal(resolved.state, State.COMPLETED);
    const err = await caught("step 4", c.complete({ namespace: ns, key: k, token, result: "late-holder" }));
    wantCodeReason("step 4: the holder's Complete with B", err, Code.FailedPrecondition, ErrorReason.RESOLVED_BY_OPERATOR);
    assert.ok(err instanceof ResolvedByOperatorError);
    assert.match(err.message, /your result was not stored: the record was resolved by an operator/);
    let rec: JobRecord = await c.lookup({ namespace: ns, key: k });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), "resolved-by-operator");
    rec = await c.complete({ namespace: ns, key: k, token, result: "resolved-by-operator" });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), "resolved-by-operator");
  },

  async wait(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    const held = await c.claim({ namespace: e.plain, key: k, leaseTtlMs: 30_000, claimant: "holder" });
    assert.equal(held.outcome, Outcome.ACQUIRED);
    const log = new RpcLog();
    const waiter = e.client("worker", log);
    const calls = new Calls();
    const done = waiter.do({ namespace: e.plain, key: k }, calls.mustNotRun(), { waitMs: 10_000 });
    await sleep(300);
    await c.complete({ namespace: e.plain, key: k, token: held.record.token, result: "R" });
    wantValue("do()", await within("do()'s return", done, 60_000), "R", true);
    assert.equal(calls.n, 0);
    assert.ok(log.count("Claim") <= 2, `do() sent ${log.count("Claim")} Claims; want at most 2 (the server waits, the SDK does not poll)`);
  },

  async "unavailable-retried"(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    await e.h.control("/unavailable?ms=1000");
    const calls = new Calls();
    wantValue("do()", await c.do({ namespace: e.plain, key: k }, calls.returns("R")), "R", false);
    assert.equal(calls.n, 1);
    const rec = await c.lookup({ namespace: e.plain, key: k });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), "R");
  },

  async "restart-mid-complete"(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    let effects = 0;
    const res = await c.do({ namespace: e.plain, key: k, leaseTtlMs: 30_000 }, async () => {
      effects++;
      await e.h.control("/restart?down_ms=1500");
      return "R";
    });
    wantValue("do()", res, "R", false);
    assert.equal(effects, 1);
    const rec = await c.lookup({ namespace: e.plain, key: k });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), "R");
    assert.equal(rec.attempt, 1);
  },

  async "restart-mid-claim"(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    await e.h.control("/restart?down_ms=4000");
    const calls = new Calls();
    wantValue("do()", await c.do({ namespace: e.plain, key: k }, calls.returns("R")), "R", false);
    assert.equal(calls.n, 1);
    const rec = await c.lookup({ namespace: e.plain, key: k });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), "R");
    assert.equal(rec.attempt, 1);
  },

  async "rate-limited"(e, id) {
    const log = new RpcLog();
    const c = e.client("limited", log);
    for (let i = 1; i <= 5; i++) {
      wantValue(`do() ${i}`, await c.do({ namespace: e.plain, key: e.key(id, String(i)) }, () => `R${i}`), `R${i}`, false);
    }
    const calls = [...log.calls].sort((a, b) => a.start - b.start);
    let limited = 0;
    calls.forEach((call, i) => {
      if (call.error?.code !== Code.ResourceExhausted || call.error.reason !== ErrorReason.RATE_LIMITED) {
        return;
      }
      limited++;
      const d = call.error.retryAfterMs;
      assert.ok(d !== undefined, `${call.method} was refused RATE_LIMITED without a RetryInfo`);
      const next = calls[i + 1];
      if (next) {
        const gap = next.start - call.end;
        assert.ok(gap >= d, `the SDK sent its next RPC ${gap.toFixed(1)} ms after a RATE_LIMITED answer whose RetryInfo said ${d} ms`);
      }
    });
    assert.ok(limited > 0, `none of the ${calls.length} RPCs was answered RATE_LIMITED; the limit (5/s, burst 1) was not met`);
  },

  async "error-text-unstorable"(e, id) {
    const c = e.client();
    const job = { namespace: e.plain, key: e.key(id, "k") };
    const message = "nul:\0:" + "€".repeat(2000);
    assert.equal(new TextEncoder().encode(message).length, 6006);
    const unstorable = new Error(message);
    const err = await caught("step 1", c.do(job, () => Promise.reject(unstorable)));
    assert.equal(err, unstorable, "step 1: do() throws the handler's error itself");
    const rec = await c.lookup(job);
    assert.equal(rec.state, State.RELEASED);
    const want = "nul:\uFFFD:" + "€".repeat(1362);
    assert.equal(new TextEncoder().encode(rec.error).length, 4094);
    assert.equal(rec.error, want);
  },

  async "unknown-field-refused"(e, id) {
    const c = e.client();
    const k = e.key(id, "k");
    // The SDK's messages have no unknown fields, so this goes below them,
    // through fetch, as the Connect transport does.
    const res = await fetch(`${e.h.http_url}/idem.v1.IdempotencyService/Claim`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${e.h.tokens.worker}` },
      body: JSON.stringify({ namespace: e.plain, key: k, leaseTTL: "5s" }),
    });
    const body = (await res.json()) as { code?: string; message?: string };
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.equal(body.code, "invalid_argument");
    assert.match(body.message ?? "", /leaseTTL/);
    const err = await caught("step 2", c.lookup({ namespace: e.plain, key: k }));
    assert.ok(err instanceof NotFoundError, `step 2: ${String(err)}; want NOT_FOUND (nothing written)`);
  },

  async "batch-claim-mixed"(e, id) {
    const c = e.client();
    const [k1, k2, k3, k4] = ["1", "2", "3", "4"].map((p) => e.key(id, p)) as [string, string, string, string];
    wantValue("setup K2", await c.do({ namespace: e.plain, key: k2 }, () => "result-2"), "result-2", false);
    const held = await c.claim({ namespace: e.plain, key: k3, leaseTtlMs: 30_000, claimant: "holder" });
    assert.equal(held.outcome, Outcome.ACQUIRED);
    const f1 = fingerprint("payload-1");
    wantValue("setup K4", await c.do({ namespace: e.plain, key: k4, fingerprint: f1 }, () => "result-4"), "result-4", false);

    const items = await c.batchClaim([
      { namespace: e.plain, key: k1, claimant: "batch" },
      { namespace: e.plain, key: k2, claimant: "batch" },
      { namespace: e.plain, key: k3, claimant: "batch" },
      { namespace: e.plain, key: k4, claimant: "batch", fingerprint: fingerprint("payload-2") },
    ]);
    assert.equal(items.length, 4);
    const first = okValue("step 1, item 1", items[0]);
    assert.equal(first.outcome, Outcome.ACQUIRED);
    assert.equal(first.record.attempt, 1);
    const second = okValue("step 1, item 2", items[1]);
    assert.equal(second.outcome, Outcome.COMPLETED);
    assert.equal(text(second.record.result), "result-2");
    const busy = itemError("step 1, item 3", items[2]);
    assert.ok(busy instanceof InProgressError, `step 1, item 3: ${String(busy)}; want InProgress`);
    assert.ok(busy.retryAfterMs > 0 && busy.retryAfterMs <= 30_000, `retry_after ${busy.retryAfterMs}`);
    const mismatch = itemError("step 1, item 4", items[3]);
    wantCodeReason("step 1, item 4", mismatch, Code.FailedPrecondition, ErrorReason.FINGERPRINT_MISMATCH);
    assert.ok(mismatch instanceof FingerprintMismatchError);

    const done = await c.batchComplete([{ namespace: e.plain, key: k1, token: first.record.token, result: "result-1" }]);
    assert.equal(done.length, 1);
    const rec1 = okValue("step 2", done[0]);
    assert.equal(rec1.state, State.COMPLETED);
    assert.equal(text(rec1.result), "result-1");

    const l1 = await c.lookup({ namespace: e.plain, key: k1 });
    assert.equal(l1.state, State.COMPLETED);
    assert.equal(text(l1.result), "result-1");
    assert.equal(l1.attempt, 1);
    const l3 = await c.lookup({ namespace: e.plain, key: k3 });
    assert.equal(l3.state, State.PROCESSING);
    assert.equal(l3.token, held.record.token);
  },

  async "batch-same-key-twice"(e, id) {
    const c = e.client();
    // Part A.
    const k1 = e.key(id, "1");
    const claims = await c.batchClaim([
      { namespace: e.plain, key: k1, claimant: "a" },
      { namespace: e.plain, key: k1, claimant: "b" },
    ]);
    const acquired = okValue("part A, step 1, item 1", claims[0]);
    assert.equal(acquired.outcome, Outcome.ACQUIRED);
    const busy = itemError("part A, step 1, item 2", claims[1]);
    assert.ok(busy instanceof InProgressError, `part A, step 1, item 2: ${String(busy)}; want InProgress`);
    const token = acquired.record.token;
    const done = await c.batchComplete([
      { namespace: e.plain, key: k1, token, result: "result" },
      { namespace: e.plain, key: k1, token, result: "other" },
    ]);
    const rec = okValue("part A, step 2, item 1", done[0]);
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(text(rec.result), "result");
    const terminal = itemError("part A, step 2, item 2", done[1]);
    wantCodeReason("part A, step 2, item 2", terminal, Code.FailedPrecondition, ErrorReason.ALREADY_TERMINAL);
    assert.ok(terminal instanceof AlreadyTerminalError);
    const l1 = await c.lookup({ namespace: e.plain, key: k1 });
    assert.equal(l1.state, State.COMPLETED);
    assert.equal(text(l1.result), "result");

    // Part B.
    const k2 = e.key(id, "2");
    const calls = new Calls();
    const out = await c.doBatch([{ namespace: e.plain, key: k2 }, { namespace: e.plain, key: k2 }], calls.returns("result"));
    assert.equal(calls.n, 1, "part B: the handler's calls");
    wantValue("part B, item 1", okValue("part B, item 1", out[0]), "result", false);
    const other = itemError("part B, item 2", out[1]);
    assert.ok(other instanceof InProgressError, `part B, item 2: ${String(other)}; want InProgress`);
    const l2 = await c.lookup({ namespace: e.plain, key: k2 });
    assert.equal(l2.state, State.COMPLETED);
    assert.equal(text(l2.result), "result");
    assert.equal(l2.attempt, 1);
  },

  async "batch-restart-mid-complete"(e, id) {
    const c = e.client();
    const keys = ["1", "2", "3"].map((p) => e.key(id, p));
    const effects = new Map<string, number>();
    let restarted!: () => void;
    const down = new Promise<void>((r) => (restarted = r));
    const out = await c.doBatch(
      keys.map((key) => ({ namespace: e.plain, key, leaseTtlMs: 30_000 })),
      async (_attempt, i) => {
        const key = keys[i]!;
        effects.set(key, (effects.get(key) ?? 0) + 1);
        if (i === 0) {
          await e.h.control("/restart?down_ms=1500");
          restarted();
        } else {
          await within("the restart", down, 60_000);
        }
        return `result-${key}`;
      },
    );
    assert.equal(out.length, 3);
    keys.forEach((key, i) => {
      wantValue(`item ${i + 1}`, okValue(`item ${i + 1}`, out[i]), `result-${key}`, false);
      assert.equal(effects.get(key), 1, `the effects of ${key}`);
    });
    for (const key of keys) {
      const rec = await c.lookup({ namespace: e.plain, key });
      assert.equal(rec.state, State.COMPLETED);
      assert.equal(text(rec.result), `result-${key}`);
      assert.equal(rec.attempt, 1);
    }
  },

  async "steps-crash-between-steps"(e, id) {
    const c = e.client();
    const job = { namespace: e.plain, key: e.key(id, "k") };
    const held = await c.claim({ ...job, claimant: "holder", leaseTtlMs: 1000 });
    assert.equal(held.outcome, Outcome.ACQUIRED);
    const t1 = held.record.token;
    await c.completeStep({ ...job, token: t1, step: "charge", result: "ch_1" });
    await sleep(leaseLapse);
    let f1 = 0;
    const f2Keys: string[] = [];
    let token = 0n;
    const res = await c.do(job, async (a) => {
      token = a.token;
      assert.equal(a.number, 2, "attempt");
      assert.equal(a.takeover, true, "takeover");
      const charge = await a.step("charge", () => {
        f1++;
        return "ch_2";
      });
      assert.equal(charge.text(), "ch_1", "step(charge)");
      assert.equal(charge.replayed, true, "step(charge) replayed");
      const receipt = await a.step("receipt", (k) => {
        f2Keys.push(k);
        return "rc_1";
      });
      assert.equal(receipt.replayed, false, "step(receipt) replayed");
      return charge.text() + receipt.text();
    });
    wantValue("step 4", res, "ch_1rc_1", false);
    assert.equal(f1, 0, "f1's runs");
    assert.deepEqual(f2Keys, [stepKey(job.namespace, job.key, "receipt")], "f2's runs and keys");
    const rec = await c.lookup(job);
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(rec.steps.length, 2, "steps");
    wantStep("lookup", rec.steps[0], "charge", StepState.FINISHED, "ch_1", t1);
    wantStep("lookup", rec.steps[1], "receipt", StepState.FINISHED, "rc_1", token);
  },

  async "steps-stale-holder-refused"(e, id) {
    const c = e.client();
    const job = { namespace: e.plain, key: e.key(id, "k") };
    const t1 = (await c.claim({ ...job, claimant: "holder", leaseTtlMs: 1000 })).record.token;
    await sleep(leaseLapse);
    const succ = await c.claim({ ...job, claimant: "successor" });
    assert.equal(succ.outcome, Outcome.ACQUIRED);
    const t2 = succ.record.token;
    const complete = await caught("step 4", c.completeStep({ ...job, token: t1, step: "charge", result: "ch_1" }));
    wantCodeReason("step 4", complete, Code.Aborted, ErrorReason.LEASE_LOST);
    assert.ok(complete instanceof LeaseLostError);
    const start = await caught("step 5", c.startStep({ ...job, token: t1, step: "charge" }));
    wantCodeReason("step 5", start, Code.Aborted, ErrorReason.LEASE_LOST);
    assert.ok(start instanceof LeaseLostError);
    const rec = await c.lookup(job);
    assert.equal(rec.state, State.PROCESSING);
    assert.equal(rec.token, t2);
    assert.equal(rec.steps.length, 0, "steps");
  },

  async "steps-repeat-and-conflict"(e, id) {
    const c = e.client();
    const job = { namespace: e.plain, key: e.key(id, "k") };
    const t = (await c.claim(job)).record.token;
    for (const step of ["step 2", "step 3"]) {
      wantStep(step, await c.completeStep({ ...job, token: t, step: "charge", result: "ch_1" }), "charge", StepState.FINISHED, "ch_1", t);
    }
    const other = await caught("step 4", c.completeStep({ ...job, token: t, step: "charge", result: "ch_2" }));
    wantCodeReason("step 4", other, Code.FailedPrecondition, ErrorReason.STEP_ALREADY_FINISHED);
    assert.ok(other instanceof StepAlreadyFinishedError);
    const again = await caught("step 5", c.startStep({ ...job, token: t, step: "charge" }));
    wantCodeReason("step 5", again, Code.FailedPrecondition, ErrorReason.STEP_ALREADY_FINISHED);
    assert.ok(again instanceof StepAlreadyFinishedError);
    const bad = await caught("step 6", c.completeStep({ ...job, token: t, step: "bad\u0007name", result: "x" }));
    wantCodeReason("step 6", bad, Code.InvalidArgument, ErrorReason.INVALID_STEP_NAME);
    const rec = await c.lookup(job);
    assert.equal(rec.steps.length, 1, "steps");
    wantStep("lookup", rec.steps[0], "charge", StepState.FINISHED, "ch_1", t);
  },

  async "steps-unfinished-rerun"(e, id) {
    const c = e.client();
    const job = { namespace: e.plain, key: e.key(id, "k") };
    const t1 = (await c.claim({ ...job, claimant: "holder", leaseTtlMs: 1000 })).record.token;
    await c.startStep({ ...job, token: t1, step: "charge" });
    await sleep(leaseLapse);
    const keys: string[] = [];
    const res = await c.do(job, async (a) => {
      const charge = await a.step("charge", (k) => {
        keys.push(k);
        return "ch_2";
      });
      return charge.value;
    });
    wantValue("step 4", res, "ch_2", false);
    assert.deepEqual(keys, [stepKey(job.namespace, job.key, "charge")], "f's runs and keys");
    const rec = await c.lookup(job);
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(rec.steps.length, 1, "steps");
    wantStep("lookup", rec.steps[0], "charge", StepState.FINISHED, "ch_2", res.record.token);
  },

  async "steps-unfinished-hold"(e, id) {
    const c = e.client();
    const job = { namespace: e.stepHeld, key: e.key(id, "k") };
    const t1 = (await c.claim({ ...job, claimant: "holder", leaseTtlMs: 1000 })).record.token;
    await c.startStep({ ...job, token: t1, step: "charge" });
    await sleep(leaseLapse);
    const calls = new Calls();
    const err = await caught("step 4", c.do(job, calls.mustNotRun()));
    assert.ok(err instanceof UnresolvedError, `step 4: ${String(err)}; want Unresolved`);
    assert.equal(calls.n, 0);
    const rec = await c.lookup(job);
    assert.equal(rec.state, State.UNRESOLVED);
    assert.equal(rec.steps.length, 1, "steps");
    wantStep("lookup", rec.steps[0], "charge", StepState.STARTED, "", t1);
  },

  async "steps-key-vectors"() {
    const file = JSON.parse(readFileSync(SCENARIO_FILE, "utf8")) as { step_key_vectors: StepKeyVector[] };
    const cases = [
      { namespace: "payments", key: "order-42", step: "charge" },
      { namespace: "jobs", key: "k\u00e9y/1", step: "send receipt" },
    ];
    for (const v of cases) {
      const own = "idem-" + createHash("sha256").update(`${v.namespace}\0${v.key}\0${v.step}`, "utf8").digest("hex");
      assert.equal(stepKey(v.namespace, v.key, v.step), own, `stepKey(${JSON.stringify(v)})`);
      const vector = file.step_key_vectors.find((x) => x.namespace === v.namespace && x.key === v.key && x.step === v.step);
      assert.ok(vector, `no step_key_vectors entry for ${JSON.stringify(v)}`);
      assert.equal(own, vector.step_key, `the vector of ${JSON.stringify(v)}`);
    }
  },

  async "resolver-decides-held"(e, id) {
    const c = e.client();
    const ns = e.held;
    const [k1, k2, k3] = ["1", "2", "3"].map((p) => e.key(id, p)) as [string, string, string];
    const tokens = new Map<string, bigint>();
    for (const key of [k1, k2, k3]) {
      tokens.set(key, (await c.claim({ namespace: ns, key, claimant: "holder", leaseTtlMs: 1000 })).record.token);
    }
    await sleep(leaseLapse);
    for (const key of [k1, k2, k3]) {
      await untilHeld(c, ns, key);
    }
    const called: Held[] = [];
    const decide = (h: Held) => {
      if (h.key === k1 || h.key === k2 || h.key === k3) {
        called.push(h);
      }
      return h.key === k1 ? completed("found") : h.key === k2 ? failed("no charge") : h.key === k3 ? release() : cantTell();
    };
    const stop = new AbortController();
    const logged: string[] = [];
    const rpcs = new RpcLog();
    const loop = runResolver(e.client("worker", rpcs), { name: "charges-resolver", namespaces: [ns], pollIntervalMs: 200, signal: stop.signal, log: resolverLog(logged) }, decide);
    try {
      await until(
        "the resolver's decisions",
        async () => (await c.batchLookup([k1, k2, k3].map((key) => ({ namespace: ns, key })))).every((r) => r.ok && r.value.state !== State.UNRESOLVED),
        10_000,
      );
    } finally {
      stop.abort();
    }
    await within("the resolver's return", loop, 10_000);
    // gRPC streams the held records; the Connect protocol's JSON cannot, so the loop polls.
    const [used, unused] = e.transport === "grpc" ? ["WatchHeld", "ListHeld"] : ["ListHeld", "WatchHeld"];
    assert.ok(rpcs.count(used) > 0 && rpcs.count(unused) === 0, `the resolver called ${used} ${rpcs.count(used)} times and ${unused} ${rpcs.count(unused)} times`);
    assert.deepEqual(
      called.map((h) => [h.key, h.token]).sort(),
      [k1, k2, k3].map((key) => [key, tokens.get(key)]).sort(),
      `the function's calls (logged: ${logged.join("; ")})`,
    );
    const calls = new Calls();
    wantValue("do(K1)", await c.do({ namespace: ns, key: k1 }, calls.mustNotRun()), "found", true);
    wantValue("do(K3)", await c.do({ namespace: ns, key: k3 }, calls.returns("again")), "again", false);
    assert.equal(calls.n, 1, "the handlers' runs");
    const h2 = await c.lookupHistory({ namespace: ns, key: k2 });
    assert.equal(h2.record.state, State.FAILED);
    assert.equal(h2.record.error, "no charge");
    const resolved = h2.history.find((t) => t.kind === TimelineEntryKind.RESOLVED);
    assert.ok(resolved, `K2's timeline has no RESOLVED entry: ${h2.history.map((t) => TimelineEntryKind[t.kind]).join(", ")}`);
    assert.equal(resolved.actor.resolver, "charges-resolver");
  },

  async "resolver-cant-tell-and-race"(e, id) {
    const c = e.client();
    const ns = e.held;
    const k = e.key(id, "k");
    await c.claim({ namespace: ns, key: k, claimant: "holder", leaseTtlMs: 1000 });
    await sleep(leaseLapse);
    const held = await untilHeld(c, ns, k);
    let askedAboutK = false;
    const stop = new AbortController();
    const loop = runResolver(c, { name: "cant-tell", namespaces: [ns], pollIntervalMs: 200, signal: stop.signal, log: resolverLog([]) }, (h) => {
      askedAboutK ||= h.key === k;
      return cantTell();
    });
    try {
      await until("the resolver's call for K", () => askedAboutK, 10_000);
    } finally {
      stop.abort();
    }
    await within("the resolver's return", loop, 10_000);
    assert.equal((await c.lookup({ namespace: ns, key: k })).state, State.UNRESOLVED, "step 3");

    const ref = { namespace: ns, key: k, token: held.token };
    const out = await Promise.allSettled([c.resolve({ ...ref, resolver: "a", completed: "x" }), c.resolve({ ...ref, resolver: "b", failed: "y" })]);
    const won = out.filter((o) => o.status === "fulfilled");
    const lost = out.filter((o): o is PromiseRejectedResult => o.status === "rejected");
    assert.equal(won.length, 1, `step 4: ${out.map((o) => (o.status === "rejected" ? String(o.reason) : "ok")).join(", ")}; want exactly one success`);
    const err = lost[0]!.reason;
    wantCodeReason("step 4", err, Code.FailedPrecondition, ErrorReason.NOT_UNRESOLVED);
    assert.ok(err instanceof NotUnresolvedError);
    const rec = await c.lookup({ namespace: ns, key: k });
    if (out[0]!.status === "fulfilled") {
      assert.equal(rec.state, State.COMPLETED);
      assert.equal(text(rec.result), "x");
    } else {
      assert.equal(rec.state, State.FAILED);
      assert.equal(rec.error, "y");
    }
  },
};

const specs = loadScenarios();

describe("the scenario file", () => {
  it("has a TypeScript implementation for every id, and no implementation of an id it does not have", () => {
    const ids = specs.map((s) => s.id);
    assert.equal(new Set(ids).size, ids.length, `${SCENARIO_FILE} has an id twice: ${ids.join(", ")}`);
    for (const s of specs) {
      assert.ok(s.title && s.steps && s.expect, `scenario ${s.id} needs a title, steps and expect`);
      assert.ok(scenarios[s.id], `scenario "${s.id}" of ${SCENARIO_FILE} has no TypeScript implementation: add it to clients/typescript/test/scenarios.test.ts`);
    }
    for (const id of Object.keys(scenarios)) {
      assert.ok(ids.includes(id), `clients/typescript/test/scenarios.test.ts implements scenario "${id}", which ${SCENARIO_FILE} no longer has: remove it`);
    }
  });
});

const transports: TransportKind[] = ["grpc", "connect"];

// The shared scenarios that a second run at the same time would disturb:
// rate-limited measures do() against the one token bucket of the harness's
// limited tenant (5/s, burst 1), and the other transport's run would take
// the tokens its retries wait for, until do() gives up RATE_LIMITED. Its
// two transports take turns, while the other shared scenarios run.
const oneTransportAtATime = new Set(["rate-limited"]);

for (const store of ["postgres", "sqlite"] as const) {
  describe(`scenarios on ${store}`, { timeout: 600_000 }, () => {
    let h: Harness;
    const envs = new Map<TransportKind, Env>();
    before(async () => {
      h = await startHarness(store);
      for (const t of transports) {
        envs.set(t, new Env(h, t));
      }
    });
    after(async () => {
      for (const e of envs.values()) {
        e.close();
      }
      await h?.stop();
    });
    const run = (t: TransportKind, s: ScenarioSpec) => {
      const impl = scenarios[s.id];
      assert.ok(impl, `scenario ${s.id} has no TypeScript implementation`);
      return impl(envs.get(t)!, s.id);
    };

    // The scenarios that leave idemd alone run at once; the exclusive ones,
    // which restart idemd or cut its store, one at a time after them.
    describe("shared", { concurrency: true }, () => {
      for (const s of specs.filter((s) => !s.exclusive && !oneTransportAtATime.has(s.id))) {
        for (const t of transports) {
          it(`${s.id} (${t})`, { timeout: 120_000 }, () => run(t, s));
        }
      }
      for (const id of oneTransportAtATime) {
        const s = specs.find((s) => s.id === id && !s.exclusive);
        assert.ok(s, `${SCENARIO_FILE} has no shared scenario ${id}`);
        describe(id, { concurrency: false }, () => {
          for (const t of transports) {
            it(`${s.id} (${t})`, { timeout: 120_000 }, () => run(t, s));
          }
        });
      }
    });
    describe("exclusive", () => {
      for (const t of transports) {
        for (const s of specs.filter((s) => s.exclusive)) {
          it(`${s.id} (${t})`, { timeout: 120_000 }, async () => {
            try {
              await run(t, s);
            } finally {
              await h.control("/ready");
            }
          });
        }
      }
    });
  });
}
