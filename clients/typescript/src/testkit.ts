/**
 * The duplicate-delivery test kit, "@idemhq/idem/testkit": it runs a
 * worker's handler (the function the worker passes to do()) through the
 * deliveries a real queue produces, against a real idemd, counts the
 * handler's side effect with a counter the test provides, and fails, for
 * each case that made the effect more than once, with the window it ran
 * twice in and the remedy. Its cases and words are those of the Go kit
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
import { CompletionUnknownError, InProgressError, LeaseLostError, UnresolvedError } from "./errors.js";
import { State } from "./gen/idem/v1/idem_pb.js";
import { grpcTransport } from "./node.js";
import type { JobRecord } from "./record.js";
import { WORDS } from "./testkit-words.js";

/**
 * MakeHandler returns the handler a worker passes to do() for one delivery
 * of job, built the way the worker builds it from the message it got. The
 * kit calls it once per delivery. Take the job's key from `job.key` rather
 * than from a constant: each case runs on a key of its own, so that what one
 * case leaves downstream cannot answer another's.
 */
export type MakeHandler = (job: Job) => Handler;

/**
 * EffectCounter counts the handler's side effect as the downstream knows it
 * (charges a fake provider applied, rows in your table). The kit reads it
 * before and after each case.
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
  /** The handler is held before it starts, with its heartbeats, while its 1 s lease lapses and a second delivery takes over; then it runs. */
  LeaseLapsed: "lease-lapsed",
  /** The first Complete reaches the server and its answer is dropped; the worker retries it; the job is delivered again. */
  CompleteAnswerLost: "complete-answer-lost",
  /** The first delivery fails after the handler returned (its effect made); a second delivery runs it again. */
  RetryableFailure: "retryable-failure",
} as const;
export type Case = (typeof Case)[keyof typeof Case];

/** ALL_CASES lists every case in the order the kit runs them. */
export const ALL_CASES: readonly Case[] = Object.values(Case);

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
}

/** CaseReport is what one case found. */
export class CaseReport {
  /** title says what the deliveries were. */
  title = "";
  /** effects is how much the effect counter went up during the case. */
  effects = 0;
  /** runs is how many times the handler ran. */
  runs = 0;
  /** deliveries says what each delivery did, in order. */
  deliveries: string[] = [];
  /** record is the record after the last delivery, if it could be read. */
  record?: JobRecord;
  /** window names where the effect ran more than once; "" unless it did, in a window the case opens. */
  window = "";
  /** remedy is what closes the window. */
  remedy = "";
  /** held says how on_lease_expiry: hold kept the effect at one, when it did. */
  held = "";
  /** finding says what is wrong when it is not one of the windows. */
  finding = "";
  /** error is why the case could not run as designed. */
  error?: Error;

  /** case is the case that ran. */
  readonly case: Case;
  /** job is the job the case delivered, with the case's own key. */
  readonly job: Job;

  constructor(c: Case, job: Job) {
    this.case = c;
    this.job = job;
  }

  /** ok is true when the case ran and made the effect exactly once. */
  get ok(): boolean {
    return this.error === undefined && this.effects === 1;
  }

  /** toString is the case's report, as the Go kit writes it. */
  toString(): string {
    const m = WORDS.messages;
    const vars = { id: this.case, effects: String(this.effects), error: this.error?.message ?? "" };
    let head: string;
    if (this.error !== undefined) {
      head = fill(m.error, vars);
    } else if (this.effects === 1) {
      head = fill(m.ok, vars);
    } else if (this.effects > 1) {
      head = fill(m.more, vars);
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
 * every delivery did and, when the effect ran more than once, the window
 * and the remedy. It resolves to the report when every case passed.
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
  const k = new Kit(server, options.token, makeHandler, effects, job, concurrency, run);
  try {
    const cases: CaseReport[] = [];
    for (const c of ALL_CASES) {
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
};

/** fill replaces each {name} in s with vars[name]. */
function fill(s: string, vars: Record<string, string>): string {
  return s.replace(/\{([a-z_]+)\}/g, (all, name: string) => vars[name] ?? all);
}

/** caseWords is the text of case c in the words file. */
function caseWords(c: Case): { id: string; title: string; window?: string; remedy?: string; held?: string } {
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

/** Faults are what the kit does to one worker's calls, in its transport: the server sees only what a real worker sent. */
class Faults {
  /** died: the Complete was not sent (the worker died). */
  died = false;
  /** answerLost: the Complete was applied and its answer dropped. */
  answerLost = false;

  constructor(
    readonly holdHeartbeats = false,
    readonly dieBeforeComplete = false,
    readonly loseCompleteAnswer = false,
  ) {}

  interceptor(): Interceptor {
    return (next) => async (req) => {
      if (req.method.name === "Heartbeat" && this.holdHeartbeats) {
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
      if (req.method.name === "Complete") {
        if (this.dieBeforeComplete) {
          this.died = true;
          // Not a code do() retries: a dead worker sends nothing more.
          throw new ConnectError("idem testkit: the worker died before its Complete went out", Code.Unknown);
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

type Outcome = "completed" | "replayed" | "in_progress" | "unresolved" | "lease_lost" | "died" | "released" | "failed";
const OUTCOME_ORDER: Outcome[] = ["completed", "replayed", "in_progress", "unresolved", "lease_lost", "died", "released", "failed"];

/** Delivery is one delivery of a job to a worker of its own, and what became of it. */
class Delivery {
  ran?: Attempt;
  result?: DoResult;
  error?: unknown;
  constructor(
    readonly wrap: Wrap,
    readonly faults: Faults,
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
    if (err instanceof LeaseLostError) {
      return "lease_lost";
    }
    if (this.wrap.failAfter && err instanceof AfterEffectError) {
      return "released";
    }
    return "failed";
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
        end = m.died;
        break;
      case "released":
        end = m.released;
        break;
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
  ) {
    this.#lookups = new IdemClient(grpcTransport({ baseUrl: server, token }));
  }

  close(): void {
    this.#lookups.close();
  }

  /** deliver delivers job to a new worker that runs the handler through do(). */
  async deliver(job: Job, faults = new Faults(), wrap: Wrap = {}, opts: DoOptions = {}): Promise<Delivery> {
    const d = new Delivery(wrap, faults);
    // Quick retries: the answer-lost case's retried Complete need not wait
    // the production backoff.
    const client = new IdemClient(grpcTransport({ baseUrl: this.server, token: this.token, interceptors: [faults.interceptor()] }), {
      retry: { baseDelayMs: 10, maxDelayMs: 200 },
    });
    try {
      const handler = this.makeHandler(job);
      d.result = await client.do(
        job,
        async (attempt) => {
          if (wrap.stall) {
            await wrap.stall(attempt.signal);
          }
          d.ran = attempt;
          const v = await handler(attempt);
          if (wrap.failAfter) {
            throw new AfterEffectError(WORDS.messages.injected_failure);
          }
          return v;
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
    switch (c) {
      case Case.TwiceInSequence:
        ds.push(await this.deliver(job), await this.deliver(job));
        break;
      case Case.Concurrent: {
        ds = await Promise.all(Array.from({ length: this.concurrency }, () => this.deliver(job)));
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
        const first = this.deliver(lapsing, new Faults(true), { stall });
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
        ds.push(await this.deliver(job, new Faults(false, false, true)), await this.deliver(job));
        break;
      case Case.RetryableFailure:
        ds.push(await this.deliver(job, undefined, { failAfter: true }), await this.deliver(job));
        break;
    }
    cr.effects = (await this.effects()) - before;
    cr.runs = ds.filter((d) => d.ran !== undefined).length;
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

    const vars: Record<string, string> = { namespace: job.namespace, key: job.key, effects: String(cr.effects), runs: String(cr.runs), ...TERMS };
    const m = WORDS.messages;
    const held = ds.some((d) => d.outcome() === "unresolved");
    if (cr.effects <= 0) {
      cr.finding = fill(m.no_effect, vars);
    } else if (cr.effects > cr.runs) {
      cr.finding = fill(m.extra_effects, vars);
    } else if (cr.effects > 1 && !cw.window) {
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
  if (c === Case.CompleteAnswerLost && !first.faults.answerLost) {
    return new Error("the first delivery's Complete was not applied");
  }
  if (c === Case.LeaseLapsed && ds.length < 2) {
    return new Error("the first delivery did not acquire the job");
  }
  if (ds[ds.length - 1]!.outcome() === "in_progress") {
    return new Error(`the last delivery still found the job in progress (after waiting up to ${MAX_WAIT_MS / 1000}s for a lease to lapse)`);
  }
  return undefined;
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
