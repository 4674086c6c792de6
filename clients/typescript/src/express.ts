/**
 * Idempotency-Key middleware for Express and any connect-style framework
 * (`(req, res, next)` on Node's http server), on idem: a POST that a client
 * retries after a timeout runs its handler once, and the retry gets the
 * response the first one got.
 *
 * It lives in its own entry point, "@idemhq/idem/express", so that the main
 * one neither needs Node's modules nor Express: it takes Node's
 * IncomingMessage and ServerResponse, which Express's req and res extend.
 *
 * ```ts
 * import express from "express";
 * import { IdemClient } from "@idemhq/idem";
 * import { grpcTransport } from "@idemhq/idem/node";
 * import { idempotency } from "@idemhq/idem/express";
 *
 * const idem = new IdemClient(grpcTransport({ baseUrl: "http://127.0.0.1:7070" }));
 * const app = express();
 * app.use(idempotency(idem, { namespace: "payments-api", caller: (req) => accountOf(req) }));
 * app.post("/payments", express.json(), (req, res) => res.status(201).json(charge(req.body)));
 * ```
 *
 * It behaves as idem's Go middleware (client/idemhttp) and Python's
 * (idem.web) do, and stores responses in the same form, so that a response
 * one of them stored is replayed by the others: see docs/idempotent-http.md.
 *
 * @packageDocumentation
 */

import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import type { IdemClient } from "./client.js";
import type { Job } from "./do.js";
import {
  AlreadyTerminalError,
  CompletionUnknownError,
  FingerprintMismatchError,
  FailureNotRecordedError,
  InProgressError,
  JobFailedError,
  messageOf,
  UnresolvedError,
} from "./errors.js";
import {
  decodeEnvelope,
  encodeEnvelope,
  fingerprint,
  fingerprintNames,
  parseKey,
  type Problem,
  PROBLEMS,
  problemBody,
  recordKey,
  RETRY_AFTER_SECONDS,
  splitTarget,
} from "./httpidem.js";

export { decodeEnvelope, encodeEnvelope, fingerprint, parseKey, PROBLEM_TYPE_PREFIX, PROBLEMS, recordKey, type StoredResponse, type Problem } from "./httpidem.js";

/** DEFAULT_STORED_HEADERS are the response headers stored and replayed by default. */
export const DEFAULT_STORED_HEADERS: readonly string[] = ["Content-Type", "Content-Encoding", "Content-Language", "Location", "ETag", "Link"];
/** DEFAULT_METHODS are the methods guarded by default: those HTTP does not define as idempotent. */
export const DEFAULT_METHODS: readonly string[] = ["POST", "PATCH"];

// Copied from limits/limits.go in the Go module; limits/copies_test.go fails when a copy disagrees.
const MIN_LEASE_TTL_MS = 1000;
const MAX_LEASE_TTL_MS = 24 * 3_600_000;
const MIN_RETENTION_MS = 60_000;
const MAX_RETENTION_MS = 90 * 24 * 3_600_000;
const RESULT_BYTES_CEILING = 16 * 1024 * 1024;

/** Logger is where the middleware says what the client is not told. console fits. */
export interface Logger {
  warn(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
}

/** IdempotencyOptions configure {@link idempotency}. caller is required; the rest have defaults. */
export interface IdempotencyOptions<Req extends IncomingMessage = IncomingMessage> {
  /**
   * caller returns the identity of the request's caller (the API key's
   * account, the authenticated subject): each caller's keys name records of
   * its own, so that no caller gets another's response. Throwing answers
   * 401 (caller-unidentified) with the error's message as the detail; put
   * the authentication in front so that it never does. An API whose callers
   * are all one may return a constant.
   */
  caller: (req: Req) => string | Promise<string>;
  /** namespace is the namespace of the records: "http" by default. Give each API its own. */
  namespace?: string;
  /** methods are the methods guarded; others pass through. POST and PATCH by default. */
  methods?: readonly string[];
  /** requireKey answers 400 (key-missing) to a guarded request without a key; by default it passes through unguarded. */
  requireKey?: boolean;
  /** fingerprintHeaders name request headers the fingerprint covers, besides the method, path, query and body. None by default. */
  fingerprintHeaders?: readonly string[];
  /**
   * fingerprint replaces the fingerprint of a request (body is its whole
   * body); a result over 64 bytes is hashed with SHA-256. By default it is
   * the one every language computes alike.
   */
  fingerprint?: (req: Req, body: Uint8Array) => Uint8Array;
  /** storedHeaders are the response headers stored and replayed: {@link DEFAULT_STORED_HEADERS} by default. */
  storedHeaders?: readonly string[];
  /**
   * release says whether a response status gives the key back (a retry
   * runs the handler again) instead of being stored: status >= 500 by
   * default. A handler that throws is answered 500 by Express, and so
   * releases it too.
   */
  release?: (status: number) => boolean;
  /**
   * waitMs is how long a request that finds its key in flight waits for the
   * first to finish and then gets its response (or runs, when the first
   * gave the key back). 0, the default, answers 409 at once.
   */
  waitMs?: number;
  /** maxRequestBytes bounds the request body, read whole to fingerprint it; a larger one is 413. 1 MiB by default. */
  maxRequestBytes?: number;
  /**
   * maxBodyBytes bounds the response body that is stored. A larger body goes
   * out as the handler writes it, and the record keeps the status and
   * headers with the body omitted: a repeat gets them, an empty body and
   * Idempotent-Body-Omitted: true, and the handler does not run again.
   * 60 KiB by default: with its head it fits the 64 KiB of result idemd
   * accepts unless configured otherwise (--max-result-bytes).
   */
  maxBodyBytes?: number;
  /**
   * leaseTtlMs is how long a record is held without a heartbeat while the
   * handler runs, and so how long a server that died mid-request keeps the
   * key from being retried: 30 s by default.
   */
  leaseTtlMs?: number;
  /** retentionMs is how long a stored response is replayed; unset means the namespace's retention in idemd. */
  retentionMs?: number;
  /**
   * failOpen runs the handler unguarded, with a warning logged, when idemd
   * cannot be reached before it runs. By default such a request is answered
   * 503 (idem-unavailable) and the handler does not run.
   */
  failOpen?: boolean;
  /** logger logs what the client is not told; console by default. */
  logger?: Logger;
}

/** Middleware is a connect-style middleware. */
export type Middleware<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse> = (req: Req, res: Res, next: (err?: unknown) => void) => void;

interface Checked<Req extends IncomingMessage> {
  caller: (req: Req) => string | Promise<string>;
  namespace: string;
  methods: Set<string>;
  requireKey: boolean;
  fingerprintHeaders: string[];
  fingerprint: ((req: Req, body: Uint8Array) => Uint8Array) | undefined;
  storedHeaders: string[];
  release: (status: number) => boolean;
  waitMs: number;
  maxRequestBytes: number;
  maxBodyBytes: number;
  leaseTtlMs: number;
  retentionMs: number | undefined;
  failOpen: boolean;
  logger: Logger;
}

const NAMESPACE = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * idempotency returns the Idempotency-Key middleware on client: for the
 * methods it guards it reads the Idempotency-Key header (an RFC 8941
 * string), claims the record (namespace, caller/key) with a fingerprint of
 * the request, runs the rest of the chain with the response held back,
 * stores the status, the stored headers and the body, and then sends it. A
 * repeat gets the stored response with Idempotent-Replayed: true; a repeat
 * while the first runs gets 409 (or waits, with waitMs), the key with
 * another request 422. A 5xx gives the key back. The errors are RFC 9457
 * problems (application/problem+json). A bad option is a TypeError or
 * RangeError naming it.
 *
 * It reads the request body itself, so put it before body parsers (or have
 * the parser keep the raw bytes in `req.rawBody`); the parsers after it read
 * the same body.
 */
export function idempotency<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(
  client: IdemClient,
  options: IdempotencyOptions<Req>,
): Middleware<Req, Res> {
  const o = check(options);
  return (req, res, next) => {
    handle(client, o, req, res, next).catch(next);
  };
}

function check<Req extends IncomingMessage>(options: IdempotencyOptions<Req>): Checked<Req> {
  if (typeof options?.caller !== "function") {
    throw new TypeError("idem: idempotency() needs options.caller: the identity of a request's caller, so that no caller gets another's response (return a constant for an API with one caller)");
  }
  const namespace = options.namespace ?? "http";
  if (!NAMESPACE.test(namespace)) {
    throw new RangeError(`idem: options.namespace ${JSON.stringify(namespace)} is not a namespace: 1 to 64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit`);
  }
  const names = (field: string, list: readonly string[] | undefined, def: readonly string[]) => {
    for (const n of list ?? def) {
      if (typeof n !== "string" || !TOKEN.test(n)) {
        throw new RangeError(`idem: options.${field} has ${JSON.stringify(n)}, which is not ${field === "methods" ? "a method" : "a header name"}`);
      }
    }
    return [...(list ?? def)];
  };
  const count = (field: string, v: number | undefined, def: number, min: number, max: number) => {
    if (v === undefined) {
      return def;
    }
    if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max) {
      throw new RangeError(`idem: options.${field} is ${String(v)}; it must be ${min} to ${max}, or unset (${def})`);
    }
    return v;
  };
  return {
    caller: options.caller,
    namespace,
    methods: new Set(names("methods", options.methods, DEFAULT_METHODS)),
    requireKey: options.requireKey ?? false,
    fingerprintHeaders: fingerprintNames(names("fingerprintHeaders", options.fingerprintHeaders, [])),
    fingerprint: options.fingerprint,
    storedHeaders: names("storedHeaders", options.storedHeaders, DEFAULT_STORED_HEADERS).map((n) => n.toLowerCase()),
    release: options.release ?? ((status) => status >= 500),
    waitMs: count("waitMs", options.waitMs, 0, 0, 2 ** 31 - 1),
    maxRequestBytes: count("maxRequestBytes", options.maxRequestBytes, 1 << 20, 0, Number.MAX_SAFE_INTEGER),
    maxBodyBytes: count("maxBodyBytes", options.maxBodyBytes, 60 << 10, 0, RESULT_BYTES_CEILING),
    leaseTtlMs: count("leaseTtlMs", options.leaseTtlMs, 30_000, MIN_LEASE_TTL_MS, MAX_LEASE_TTL_MS),
    retentionMs: options.retentionMs === undefined ? undefined : count("retentionMs", options.retentionMs, 0, MIN_RETENTION_MS, MAX_RETENTION_MS),
    failOpen: options.failOpen ?? false,
    logger: options.logger ?? console,
  };
}

/** ReleaseError is what the job throws for a response whose status gives the key back. */
class ReleaseError extends Error {
  constructor(readonly status: number) {
    super(`the handler answered ${status}: released for a retry`);
  }
}

async function handle<Req extends IncomingMessage>(client: IdemClient, o: Checked<Req>, req: Req, res: ServerResponse, next: (err?: unknown) => void): Promise<void> {
  if (!o.methods.has(req.method ?? "")) {
    next();
    return;
  }
  const value = req.headers["idempotency-key"];
  if (value === undefined) {
    if (o.requireKey) {
      writeProblem(res, PROBLEMS.keyMissing, 'this request needs an Idempotency-Key header with a key unique to it, like Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"');
    } else {
      next();
    }
    return;
  }
  let key: string;
  try {
    key = parseKey(Array.isArray(value) ? value.join(", ") : value);
  } catch (err) {
    writeProblem(res, PROBLEMS.keyMalformed, `Idempotency-Key: ${messageOf(err)}`);
    return;
  }
  let caller: string;
  try {
    caller = await o.caller(req);
  } catch (err) {
    writeProblem(res, PROBLEMS.callerUnidentified, messageOf(err));
    return;
  }
  let body: Uint8Array;
  try {
    body = await readBody(req, o.maxRequestBytes);
  } catch (err) {
    if (err instanceof TooLarge) {
      writeProblem(res, PROBLEMS.requestTooLarge, `the body is over ${o.maxRequestBytes} bytes, the most this API reads to fingerprint a request with an Idempotency-Key`);
      return;
    }
    throw err;
  }

  const target = splitTarget((req as { originalUrl?: string }).originalUrl ?? req.url ?? "/");
  let fp = o.fingerprint
    ? o.fingerprint(req, body)
    : fingerprint(req.method ?? "", target, (name) => {
        const v = req.headers[name];
        return Array.isArray(v) ? v.join(", ") : v;
      }, o.fingerprintHeaders, body);
  if (fp.length > 64) {
    fp = new Uint8Array(createHash("sha256").update(fp).digest());
  }
  const job: Job = { namespace: o.namespace, key: recordKey(caller, key), fingerprint: fp, leaseTtlMs: o.leaseTtlMs, retentionMs: o.retentionMs };

  let cap: Capture | undefined;
  let replayed: Uint8Array | undefined;
  let err: unknown;
  try {
    const result = await client.do(
      job,
      async () => {
        cap = new Capture(res, o.maxBodyBytes);
        await cap.run(next);
        if (o.release(cap.status)) {
          throw new ReleaseError(cap.status);
        }
        return cap.envelope(o.storedHeaders);
      },
      { waitMs: o.waitMs },
    );
    if (result.replayed) {
      replayed = result.value;
    }
  } catch (e) {
    err = e;
  }
  if (cap !== undefined) {
    if (!cap.ended) {
      // The chain threw before it ended the response (do() released the
      // key): the framework's error handling answers.
      cap.restore();
      throw err;
    }
    await ran(client, o, job, cap, err);
    cap.send();
    return;
  }
  if (err === undefined) {
    replay(res, o, job, replayed ?? new Uint8Array());
  } else if (err instanceof InProgressError) {
    writeProblem(res, PROBLEMS.keyInFlight, "another request with this key has not finished; retry after a moment");
  } else if (err instanceof FingerprintMismatchError) {
    writeProblem(res, PROBLEMS.keyReused, "this key was used for a request with another method, path, query, body or fingerprinted header; use a new key for a new request");
  } else if (err instanceof JobFailedError) {
    writeProblem(res, PROBLEMS.requestFailed, err.record.error);
  } else if (err instanceof UnresolvedError) {
    writeProblem(res, PROBLEMS.keyUnresolved, "the outcome of the first request with this key is not known; an operator resolves it");
  } else if (o.failOpen) {
    o.logger.warn("idem: idem is unreachable; running the handler without an idempotency check (failOpen)", { namespace: job.namespace, key: job.key, error: messageOf(err) });
    next();
  } else {
    o.logger.error("idem: idem is unreachable; the request is refused (503) and its handler not run", { namespace: job.namespace, key: job.key, error: messageOf(err) });
    writeProblem(res, PROBLEMS.idemUnavailable, "the API cannot check this Idempotency-Key now; retry in a moment");
  }
}

/**
 * ran logs what went wrong after the handler ran, whose response goes out
 * whatever happened to its record: the effect happened. A Complete that was
 * not confirmed (idemd refused the stored response for its size, or could
 * not be reached until the lease ran out) is made once more with the body
 * omitted, so that a repeat gets the status instead of running the handler
 * again.
 */
async function ran<Req extends IncomingMessage>(client: IdemClient, o: Checked<Req>, job: Job, cap: Capture, err: unknown): Promise<void> {
  const fields = { namespace: job.namespace, key: job.key };
  if (err === undefined || err instanceof ReleaseError) {
    return;
  }
  if (err instanceof FailureNotRecordedError && err.handlerError instanceof ReleaseError) {
    o.logger.error("idem: the key could not be given back after a response that releases it; a retry waits for its lease to run out", { ...fields, error: messageOf(err) });
    return;
  }
  if (err instanceof CompletionUnknownError) {
    cap.omitted = true;
    try {
      await client.complete({ namespace: job.namespace, key: job.key, token: err.record.token, result: cap.envelope(o.storedHeaders) }, { timeoutMs: 10_000 });
      o.logger.warn("idem: idem did not store the response; its record keeps the status with the body omitted (for a response too large, raise idemd's --max-result-bytes or lower maxBodyBytes)", { ...fields, error: messageOf(err) });
    } catch (e) {
      if (!(e instanceof AlreadyTerminalError)) {
        o.logger.error("idem: the response was sent but not stored; a repeat of the request may run the handler again once its lease runs out", { ...fields, error: `${messageOf(err)}; ${messageOf(e)}` });
      } // else the first Complete was stored after all; its answer was lost
    }
    return;
  }
  o.logger.error("idem: the response was sent but its record was not completed; a repeat of the request may run the handler again", { ...fields, error: messageOf(err) });
}

/** replay writes the stored response of a completed record. */
function replay<Req extends IncomingMessage>(res: ServerResponse, o: Checked<Req>, job: Job, envelope: Uint8Array): void {
  let s;
  try {
    s = decodeEnvelope(envelope);
  } catch (err) {
    o.logger.error("idem: a completed record holds no stored response this version reads", { namespace: job.namespace, key: job.key, error: messageOf(err) });
    writeProblem(res, PROBLEMS.recordUnreadable, messageOf(err));
    return;
  }
  const values = new Map<string, string[]>();
  for (const [name, value] of s.headers) {
    if (!s.omitted || !name.startsWith("content-")) {
      values.set(name, [...(values.get(name) ?? []), value]);
    }
  }
  for (const [name] of s.headers) {
    res.removeHeader(name);
  }
  for (const [name, vs] of values) {
    res.setHeader(display(name), vs.length === 1 ? vs[0]! : vs);
  }
  res.setHeader("Idempotent-Replayed", "true");
  if (s.omitted) {
    res.setHeader("Idempotent-Body-Omitted", "true");
  }
  if (bodyAllowed(s.status)) {
    res.setHeader("Content-Length", s.body.length);
  }
  res.statusCode = s.status;
  res.end(s.body.length > 0 ? s.body : undefined);
}

/** display is a header name as it is usually written (Content-Type), for a replay of the lowercase name a record holds. */
function display(name: string): string {
  return name.replace(/(^|-)([a-z])/g, (_, dash: string, c: string) => dash + c.toUpperCase());
}

function writeProblem(res: ServerResponse, p: Problem, detail: string): void {
  const body = Buffer.from(problemBody(p, detail), "utf8");
  res.statusCode = p.status;
  res.setHeader("Content-Type", "application/problem+json");
  res.setHeader("Content-Length", body.length);
  if (p === PROBLEMS.keyInFlight || p === PROBLEMS.idemUnavailable) {
    res.setHeader("Retry-After", String(RETRY_AFTER_SECONDS));
  }
  res.end(body);
}

class TooLarge extends Error {}

/**
 * readBody reads req's body whole, up to max bytes, and makes req readable
 * again from the start, so that the body parsers after the middleware read
 * the same bytes. A body a parser before it read is taken from req.rawBody.
 */
async function readBody(req: IncomingMessage, max: number): Promise<Uint8Array> {
  const raw = (req as { rawBody?: unknown }).rawBody;
  if (raw instanceof Uint8Array) {
    if (raw.length > max) {
      throw new TooLarge();
    }
    return raw;
  }
  if ((req as { body?: unknown }).body !== undefined || req.readableEnded) {
    throw new Error("idem: the request body was read before the idempotency middleware, which fingerprints it: put idempotency() before the body parsers, or keep the raw bytes in req.rawBody (express.json({ verify: (req, res, buf) => { req.rawBody = buf } }))");
  }
  const length = Number(req.headers["content-length"] ?? NaN);
  if (length > max) {
    throw new TooLarge();
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const b = chunk as Buffer;
    size += b.length;
    if (size > max) {
      throw new TooLarge();
    }
    chunks.push(b);
  }
  const body = Buffer.concat(chunks, size);
  replayStream(req, body);
  return body;
}

/** The stream methods and properties a body parser uses on a request. */
const STREAM_METHODS = [
  "on", "once", "addListener", "prependListener", "prependOnceListener", "removeListener", "off", "removeAllListeners",
  "listeners", "rawListeners", "listenerCount", "pipe", "unpipe", "pause", "resume", "isPaused", "read", "setEncoding", "unshift",
] as const;
const STREAM_PROPERTIES = ["readable", "readableEnded", "readableFlowing", "readableLength", "readableEncoding", "_readableState"] as const;

/**
 * replayStream makes req, whose body was read to its end, read body again:
 * its stream methods and state become those of a fresh stream of body.
 * Node cannot rewind a request, and a parser reads the request object it
 * was given, so the object's own methods must serve the replay.
 */
function replayStream(req: IncomingMessage, body: Buffer): void {
  const replayed = Readable.from(body.length > 0 ? [body] : [], { objectMode: false });
  const target = req as unknown as Record<string | symbol, unknown>;
  const source = replayed as unknown as Record<string | symbol, unknown>;
  for (const m of STREAM_METHODS) {
    const f = source[m] as (...args: unknown[]) => unknown;
    target[m] = (...args: unknown[]) => {
      const out = f.apply(replayed, args);
      return out === replayed ? req : out;
    };
  }
  target[Symbol.asyncIterator] = () => (source[Symbol.asyncIterator] as () => unknown).call(replayed);
  for (const p of STREAM_PROPERTIES) {
    Object.defineProperty(req, p, { configurable: true, get: () => source[p] });
  }
}

/** The methods of a ServerResponse that the capture takes over while the handler runs. */
interface Patched {
  writeHead: (this: ServerResponse, ...args: unknown[]) => ServerResponse;
  write: (this: ServerResponse, ...args: unknown[]) => boolean;
  end: (this: ServerResponse, ...args: unknown[]) => ServerResponse;
  flushHeaders: (this: ServerResponse) => void;
}

/**
 * Capture holds a response back while the handler writes it: its headers
 * stay in the response (nothing is sent before writeHead), and its status
 * and body here. From the moment the handler calls flushHeaders, writes a
 * text/event-stream, or writes more than maxBody bytes, what it writes goes
 * out at once, and the body is still kept while it fits in maxBody.
 */
class Capture {
  status = 0;
  statusMessage: string | undefined;
  chunks: Buffer[] = [];
  size = 0;
  passing = false;
  omitted = false;
  ended = false;
  #orig: Patched | undefined;
  #endCallback: (() => void) | undefined;

  constructor(
    readonly res: ServerResponse,
    readonly maxBody: number,
  ) {}

  /** run calls next with the response's methods taken over, and resolves once the handler ended the response. */
  run(next: (err?: unknown) => void): Promise<void> {
    const res = this.res;
    const orig = { writeHead: res.writeHead, write: res.write, end: res.end, flushHeaders: res.flushHeaders } as unknown as Patched;
    this.#orig = orig;
    return new Promise<void>((resolve) => {
      res.writeHead = ((status: number, reason?: unknown, headers?: unknown) => {
        if (typeof reason !== "string") {
          headers = reason;
          reason = undefined;
        }
        if (this.status === 0) {
          this.status = status;
          this.statusMessage = reason as string | undefined;
          res.statusCode = status;
          setHeaders(res, headers);
          if (isEventStream(res.getHeader("content-type"))) {
            this.pass();
          }
        }
        return res;
      }) as ServerResponse["writeHead"];
      res.write = ((chunk: unknown, encoding?: unknown, cb?: unknown) => {
        if (typeof encoding === "function") {
          cb = encoding;
          encoding = undefined;
        }
        const ok = this.write(chunk, encoding as BufferEncoding | undefined);
        if (typeof cb === "function") {
          process.nextTick(cb as () => void);
        }
        return ok;
      }) as ServerResponse["write"];
      res.end = ((chunk?: unknown, encoding?: unknown, cb?: unknown) => {
        if (this.ended) {
          return res; // once: the response goes out after its record is complete
        }
        if (typeof chunk === "function") {
          cb = chunk;
          chunk = undefined;
        } else if (typeof encoding === "function") {
          cb = encoding;
          encoding = undefined;
        }
        if (chunk !== undefined && chunk !== null) {
          this.write(chunk, encoding as BufferEncoding | undefined);
        }
        this.start();
        this.ended = true;
        this.#endCallback = typeof cb === "function" ? (cb as () => void) : undefined;
        resolve();
        return res;
      }) as ServerResponse["end"];
      res.flushHeaders = () => {
        this.start();
        this.pass();
      };
      next();
    });
  }

  /** start fixes the status: the handler's, or the response's statusCode (which res.status() sets) when it wrote without writeHead. */
  start(): void {
    if (this.status === 0) {
      this.status = this.res.statusCode;
      if (isEventStream(this.res.getHeader("content-type"))) {
        this.pass();
      }
    }
  }

  write(chunk: unknown, encoding: BufferEncoding | undefined): boolean {
    this.start();
    const b = typeof chunk === "string" ? Buffer.from(chunk, encoding ?? "utf8") : asBuffer(chunk as Uint8Array);
    if (!this.omitted && this.size + b.length > this.maxBody) {
      this.pass(); // what was captured goes out first
      this.omitted = true;
      this.chunks = [];
      this.size = 0;
    }
    if (!this.omitted) {
      this.chunks.push(b);
      this.size += b.length;
    }
    if (this.passing) {
      return this.#orig!.write.call(this.res, b);
    }
    return true;
  }

  /** pass sends the status, the headers and the body captured so far, and makes later writes go straight out. */
  pass(): void {
    if (this.passing) {
      return;
    }
    this.passing = true;
    const orig = this.#orig!;
    if (this.statusMessage !== undefined) {
      orig.writeHead.call(this.res, this.status, this.statusMessage);
    } else {
      orig.writeHead.call(this.res, this.status);
    }
    for (const c of this.chunks) {
      orig.write.call(this.res, c);
    }
  }

  /** restore gives the response its own methods back. */
  restore(): void {
    Object.assign(this.res, this.#orig);
  }

  /** envelope is the record's result for the response. */
  envelope(stored: readonly string[]): Uint8Array {
    const headers: Array<[string, string]> = [];
    for (const name of stored) {
      const v = this.res.getHeader(name);
      for (const one of v === undefined ? [] : Array.isArray(v) ? v : [v]) {
        headers.push([name, String(one)]);
      }
    }
    return encodeEnvelope({ status: this.status, headers, body: this.omitted ? new Uint8Array() : Buffer.concat(this.chunks, this.size), omitted: this.omitted });
  }

  /** send ends the response: the held one, or the end of one that went out already. */
  send(): void {
    this.restore();
    const cb = this.#endCallback;
    if (this.passing) {
      this.res.end(cb);
      return;
    }
    const body = Buffer.concat(this.chunks, this.size);
    if (bodyAllowed(this.status)) {
      this.res.setHeader("Content-Length", body.length);
    }
    if (this.statusMessage !== undefined) {
      this.res.writeHead(this.status, this.statusMessage);
    } else {
      this.res.writeHead(this.status);
    }
    this.res.end(body.length > 0 ? body : undefined, cb);
  }
}

/** setHeaders applies the headers of a writeHead call: an object, or a flat or paired array. */
function setHeaders(res: ServerResponse, headers: unknown): void {
  if (headers === undefined || headers === null) {
    return;
  }
  if (Array.isArray(headers)) {
    const pairs: Array<[string, string]> = Array.isArray(headers[0]) ? (headers as Array<[string, string]>) : [];
    if (pairs.length === 0) {
      for (let i = 0; i + 1 < headers.length; i += 2) {
        pairs.push([String(headers[i]), String(headers[i + 1])]);
      }
    }
    for (const [k, v] of pairs) {
      res.appendHeader(k, v);
    }
    return;
  }
  for (const [k, v] of Object.entries(headers as Record<string, string | number | string[]>)) {
    res.setHeader(k, v);
  }
}

/** asBuffer is a Buffer over u's bytes, not a copy. */
function asBuffer(u: Uint8Array): Buffer {
  return Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength);
}

function isEventStream(v: unknown): boolean {
  return typeof v === "string" && v.split(";")[0]!.trim().toLowerCase() === "text/event-stream";
}

function bodyAllowed(status: number): boolean {
  return status !== 204 && status !== 304 && (status < 100 || status > 199);
}
