// The resolver loop: decides held (UNRESOLVED) records by asking a
// function, usually one that looks the effect up downstream by its step key
// or fencing token, instead of leaving every record to a person.

import type { IdemClient } from "./client.js";
import { ErrorReason } from "./gen/idem/v1/error_reason_pb.js";
import { isTransient, messageOf, RpcError } from "./errors.js";
import type { JobRecord, JobStep } from "./record.js";
import { delay, sleep } from "./retry.js";
import { stepKey } from "./step.js";

/**
 * Decision is a resolver function's answer about one held record; make it
 * with {@link completed}, {@link failed}, {@link release} or
 * {@link cantTell}.
 */
export type Decision =
  | { kind: "completed"; result: Uint8Array | string; reason?: string }
  | { kind: "failed"; error: string; reason?: string }
  | { kind: "release"; reason?: string }
  | { kind: "cantTell" };

/** completed says the effect happened: the record becomes COMPLETED with result, which later Claims replay. */
export function completed(result: Uint8Array | string, reason?: string): Decision {
  return { kind: "completed", result, reason };
}

/** failed says the job failed for good: the record becomes FAILED with error. */
export function failed(error: string, reason?: string): Decision {
  return { kind: "failed", error, reason };
}

/** release says the effect did not happen: the record becomes RELEASED and the next Claim runs the job again. */
export function release(reason?: string): Decision {
  return { kind: "release", reason };
}

/** cantTell leaves the record held, for a person; the loop asks again after its retry interval. */
export function cantTell(): Decision {
  return { kind: "cantTell" };
}

/** HeldStep is a step of a held record, with the key its effect was given downstream. */
export type HeldStep = JobStep & { stepKey: string };

/** Held is what a resolver function is asked about: one UNRESOLVED record. */
export interface Held {
  namespace: string;
  key: string;
  /** token is the fencing token of the lease that ran out: look the effect up by it, if it was passed downstream. */
  token: bigint;
  attempt: number;
  /** steps are the job's steps, each with its step key: a STARTED one may or may not have happened. */
  steps: HeldStep[];
  /** record is the record as delivered. */
  record: JobRecord;
  /** stepKey is the key of the job's step name, as {@link Steps.stepKey} gave it to the step's function. */
  stepKey(name: string): string;
}

/** ResolverFn decides one held record. A function that throws is logged and counts as {@link cantTell}. */
export type ResolverFn = (held: Held) => Promise<Decision> | Decision;

/** ResolverOptions configure {@link runResolver}. */
export interface ResolverOptions {
  /** name is the resolver's name, kept on each record's timeline: 1 to 128 bytes of UTF-8 without control characters. */
  name: string;
  /** namespaces limits the loop to these namespaces; every namespace the client's token admits by default. */
  namespaces?: readonly string[];
  /**
   * retryIntervalMs is how long a record the function could not tell about
   * (or whose Resolve failed) waits before it is asked about again. It
   * defaults to 1 minute.
   */
  retryIntervalMs?: number;
  /**
   * pollIntervalMs is how often the loop lists the held records where it
   * cannot stream them (the Connect protocol's JSON). It defaults to 5
   * seconds.
   */
  pollIntervalMs?: number;
  /** signal stops the loop: its promise then resolves. */
  signal?: AbortSignal;
  /** log is told of a function that threw and of errors the loop rides out; console.warn by default. */
  log?: (message: string, err: unknown) => void;
}

/** Pending is a held record the loop knows of, and when to ask about it. */
interface Pending {
  record: JobRecord;
  askAt: number;
  seen: number; // the sync generation that last delivered it
}

/** Loop is one resolver loop's state. */
class Loop {
  readonly pending = new Map<string, Pending>();
  readonly retryMs: number;
  readonly log: (message: string, err: unknown) => void;
  /** signal is aborted when the caller stops the loop or the loop fails. */
  readonly signal: AbortSignal;
  /** failure is the error that ended the loop, if one did. */
  failure: unknown;
  readonly #stop = new AbortController();
  #wake: (() => void) | undefined;

  constructor(
    readonly client: IdemClient,
    readonly o: ResolverOptions,
    readonly fn: ResolverFn,
  ) {
    this.retryMs = o.retryIntervalMs ?? 60_000;
    this.log = o.log ?? ((message, err) => console.warn(`idem resolver ${o.name}: ${message}: ${messageOf(err)}`));
    this.signal = this.#stop.signal;
    if (o.signal?.aborted) {
      this.#stop.abort();
    }
    o.signal?.addEventListener("abort", this.#onCallerAbort, { once: true });
  }

  readonly #onCallerAbort = () => this.#stop.abort();

  /** close lets go of the caller's signal. */
  close(): void {
    this.o.signal?.removeEventListener("abort", this.#onCallerAbort);
  }

  /** fail ends the loop with err (the first error wins). */
  fail(err: unknown): void {
    if (this.failure === undefined) {
      this.failure = err;
    }
    this.#stop.abort(err);
  }

  /** held notes a held record delivered in generation gen; a record already known keeps when to ask. */
  held(record: JobRecord, gen: number): void {
    const id = idOf(record.namespace, record.key, record.token);
    const p = this.pending.get(id);
    if (p) {
      p.seen = gen;
    } else {
      this.pending.set(id, { record, askAt: 0, seen: gen });
    }
    this.#wake?.();
  }

  /** forgetOlder drops the records a sync of generation gen no longer delivered. */
  forgetOlder(gen: number): void {
    for (const [id, p] of this.pending) {
      if (p.seen < gen) {
        this.pending.delete(id);
      }
    }
  }

  /** decideDue asks about every record that is due, one at a time. */
  async decideDue(): Promise<void> {
    for (const [id, p] of [...this.pending]) {
      if (this.signal.aborted) {
        return;
      }
      if (p.askAt <= Date.now() && this.pending.get(id) === p) {
        if (await this.decide(p.record)) {
          this.pending.delete(id);
        } else {
          p.askAt = Date.now() + this.retryMs;
        }
      }
    }
  }

  /** decide asks fn about record and sends its decision; false leaves the record for later. */
  async decide(record: JobRecord): Promise<boolean> {
    let d: Decision;
    try {
      d = await this.fn(heldOf(record));
    } catch (err) {
      this.log(`deciding ${record.namespace}/${record.key} threw; left for later`, err);
      return false;
    }
    if (d.kind === "cantTell") {
      return false;
    }
    const req = { namespace: record.namespace, key: record.key, token: record.token, resolver: this.o.name, reason: d.reason };
    try {
      if (d.kind === "completed") {
        await this.client.resolve({ ...req, completed: d.result }, { signal: this.signal });
      } else if (d.kind === "failed") {
        await this.client.resolve({ ...req, failed: d.error }, { signal: this.signal });
      } else {
        await this.client.resolve({ ...req, released: true }, { signal: this.signal });
      }
      return true;
    } catch (err) {
      if (err instanceof RpcError && decidedElsewhere.has(err.reason)) {
        return true; // someone else decided, or the holder came back: nothing left to do
      }
      if (err instanceof RpcError && err.reason === ErrorReason.INVALID_RESOLVER) {
        throw err; // every Resolve of this loop would be refused
      }
      if (!this.signal.aborted) {
        this.log(`resolving ${record.namespace}/${record.key} failed; asking again later`, err);
      }
      return false;
    }
  }

  /** rest waits until ms have passed, a record arrived, or the loop is stopped. */
  async rest(ms: number): Promise<void> {
    // One controller for both: AbortSignal.any is newer than Node 18.
    const woken = new AbortController();
    const wake = () => woken.abort();
    this.#wake = wake;
    this.signal.addEventListener("abort", wake, { once: true });
    try {
      await sleep(this.signal.aborted ? 0 : ms, woken.signal);
    } finally {
      this.#wake = undefined;
      this.signal.removeEventListener("abort", wake);
    }
  }

  /** nextDue is how long until the next record is due to be asked about, at most max. */
  nextDue(max: number): number {
    let next = max;
    for (const p of this.pending.values()) {
      next = Math.min(next, Math.max(p.askAt - Date.now(), 0));
    }
    return next;
  }
}

/** decidedElsewhere are the reasons a Resolve is refused when the record needs no decision from this loop. */
const decidedElsewhere = new Set([ErrorReason.NOT_UNRESOLVED, ErrorReason.LEASE_LOST, ErrorReason.NOT_FOUND]);

/**
 * runResolver runs a resolver loop until options.signal is aborted, and
 * then resolves. It delivers every UNRESOLVED record of the client's tenant
 * in options.namespaces to fn, those held when it starts and each as it
 * becomes held: by WatchHeld where the client's transport
 * {@link IdemClient.streams} (gRPC), else by polling ListHeld. It sends
 * fn's decision with Resolve under options.name; a record fn can't tell
 * about (or that threw) is left held and asked about again after
 * retryIntervalMs. A Resolve refused NOT_UNRESOLVED (another resolver or a
 * person decided first) is not an error. Transient errors are logged and
 * ridden out; any other error of WatchHeld, ListHeld (a namespace the token
 * does not admit, …) or an invalid name rejects the promise.
 *
 * ```ts
 * const stop = new AbortController();
 * await runResolver(idem, { name: "charges", namespaces: ["payments"], signal: stop.signal }, async (held) => {
 *   const charge = await psp.findCharge(held.steps.find((s) => s.name === "charge")?.stepKey ?? "");
 *   return charge ? completed(charge.id, `charge ${charge.id} found`) : cantTell();
 * });
 * ```
 */
export async function runResolver(client: IdemClient, options: ResolverOptions, fn: ResolverFn): Promise<void> {
  const loop = new Loop(client, options, fn);
  const tasks = client.streams ? [watch(loop), decideLoop(loop)] : [poll(loop)];
  await Promise.all(tasks.map((t) => t.catch((err: unknown) => loop.fail(err))));
  loop.close();
  if (loop.failure !== undefined) {
    throw loop.failure;
  }
}

/** decideLoop asks about the records WatchHeld delivers as they come and fall due. */
async function decideLoop(loop: Loop): Promise<void> {
  while (!loop.signal.aborted) {
    await loop.decideDue();
    await loop.rest(loop.nextDue(loop.retryMs));
  }
}

/** watch keeps loop's records up to date from WatchHeld, connecting again when the stream ends. */
async function watch(loop: Loop): Promise<void> {
  const signal = loop.signal;
  for (let gen = 1, failures = 0; !signal.aborted; gen++) {
    try {
      for await (const ev of loop.client.watchHeld({ namespaces: loop.o.namespaces }, { signal })) {
        failures = 0;
        if (ev.kind === "held") {
          loop.held(ev.record, gen);
        } else if (ev.kind === "synced") {
          loop.forgetOlder(gen);
        } else {
          loop.pending.delete(idOf(ev.namespace, ev.key, ev.token));
        }
      }
    } catch (err) {
      if (signal.aborted) {
        return;
      }
      if (!isTransient(err)) {
        throw err;
      }
      loop.log("the held records' stream failed; connecting again", err);
    }
    await sleep(delay(loop.client.retryPolicy, failures++), signal);
  }
}

/** poll runs loop on ListHeld, every pollIntervalMs. */
async function poll(loop: Loop): Promise<void> {
  const signal = loop.signal;
  const interval = loop.o.pollIntervalMs ?? 5000;
  for (let gen = 1; !signal.aborted; gen++) {
    try {
      let pageToken = "";
      do {
        const page = await loop.client.listHeld({ namespaces: loop.o.namespaces, pageToken }, { signal });
        for (const r of page.records) {
          loop.held(r, gen);
        }
        pageToken = page.nextPageToken;
      } while (pageToken !== "");
      loop.forgetOlder(gen);
    } catch (err) {
      if (signal.aborted) {
        return;
      }
      if (!isTransient(err)) {
        throw err;
      }
      loop.log("listing the held records failed; trying again", err);
    }
    await loop.decideDue();
    await loop.rest(loop.nextDue(interval));
  }
}

/** heldOf is what fn is asked about for record. */
function heldOf(record: JobRecord): Held {
  return {
    namespace: record.namespace,
    key: record.key,
    token: record.token,
    attempt: record.attempt,
    steps: record.steps.map((s) => ({ ...s, stepKey: stepKey(record.namespace, record.key, s.name) })),
    record,
    stepKey: (name) => stepKey(record.namespace, record.key, name),
  };
}

function idOf(namespace: string, key: string, token: bigint): string {
  return `${namespace}\0${key}\0${token}`;
}
