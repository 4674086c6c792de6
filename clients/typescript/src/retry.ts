import { isTransient, RpcError } from "./errors.js";

/**
 * RetryPolicy is capped exponential backoff with jitter for RPCs that fail
 * with a transient error (see {@link isTransient}). Retry n waits a random
 * time between half and all of min(baseDelayMs·2ⁿ, maxDelayMs), and never
 * less than the server's RetryInfo delay. {@link IdemClient.do} retries its
 * Claims and Heartbeats this way; its Complete and Fail are retried for as
 * long as the lease lasts, whatever maxAttempts says, because they record
 * what already happened. {@link IdemClient.doBatch} retries each item of
 * its batch calls the same way. The typed calls never retry.
 */
export interface RetryPolicy {
  /** baseDelayMs is the delay before the first retry. It defaults to 100. */
  baseDelayMs: number;
  /** maxDelayMs caps each delay. It defaults to 5000. */
  maxDelayMs: number;
  /**
   * maxAttempts is how many times one RPC is tried in all, the first try
   * included. It defaults to 10: with the default delays, about 11 to 21 s
   * of retrying, enough to ride out a restart of idemd.
   */
  maxAttempts: number;
}

/** MAX_RETRY_FIELD is the largest value a field takes: 2³¹−1, the longest delay a JavaScript timer holds (in ms). */
const MAX_RETRY_FIELD = 2 ** 31 - 1;

/**
 * withDefaults fills in the fields of p that are unset or not positive. It
 * throws a RangeError naming the field for one that is not a finite number
 * or is above 2³¹−1: a timer takes such a delay as 1 ms, which would retry
 * at once, over and over.
 */
export function withDefaults(p: Partial<RetryPolicy> = {}): RetryPolicy {
  const baseDelayMs = positive(p.baseDelayMs, "baseDelayMs") ?? 100;
  const maxDelayMs = Math.max(positive(p.maxDelayMs, "maxDelayMs") ?? 5000, baseDelayMs);
  const maxAttempts = positive(p.maxAttempts, "maxAttempts") ?? 10;
  return { baseDelayMs, maxDelayMs, maxAttempts };
}

function positive(v: number | undefined, field: string): number | undefined {
  if (v === undefined) {
    return undefined;
  }
  if (typeof v !== "number" || !Number.isFinite(v) || v > MAX_RETRY_FIELD) {
    throw new RangeError(`idem: retry.${field} is ${String(v)}; it must be a finite number at most ${MAX_RETRY_FIELD} (0 or less for the default), or unset`);
  }
  return v > 0 ? v : undefined;
}

/**
 * delay is the wait before retry n (n = 0 for the first retry). The jitter
 * keeps many workers that failed together from retrying together.
 */
export function delay(p: RetryPolicy, n: number): number {
  const d = Math.min(p.baseDelayMs * 2 ** Math.min(n, 32), p.maxDelayMs);
  return d / 2 + Math.random() * (d / 2);
}

/** backoff is the wait before retry n after err: at least err's RetryInfo delay. */
export function backoff(p: RetryPolicy, n: number, err: unknown): number {
  const d = delay(p, n);
  const hint = err instanceof RpcError ? err.retryAfterMs : undefined;
  return hint !== undefined && hint > d ? hint : d;
}

/** RetryBounds limit one {@link retry}. */
export interface RetryBounds {
  /** signal ends the retries (and the call in flight) when aborted. */
  signal?: AbortSignal;
  /**
   * until (a Date.now() value) ends the retries instead of the policy's
   * maxAttempts: no try starts after it, though the first one always goes
   * out, and a backoff that would pass it is cut short, so that the last
   * try goes out at it.
   */
  until?: number;
  /**
   * deadline (a Date.now() value) bounds the tries themselves: each gets
   * what is left of it as its timeout, and none starts after it. It keeps a
   * try that hangs from hanging forever; set it no earlier than until.
   */
  deadline?: number;
  /** onRetry is told of each transient failure before its backoff. */
  onRetry?: (err: unknown, waitMs: number) => void;
}

/** CallBounds are what one try of a retried call gets. */
export interface CallBounds {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/**
 * retry calls call until it succeeds, fails with an error that is not
 * transient, has been tried p.maxAttempts times (or, with bounds.until, its
 * last try at until failed), or the signal was aborted; it throws the last
 * error.
 */
export async function retry<T>(p: RetryPolicy, call: (bounds: CallBounds) => Promise<T>, bounds: RetryBounds = {}): Promise<T> {
  const { until, deadline, signal } = bounds;
  for (let attempt = 1; ; attempt++) {
    const left = deadline === undefined ? undefined : deadline - Date.now();
    try {
      return await call({ signal, timeoutMs: left === undefined ? undefined : Math.max(left, 1) });
    } catch (err) {
      if (!isTransient(err) || signal?.aborted) {
        throw err;
      }
      if (until === undefined && attempt >= p.maxAttempts) {
        throw err;
      }
      let wait = backoff(p, attempt - 1, err);
      if (until !== undefined) {
        const remaining = until - Date.now();
        if (remaining <= 0) {
          throw err;
        }
        wait = Math.min(wait, remaining); // one last try at until
      }
      if (deadline !== undefined && Date.now() + wait >= deadline) {
        throw err;
      }
      bounds.onRetry?.(err, wait);
      if (!(await sleep(wait, signal))) {
        throw err;
      }
    }
  }
}

/**
 * sleep waits for ms and resolves false if signal was aborted first. It
 * waits ms by the clock: Node starts a timer at the time its event loop
 * read at the start of the turn, so a timer alone ends early by the work
 * done in that turn, and a retry would come before the RetryInfo delay.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(false);
      return;
    }
    const end = performance.now() + ms;
    let timer: ReturnType<typeof setTimeout>;
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const wait = (left: number) => {
      timer = setTimeout(() => {
        const rest = end - performance.now();
        if (rest > 0) {
          wait(rest);
          return;
        }
        signal?.removeEventListener("abort", onAbort);
        resolve(true);
      }, left);
    };
    wait(ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
