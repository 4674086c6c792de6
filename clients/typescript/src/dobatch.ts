import { Code } from "@connectrpc/connect";
import type { BatchResult } from "./batch.js";
import type { ClaimResult, IdemClient } from "./client.js";
import {
  CompletionUnknownError,
  FailureNotRecordedError,
  IdemError,
  isPermanent,
  isTransient,
  JobFailedError,
  LeaseLostError,
  messageOf,
  ResolvedByOperatorError,
  RpcError,
} from "./errors.js";
import { ErrorReason } from "./gen/idem/v1/error_reason_pb.js";
import { Outcome } from "./gen/idem/v1/idem_pb.js";
import { type Attempt, type DoResult, doResult, type Job, lastTryDeadline, leaseOf, newAttempt, resultBytes } from "./do.js";
import { durationOf, type JobRecord } from "./record.js";
import { backoff, type CallBounds, sleep } from "./retry.js";
import { MAX_ERROR_BYTES, storableText } from "./text.js";
import { randomUUID } from "./uuid.js";

/**
 * BatchHandler performs the side effect of jobs[index] under attempt, as a
 * {@link Handler} does for do(): a do() handler is a BatchHandler.
 */
export type BatchHandler = (attempt: Attempt, index: number) => Promise<Uint8Array | string | void> | Uint8Array | string | void;

/** DoBatchOptions configure one {@link IdemClient.doBatch} call. */
export interface DoBatchOptions {
  /**
   * signal cancels doBatch: its Claims and every handler's
   * `attempt.signal`. The Completes and Fails of handlers that returned are
   * sent even if it is aborted, within their leases, as do()'s are.
   */
  signal?: AbortSignal;
  /**
   * concurrency is how many handlers run at once, started in the order of
   * the jobs; all of the acquired jobs' by default.
   */
  concurrency?: number;
}

/** ItemLimit bounds the retries of one item: a number of tries, or a time (Date.now()) after which none starts. */
interface ItemLimit {
  attempts?: number;
  until?: number;
}

/** BatchSend sends one batch; it throws only for the batch as a whole. */
type BatchSend<Q, T> = (reqs: Q[], bounds: CallBounds) => Promise<BatchResult<T>[]>;

/**
 * refusedForSize reports whether a batch was refused as a whole for its
 * number of items or its bytes: nothing of it was done, and smaller batches
 * of the same items would be taken. That is INVALID_BATCH_SIZE and
 * REQUEST_TOO_LARGE, and a RESOURCE_EXHAUSTED with neither a reason nor a
 * RetryInfo: a message over a gRPC size limit, which a gRPC server (or this
 * client, for the answer) enforces before idem sees the call.
 */
function refusedForSize(err: unknown): boolean {
  if (!(err instanceof RpcError)) {
    return false;
  }
  return (
    err.reason === ErrorReason.INVALID_BATCH_SIZE ||
    err.reason === ErrorReason.REQUEST_TOO_LARGE ||
    (err.code === Code.ResourceExhausted && err.reasonName === "" && err.retryAfterMs === undefined)
  );
}

/**
 * sendHalving answers every one of reqs: a batch the server refuses for its
 * size is halved and the halves sent in turn, and a batch that fails as a
 * whole gives each of its items that error.
 */
async function sendHalving<Q, T>(reqs: Q[], send: BatchSend<Q, T>, bounds: CallBounds): Promise<BatchResult<T>[]> {
  try {
    return await send(reqs, bounds);
  } catch (err) {
    if (reqs.length > 1 && refusedForSize(err)) {
      const half = Math.floor(reqs.length / 2);
      return [...(await sendHalving(reqs.slice(0, half), send, bounds)), ...(await sendHalving(reqs.slice(half), send, bounds))];
    }
    if (!(err instanceof IdemError)) {
      throw err; // a bug, not an answer
    }
    return reqs.map(() => ({ ok: false, error: err }));
  }
}

/**
 * retryItems sends reqs until every item has an answer that is not
 * transient or has reached its limit (limits[i] for reqs[i]). Each retry
 * carries only the items still owed an answer, so an item answered is never
 * sent again, and waits as retry() does: the policy's backoff, at least the
 * server's RetryInfo, cut short so that an item with an `until` gets one
 * last try at it. deadline bounds each try and the retrying. sent is when
 * the try that gave each item its answer went out.
 */
async function retryItems<Q, T>(
  client: IdemClient,
  reqs: Q[],
  limits: ItemLimit[],
  send: BatchSend<Q, T>,
  bounds: { signal?: AbortSignal; deadline?: number; timeoutMs?: number } = {},
): Promise<{ items: BatchResult<T>[]; sent: number[] }> {
  const items: BatchResult<T>[] = new Array(reqs.length);
  const sent: number[] = new Array(reqs.length).fill(0);
  let pending = reqs.map((_, i) => i);
  for (let attempt = 1; pending.length > 0; attempt++) {
    const at = Date.now();
    const left = bounds.deadline === undefined ? bounds.timeoutMs : Math.max(bounds.deadline - at, 1);
    const answers = await sendHalving(
      pending.map((i) => reqs[i]!),
      send,
      { signal: bounds.signal, timeoutMs: left },
    );
    const next: number[] = [];
    let lastErr: unknown;
    let until: number | undefined; // the earliest limit of the items retried
    pending.forEach((i, k) => {
      const answer = answers[k]!;
      items[i] = answer;
      sent[i] = at;
      if (answer.ok || !isTransient(answer.error)) {
        return;
      }
      const lim = limits[i]!;
      if (lim.attempts !== undefined && attempt >= lim.attempts) {
        return;
      }
      if (lim.until !== undefined) {
        if (Date.now() >= lim.until) {
          return; // its last try was this one
        }
        until = Math.min(until ?? lim.until, lim.until);
      }
      next.push(i);
      if (lastErr === undefined || (answer.error instanceof RpcError && (answer.error.retryAfterMs ?? 0) > ((lastErr as RpcError).retryAfterMs ?? 0))) {
        lastErr = answer.error;
      }
    });
    if (next.length === 0 || bounds.signal?.aborted) {
      break;
    }
    let wait = backoff(client.retryPolicy, attempt - 1, lastErr);
    if (until !== undefined) {
      wait = Math.min(wait, Math.max(until - Date.now(), 0));
    }
    if (bounds.deadline !== undefined && Date.now() + wait >= bounds.deadline) {
      break;
    }
    if (!(await sleep(wait, bounds.signal))) {
      break;
    }
    pending = next;
  }
  return { items, sent };
}

/** BatchJob is one job of a doBatch that was acquired. */
interface BatchJob {
  index: number;
  job: Job;
  rec: JobRecord; // as acquired
  lease: number;
  abort: AbortController; // the handler's signal
  until: number; // when the lease runs out, by this machine's clock
  lost?: unknown; // why the lease was given up
  value?: Uint8Array;
  threw: boolean;
  handlerError?: unknown;
}

/** runDoBatch is {@link IdemClient.doBatch}. */
export async function runDoBatch(client: IdemClient, jobs: readonly Job[], handler: BatchHandler, o: DoBatchOptions): Promise<BatchResult<DoResult, unknown>[]> {
  const out: BatchResult<DoResult, unknown>[] = new Array(jobs.length);
  if (jobs.length === 0) {
    return out;
  }
  if (o.concurrency !== undefined && !(Number.isInteger(o.concurrency) && o.concurrency > 0)) {
    throw new RangeError(`idem: concurrency is ${String(o.concurrency)}; it must be a whole number above 0, or unset`);
  }
  // A bad duration is the caller's mistake, named by the job it is in.
  jobs.forEach((job, i) => {
    durationOf(job.leaseTtlMs, `jobs[${i}].leaseTtlMs`);
    durationOf(job.retentionMs, `jobs[${i}].retentionMs`);
  });
  const claims = await Promise.all(
    jobs.map(async (job) => ({
      namespace: job.namespace,
      key: job.key,
      fingerprint: job.fingerprint,
      leaseTtlMs: job.leaseTtlMs,
      claimant: await randomUUID(),
      retentionMs: job.retentionMs,
    })),
  );
  const attempts = client.retryPolicy.maxAttempts;
  const { items, sent } = await retryItems<(typeof claims)[number], ClaimResult>(
    client,
    claims,
    claims.map(() => ({ attempts })),
    (reqs, b) => client.batchClaim(reqs, b),
    { signal: o.signal },
  );
  const acquired: BatchJob[] = [];
  items.forEach((item, i) => {
    if (!item.ok) {
      out[i] = item; // InProgressError and UnresolvedError among them: the handler is not called
      return;
    }
    const { outcome, record } = item.value;
    if (outcome === Outcome.COMPLETED) {
      out[i] = { ok: true, value: doResult(record.result, true, record) };
    } else if (outcome === Outcome.FAILED) {
      out[i] = { ok: false, error: new JobFailedError(record) };
    } else {
      const lease = leaseOf(jobs[i]!, record);
      acquired.push({ index: i, job: jobs[i]!, rec: record, lease, abort: new AbortController(), until: sent[i]! + lease, threw: false });
    }
  });
  if (acquired.length > 0) {
    await runBatch(client, acquired, handler, o, out);
  }
  return out;
}

/** runBatch runs the handlers of the acquired jobs, keeps their leases, records their outcomes and fills in out. */
async function runBatch(client: IdemClient, jobs: BatchJob[], handler: BatchHandler, o: DoBatchOptions, out: BatchResult<DoResult, unknown>[]): Promise<void> {
  const beatsAbort = new AbortController();
  const onCallerAbort = () => {
    for (const j of jobs) {
      j.abort.abort(o.signal?.reason);
    }
    beatsAbort.abort();
  };
  if (o.signal?.aborted) {
    onCallerAbort();
  } else {
    o.signal?.addEventListener("abort", onCallerAbort, { once: true });
  }
  const beats = keepLeases(client, jobs, beatsAbort.signal);

  let next = 0;
  const worker = async () => {
    for (let j = jobs[next++]; j !== undefined; j = jobs[next++]) {
      const rec = j.rec;
      try {
        j.value = resultBytes(await handler(newAttempt(client, j.job, rec, j.abort.signal), j.index));
      } catch (err) {
        j.threw = true;
        j.handlerError = err;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(o.concurrency ?? jobs.length, jobs.length) }, worker));
  } finally {
    beatsAbort.abort();
    await beats;
    o.signal?.removeEventListener("abort", onCallerAbort);
  }

  // As in do(): what already happened is recorded whatever the caller's
  // signal does now, each job until its lease ends, and the last try at
  // the latest lease's end has time to be answered.
  const deadline = Math.max(...jobs.map((j) => lastTryDeadline(j.until, j.lease)));
  const completes: BatchJob[] = [];
  const fails: BatchJob[] = [];
  for (const j of jobs) {
    if (j.lost !== undefined) {
      // A successor may hold the job now: record nothing.
      if (j.lost instanceof RpcError && j.value !== undefined) {
        j.lost.value = j.value;
      }
      out[j.index] = { ok: false, error: j.lost };
    } else if (j.threw) {
      fails.push(j);
    } else {
      completes.push(j);
    }
  }
  await Promise.all([completeBatch(client, completes, deadline, out), failBatch(client, fails, deadline, out)]);
}

/**
 * keepLeases heartbeats every job that still holds its lease in one
 * BatchHeartbeat, every third of the shortest lease, until signal is
 * aborted. A job whose heartbeat fails with an error that is not transient
 * has lost its lease: its handler's signal is aborted with that error.
 */
async function keepLeases(client: IdemClient, jobs: BatchJob[], signal: AbortSignal): Promise<void> {
  const interval = Math.min(...jobs.map((j) => j.lease)) / 3;
  const attempts = client.retryPolicy.maxAttempts;
  while (await sleep(interval, signal)) {
    const held = jobs.filter((j) => j.lost === undefined);
    if (held.length === 0) {
      return;
    }
    // A beat that takes longer than the interval is of no use, and one hung
    // on a dead connection must not stop the beats after it.
    const { items, sent } = await retryItems(
      client,
      held.map((j) => ({ namespace: j.job.namespace, key: j.job.key, token: j.rec.token, leaseTtlMs: j.job.leaseTtlMs })),
      held.map(() => ({ attempts })),
      (reqs, b) => client.batchHeartbeat(reqs, b),
      { signal, timeoutMs: Math.max(interval, 1000) },
    );
    held.forEach((j, k) => {
      const item = items[k]!;
      if (item.ok) {
        j.until = sent[k]! + j.lease;
      } else if (!signal.aborted && !isTransient(item.error)) {
        j.lost = item.error;
        j.abort.abort(item.error);
      }
    });
  }
}

/** completeBatch records the handlers' values, each retried until confirmed or its lease runs out. */
async function completeBatch(client: IdemClient, jobs: BatchJob[], deadline: number, out: BatchResult<DoResult, unknown>[]): Promise<void> {
  if (jobs.length === 0) {
    return;
  }
  const results = jobs.map((j) => j.value ?? new Uint8Array());
  const { items } = await retryItems(
    client,
    jobs.map((j, k) => ({ namespace: j.job.namespace, key: j.job.key, token: j.rec.token, result: results[k] })),
    jobs.map((j) => ({ until: j.until })),
    (reqs, b) => client.batchComplete(reqs, b),
    { deadline },
  );
  jobs.forEach((j, k) => {
    const item = items[k]!;
    const value = results[k]!;
    if (item.ok) {
      out[j.index] = { ok: true, value: doResult(value, false, item.value) };
    } else if (item.error instanceof LeaseLostError || item.error instanceof ResolvedByOperatorError) {
      item.error.value = value;
      out[j.index] = item;
    } else {
      out[j.index] = { ok: false, error: new CompletionUnknownError(value, j.rec, item.error) };
    }
  });
}

/**
 * failBatch records the handlers' errors, each retried until confirmed or
 * its lease runs out: a job's error is then its handler's, or, when the
 * failure could not be recorded, a {@link FailureNotRecordedError} with the
 * handler's and the Fail's (as do() throws them).
 */
async function failBatch(client: IdemClient, jobs: BatchJob[], deadline: number, out: BatchResult<DoResult, unknown>[]): Promise<void> {
  if (jobs.length === 0) {
    return;
  }
  const { items } = await retryItems(
    client,
    jobs.map((j) => ({
      namespace: j.job.namespace,
      key: j.job.key,
      token: j.rec.token,
      error: storableText(messageOf(j.handlerError), MAX_ERROR_BYTES),
      retryable: !isPermanent(j.handlerError),
    })),
    jobs.map((j) => ({ until: j.until })),
    (reqs, b) => client.batchFail(reqs, b),
    { deadline },
  );
  jobs.forEach((j, k) => {
    const item = items[k]!;
    out[j.index] = { ok: false, error: item.ok ? j.handlerError : new FailureNotRecordedError(j.handlerError, item.error, j.rec) };
  });
}
