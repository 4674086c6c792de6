import type { IdemClient } from "./client.js";
import {
  CompletionUnknownError,
  FailureNotRecordedError,
  InProgressError,
  isPermanent,
  isTransient,
  JobFailedError,
  LeaseLostError,
  messageOf,
  ResolvedByOperatorError,
  RpcError,
} from "./errors.js";
import { Outcome } from "./gen/idem/v1/idem_pb.js";
import type { JobRecord } from "./record.js";
import { bytesOf } from "./record.js";
import { delay, retry, sleep } from "./retry.js";
import { jsonOf, MAX_ERROR_BYTES, storableText, utf8Text } from "./text.js";
import { randomUUID } from "./uuid.js";
import { jobSteps, type Steps } from "./step.js";

// Copied from limits/limits.go in the Go module; limits/copies_test.go fails when a copy disagrees.
/**
 * DEFAULT_LEASE_TTL_MS is the lease do() assumes when neither the job nor
 * the claimed record tells it: the server's documented default.
 */
const DEFAULT_LEASE_TTL_MS = 5 * 60_000;

/** MAX_WAIT_MS is the longest {@link ClaimRequest.waitMs} the server accepts. */
export const MAX_WAIT_MS = 60_000;

/** Job identifies one unit of work and how to hold it. */
export interface Job {
  /** namespace is the job type, matching ^[a-z0-9][a-z0-9_.-]{0,63}$. */
  namespace: string;
  /** key is the idempotency key, chosen once when the job was created. */
  key: string;
  /**
   * fingerprint is an optional hash of the payload ({@link fingerprint},
   * {@link fingerprintJSON}): a Claim of the key with another fingerprint
   * throws {@link FingerprintMismatchError}. None by default.
   */
  fingerprint?: Uint8Array;
  /**
   * leaseTtlMs is how long the job is held without a heartbeat. Unset means
   * the server's default (5 minutes unless configured otherwise). do()
   * heartbeats every third of it while the handler runs.
   */
  leaseTtlMs?: number;
  /**
   * retentionMs is how long the outcome is kept (and replayed) after the job
   * finishes. Unset means the server's default (24 hours unless configured
   * otherwise).
   */
  retentionMs?: number;
}

/**
 * Attempt describes the acquisition the handler runs under, and records
 * the job's named steps ({@link Steps.step}).
 */
export interface Attempt extends Steps {
  /**
   * token is the fencing token of this acquisition. Pass it to downstream
   * systems that can reject writes from a superseded token.
   */
  token: bigint;
  /** number is the record's attempt count: 1 for the first acquisition. */
  number: number;
  /**
   * takeover is number > 1: an earlier attempt held the job and may have
   * done part of the work before it failed or lost its lease. Check the
   * downstream state before repeating a partial effect.
   */
  takeover: boolean;
  /**
   * signal is aborted when the lease is lost (a heartbeat was refused: its
   * reason is the error, a {@link LeaseLostError} when another worker took
   * over) or when do()'s own signal is. Stop, and do not perform the side
   * effect after it: `attempt.signal.throwIfAborted()` just before it.
   */
  signal: AbortSignal;
  /** record is the record as acquired. */
  record: JobRecord;
}

/**
 * Handler performs the job's side effect and returns its result (a string
 * is stored as UTF-8), which idem stores and replays to later deliveries.
 * Throwing records a retryable failure, or a permanent one when the error is
 * wrapped with {@link permanent}.
 */
export type Handler = (attempt: Attempt) => Promise<Uint8Array | string | void> | Uint8Array | string | void;

/** DoOptions configure one {@link IdemClient.do} call. */
export interface DoOptions {
  /**
   * waitMs makes do() wait while another worker holds the job, instead of
   * throwing {@link InProgressError} at once (the default, which suits
   * queues that redeliver). do() waits until the job has COMPLETED (the
   * stored value), FAILED ({@link JobFailedError}) or is acquired (the
   * handler runs), or until waitMs has passed ({@link InProgressError}). The
   * server does the waiting (ClaimRequest.wait, up to a minute per Claim) and
   * answers as soon as the holder finishes; when it answers IN_PROGRESS
   * before the wait it was asked for, do() polls with the client's backoff
   * instead, never later than the holder's lease runs out.
   */
  waitMs?: number;
  /**
   * signal cancels do(): its Claims, and the handler's `attempt.signal`.
   * Once the handler has returned, its Complete or Fail is sent even if
   * signal is aborted, for at most one lease, because it records what
   * already happened.
   */
  signal?: AbortSignal;
}

/** DoResult is what {@link IdemClient.do} returns. */
export interface DoResult {
  /** value is the handler's value, or the stored value when replayed. */
  value: Uint8Array;
  /** replayed is true when the job had completed earlier and the handler was not called. */
  replayed: boolean;
  /** record is the record after do()'s last successful call. */
  record: JobRecord;
  /**
   * text returns value as UTF-8 text (what a handler that returned a string
   * stored), as Python's Result.text() does: a byte order mark is kept, and
   * bytes that are not UTF-8 throw a TypeError.
   */
  text(): string;
  /**
   * json returns value parsed as JSON (what a handler that returned
   * JSON.stringify(x) stored), as Python's Result.json() does: a leading
   * byte order mark is skipped, text that is not JSON throws a SyntaxError,
   * and bytes that are not UTF-8 a TypeError.
   */
  json<T = unknown>(): T;
}

/** Done is the {@link DoResult} that do() and doBatch() return. */
class Done implements DoResult {
  constructor(
    public value: Uint8Array,
    public replayed: boolean,
    public record: JobRecord,
  ) {}

  text(): string {
    return utf8Text(this.value);
  }

  json<T = unknown>(): T {
    return jsonOf<T>(this.value);
  }
}

/** doResult is the {@link DoResult} of a job whose value is value. */
export function doResult(value: Uint8Array, replayed: boolean, record: JobRecord): DoResult {
  return new Done(value, replayed, record);
}

/** runDo is {@link IdemClient.do}. */
export async function runDo(client: IdemClient, job: Job, handler: Handler, o: DoOptions): Promise<DoResult> {
  const claimant = await randomUUID();
  const waitUntil = Date.now() + (o.waitMs ?? 0);
  for (let poll = 0; ; ) {
    // The server waits for the holder, for what is left of o.waitMs.
    const waitMs = Math.floor(Math.min(Math.max(waitUntil - Date.now(), 0), MAX_WAIT_MS));
    const asked = Date.now();
    let claimed: { outcome: Outcome; record: JobRecord };
    let claimSent = 0; // when the last Claim went out: the lease runs from after it
    try {
      claimed = await retry(
        client.retryPolicy,
        (b) => {
          claimSent = Date.now();
          return client.claim(
            {
              namespace: job.namespace,
              key: job.key,
              fingerprint: job.fingerprint,
              leaseTtlMs: job.leaseTtlMs,
              claimant,
              retentionMs: job.retentionMs,
              waitMs,
            },
            { signal: b.signal },
          );
        },
        { signal: o.signal },
      );
    } catch (err) {
      if (!(err instanceof InProgressError)) {
        throw err; // UnresolvedError among them: the handler is not called
      }
      const remaining = waitUntil - Date.now();
      if (remaining <= 0) {
        throw err;
      }
      if (waitMs > 0 && Date.now() - asked >= waitMs) {
        continue; // the server waited all it was asked to: ask again
      }
      // Answered before the wait it was asked for: poll.
      if (!(await sleep(Math.min(delay(client.retryPolicy, poll), remaining, Math.max(err.retryAfterMs, 1)), o.signal))) {
        throw o.signal?.reason ?? err;
      }
      poll++;
      continue;
    }
    switch (claimed.outcome) {
      case Outcome.COMPLETED:
        return doResult(claimed.record.result, true, claimed.record);
      case Outcome.FAILED:
        throw new JobFailedError(claimed.record);
      default: // ACQUIRED: claim() returns no other outcome
        return run(client, job, claimed.record, claimSent, handler, o);
    }
  }
}

/**
 * run calls handler under the acquired record rec, whose Claim went out at
 * claimed (a Date.now() value), and records its outcome.
 */
async function run(client: IdemClient, job: Job, rec: JobRecord, claimed: number, handler: Handler, o: DoOptions): Promise<DoResult> {
  const lease = leaseOf(job, rec);

  const handlerAbort = new AbortController();
  const beatsAbort = new AbortController();
  const onCallerAbort = () => {
    handlerAbort.abort(o.signal?.reason);
    beatsAbort.abort();
  };
  if (o.signal?.aborted) {
    onCallerAbort();
  } else {
    o.signal?.addEventListener("abort", onCallerAbort, { once: true });
  }
  let lost: unknown; // why the lease was given up, if it was
  let leaseEnds = claimed + lease; // by this machine's clock
  const beats = keepLease(client, job, rec.token, lease, leaseEnds, beatsAbort.signal).then((held) => {
    leaseEnds = held.until;
    if (held.lost !== undefined) {
      lost = held.lost;
      handlerAbort.abort(held.lost);
    }
  });

  let value: Uint8Array | undefined;
  let handlerError: unknown;
  let threw = false;
  try {
    value = resultBytes(await handler(newAttempt(client, job, rec, handlerAbort.signal)));
  } catch (err) {
    threw = true;
    handlerError = err;
  } finally {
    beatsAbort.abort();
    await beats;
    o.signal?.removeEventListener("abort", onCallerAbort);
  }

  if (lost !== undefined) {
    // A successor may hold the job now; anything we record would be
    // rejected, and the handler's error, if any, is most likely the abort.
    if (lost instanceof RpcError && value !== undefined) {
      lost.value = value;
    }
    throw lost;
  }

  // Complete and Fail record what already happened, so a caller that gives
  // up now must not skip them: they are retried until the lease we hold
  // runs out (the first try goes out even after it did), with one last try
  // there. The deadline only keeps a try that hangs from hanging forever;
  // it gives that last try time to be answered.
  const until = leaseEnds;
  const deadline = lastTryDeadline(until, lease);
  if (threw) {
    const error = storableText(messageOf(handlerError), MAX_ERROR_BYTES);
    try {
      await retry(
        client.retryPolicy,
        (b) => client.fail({ namespace: job.namespace, key: job.key, token: rec.token, error, retryable: !isPermanent(handlerError) }, b),
        { until, deadline },
      );
    } catch (err) {
      throw new FailureNotRecordedError(handlerError, err, rec);
    }
    throw handlerError;
  }
  const result = value ?? new Uint8Array();
  try {
    const done = await retry(
      client.retryPolicy,
      (b) => client.complete({ namespace: job.namespace, key: job.key, token: rec.token, result }, b),
      { until, deadline },
    );
    return doResult(result, false, done);
  } catch (err) {
    if (err instanceof LeaseLostError || err instanceof ResolvedByOperatorError) {
      err.value = result;
      throw err;
    }
    throw new CompletionUnknownError(result, rec, err);
  }
}

/** newAttempt is the {@link Attempt} a handler gets for rec, acquired for job. */
export function newAttempt(client: IdemClient, job: Job, rec: JobRecord, signal: AbortSignal): Attempt {
  const steps = jobSteps(client, { namespace: job.namespace, key: job.key, token: rec.token }, rec.steps, signal);
  return { token: rec.token, number: rec.attempt, takeover: rec.attempt > 1, signal, record: rec, ...steps };
}

/** leaseOf is the lease job holds rec under, in milliseconds. */
export function leaseOf(job: Job, rec: JobRecord): number {
  let lease = job.leaseTtlMs ?? 0;
  if (lease <= 0 && rec.leaseExpiresAt && rec.updatedAt) {
    // The server's default lease, measured on the server's clock.
    lease = rec.leaseExpiresAt.getTime() - rec.updatedAt.getTime();
  }
  return lease > 0 ? lease : DEFAULT_LEASE_TTL_MS;
}

/** HeldLease is what {@link keepLease} knows of the lease when it returns. */
interface HeldLease {
  /**
   * until is when the lease runs out, by this machine's clock: a lease
   * after the last Claim or heartbeat that the server answered was sent.
   */
  until: number;
  /** lost is why the lease was given up, or undefined. */
  lost?: unknown;
}

/**
 * keepLease heartbeats every third of lease until signal is aborted, and
 * then resolves with when the lease runs out, starting from until. It
 * resolves early with the first error that is not transient: the lease was
 * lost, or the record changed under the worker. Transient failures are
 * retried and then left to the next beat: the lease outlives two missed
 * beats, and a lease that ran out is still ours until someone takes it over.
 */
async function keepLease(client: IdemClient, job: Job, token: bigint, lease: number, until: number, signal: AbortSignal): Promise<HeldLease> {
  const interval = lease / 3;
  for (;;) {
    if (!(await sleep(interval, signal))) {
      return { until };
    }
    let sent = 0;
    try {
      await retry(
        client.retryPolicy,
        // A beat that takes longer than the interval is of no use, and one
        // hung on a dead connection must not stop the beats after it.
        (b) => {
          sent = Date.now();
          return client.heartbeat({ namespace: job.namespace, key: job.key, token, leaseTtlMs: job.leaseTtlMs }, { signal: b.signal, timeoutMs: Math.max(interval, 1000) });
        },
        { signal },
      );
      until = sent + lease;
    } catch (err) {
      if (!signal.aborted && !isTransient(err)) {
        return { until, lost: err };
      }
    }
  }
}

/** resultBytes is the handler's value as the bytes to store. */
export function resultBytes(v: unknown): Uint8Array {
  if (v === undefined || v === null) {
    return new Uint8Array();
  }
  if (typeof v === "string" || v instanceof Uint8Array) {
    return bytesOf(v);
  }
  throw new TypeError(`idem: the handler returned ${typeof v === "object" ? "an object" : `a ${typeof v}`}; return a Uint8Array or a string (JSON.stringify an object)`);
}

/**
 * LAST_TRY_GRACE_MS is the least time the last try of a Complete or Fail,
 * sent as its lease ends, has to be answered, however short the lease.
 */
const LAST_TRY_GRACE_MS = 5000;

/**
 * lastTryDeadline bounds the tries of a Complete or Fail whose lease ends at
 * until: one lease (at least LAST_TRY_GRACE_MS) past it, so that the try sent
 * when the lease ends is not cut short.
 */
export function lastTryDeadline(until: number, lease: number): number {
  return until + Math.max(lease, LAST_TRY_GRACE_MS);
}
