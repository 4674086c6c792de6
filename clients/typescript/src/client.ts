import { type CallOptions, type Client, Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { AdminService, type ResolveRecordRequestSchema, type StatsRow as StatsRowPb } from "./gen/idem/v1/admin_pb.js";
import {
  type ClaimRequestSchema,
  type ClaimResponse,
  type CompleteRequestSchema,
  type FailRequestSchema,
  type HeartbeatRequestSchema,
  IdempotencyService,
  Outcome,
  State,
} from "./gen/idem/v1/idem_pb.js";
import { ResolverService, type ResolveRequestSchema } from "./gen/idem/v1/resolver_pb.js";
import { answers, type BatchResult } from "./batch.js";
import { IdemError, InProgressError, RpcError, UnresolvedError } from "./errors.js";
import { bytesOf, durationMs, durationOf, type JobRecord, type JobStep, recordFromProto, stepFromProto, type TimelineEntry, timelineFromProto } from "./record.js";
import { streams } from "./transport.js";
import { type RetryPolicy, withDefaults } from "./retry.js";
import { type DoOptions, type DoResult, type Handler, type Job, MAX_WAIT_MS, runDo } from "./do.js";
import { type BatchHandler, type DoBatchOptions, runDoBatch } from "./dobatch.js";

export { MAX_WAIT_MS };

/** ClaimRequest asks for the right to perform one job. */
export interface ClaimRequest {
  /** namespace is the job type, matching ^[a-z0-9][a-z0-9_.-]{0,63}$. */
  namespace: string;
  /** key is the idempotency key: 1 to 256 bytes of printable UTF-8. */
  key: string;
  /**
   * fingerprint is an optional hash of the request (at most 64 bytes; see
   * {@link fingerprint} and {@link fingerprintJSON}). None by default.
   */
  fingerprint?: Uint8Array;
  /**
   * leaseTtlMs is how long the lease lasts without a heartbeat. Unset (or 0)
   * means the server's default, 5 minutes unless configured otherwise;
   * bounds 1 s to 24 h.
   */
  leaseTtlMs?: number;
  /**
   * claimant identifies this attempt (at most 128 bytes). Repeating a Claim
   * with the same claimant while its lease lives returns ACQUIRED with the
   * same token, so a Claim whose response was lost can be retried. None by
   * default.
   */
  claimant?: string;
  /**
   * retentionMs is how long the record is kept after it leaves PROCESSING.
   * Unset means the server's default, 24 hours unless configured otherwise;
   * bounds 1 min to 90 days.
   */
  retentionMs?: number;
  /**
   * waitMs is how long the server waits, when another worker holds the job,
   * for it to finish before it answers: the Claim then returns the job's
   * outcome (COMPLETED, FAILED, or ACQUIRED when the holder gave it back or
   * its lease ran out), or IN_PROGRESS when the wait runs out. Unset (or 0)
   * answers at once; at most {@link MAX_WAIT_MS}.
   */
  waitMs?: number;
}

/** ClaimResult is the answer to a Claim that acquired or found the job finished. */
export interface ClaimResult {
  /** outcome is ACQUIRED, COMPLETED or FAILED: the others are thrown. */
  outcome: Outcome;
  /** record is the record after the Claim. */
  record: JobRecord;
}

/** CompleteRequest records a job's success. */
export interface CompleteRequest {
  namespace: string;
  key: string;
  /** token is the token of the ACQUIRED Claim. */
  token: bigint;
  /**
   * result is stored and replayed to later Claims (a string as UTF-8): at
   * most 64 KiB unless the server is configured otherwise.
   */
  result?: Uint8Array | string;
}

/** FailRequest records a job's failure. */
export interface FailRequest {
  namespace: string;
  key: string;
  /** token is the token of the ACQUIRED Claim. */
  token: bigint;
  /** error says what went wrong: at most 4 KiB of UTF-8 without NUL (see {@link storableText}). */
  error: string;
  /**
   * retryable true releases the record (RELEASED) so that the next Claim
   * acquires it; false makes the failure permanent (FAILED) and replays
   * error to every later Claim.
   */
  retryable: boolean;
}

/** HeartbeatRequest extends a lease. */
export interface HeartbeatRequest {
  namespace: string;
  key: string;
  /** token is the token of the ACQUIRED Claim. */
  token: bigint;
  /** leaseTtlMs is the new lease, counted from now. Unset means the server's default. */
  leaseTtlMs?: number;
}

/** LookupRequest names a record. */
export interface LookupRequest {
  namespace: string;
  key: string;
}

/** StartStepRequest marks a step of a held job STARTED. */
export interface StartStepRequest {
  namespace: string;
  key: string;
  /** token is the token of the ACQUIRED Claim. */
  token: bigint;
  /** step is the step's name: 1 to 128 bytes of UTF-8 without control characters, unique in the job. */
  step: string;
}

/** CompleteStepRequest records a step of a held job FINISHED with its result. */
export type CompleteStepRequest = StartStepRequest & {
  /** result is the step's result (a string as UTF-8); empty by default. */
  result?: Uint8Array | string;
};

/** LookupHistory is a record with its timeline. */
export interface LookupHistory {
  record: JobRecord;
  /** history is the exceptions in the life of the record's key, oldest first (at most the latest 1000). */
  history: TimelineEntry[];
}

/** HeldRequest chooses the held records ListHeld and WatchHeld deliver. */
export interface HeldRequest {
  /** namespaces limits them to these namespaces; every namespace the token admits by default. */
  namespaces?: readonly string[];
}

/** ListHeldRequest asks for one page of held records. */
export type ListHeldRequest = HeldRequest & {
  /** pageSize is 1 to 1000; 100 by default. */
  pageSize?: number;
  /** pageToken is the previous page's nextPageToken; "" for the first page. */
  pageToken?: string;
};

/**
 * HeldEvent is one event of {@link IdemClient.watchHeld}: a record that is
 * UNRESOLVED (`held`), the end of the records held when the stream started
 * (`synced`), or a delivered record that is no longer held (`left`).
 */
export type HeldEvent =
  | { kind: "held"; record: JobRecord }
  | { kind: "synced" }
  | { kind: "left"; namespace: string; key: string; token: bigint };

/**
 * ResolveRequest is a resolver's decision about one held record, for the
 * lease held with token: exactly one of `completed` (the effect happened:
 * COMPLETED with this result), `failed` (FAILED with this error) or
 * `released: true` (it did not: the next Claim runs the job again).
 */
export interface ResolveRequest {
  namespace: string;
  key: string;
  /** token is the token the record was delivered with. */
  token: bigint;
  /** resolver is the resolver's name, kept on the record's timeline: 1 to 128 bytes without control characters. */
  resolver: string;
  /** reason says why in a few words (at most 1024 bytes); none by default. */
  reason?: string;
  completed?: Uint8Array | string;
  failed?: string;
  released?: boolean;
}

/** ClientOptions configure an {@link IdemClient}. */
export interface ClientOptions {
  /**
   * retry sets how {@link IdemClient.do} retries RPCs that fail with a
   * transient error and how fast it polls while waiting. Unset fields take
   * their defaults (see {@link RetryPolicy}); a field that is not a finite
   * number, or is above 2³¹−1, is a RangeError naming it.
   */
  retry?: Partial<RetryPolicy>;
}

/** A transport that holds connections: {@link IdemClient.close} closes them. */
interface Closable {
  close?: () => void;
}

/**
 * IdemClient talks to one idem service over a Connect-ES transport:
 * {@link connectTransport} (the Connect protocol over fetch, in every
 * runtime) or grpcTransport from "@idemhq/idem/node" (gRPC over Node's
 * HTTP/2). It is thin: every typed call is one RPC without retries, and
 * {@link IdemClient.do} adds the retries and the lease handling around them.
 * Create one per process and share it.
 *
 * Typed calls throw an {@link RpcError} (of the subclass its reason names)
 * for an error status; the batch calls (batchClaim, …) answer each item
 * with what its unary call returns or throws. {@link IdemClient.claim} also throws
 * {@link InProgressError} and {@link UnresolvedError} for those outcomes, so
 * that code which only handles the happy path never runs a side effect that
 * another worker is running or that waits for a decision.
 */
export class IdemClient {
  /**
   * raw holds the generated clients on the same transport, for code that
   * works with the protobuf messages: their errors are plain ConnectErrors
   * ({@link RpcError.from} decodes them).
   */
  readonly raw: {
    readonly idempotency: Client<typeof IdempotencyService>;
    readonly admin: Client<typeof AdminService>;
    readonly resolver: Client<typeof ResolverService>;
  };
  /**
   * admin has the typed AdminService calls (list, delete, count, resolve),
   * for operators' tools. When idemd runs with tenants, only tenants with
   * `admin: true` may call them.
   */
  readonly admin: AdminClient;
  /** retryPolicy is the policy do() retries with. */
  readonly retryPolicy: RetryPolicy;
  /**
   * streams is true when the transport can carry a server stream to idemd
   * ({@link IdemClient.watchHeld}): gRPC does; the Connect protocol's JSON
   * does not (idemd serves streams over HTTP by gRPC-Web only).
   */
  readonly streams: boolean;
  readonly #transport: Transport & Closable;

  constructor(transport: Transport, options: ClientOptions = {}) {
    this.#transport = transport;
    this.raw = {
      idempotency: createClient(IdempotencyService, transport),
      admin: createClient(AdminService, transport),
      resolver: createClient(ResolverService, transport),
    };
    this.streams = streams(transport);
    this.admin = new AdminClient(this.raw.admin);
    this.retryPolicy = withDefaults(options.retry);
  }

  /**
   * claim asks for the right to perform a job, in one RPC without retries.
   * ACQUIRED, COMPLETED and FAILED are returned: act on `outcome`.
   * IN_PROGRESS throws an {@link InProgressError} (with retryAfterMs),
   * UNRESOLVED an {@link UnresolvedError}, a Claim with another fingerprint
   * a {@link FingerprintMismatchError}.
   */
  async claim(req: ClaimRequest, options?: CallOptions): Promise<ClaimResult> {
    const resp = await call(() => this.raw.idempotency.claim(claimMessage(req), options));
    return claimAnswer(resp);
  }

  /**
   * complete records a job's success with the acquired token, in one RPC
   * without retries; repeating it after a lost response returns the stored
   * record. Throws {@link LeaseLostError} (another worker took over),
   * {@link AlreadyTerminalError}, {@link NotFoundError},
   * {@link ResolvedByOperatorError}.
   */
  async complete(req: CompleteRequest, options?: CallOptions): Promise<JobRecord> {
    const msg = completeMessage(req);
    const resp = await call(() => this.raw.idempotency.complete(msg, options).catch((err: unknown) => Promise.reject(resultRefused(err, msg.result?.length ?? 0))));
    return recordFromProto(resp.record);
  }

  /**
   * fail records a job's failure with the acquired token, in one RPC without
   * retries; repeating it returns the stored record. Throws as
   * {@link IdemClient.complete} does.
   */
  async fail(req: FailRequest, options?: CallOptions): Promise<JobRecord> {
    const resp = await call(() => this.raw.idempotency.fail(failMessage(req), options));
    return recordFromProto(resp.record);
  }

  /**
   * heartbeat extends the lease held with the token, in one RPC without
   * retries, and returns the record with its new leaseExpiresAt. Throws
   * {@link LeaseLostError}, {@link AlreadyTerminalError}, {@link NotFoundError}.
   */
  async heartbeat(req: HeartbeatRequest, options?: CallOptions): Promise<JobRecord> {
    const resp = await call(() => this.raw.idempotency.heartbeat(heartbeatMessage(req), options));
    return recordFromProto(resp.record);
  }

  /** lookup reads a record without changing it. Throws {@link NotFoundError}. */
  async lookup(req: LookupRequest, options?: CallOptions): Promise<JobRecord> {
    const resp = await call(() => this.raw.idempotency.lookup({ namespace: req.namespace, key: req.key }, options));
    return recordFromProto(resp.record);
  }

  /**
   * lookupHistory reads a record and its timeline (Lookup with
   * include_history). Throws {@link NotFoundError}.
   */
  async lookupHistory(req: LookupRequest, options?: CallOptions): Promise<LookupHistory> {
    const resp = await call(() => this.raw.idempotency.lookup({ namespace: req.namespace, key: req.key, includeHistory: true }, options));
    return { record: recordFromProto(resp.record), history: resp.history.map(timelineFromProto) };
  }

  /**
   * startStep marks a step of the job held with token STARTED, before its
   * effect, in one RPC without retries, and returns the step. Throws
   * {@link LeaseLostError}, {@link AlreadyTerminalError},
   * {@link StepAlreadyFinishedError} (the step is FINISHED), and an
   * {@link RpcError} with reason INVALID_STEP_NAME or TOO_MANY_STEPS.
   */
  async startStep(req: StartStepRequest, options?: CallOptions): Promise<JobStep> {
    const resp = await call(() => this.raw.idempotency.startStep({ namespace: req.namespace, key: req.key, token: req.token, step: req.step }, options));
    return stepFromProto(resp.step);
  }

  /**
   * completeStep records a step of the job held with token FINISHED with
   * its result, in one RPC without retries, and returns the step; repeating
   * it with the same result returns the stored step. Throws as
   * {@link IdemClient.startStep} does; {@link StepAlreadyFinishedError} for
   * another result, and STEPS_TOO_LARGE past the job's bounds.
   */
  async completeStep(req: CompleteStepRequest, options?: CallOptions): Promise<JobStep> {
    const msg = { namespace: req.namespace, key: req.key, token: req.token, step: req.step, result: bytesOf(req.result ?? new Uint8Array()) };
    const resp = await call(() => this.raw.idempotency.completeStep(msg, options));
    return stepFromProto(resp.step);
  }

  /**
   * listHeld returns one page of the UNRESOLVED records of the caller's
   * tenant, ordered by namespace, then key: the polling fallback of
   * {@link IdemClient.watchHeld}.
   */
  async listHeld(req: ListHeldRequest = {}, options?: CallOptions): Promise<{ records: JobRecord[]; nextPageToken: string }> {
    const resp = await call(() =>
      this.raw.resolver.listHeld({ namespaces: [...(req.namespaces ?? [])], pageSize: req.pageSize, pageToken: req.pageToken }, options),
    );
    return { records: resp.records.map(recordFromProto), nextPageToken: resp.nextPageToken };
  }

  /**
   * watchHeld streams the UNRESOLVED records of the caller's tenant: every
   * record held when it starts, then `synced`, then each record as it
   * becomes held, and `left` for a delivered one that no longer is. It runs
   * until options.signal is aborted (the iteration then ends with the
   * abort's error) or the server ends it. It needs a transport that
   * {@link IdemClient.streams}; errors are decoded as the typed calls'.
   */
  async *watchHeld(req: HeldRequest = {}, options?: CallOptions): AsyncGenerator<HeldEvent> {
    try {
      for await (const m of this.raw.resolver.watchHeld({ namespaces: [...(req.namespaces ?? [])] }, options)) {
        switch (m.event.case) {
          case "held":
            yield { kind: "held", record: recordFromProto(m.event.value) };
            break;
          case "synced":
            yield { kind: "synced" };
            break;
          case "left":
            yield { kind: "left", namespace: m.event.value.namespace, key: m.event.value.key, token: m.event.value.token };
            break;
        }
      }
    } catch (err) {
      throw RpcError.from(err);
    }
  }

  /**
   * resolve decides a held (UNRESOLVED) record as a resolver, for the lease
   * held with token, with exactly one of `completed`, `failed` or
   * `released`, and returns the resolved record. Throws
   * {@link NotUnresolvedError} when another resolver or a person decided
   * first (unless the same decision), {@link LeaseLostError} when the
   * record holds another token, {@link NotFoundError}.
   */
  async resolve(req: ResolveRequest, options?: CallOptions): Promise<JobRecord> {
    const given = (["completed", "failed", "released"] as const).filter((f) => req[f] !== undefined && req[f] !== false);
    if (given.length !== 1) {
      throw new TypeError(`idem: resolve takes exactly one of completed, failed and released; got ${given.length ? given.join(", ") : "none"}`);
    }
    let resolution: MessageInitShape<typeof ResolveRequestSchema>["resolution"];
    if (req.completed !== undefined) {
      resolution = { case: "completed", value: { result: bytesOf(req.completed) } };
    } else if (req.failed !== undefined) {
      resolution = { case: "failed", value: { error: req.failed } };
    } else {
      resolution = { case: "released", value: {} };
    }
    const msg = { namespace: req.namespace, key: req.key, token: req.token, resolver: req.resolver, reason: req.reason, resolution };
    const resp = await call(() => this.raw.resolver.resolve(msg, options));
    return recordFromProto(resp.record);
  }

  /**
   * batchClaim is {@link IdemClient.claim} for many jobs in one RPC, for a
   * consumer that holds a delivery of many: one result per request, in
   * their order, each what claim() returns or the error it throws
   * ({@link InProgressError}, {@link UnresolvedError},
   * {@link FingerprintMismatchError}, …). Two requests of one key are
   * answered as two claims made in that order. An item's waitMs must be
   * unset or 0 (a batch answers at once; INVALID_WAIT otherwise).
   *
   * The call throws, for the batch as a whole, only what concerns it: an
   * {@link RpcError} with reason INVALID_BATCH_SIZE (no requests, or more
   * than the server's --batch-max-items, 500 by default),
   * REQUEST_TOO_LARGE (over its --batch-max-bytes, 4 MiB by default), or
   * a failure of the RPC itself (authentication, transport). As the typed
   * calls, it is one RPC without retries: an item whose error
   * {@link isTransient} (UNAVAILABLE, a rate limit counted per item) may be
   * claimed again with the same claimant, which is safe to repeat.
   */
  async batchClaim(reqs: readonly ClaimRequest[], options?: CallOptions): Promise<BatchResult<ClaimResult>[]> {
    const requests = reqs.map((r, i) => claimMessage(r, `requests[${i}].`));
    const resp = await call(() => this.raw.idempotency.batchClaim({ requests }, options));
    return answers("BatchClaim", requests.length, resp.results, claimAnswer);
  }

  /**
   * batchComplete is {@link IdemClient.complete} for many jobs in one RPC:
   * one result per request, in their order, each the completed record or
   * the error complete() throws ({@link LeaseLostError},
   * {@link AlreadyTerminalError}, …). It throws as {@link IdemClient.batchClaim}
   * does; an item that failed transiently may be sent again with the same
   * token and result, which is safe to repeat.
   */
  async batchComplete(reqs: readonly CompleteRequest[], options?: CallOptions): Promise<BatchResult<JobRecord>[]> {
    const requests = reqs.map((r) => completeMessage(r));
    const resp = await call(() => this.raw.idempotency.batchComplete({ requests }, options));
    return answers("BatchComplete", requests.length, resp.results, (r) => recordFromProto(r.record));
  }

  /**
   * batchFail is {@link IdemClient.fail} for many jobs in one RPC: one
   * result per request, in their order, each the record or the error fail()
   * throws. It throws and may be repeated as {@link IdemClient.batchComplete}.
   */
  async batchFail(reqs: readonly FailRequest[], options?: CallOptions): Promise<BatchResult<JobRecord>[]> {
    const requests = reqs.map((r) => failMessage(r));
    const resp = await call(() => this.raw.idempotency.batchFail({ requests }, options));
    return answers("BatchFail", requests.length, resp.results, (r) => recordFromProto(r.record));
  }

  /**
   * batchHeartbeat is {@link IdemClient.heartbeat} for many leases in one
   * RPC, to keep a whole delivery's jobs held while they run: one result
   * per request, in their order, each the record with its new
   * leaseExpiresAt or the error heartbeat() throws ({@link LeaseLostError}:
   * stop that job). It throws as {@link IdemClient.batchClaim} does.
   */
  async batchHeartbeat(reqs: readonly HeartbeatRequest[], options?: CallOptions): Promise<BatchResult<JobRecord>[]> {
    const requests = reqs.map((r, i) => heartbeatMessage(r, `requests[${i}].`));
    const resp = await call(() => this.raw.idempotency.batchHeartbeat({ requests }, options));
    return answers("BatchHeartbeat", requests.length, resp.results, (r) => recordFromProto(r.record));
  }

  /**
   * batchLookup is {@link IdemClient.lookup} for many records in one RPC:
   * one result per request, in their order, each the record or the error
   * lookup() throws ({@link NotFoundError} for one that does not exist).
   */
  async batchLookup(reqs: readonly LookupRequest[], options?: CallOptions): Promise<BatchResult<JobRecord>[]> {
    const requests = reqs.map((r) => ({ namespace: r.namespace, key: r.key }));
    const resp = await call(() => this.raw.idempotency.batchLookup({ requests }, options));
    return answers("BatchLookup", requests.length, resp.results, (r) => recordFromProto(r.record));
  }

  /**
   * do runs handler at most once per (namespace, key) across all workers,
   * and records its outcome; see {@link DoOptions} for waiting. It returns
   * only when the job is done: by this call (the handler ran and its Complete
   * was confirmed) or before (a replay of the stored result, `replayed`
   * true). Every other outcome is thrown:
   *
   * - {@link InProgressError}: another worker holds the job (after waitMs).
   * - {@link JobFailedError}: the job failed permanently earlier.
   * - {@link UnresolvedError}: the job waits for a resolution.
   * - {@link FingerprintMismatchError}: the key was used for another request.
   * - {@link LeaseLostError}: another worker took the job over while the
   *   handler ran (its `attempt.signal` was aborted) or before its Complete;
   *   `value` holds the handler's value if it returned one.
   * - {@link ResolvedByOperatorError}: the handler's result was not stored:
   *   an operator resolved the record meanwhile.
   * - {@link CompletionUnknownError}: the handler returned, but the Complete
   *   could not be confirmed before the lease ran out.
   * - the handler's own error, once its failure is recorded: retryable
   *   (RELEASED) unless wrapped with {@link permanent} (FAILED).
   *
   * It claims under a fresh claimant id (a UUID), reused when a Claim that
   * failed transiently is retried, so a Claim whose answer was lost still
   * acquires. While the handler runs it heartbeats every third of the
   * lease. The error text it records is made storable (see
   * {@link storableText}), so a failure is recorded whatever its message.
   */
  do(job: Job, handler: Handler, options?: DoOptions): Promise<DoResult> {
    return runDo(this, job, handler, options ?? {});
  }

  /**
   * doBatch is {@link IdemClient.do} for a delivery of several jobs (a
   * batch of queue messages): it claims them all in one BatchClaim, runs
   * handler(attempt, index) for each job it acquired (at most
   * `concurrency` at once; all by default), keeps their leases with one
   * BatchHeartbeat every third of the shortest lease, and records their
   * outcomes with one BatchComplete and one BatchFail once every handler has
   * returned. It resolves with one result per job, in the order of jobs,
   * each what do() would have returned (`ok`) or thrown for that job alone:
   * the value (fresh, or stored and `replayed`), or the error
   * ({@link InProgressError}, {@link UnresolvedError},
   * {@link JobFailedError}, {@link FingerprintMismatchError}, the handler's
   * own, {@link LeaseLostError}, {@link ResolvedByOperatorError},
   * {@link CompletionUnknownError}, or the Claim's). Two jobs of one key are
   * two Claims in that order: the second finds the first's lease, an
   * InProgressError.
   *
   * Each item is retried as do() retries its unary call, and a retry carries
   * only the items still owed an answer: the Claims while they fail
   * transiently, up to the retry policy's maxAttempts, each job under a
   * claimant of its own that its retries reuse; the heartbeats in the same
   * way, and a job whose heartbeat is refused (LEASE_LOST, …) has its
   * `attempt.signal` aborted with that error; the Completes and Fails until
   * the server confirms them or the job's lease runs out, whatever
   * `signal` does once the handlers returned. A batch the server refuses for
   * its size is halved and the halves sent in turn. No jobs is no RPC.
   */
  doBatch(jobs: readonly Job[], handler: BatchHandler, options?: DoBatchOptions): Promise<BatchResult<DoResult, unknown>[]> {
    return runDoBatch(this, jobs, handler, options ?? {});
  }

  /**
   * close closes the transport's connections, if it holds any (gRPC's
   * HTTP/2 session); calls in flight fail. A fetch transport has nothing to
   * close.
   */
  close(): void {
    this.#transport.close?.();
  }
}

/** ListRecordsRequest filters and pages a listing. */
export interface ListRecordsRequest {
  /** namespace limits the listing to one namespace; all by default. */
  namespace?: string;
  /** state limits it to one state; all by default. */
  state?: State;
  /** olderThanMs limits it to records unchanged for at least this long. */
  olderThanMs?: number;
  /** pageSize is 1 to 1000; 100 by default. */
  pageSize?: number;
  /** pageToken is the previous page's nextPageToken; "" for the first page. */
  pageToken?: string;
  /** tenant lists another tenant's records (operators only). */
  tenant?: string;
  /** allTenants lists every tenant's records (operators only; not with tenant). */
  allTenants?: boolean;
  /**
   * keyPrefix limits it to records whose key starts with it (compared
   * bytewise); all by default. At most 256 bytes, without control
   * characters, as a key.
   */
  keyPrefix?: string;
}

/** ListRecordsPage is one page of a listing. */
export interface ListRecordsPage {
  records: JobRecord[];
  /** nextPageToken is "" on the last page. */
  nextPageToken: string;
}

/** RecordRef names one record, of the caller's tenant or (operators) another's. */
export interface RecordRef {
  namespace: string;
  key: string;
  /** tenant names another tenant (operators only); "" for the caller's own. */
  tenant?: string;
}

/**
 * ResolveRecordRequest names an UNRESOLVED record and exactly one
 * resolution: `completed` (the result every later Claim replays), `failed`
 * (the error every later Claim replays) or `released: true` (the next Claim
 * acquires it).
 */
export type ResolveRecordRequest = RecordRef & {
  completed?: Uint8Array | string;
  failed?: string;
  released?: boolean;
};

/** StatsRequest asks for record counts. */
export interface StatsRequest {
  namespace?: string;
  tenant?: string;
  allTenants?: boolean;
}

/** StatsRow is the number of records of one namespace in one state. */
export interface StatsRow {
  namespace: string;
  state: State;
  count: bigint;
  tenant: string;
  /**
   * oldestUpdatedAt is the earliest updatedAt of these records: with
   * PROCESSING, the claim that has gone longest without a Claim or
   * Heartbeat renewing its lease; with UNRESOLVED, the record held longest.
   */
  oldestUpdatedAt?: Date;
}

/** AdminClient has the typed AdminService calls; see {@link IdemClient.admin}. */
export class AdminClient {
  readonly #raw: Client<typeof AdminService>;

  constructor(raw: Client<typeof AdminService>) {
    this.#raw = raw;
  }

  /** listRecords returns one page of records in (namespace, key) order. */
  async listRecords(req: ListRecordsRequest = {}, options?: CallOptions): Promise<ListRecordsPage> {
    const resp = await call(() =>
      this.#raw.listRecords(
        {
          namespace: req.namespace,
          state: req.state,
          olderThan: durationOf(req.olderThanMs, "olderThanMs"),
          pageSize: req.pageSize,
          pageToken: req.pageToken,
          tenant: req.tenant,
          allTenants: req.allTenants,
          keyPrefix: req.keyPrefix,
        },
        options,
      ),
    );
    return { records: resp.records.map(recordFromProto), nextPageToken: resp.nextPageToken };
  }

  /**
   * deleteRecord evicts one record whatever its state and returns it as it
   * was. The next Claim of the key creates it afresh with a greater token.
   */
  async deleteRecord(req: RecordRef, options?: CallOptions): Promise<JobRecord> {
    const resp = await call(() => this.#raw.deleteRecord({ namespace: req.namespace, key: req.key, tenant: req.tenant }, options));
    return recordFromProto(resp.record);
  }

  /** stats counts the records per namespace and state. */
  async stats(req: StatsRequest = {}, options?: CallOptions): Promise<StatsRow[]> {
    const resp = await call(() => this.#raw.stats({ namespace: req.namespace, tenant: req.tenant, allTenants: req.allTenants }, options));
    return resp.rows.map((r: StatsRowPb) => ({
      namespace: r.namespace,
      state: r.state,
      count: r.count,
      tenant: r.tenant,
      oldestUpdatedAt: r.oldestUpdatedAt ? timestampDate(r.oldestUpdatedAt) : undefined,
    }));
  }

  /**
   * resolveRecord moves an UNRESOLVED record on, with exactly one of
   * `completed`, `failed` or `released`, and returns the resolved record.
   */
  async resolveRecord(req: ResolveRecordRequest, options?: CallOptions): Promise<JobRecord> {
    const given = (["completed", "failed", "released"] as const).filter((f) => req[f] !== undefined && req[f] !== false);
    if (given.length !== 1) {
      throw new TypeError(`idem: resolveRecord takes exactly one of completed, failed and released; got ${given.length ? given.join(", ") : "none"}`);
    }
    let resolution: MessageInitShape<typeof ResolveRecordRequestSchema>["resolution"];
    if (req.completed !== undefined) {
      resolution = { case: "completed", value: { result: bytesOf(req.completed) } };
    } else if (req.failed !== undefined) {
      resolution = { case: "failed", value: { error: req.failed } };
    } else {
      resolution = { case: "released", value: {} };
    }
    const resp = await call(() => this.#raw.resolveRecord({ namespace: req.namespace, key: req.key, tenant: req.tenant, resolution }, options));
    return recordFromProto(resp.record);
  }
}

/** claimMessage is the ClaimRequest message of req; at prefixes the field a RangeError names. */
function claimMessage(req: ClaimRequest, at = ""): MessageInitShape<typeof ClaimRequestSchema> {
  return {
    namespace: req.namespace,
    key: req.key,
    fingerprint: req.fingerprint,
    leaseTtl: durationOf(req.leaseTtlMs, `${at}leaseTtlMs`),
    claimant: req.claimant,
    retention: durationOf(req.retentionMs, `${at}retentionMs`),
    wait: durationOf(req.waitMs, `${at}waitMs`),
  };
}

/**
 * claimAnswer is what claim() makes of a ClaimResponse: ACQUIRED, COMPLETED
 * and FAILED are returned, IN_PROGRESS and UNRESOLVED thrown.
 */
function claimAnswer(resp: ClaimResponse): ClaimResult {
  const record = recordFromProto(resp.record);
  switch (resp.outcome) {
    case Outcome.ACQUIRED:
    case Outcome.COMPLETED:
    case Outcome.FAILED:
      return { outcome: resp.outcome, record };
    case Outcome.IN_PROGRESS:
      throw new InProgressError(record, durationMs(resp.retryAfter));
    case Outcome.UNRESOLVED:
      throw new UnresolvedError(record);
  }
  throw new IdemError(`idem: Claim answered with unknown outcome ${resp.outcome}; this version of @idemhq/idem is older than the server`);
}

function completeMessage(req: CompleteRequest): MessageInitShape<typeof CompleteRequestSchema> {
  return { namespace: req.namespace, key: req.key, token: req.token, result: req.result === undefined ? undefined : bytesOf(req.result) };
}

function failMessage(req: FailRequest): MessageInitShape<typeof FailRequestSchema> {
  return { namespace: req.namespace, key: req.key, token: req.token, error: req.error, retryable: req.retryable };
}

function heartbeatMessage(req: HeartbeatRequest, at = ""): MessageInitShape<typeof HeartbeatRequestSchema> {
  return { namespace: req.namespace, key: req.key, token: req.token, leaseTtl: durationOf(req.leaseTtlMs, `${at}leaseTtlMs`) };
}

/**
 * resultRefused is err, the error of a Complete of a result of n bytes, with
 * the result's size and the limit in its message when gRPC refused the
 * request for its size (RESOURCE_EXHAUSTED without details): a gRPC server
 * says only that a message was larger than its maximum, before idemd's own
 * check could name the limit.
 */
function resultRefused(err: unknown, n: number): unknown {
  if (!(err instanceof ConnectError) || err.code !== Code.ResourceExhausted || err.details.length > 0) {
    return err;
  }
  return new ConnectError(
    `result is ${n} bytes, more than the server reads (${err.rawMessage}); idemd's --max-result-bytes bounds results, at most ${RESULT_BYTES_CEILING}`,
    err.code,
    err.metadata,
    undefined,
    err,
  );
}

/** RESULT_BYTES_CEILING is the most any idemd's --max-result-bytes may be: 16 MiB. */
const RESULT_BYTES_CEILING = 16 * 1024 * 1024;

/** call runs one RPC and decodes its error. */
async function call<T>(rpc: () => Promise<T>): Promise<T> {
  try {
    return await rpc();
  } catch (err) {
    throw RpcError.from(err);
  }
}
