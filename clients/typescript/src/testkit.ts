/**
 * The duplicate-delivery test kit, "@idemhq/idem/testkit": it runs a
 * worker's handler (the function the worker passes to do()) through the
 * deliveries a real queue produces, against a real idemd, counts the
 * handler's side effect with a counter the test provides, and fails, for
 * each case that did not make the effect exactly once inside the handler,
 * with the window it ran twice (or was lost) in and the remedy. Its cases and words are those of the Go kit
 * (idemtest.CheckHandler).
 *
 * ```ts
 * import { test } from "node:test";
 * import { checkHandler } from "@idemhq/idem/testkit";
 *
 * test("the charge is exactly once", async () => {
 *   const provider = new FakeProvider();
 *   await checkHandler((job) => chargeHandler(provider, job), () => provider.chargesApplied, {
 *     job: { namespace: "payments", key: "order-1042" },
 *   });
 * });
 * ```
 *
 * It starts an idemd of its own on SQLite in a temporary directory (the
 * `idemd` option, IDEMD_BIN, or `idemd` on the PATH), or uses one the test
 * points at (`server`). Node only: it spawns processes and speaks gRPC over
 * Node's HTTP/2.
 *
 * @packageDocumentation
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { IdemClient } from "./client.js";
import type { DoOptions, DoResult, Handler, Job, Attempt } from "./do.js";
import { MAX_WAIT_MS } from "./client.js";
import { CompletionUnknownError, FailureNotRecordedError, InProgressError, LeaseLostError, RpcError, UnresolvedError } from "./errors.js";
import { State } from "./gen/idem/v1/idem_pb.js";
import { grpcTransport } from "./node.js";
import type { JobRecord } from "./record.js";
import { type ResolverFn, runResolver } from "./resolver.js";
import { WORDS } from "./testkit-words.js";

/**
 * MakeHandler returns the handler a worker passes to do() for one delivery
 * of job, built the way the worker builds it from the message it got. The
 * kit calls it once per delivery. Take the job's key from `job.key` rather
 * than from a constant: each case runs on a key of its own, so that what one
 * case leaves downstream cannot answer another's. `worker` is the client of
 * the worker the delivery runs in: a handler that calls idem itself (a
 * Complete of its own token, say) calls it with this client, as a worker's
 * handler calls it with the worker's, so that the kit's faults apply to
 * those calls and the crash-after-complete case can stop the worker right
 * after such a Complete.
 */
export type MakeHandler = (job: Job, worker: IdemClient) => Handler;

/**
 * EffectCounter counts the handler's side effect as the downstream knows it
 * (charges a fake provider applied, rows in your table). The kit reads it
 * before and after each case, and while it runs (around the building of
 * each delivery's handler, around each run of it, when a worker dies), to
 * tell an effect made outside the handler or after it returned.
 */
export type EffectCounter = () => number | Promise<number>;

/** The cases the kit runs, in this order. */
export const Case = {
  /** The job delivered, and once it completed, delivered again: the second delivery replays. */
  TwiceInSequence: "twice-in-sequence",
  /** The job delivered several times at once, then again each copy that found it in progress. */
  Concurrent: "concurrent",
  /** The handler runs under a 1 s lease with heartbeats held; the worker "dies" before Complete; a redelivery waits for the lease to lapse. */
  CrashAfterEffect: "crash-after-effect",
  /**
   * The worker "dies" as soon as a Complete of the record is applied: the
   * handler's own (sent through makeHandler's `worker` while it runs) or
   * do()'s; what the handler does after that is not counted; the job is
   * delivered again.
   */
  CrashAfterComplete: "crash-after-complete",
  /** The handler is held before it starts, with its heartbeats, while its 1 s lease lapses and a second delivery takes over; then it runs. */
  LeaseLapsed: "lease-lapsed",
  /** The first Complete reaches the server and its answer is dropped; the worker retries it; the job is delivered again. */
  CompleteAnswerLost: "complete-answer-lost",
  /** The first delivery fails after the handler returned (its effect made); a second delivery runs it again. */
  RetryableFailure: "retryable-failure",
  /**
   * The handler runs under a 1 s lease with heartbeats held, and the worker
   * "dies" between two of the job's effects: at the first StartStep after a
   * step was recorded FINISHED, or before Complete. The redelivery takes
   * over once the lease lapses: a recorded step does not run again, an
   * effect outside every step does.
   */
  StepsCrashBetweenSteps: "steps-crash-between-steps",
  /**
   * As StepsCrashBetweenSteps, with the worker dying inside the first step,
   * after its effect and before its CompleteStep (before Complete when the
   * handler records no step): the step stays STARTED, and the namespace's
   * on_unfinished_step policy says what the redelivery does.
   */
  StepsCrashInsideStep: "steps-crash-inside-step",
  /**
   * Run after the others only when the `resolver` option gives one: the
   * worker dies inside the first step (before Complete when the handler
   * records no step) in a namespace whose policy holds the job, the
   * redelivery finds it UNRESOLVED, the resolver runs until it decided the
   * record (10 s at most), and the job is delivered again. A resolver that
   * releases a job whose effect happened makes the effect twice; one that
   * cannot tell leaves it held.
   */
  StepsHeldResolver: "steps-held-resolver",
} as const;
export type Case = (typeof Case)[keyof typeof Case];

/** ALL_CASES lists every case the kit runs by default, in the order it runs them: all but StepsHeldResolver. */
export const ALL_CASES: readonly Case[] = Object.values(Case).filter((c) => c !== Case.StepsHeldResolver);

/** RESOLVER_WAIT_MS bounds how long StepsHeldResolver waits for the resolver's decision. */
const RESOLVER_WAIT_MS = 10_000;

/** CheckOptions configure {@link checkHandler} and {@link inspectHandler}. */
export interface CheckOptions {
  /**
   * job is the job the cases deliver: its namespace (whose policy applies),
   * fingerprint, lease and retention. Each case runs on the key
   * `job.key + "." + case` (on a `server` of the test's, with a run id
   * between them: `order-1042.5f2a9c1e.crash-after-effect`). Deliveries whose lease must lapse get a 1 s
   * lease instead. It defaults to namespace "jobs", key "job-1".
   */
  job?: Job;
  /**
   * server is the gRPC URL of a running idemd ("http://127.0.0.1:7070") to
   * run the cases on, instead of starting one. Its policies are whatever it
   * was started with.
   */
  server?: string;
  /** idemd is the idemd binary to start; IDEMD_BIN, or `idemd` on the PATH, by default. */
  idemd?: string;
  /**
   * config is the YAML of an idemd config file (tenants, policies: the
   * on_lease_expiry: hold of a namespace) for the idemd the kit starts.
   * None by default: one tenant without authentication, no policies.
   */
  config?: string;
  /** token is the tenant's bearer token, for a server with tenants. */
  token?: string;
  /**
   * concurrency is how many deliveries the concurrent case makes at once: a
   * whole number, 2 or more (a smaller one counts as 2). It defaults to 8.
   */
  concurrency?: number;
  /** log receives the report of each case that passed (node:test's `t.diagnostic`, say). */
  log?: (report: string) => void;
  /**
   * resolver adds the case StepsHeldResolver, which checks that the
   * function a resolver of yours runs ({@link runResolver}) decides a held
   * job of the handler right: completed when its effect happened, release
   * when it did not. The job's namespace must be held (on_unfinished_step:
   * hold or on_lease_expiry: hold, through `config`). Not run by default.
   */
  resolver?: ResolverFn;
}

/** CaseReport is what one case found. */
export class CaseReport {
  /** title says what the deliveries were. */
  title = "";
  /**
   * effects is how much the effect counter went up during the case (or for
   * a second after it, when it had not moved by its end), leaving out what a
   * handler did after its worker died.
   */
  effects = 0;
  /** outside is how many of the effects happened while the handler of a delivery was being built, before do() claimed the job. */
  outside = 0;
  /** late is how many of the effects happened after the handler that made them returned. */
  late = 0;
  /** runs is how many times the handler ran. */
  runs = 0;
  /** deliveries says what each delivery did, in order. */
  deliveries: string[] = [];
  /** record is the record after the last delivery, if it could be read. */
  record?: JobRecord;
  /** window names where the effect ran more than once (or, after the handler's own Complete, not at all); "" unless the case found such a window. */
  window = "";
  /** remedy is what closes the window. */
  remedy = "";
  /** held says how on_lease_expiry: hold kept the effect at one, when it did. */
  held = "";
  /** finding says what is wrong when it is not one of the windows. */
  finding = "";
  /** error is why the case could not run as designed. */
  error?: Error;
  /**
   * stepEffects is, for a handler that records steps ({@link Attempt.step}),
   * how much the effect counter went up inside each step, by the step's
   * name, and outside every step (""); undefined for a handler that records
   * none. Such a handler makes one effect per step, and at most one outside
   * them.
   */
  stepEffects?: Map<string, number>;
  /** repeatedStep names the step whose effect ran more than once; "" if none did. */
  repeatedStep = "";
  /** repeatedUnrecorded is true when an effect made outside every step ran more than once. */
  repeatedUnrecorded = false;

  /** case is the case that ran. */
  readonly case: Case;
  /** job is the job the case delivered, with the case's own key. */
  readonly job: Job;

  constructor(c: Case, job: Job) {
    this.case = c;
    this.job = job;
  }

  /** ok is true when the case ran and made the effect exactly once (each step's, for a handler that records steps), inside the handler. */
  get ok(): boolean {
    if (this.error !== undefined || this.outside !== 0 || this.late !== 0 || this.finding !== "") {
      return false;
    }
    if (this.stepEffects !== undefined) {
      return this.effects >= 1 && this.repeatedStep === "" && !this.repeatedUnrecorded;
    }
    return this.effects === 1;
  }

  /** toString is the case's report, as the Go kit writes it. */
  toString(): string {
    const m = WORDS.messages;
    // A handler that records steps is judged step by step: the count is the repeated one's.
    let effects = this.effects;
    if (this.repeatedStep !== "" || this.repeatedUnrecorded) {
      effects = this.stepEffects?.get(this.repeatedUnrecorded ? "" : this.repeatedStep) ?? effects;
    }
    const vars = { id: this.case, effects: String(effects), error: this.error?.message ?? "" };
    let head: string;
    if (this.error !== undefined) {
      head = fill(m.error, vars);
    } else if (this.late > 0 && this.outside === 0) {
      head = fill(m.late, vars);
    } else if (this.ok || this.effects === 1) {
      head = fill(m.ok, vars);
    } else if (this.effects > 1) {
      head = fill(m.more, vars);
    } else if (this.window !== "") {
      head = fill(m.lost, vars);
    } else {
      head = fill(m.none, vars);
    }
    const lines = [this.title, ...this.deliveries];
    if (this.record !== undefined) {
      lines.push(fill(m.record, { state: State[this.record.state] ?? String(this.record.state), attempt: String(this.record.attempt), token: String(this.record.token) }));
    }
    if (this.window !== "") {
      lines.push(fill(m.window, { text: this.window }), fill(m.remedy, { text: this.remedy }));
    }
    if (this.held !== "") {
      lines.push(fill(m.held, { text: this.held }));
    }
    if (this.finding !== "") {
      lines.push(this.finding);
    }
    return [head, ...lines].join("\n  ");
  }
}

/** Report is what the kit found, case by case. */
export class Report {
  constructor(readonly cases: CaseReport[]) {}

  /** case returns the report of case c, or undefined. */
  case(c: Case): CaseReport | undefined {
    return this.cases.find((r) => r.case === c);
  }

  /** failed returns the reports of the cases that did not make the effect once. */
  failed(): CaseReport[] {
    return this.cases.filter((r) => !r.ok);
  }

  toString(): string {
    return this.cases.map(String).join("\n");
  }
}

/** CheckFailedError is what {@link checkHandler} throws: its message is the report of every failed case. */
export class CheckFailedError extends Error {
  override name = "CheckFailedError";
  constructor(readonly report: Report) {
    super(report.failed().map(String).join("\n"));
  }
}

/**
 * checkHandler runs every case against the handlers makeHandler makes, each
 * delivery through do() on a client of its own (a worker process of its
 * own), and throws a {@link CheckFailedError} whose message is the report of
 * each case where the effect did not happen exactly once: the count, what
 * every delivery did and the window and the remedy, or what else is wrong. It resolves to the report when every case passed.
 *
 * The windows are driven by controls, not timing: a 1 s lease (the server's
 * minimum) whose heartbeats are held, a Claim that waits on the server for
 * the lease to lapse, a Complete that is not sent, a Complete whose answer
 * is dropped after the server applied it. The faults live in the kit's
 * clients (a Connect interceptor); idemd is the one you run in production.
 */
export async function checkHandler(makeHandler: MakeHandler, effects: EffectCounter, options: CheckOptions = {}): Promise<Report> {
  const report = await inspectHandler(makeHandler, effects, options);
  for (const c of report.cases) {
    if (c.ok) {
      options.log?.(String(c));
    }
  }
  if (report.failed().length > 0) {
    throw new CheckFailedError(report);
  }
  return report;
}

/**
 * inspectHandler runs the cases of {@link checkHandler} and resolves to the
 * report without throwing for what it found, for a test that asserts what
 * the kit finds. It rejects only for a bad option or when idemd cannot be
 * started.
 */
export async function inspectHandler(makeHandler: MakeHandler, effects: EffectCounter, options: CheckOptions = {}): Promise<Report> {
  const job: Job = options.job ?? { namespace: "jobs", key: "job-1" };
  const concurrency = Math.max(options.concurrency ?? 8, 2);
  if (!Number.isInteger(concurrency)) {
    throw new RangeError(`idem: concurrency is ${String(options.concurrency)}; it must be a whole number of deliveries (2 or more; 8 by default)`);
  }
  let idemd: Idemd | undefined;
  let server = options.server;
  if (server === undefined) {
    idemd = await startIdemd({ bin: options.idemd, config: options.config });
    server = idemd.grpcUrl;
  }
  // A server the test points at keeps the records of earlier runs (for the
  // retention, a day by default): a run of its own keeps their keys apart.
  const run = idemd === undefined ? `.${randomUUID().slice(0, 8)}` : "";
  const k = new Kit(server, options.token, makeHandler, effects, job, concurrency, run, options.resolver);
  try {
    const cases: CaseReport[] = [];
    for (const c of options.resolver ? [...ALL_CASES, Case.StepsHeldResolver] : ALL_CASES) {
      cases.push(await k.runCase(c));
    }
    return new Report(cases);
  } finally {
    k.close();
    await idemd?.stop();
  }
}

/** Idemd is an idemd process the kit started. */
export interface Idemd {
  /** grpcUrl is its gRPC listener ("http://127.0.0.1:N"). */
  grpcUrl: string;
  /** jsonUrl is its HTTP/JSON (Connect) listener. */
  jsonUrl: string;
  /** stop stops it and removes its data directory. */
  stop(): Promise<void>;
}

/** StartIdemdOptions configure {@link startIdemd}. */
export interface StartIdemdOptions {
  /** bin is the idemd binary; IDEMD_BIN, or `idemd` on the PATH, by default. */
  bin?: string;
  /** config is the YAML of an idemd config file to serve. None by default. */
  config?: string;
}

// idemd has no release to download yet: a clone builds it.
const GET_IDEMD = "To get idemd: in a clone of https://github.com/idemhq/idem, `make install` (it says where it puts idemd) or `make build` (bin/idemd).";

/**
 * startIdemd starts idemd on SQLite in a new temporary directory, on
 * loopback ports the system picks, and resolves once it serves. The
 * IDEM_* variables of the environment do not reach it, so it never runs on
 * the database of a developer's shell.
 */
export async function startIdemd(options: StartIdemdOptions = {}): Promise<Idemd> {
  const bin = options.bin ?? process.env.IDEMD_BIN ?? "idemd";
  const dir = await mkdtemp(path.join(tmpdir(), "idem-testkit-"));
  const args = ["serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", "127.0.0.1:0",
    "--sweep-interval", "0", "--log-format", "json"];
  if (options.config !== undefined) {
    const file = path.join(dir, "idemd.yaml");
    await writeFile(file, options.config);
    args.push("--config", file);
  }
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("IDEM_")));
  let child: ChildProcess;
  try {
    child = spawn(bin, args, { env, stdio: ["ignore", "ignore", "pipe"] });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  const log: string[] = [];
  const served = new Promise<{ listen: string; json_listen: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`idem testkit: ${bin} did not serve within 60 s:\n${log.join("\n")}`)), 60_000);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(new Error(`idem testkit: cannot start ${bin}: ${err.message}; give the idemd option, set IDEMD_BIN, or put idemd on the PATH. ${GET_IDEMD}`));
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`idem testkit: ${bin} exited (${code ?? signal}) before it served:\n${log.join("\n")}`));
    });
    readline.createInterface({ input: child.stderr! }).on("line", (line) => {
      log.push(line);
      if (log.length > 200) {
        log.shift();
      }
      try {
        const m = JSON.parse(line) as { msg?: string; listen?: string; json_listen?: string };
        if (m.msg === "idemd serving" && m.listen && m.json_listen) {
          clearTimeout(timer);
          resolve({ listen: m.listen, json_listen: m.json_listen });
        }
      } catch {
        // not a JSON line: kept in the log
      }
    });
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const addrs = await served;
    return { grpcUrl: `http://${addrs.listen}`, jsonUrl: `http://${addrs.json_listen}`, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

// TERMS are this package's names for what the remedies point at.
const TERMS = {
  takeover: "attempt.takeover",
  token_field: "attempt.token",
  permanent: "permanent(err)",
  lost_check: "attempt.signal.throwIfAborted()",
  worker_client: "makeHandler's second argument",
  step_call: "attempt.step(name, fn)",
  step_key_call: "attempt.stepKey(name)",
};

/** fill replaces each {name} in s with vars[name]. */
function fill(s: string, vars: Record<string, string>): string {
  return s.replace(/\{([a-z_]+)\}/g, (all, name: string) => vars[name] ?? all);
}

/** caseWords is the text of case c in the words file. */
function caseWords(c: Case): {
  id: string;
  title: string;
  window?: string;
  remedy?: string;
  held?: string;
  window_unrecorded?: string;
  remedy_unrecorded?: string;
  undecided?: string;
  not_held?: string;
} {
  const cw = WORDS.cases.find((x) => x.id === c);
  if (cw === undefined) {
    throw new Error(`idem testkit: the words have no case ${c}`);
  }
  return cw;
}

/** errAfterEffect is the error the retryable-failure case's first delivery throws after the handler returned. */
class AfterEffectError extends Error {
  override name = "AfterEffectError";
}

/** LATE_WAIT_MS is how long a case whose effect counter did not move waits for an effect that comes after the handler returned, before it reports none. */
const LATE_WAIT_MS = 1000;

/**
 * Faults are what the kit does to one worker's calls, in its transport: the
 * server sees only what a real worker sent. Once the worker died, it sends
 * nothing more.
 */
class Faults {
  /** running: the handler runs. */
  running = false;
  /** ownCall: the handler sent a Complete or Fail of its own through the worker. */
  ownCall = false;
  /** died: the worker died (see dieBeforeComplete, dieAfterComplete). */
  died = false;
  /** diedIn: the worker died while the handler ran. */
  diedIn = false;
  /** atDeath is the effect counter when the worker died. */
  atDeath = 0;
  /** answerLost: the Complete was applied and its answer dropped. */
  answerLost = false;
  /** effects is the effect counter, read when the worker dies. */
  effects: EffectCounter = () => 0;
  /** stepDone: a CompleteStep of the worker was applied. */
  stepDone = false;
  /** stepsSeen: the handler recorded (or began to record) a step. */
  stepsSeen = false;
  /** openStep is the step whose effect the counter sees now; "" outside every step. */
  openStep = "";
  /** mark is the effect counter when what it saw was last charged to a step. */
  mark = 0;
  /** stepEffects is what the counter saw while the handler ran, by the step open then, in the order steps opened. */
  readonly stepEffects = new Map<string, number>();

  constructor(
    readonly holdHeartbeats = false,
    /** dieBeforeComplete: the worker dies before its first Complete (the handler's own, or do()'s) goes out. */
    readonly dieBeforeComplete = false,
    readonly loseCompleteAnswer = false,
    /** dieAfterComplete: the worker dies as soon as its first Complete is applied, before it hears the answer. */
    readonly dieAfterComplete = false,
    /** dieBetweenSteps: the worker dies at the first StartStep, CompleteStep or Complete after a CompleteStep was applied, or at Complete when none was. */
    readonly dieBetweenSteps = false,
    /** dieInStep: the worker dies inside a step, after its effect: its first CompleteStep (or, with no step, its Complete) never goes out. */
    readonly dieInStep = false,
  ) {}

  async die(): Promise<void> {
    const inHandler = this.running;
    this.atDeath = await this.effects();
    if (inHandler) {
      this.attribute(this.atDeath);
    }
    this.died = true;
    this.diedIn = inHandler;
  }

  /** start marks the handler running, the counter at at. */
  start(at: number): void {
    this.mark = at;
    this.running = true;
  }

  /** stop marks the handler returned, the counter at at. */
  stop(at: number): void {
    if (!this.died) {
      this.attribute(at);
    }
    this.running = false;
  }

  /** attribute charges what the counter saw since the last mark, at at, to the open step. */
  attribute(at: number): void {
    const d = at - this.mark;
    if (d !== 0 && this.running) {
      this.stepEffects.set(this.openStep, (this.stepEffects.get(this.openStep) ?? 0) + d);
    }
    this.mark = at;
  }

  /** openStepNamed opens step name: what the counter sees from now on is its effect. */
  async openStepNamed(name: string): Promise<void> {
    const at = await this.effects();
    if (this.openStep !== name) {
      this.attribute(at);
    }
    this.openStep = name;
    this.stepsSeen = true;
  }

  /** closeStep closes the open step once its CompleteStep was applied. */
  async closeStep(): Promise<void> {
    this.attribute(await this.effects());
    this.openStep = "";
    this.stepDone = true;
  }

  interceptor(): Interceptor {
    return (next) => async (req) => {
      const method = req.method.name;
      if (this.running && (method === "Complete" || method === "Fail")) {
        this.ownCall = true;
      }
      if (this.died) {
        // Not a code do() retries.
        throw new ConnectError("idem testkit: the worker is dead and sends nothing", Code.Unknown);
      }
      if (method === "StartStep") {
        if (this.dieBetweenSteps && this.stepDone) {
          await this.die();
          throw new ConnectError("idem testkit: the worker died between two steps", Code.Unknown);
        }
        await this.openStepNamed((req.message as unknown as { step: string }).step);
      }
      if (method === "CompleteStep") {
        await this.openStepNamed((req.message as unknown as { step: string }).step);
        if (this.dieInStep || (this.dieBetweenSteps && this.stepDone)) {
          await this.die();
          throw new ConnectError("idem testkit: the worker died before its CompleteStep went out", Code.Unknown);
        }
        const res = await next(req);
        await this.closeStep();
        return res;
      }
      if (method === "Heartbeat" && this.holdHeartbeats) {
        // Held until the call ends (its timeout, or do() stopping the beats).
        await new Promise<void>((resolve) => {
          if (req.signal.aborted) {
            resolve();
          } else {
            req.signal.addEventListener("abort", () => resolve(), { once: true });
          }
        });
        throw new ConnectError("idem testkit: the heartbeat was held", Code.DeadlineExceeded);
      }
      if (method === "Complete") {
        if (this.dieBeforeComplete || this.dieBetweenSteps || this.dieInStep) {
          await this.die();
          throw new ConnectError("idem testkit: the worker died before its Complete went out", Code.Unknown);
        }
        if (this.dieAfterComplete) {
          await next(req); // not applied: it throws, and the worker lives on
          await this.die();
          throw new ConnectError("idem testkit: the worker died once its Complete was applied", Code.Unknown);
        }
        if (this.loseCompleteAnswer && !this.answerLost) {
          await next(req); // not applied: the next try is the one whose answer is lost
          this.answerLost = true;
          throw new ConnectError("idem testkit: the server applied the Complete, and its answer was lost", Code.Unavailable);
        }
      }
      return next(req);
    };
  }
}

/** Wrap is what the kit does around the handler of one delivery. */
interface Wrap {
  /** stall, when set, runs before the handler: it starts once stall resolves. */
  stall?: (signal: AbortSignal) => Promise<void>;
  /** failAfter makes the delivery fail once the handler returned. */
  failAfter?: boolean;
}

type Outcome = "completed" | "replayed" | "in_progress" | "unresolved" | "lease_lost" | "died" | "released" | "not_released" | "failed";
const OUTCOME_ORDER: Outcome[] = ["completed", "replayed", "in_progress", "unresolved", "lease_lost", "died", "released", "not_released", "failed"];

/** Delivery is one delivery of a job to a worker of its own, and what became of it. */
class Delivery {
  faults = new Faults();
  /** handler is the handler as built for this delivery (undefined until the worker's client exists). */
  handler?: Handler;
  /** built, during and zombie are what the effect counter saw while the handler was built, while it ran (until its worker died, when it died in it), and after that. */
  built = 0;
  during = 0;
  zombie = 0;
  /** ended is the state the handler left the record in when it ended the record itself through a client the kit does not see. */
  ended = "";
  ran?: Attempt;
  result?: DoResult;
  error?: unknown;
  constructor(
    readonly job: Job,
    readonly wrap: Wrap,
  ) {}

  outcome(): Outcome {
    const err = this.error;
    if (this.faults.died && this.ran !== undefined) {
      return "died";
    }
    if (err === undefined) {
      return this.result?.replayed ? "replayed" : "completed";
    }
    if (err instanceof InProgressError) {
      return "in_progress";
    }
    if (err instanceof UnresolvedError) {
      return "unresolved";
    }
    if (err instanceof LeaseLostError || (err instanceof FailureNotRecordedError && err.failError instanceof LeaseLostError)) {
      return "lease_lost"; // the Complete, or the Fail of the handler's error, was refused
    }
    if (this.wrap.failAfter && err instanceof FailureNotRecordedError && err.handlerError instanceof AfterEffectError) {
      return "not_released";
    }
    if (this.wrap.failAfter && err instanceof AfterEffectError) {
      return "released";
    }
    return "failed";
  }

  /** lostAtOwnComplete: the worker died right after the handler's own Complete was applied, before the handler made its effect. */
  lostAtOwnComplete(): boolean {
    return this.faults.died && this.faults.diedIn && this.faults.dieAfterComplete && this.during <= 0;
  }

  line(): string {
    const m = WORDS.messages;
    let ran = "";
    if (this.ran !== undefined) {
      ran = fill(this.wrap.stall ? m.ran_stalled : m.ran, { attempt: String(this.ran.number), token: String(this.ran.token) });
    }
    let end: string;
    switch (this.outcome()) {
      case "completed":
        end = this.faults.answerLost ? m.answer_lost : this.wrap.stall ? m.late_complete : m.completed;
        break;
      case "replayed":
        return m.replayed;
      case "in_progress":
        return m.in_progress;
      case "unresolved":
        return m.unresolved;
      case "lease_lost":
        end = m.lease_lost;
        break;
      case "died":
        end = this.faults.dieAfterComplete ? (this.faults.diedIn ? m.died_after_own_complete : m.died_after_complete) : m.died;
        break;
      case "released":
        end = m.released;
        break;
      case "not_released": {
        const failError = (this.error as FailureNotRecordedError).failError;
        const reason = failError instanceof RpcError && failError.reasonName !== "" ? failError.reasonName : messageOf(failError);
        end = fill(m.not_released, { reason });
        break;
      }
      default:
        end = fill(m.failed, { error: messageOf(this.error) });
    }
    return ran === "" ? end : `${ran}; ${end}`;
  }
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Kit runs the cases of one checkHandler call. */
class Kit {
  readonly #lookups: IdemClient;

  constructor(
    readonly server: string,
    readonly token: string | undefined,
    readonly makeHandler: MakeHandler,
    readonly effects: EffectCounter,
    readonly job: Job,
    readonly concurrency: number,
    readonly run: string,
    readonly resolver?: ResolverFn,
  ) {
    this.#lookups = new IdemClient(grpcTransport({ baseUrl: server, token }));
  }

  close(): void {
    this.#lookups.close();
  }

  /** deliver builds the handler of a delivery of job and sends it (see send). */
  async deliver(job: Job, faults = new Faults(), wrap: Wrap = {}, opts: DoOptions = {}): Promise<Delivery> {
    const d = new Delivery(job, wrap);
    d.faults = faults;
    return this.send(await this.build(d), opts);
  }

  /**
   * build makes the worker of delivery d (a client of its own, with d's
   * faults in its transport) and builds its handler, as a worker builds it
   * from the message it got, counting what the effect counter saw
   * meanwhile: an effect made there happens on every delivery, outside
   * do().
   */
  async build(d: Delivery): Promise<{ d: Delivery; client: IdemClient }> {
    // Quick retries: the answer-lost case's retried Complete need not wait
    // the production backoff.
    const client = new IdemClient(grpcTransport({ baseUrl: this.server, token: this.token, interceptors: [d.faults.interceptor()] }), {
      retry: { baseDelayMs: 10, maxDelayMs: 200 },
    });
    d.faults.effects = this.effects;
    const before = await this.effects();
    try {
      d.handler = this.makeHandler(d.job, client);
    } catch (err) {
      d.error = err;
    }
    d.built = (await this.effects()) - before;
    return { d, client };
  }

  /** send delivers d's job to its worker, which runs the handler through do(). */
  async send({ d, client }: { d: Delivery; client: IdemClient }, opts: DoOptions = {}): Promise<Delivery> {
    const { wrap, faults, job } = d;
    try {
      if (d.handler === undefined) {
        return d; // building it threw: d.error says what
      }
      const handler = d.handler;
      d.result = await client.do(
        job,
        async (attempt) => {
          if (wrap.stall) {
            await wrap.stall(attempt.signal);
          }
          d.ran = attempt;
          const start = await this.effects();
          faults.start(start);
          try {
            const v = await handler(attempt);
            if (wrap.failAfter) {
              throw new AfterEffectError(WORDS.messages.injected_failure);
            }
            return v;
          } finally {
            const returned = await this.effects();
            faults.stop(returned);
            if (faults.died && faults.diedIn) {
              d.during = faults.atDeath - start;
              d.zombie = returned - faults.atDeath;
            } else {
              d.during = returned - start;
            }
            d.ended = await this.endedUnseen(job, attempt, faults);
          }
        },
        opts,
      );
    } catch (err) {
      d.error = err;
    } finally {
      client.close();
    }
    return d;
  }

  /**
   * endedUnseen is the state the handler of attempt left job's record in,
   * when it ended the record itself (Complete or Fail with its token)
   * through a client other than its worker's; "" otherwise.
   */
  async endedUnseen(job: Job, attempt: Attempt, faults: Faults): Promise<string> {
    if (faults.ownCall) {
      return "";
    }
    try {
      const rec = await this.#lookups.lookup({ namespace: job.namespace, key: job.key });
      return rec.token === attempt.token && rec.state !== State.PROCESSING ? (State[rec.state] ?? String(rec.state)) : "";
    } catch {
      return "";
    }
  }

  /** awaitLateEffects waits up to LATE_WAIT_MS for the effect counter to move past end, and resolves with by how much it did. */
  async awaitLateEffects(end: number): Promise<number> {
    const deadline = Date.now() + LATE_WAIT_MS;
    for (;;) {
      const moved = (await this.effects()) - end;
      if (moved > 0 || Date.now() >= deadline) {
        return Math.max(moved, 0);
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /**
   * resolve runs the resolver of the `resolver` option until it decided
   * job's held record, for RESOLVER_WAIT_MS at most, and reports whether it
   * did.
   */
  async resolve(job: Job): Promise<boolean> {
    const stop = new AbortController();
    const loop = runResolver(this.#lookups, { name: "idem-testkit", namespaces: [job.namespace], signal: stop.signal, log: () => {} }, this.resolver!).catch(() => {});
    const deadline = Date.now() + RESOLVER_WAIT_MS;
    try {
      for (;;) {
        try {
          const rec = await this.#lookups.lookup({ namespace: job.namespace, key: job.key });
          if (rec.state !== State.UNRESOLVED) {
            return true;
          }
        } catch {
          // asked again below
        }
        if (Date.now() >= deadline) {
          return false;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      stop.abort();
      await loop;
    }
  }

  async runCase(c: Case): Promise<CaseReport> {
    const cw = caseWords(c);
    const job: Job = { ...this.job, key: `${this.job.key}${this.run}.${c}` };
    const cr = new CaseReport(c, job);
    cr.title = fill(cw.title, { n: String(this.concurrency) });
    // The deliveries whose lease must lapse hold it for the server's
    // minimum, and their heartbeats do not get through.
    const lapsing: Job = { ...job, leaseTtlMs: 1000 };
    const waitForLapse: DoOptions = { waitMs: MAX_WAIT_MS };

    const before = await this.effects();
    let ds: Delivery[] = [];
    let decided = false; // by the resolver of StepsHeldResolver
    switch (c) {
      case Case.TwiceInSequence:
        ds.push(await this.deliver(job));
        ds.push(await this.deliver(job));
        break;
      case Case.Concurrent: {
        // Built one after the other before any is sent, so that what
        // building one makes is counted as its own.
        const built = [];
        for (let i = 0; i < this.concurrency; i++) {
          built.push(await this.build(new Delivery(job, {})));
        }
        ds = await Promise.all(built.map((b) => this.send(b)));
        ds.sort((a, b) => OUTCOME_ORDER.indexOf(a.outcome()) - OUTCOME_ORDER.indexOf(b.outcome()));
        for (const d of ds.slice(0, this.concurrency)) {
          if (d.outcome() === "in_progress") {
            ds.push(await this.deliver(job)); // the queue redelivers it
          }
        }
        break;
      }
      case Case.CrashAfterEffect:
        ds.push(await this.deliver(lapsing, new Faults(true, true)));
        ds.push(await this.deliver(job, undefined, {}, waitForLapse));
        break;
      case Case.CrashAfterComplete:
        // A lapsing lease, so that a record the dead worker left PROCESSING
        // is taken over by the redelivery.
        ds.push(await this.deliver(lapsing, new Faults(false, false, false, true)));
        ds.push(await this.deliver(job, undefined, {}, waitForLapse));
        break;
      case Case.LeaseLapsed: {
        let acquired!: () => void;
        let resume!: () => void;
        const acquiredP = new Promise<void>((r) => (acquired = r));
        const resumeP = new Promise<void>((r) => (resume = r));
        const stall = async (signal: AbortSignal) => {
          acquired();
          await Promise.race([resumeP, new Promise<void>((r) => signal.addEventListener("abort", () => r(), { once: true }))]);
          signal.throwIfAborted();
        };
        const stalled = new Delivery(lapsing, { stall });
        stalled.faults = new Faults(true);
        const first = this.send(await this.build(stalled));
        const firstDone = first.then(() => "done" as const);
        let second: Delivery | undefined;
        if ((await Promise.race([acquiredP.then(() => "acquired" as const), firstDone])) === "acquired") {
          second = await this.deliver(job, undefined, {}, waitForLapse);
        }
        resume();
        ds.push(await first);
        if (second !== undefined) {
          ds.push(second);
        }
        break;
      }
      case Case.CompleteAnswerLost:
        ds.push(await this.deliver(job, new Faults(false, false, true)));
        ds.push(await this.deliver(job));
        break;
      case Case.RetryableFailure:
        ds.push(await this.deliver(job, undefined, { failAfter: true }));
        ds.push(await this.deliver(job));
        break;
      case Case.StepsCrashBetweenSteps:
        ds.push(await this.deliver(lapsing, new Faults(true, false, false, false, true)));
        ds.push(await this.deliver(job, undefined, {}, waitForLapse));
        break;
      case Case.StepsCrashInsideStep:
        ds.push(await this.deliver(lapsing, new Faults(true, false, false, false, false, true)));
        ds.push(await this.deliver(job, undefined, {}, waitForLapse));
        break;
      case Case.StepsHeldResolver:
        ds.push(await this.deliver(lapsing, new Faults(true, false, false, false, false, true)));
        ds.push(await this.deliver(job, undefined, {}, waitForLapse));
        if (ds[1]!.outcome() === "unresolved") {
          decided = await this.resolve(job);
          ds.push(await this.deliver(job));
        }
        break;
    }
    const end = await this.effects();

    // What the counter saw, by when it moved: while a handler was built,
    // while one ran (before its worker died), after a dead worker's, and
    // the rest, which came after the handler that made it returned.
    let during = 0;
    let zombie = 0;
    for (const d of ds) {
      cr.outside += d.built;
      during += d.during;
      zombie += d.zombie;
    }
    const lost = ds.some((d) => d.lostAtOwnComplete());
    cr.effects = end - before - zombie;
    cr.late = Math.max(cr.effects - cr.outside - during, 0);
    cr.runs = ds.filter((d) => d.ran !== undefined).length;
    const order = stepEffects(cr, ds);
    cr.deliveries = describe(ds);
    try {
      cr.record = await this.#lookups.lookup({ namespace: job.namespace, key: job.key });
    } catch {
      // no record line
    }
    cr.error = caseError(c, ds);
    if (cr.error !== undefined) {
      return cr;
    }
    if (cr.runs > 0 && cr.effects <= 0 && !lost) {
      const moved = await this.awaitLateEffects(end);
      cr.effects += moved;
      cr.late += moved;
    }

    const vars: Record<string, string> = {
      namespace: job.namespace,
      key: job.key,
      effects: String(cr.effects),
      runs: String(cr.runs),
      deliveries: String(ds.length),
      outside: String(cr.outside),
      late: String(cr.late),
      ...TERMS,
    };
    const m = WORDS.messages;
    const held = ds.some((d) => d.outcome() === "unresolved");
    if (cr.outside > 0) {
      cr.finding = fill(m.outside_effects, vars);
    } else if (cr.late > 0) {
      cr.finding = fill(m.late_effect, vars);
    } else if (lost && cr.effects <= 0) {
      cr.window = fill(cw.window ?? "", vars);
      cr.remedy = fill(cw.remedy ?? "", vars);
    } else if (cr.effects <= 0) {
      cr.finding = fill(m.no_effect, vars);
    } else if (c === Case.StepsHeldResolver) {
      judgeResolver(cr, cw, order, vars, held, decided);
    } else if (cr.stepEffects !== undefined) {
      judgeSteps(cr, cw, order, vars, held);
    } else if (cr.effects > 1 && isStepsCase(c)) {
      // No step recorded: the effect that ran again is outside every step.
      cr.repeatedUnrecorded = true;
      cr.window = fill(cw.window_unrecorded ?? cw.window ?? "", vars);
      cr.remedy = fill(cw.remedy_unrecorded ?? "", vars);
    } else if (cr.effects > cr.runs) {
      cr.finding = fill(m.extra_effects, vars);
    } else if (cr.effects > 1 && (!cw.window || c === Case.CrashAfterComplete)) {
      cr.finding = fill(m.extra_runs, vars);
    } else if (cr.effects > 1) {
      cr.window = fill(cw.window ?? "", vars);
      cr.remedy = fill(cw.remedy ?? "", vars);
    } else if (held && cw.held) {
      cr.held = fill(cw.held, vars);
    }
    return cr;
  }
}

/** caseError is why case c could not run as designed, or undefined. */
function caseError(c: Case, ds: Delivery[]): Error | undefined {
  const m = WORDS.messages;
  for (const d of ds) {
    // A record ended where the kit cannot see it explains a failure that
    // follows, and leaves the crash-after-complete case blind.
    if (d.ended !== "" && (c === Case.CrashAfterComplete || d.outcome() === "failed")) {
      return new Error(fill(m.ended_unseen, { state: d.ended, worker_client: TERMS.worker_client }));
    }
  }
  for (const d of ds) {
    if (d.outcome() === "failed") {
      if (d.ran !== undefined && !(d.error instanceof CompletionUnknownError)) {
        return new Error(fill(m.handler_failed, { error: messageOf(d.error) }));
      }
      return d.error instanceof Error ? d.error : new Error(String(d.error));
    }
  }
  const first = ds[0]!;
  if (c === Case.CrashAfterEffect && !first.faults.died) {
    return new Error("the first delivery did not reach its Complete");
  }
  if (c === Case.CrashAfterComplete && !first.faults.died) {
    return new Error("no Complete of the first delivery was applied");
  }
  if (c === Case.CompleteAnswerLost && !first.faults.answerLost) {
    return new Error("the first delivery's Complete was not applied");
  }
  if ((isStepsCase(c) || c === Case.StepsHeldResolver) && !first.faults.died) {
    return new Error("the first delivery did not reach the step call or the Complete its worker dies at");
  }
  if (c === Case.LeaseLapsed && ds.length < 2) {
    return new Error("the first delivery did not acquire the job");
  }
  if (ds[ds.length - 1]!.outcome() === "in_progress") {
    return new Error(`the last delivery still found the job in progress (after waiting up to ${MAX_WAIT_MS / 1000}s for a lease to lapse)`);
  }
  return undefined;
}

/** isStepsCase reports whether c is one of the cases of a job with several effects. */
function isStepsCase(c: Case): boolean {
  return c === Case.StepsCrashBetweenSteps || c === Case.StepsCrashInsideStep;
}

/**
 * stepEffects sums into cr what the deliveries' handlers made inside each
 * step and outside them, and returns the steps in the order they first
 * opened; cr.stepEffects stays undefined when no handler recorded a step.
 */
function stepEffects(cr: CaseReport, ds: Delivery[]): string[] {
  const order: string[] = [];
  if (!ds.some((d) => d.faults.stepsSeen)) {
    return order;
  }
  // Every delivery counts, also one that sent no step call: its steps were
  // all FINISHED and replayed, and what it made was outside every step.
  cr.stepEffects = new Map();
  for (const d of ds) {
    for (const [name, n] of d.faults.stepEffects) {
      if (!order.includes(name)) {
        order.push(name);
      }
      cr.stepEffects.set(name, (cr.stepEffects.get(name) ?? 0) + n);
    }
  }
  return order;
}

/**
 * judgeResolver reports StepsHeldResolver: the record was not held, the
 * resolver left it held, or an effect ran twice after its decision.
 */
function judgeResolver(cr: CaseReport, cw: ReturnType<typeof caseWords>, order: string[], vars: Record<string, string>, held: boolean, decided: boolean): void {
  if (!held) {
    cr.finding = fill(cw.not_held ?? "", vars);
    return;
  }
  if (!decided) {
    cr.finding = fill(cw.undecided ?? "", vars);
    return;
  }
  let repeated = cr.stepEffects === undefined && cr.effects > 1;
  if (cr.stepEffects !== undefined) {
    const name = order.find((n) => (cr.stepEffects!.get(n) ?? 0) > 1);
    if (name !== undefined) {
      cr.repeatedStep = name;
      cr.repeatedUnrecorded = name === "";
      repeated = true;
    }
  } else if (repeated) {
    cr.repeatedUnrecorded = true;
  }
  if (repeated) {
    cr.window = fill(cw.window ?? "", vars);
    cr.remedy = fill(cw.remedy ?? "", vars);
  }
}

/**
 * judgeSteps names, for a handler that records steps, the first step whose
 * effect ran more than once, or the effect outside every step that did,
 * with the case's window and remedy for it.
 */
function judgeSteps(cr: CaseReport, cw: ReturnType<typeof caseWords>, order: string[], vars: Record<string, string>, held: boolean): void {
  const m = WORDS.messages;
  const effects = cr.stepEffects!;
  const repeated = order.find((name) => name !== "" && (effects.get(name) ?? 0) > 1);
  if (repeated !== undefined) {
    cr.repeatedStep = repeated;
    vars = { ...vars, step: repeated, effects: String(effects.get(repeated)) };
    if (!cw.window) {
      cr.finding = fill(m.extra_runs, vars);
      return;
    }
    // A step run again is closed by its key, whatever the window; between
    // steps it runs again only when its name changed.
    const remedy = cw.id === Case.StepsCrashBetweenSteps ? cw.remedy : caseWords(Case.StepsCrashInsideStep).remedy;
    cr.window = fill(cw.window, vars);
    cr.remedy = fill(remedy ?? "", vars);
    return;
  }
  if ((effects.get("") ?? 0) > 1) {
    cr.repeatedUnrecorded = true;
    vars = { ...vars, effects: String(effects.get("")) };
    if (!cw.window) {
      cr.finding = fill(m.extra_runs, vars);
      return;
    }
    cr.window = fill(cw.window_unrecorded ?? cw.window, vars);
    cr.remedy = fill(cw.remedy_unrecorded ?? caseWords(Case.StepsCrashBetweenSteps).remedy_unrecorded ?? "", vars);
    return;
  }
  if (held && cw.held) {
    cr.held = fill(cw.held, vars);
  }
}

/** describe is the report's lines for ds: one per delivery, or one for a run of deliveries that did the same. */
function describe(ds: Delivery[]): string[] {
  const m = WORDS.messages;
  const out: string[] = [];
  for (let i = 0; i < ds.length; ) {
    const what = ds[i]!.line();
    let j = i + 1;
    while (j < ds.length && ds[j]!.line() === what) {
      j++;
    }
    out.push(j - i === 1 ? fill(m.delivery, { i: String(i + 1), what }) : fill(m.deliveries, { i: String(i + 1), to: String(j), what }));
    i = j;
  }
  return out;
}
