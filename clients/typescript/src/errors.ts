import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import type { Status } from "./gen/google/rpc/status_pb.js";
import { ErrorReason } from "./gen/idem/v1/error_reason_pb.js";
import type { JobRecord } from "./record.js";
import { durationMs } from "./record.js";

/** ERROR_DOMAIN is the ErrorInfo domain of every error idem sends. */
export const ERROR_DOMAIN = "idem";

/**
 * IdemError is the base class of every error this package throws: the
 * errors of RPCs ({@link RpcError} and its subclasses) and the outcomes
 * that do not mean "done by you" ({@link InProgressError},
 * {@link UnresolvedError}, {@link JobFailedError},
 * {@link CompletionUnknownError}, {@link FailureNotRecordedError}).
 */
export class IdemError extends Error {
  override name = "IdemError";
}

/**
 * RpcError is the error of one RPC, decoded: its status code, and the
 * google.rpc.ErrorInfo reason and google.rpc.RetryInfo delay idem attaches.
 * Branch on {@link RpcError.reason} (or the subclass), never on the code or
 * the message: a transport reports a connection reset as ABORTED, the same
 * code as LEASE_LOST, and only the reason tells them apart.
 *
 * The subclasses name the reasons a worker acts on: {@link LeaseLostError},
 * {@link FingerprintMismatchError}, {@link NotFoundError},
 * {@link AlreadyTerminalError} and {@link ResolvedByOperatorError}.
 */
export class RpcError extends IdemError {
  override name = "RpcError";
  /** code is the status code (Connect's Code; the same numbers as gRPC's). */
  readonly code: Code;
  /**
   * reason is idem's ErrorInfo reason: ErrorReason.UNSPECIFIED when the error
   * has none (a transport error) or one this version of the package does not
   * know ({@link RpcError.reasonName} has it then).
   */
  readonly reason: ErrorReason;
  /** reasonName is the reason as sent ("LEASE_LOST"); "" when there is none. */
  readonly reasonName: string;
  /** metadata is the ErrorInfo's metadata: "field" names the field of an INVALID_* reason. */
  readonly metadata: Readonly<Record<string, string>>;
  /**
   * retryAfterMs is the google.rpc.RetryInfo delay, in milliseconds, when the
   * server sent one (RESOURCE_EXHAUSTED / RATE_LIMITED): wait that long
   * before trying again.
   */
  readonly retryAfterMs: number | undefined;
  /** serverMessage is the server's message, which says what to do. */
  readonly serverMessage: string;
  /**
   * value is set when {@link IdemClient.do} throws this error after the
   * handler returned: the handler's value. The side effect ran, but idem did
   * not record it.
   */
  value?: Uint8Array;
  declare readonly cause: ConnectError;

  constructor(err: ConnectError) {
    const info = err.findDetails(ErrorInfoSchema).find((d) => d.domain === ERROR_DOMAIN);
    const retry = err.findDetails(RetryInfoSchema)[0];
    const reasonName = info?.reason ?? "";
    const codeName = codeNameOf(err.code);
    super(`idem: ${messagePrefix(reasonName)}${err.rawMessage} (${reasonName ? `${codeName}/${reasonName}` : codeName})`, { cause: err });
    this.code = err.code;
    this.reasonName = reasonName;
    this.reason = reasonValue(reasonName);
    this.metadata = { ...(info?.metadata ?? {}) };
    this.retryAfterMs = retry ? durationMs(retry.retryDelay) : undefined;
    this.serverMessage = err.rawMessage;
  }

  /** codeName is the code's canonical name: "FAILED_PRECONDITION". */
  get codeName(): string {
    return codeNameOf(this.code);
  }

  /**
   * from decodes an error of an RPC made with a client of this package's
   * generated services ({@link IdemClient.raw}) into an RpcError of the
   * class its reason names. Anything that is not a ConnectError comes back
   * as it is.
   */
  static from(err: unknown): unknown {
    if (err instanceof RpcError || !(err instanceof ConnectError)) {
      return err;
    }
    const info = err.findDetails(ErrorInfoSchema).find((d) => d.domain === ERROR_DOMAIN);
    switch (reasonValue(info?.reason ?? "")) {
      case ErrorReason.LEASE_LOST:
        return new LeaseLostError(err);
      case ErrorReason.FINGERPRINT_MISMATCH:
        return new FingerprintMismatchError(err);
      case ErrorReason.NOT_FOUND:
        return new NotFoundError(err);
      case ErrorReason.ALREADY_TERMINAL:
        return new AlreadyTerminalError(err);
      case ErrorReason.RESOLVED_BY_OPERATOR:
        return new ResolvedByOperatorError(err);
      case ErrorReason.STEP_ALREADY_FINISHED:
        return new StepAlreadyFinishedError(err);
      case ErrorReason.NOT_UNRESOLVED:
        return new NotUnresolvedError(err);
      default:
        return new RpcError(err);
    }
  }
}

/**
 * statusError decodes a google.rpc.Status that a batch call answered for one
 * item into the error the unary call would have thrown: the same class,
 * code, reason, metadata and retry delay. It goes through the ConnectError
 * that the transport would have made of the same status, so that an item's
 * error and a unary call's are decoded by one piece of code.
 */
export function statusError(status: Status): RpcError {
  const err = new ConnectError(status.message, status.code as Code);
  // The details as a transport hands them over: a type name and the bytes.
  err.details.push(...status.details.map((any) => ({ type: any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1), value: any.value })));
  return RpcError.from(err) as RpcError;
}

/**
 * LeaseLostError (ABORTED / LEASE_LOST): the token is no longer the record's
 * current token because another worker took the job over. Stop the work and
 * do not retry with that token.
 */
export class LeaseLostError extends RpcError {
  override name = "LeaseLostError";
}

/**
 * FingerprintMismatchError (FAILED_PRECONDITION / FINGERPRINT_MISMATCH): the
 * key was claimed before for a request with another fingerprint. Reusing a
 * key for a different request is a bug in the producer.
 */
export class FingerprintMismatchError extends RpcError {
  override name = "FingerprintMismatchError";
}

/**
 * NotFoundError (NOT_FOUND): no such record: never claimed, purged after its
 * retention, or deleted by an operator.
 */
export class NotFoundError extends RpcError {
  override name = "NotFoundError";
}

/**
 * AlreadyTerminalError (FAILED_PRECONDITION / ALREADY_TERMINAL): the record
 * already left PROCESSING, and this call does not repeat the one that ended
 * it.
 */
export class AlreadyTerminalError extends RpcError {
  override name = "AlreadyTerminalError";
}

/**
 * ResolvedByOperatorError (FAILED_PRECONDITION / RESOLVED_BY_OPERATOR): your
 * result (or error) was not stored: the record was UNRESOLVED and an operator
 * resolved it (`idem resolve`, AdminService.ResolveRecord) with another
 * outcome. The record keeps the operator's resolution; do not retry.
 */
export class ResolvedByOperatorError extends RpcError {
  override name = "ResolvedByOperatorError";
}

/**
 * StepAlreadyFinishedError (FAILED_PRECONDITION / STEP_ALREADY_FINISHED): the
 * step is FINISHED with another result, or was started again after it
 * finished; a FINISHED step never changes.
 */
export class StepAlreadyFinishedError extends RpcError {
  override name = "StepAlreadyFinishedError";
}

/**
 * NotUnresolvedError (FAILED_PRECONDITION / NOT_UNRESOLVED): the record is
 * not UNRESOLVED, so there is nothing to resolve: another resolver or a
 * person decided first, or its holder's late Complete or Fail ended it.
 */
export class NotUnresolvedError extends RpcError {
  override name = "NotUnresolvedError";
}

/**
 * InProgressError: another worker holds a live lease on the record. Do not
 * perform the side effect; try again later (or let the queue redeliver the
 * job), or pass `waitMs` to {@link IdemClient.do}.
 */
export class InProgressError extends IdemError {
  override name = "InProgressError";
  /**
   * retryAfterMs is how long until the holder's lease runs out; a Claim after
   * that may acquire the record. The holder usually finishes sooner.
   */
  readonly retryAfterMs: number;
  /** record is the record as the Claim saw it. */
  readonly record: JobRecord;

  constructor(record: JobRecord, retryAfterMs: number) {
    super(`idem: ${record.namespace}/${record.key} is in progress in another worker; its lease runs out in ${retryAfterMs} ms`);
    this.record = record;
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * UnresolvedError: the record is UNRESOLVED: its lease ran out under a policy
 * that holds such records for resolution, so the side effect may or may not
 * have happened. Do not run the job; park the message (a dead-letter queue)
 * until the late holder or an operator (`idem resolve`) resolves it.
 */
export class UnresolvedError extends IdemError {
  override name = "UnresolvedError";
  /** record is the UNRESOLVED record. */
  readonly record: JobRecord;

  constructor(record: JobRecord) {
    super(`idem: ${record.namespace}/${record.key} is unresolved: its lease ran out under a hold policy; park the message until it is resolved (idem resolve)`);
    this.record = record;
  }
}

/**
 * JobFailedError: the job failed permanently earlier (FAILED); the handler
 * was not called.
 */
export class JobFailedError extends IdemError {
  override name = "JobFailedError";
  /** storedError is the error text the permanent failure recorded. */
  readonly storedError: string;
  /** record is the FAILED record. */
  readonly record: JobRecord;

  constructor(record: JobRecord) {
    super(`idem: ${record.namespace}/${record.key} failed permanently earlier: ${record.error}`);
    this.storedError = record.error;
    this.record = record;
  }
}

/**
 * CompletionUnknownError: the handler returned a value but idem did not
 * confirm the Complete: it failed until the lease ran out, or the server
 * rejected it (a result over the server's size limit, for instance). The
 * side effect ran; whether idem recorded it is unknown, so a later delivery
 * may run it again once the lease runs out. `cause` is the last Complete
 * error.
 */
export class CompletionUnknownError extends IdemError {
  override name = "CompletionUnknownError";
  /** value is what the handler returned. */
  readonly value: Uint8Array;
  /** record is the record as acquired (PROCESSING, with the attempt's token). */
  readonly record: JobRecord;

  constructor(value: Uint8Array, record: JobRecord, cause: unknown) {
    super(`idem: ${record.namespace}/${record.key} ran, but its completion was not confirmed: ${messageOf(cause)}`, { cause });
    this.value = value;
    this.record = record;
  }
}

/**
 * FailureNotRecordedError: the handler threw, and its Fail was not recorded:
 * the server refused it (ALREADY_TERMINAL when the handler completed its own
 * token first, LEASE_LOST when another worker took the job over) or it
 * failed until the lease ran out. The handler's error is never lost: it is
 * `handlerError`, and this error's `cause`; `failError` is the last Fail
 * error (an {@link RpcError} such as {@link AlreadyTerminalError}).
 */
export class FailureNotRecordedError extends IdemError {
  override name = "FailureNotRecordedError";
  /** handlerError is what the handler threw. */
  readonly handlerError: unknown;
  /** failError is why the failure was not recorded: the last Fail error. */
  readonly failError: unknown;
  /** record is the record as acquired (with the attempt's token). */
  readonly record: JobRecord;
  declare readonly cause: unknown;

  constructor(handlerError: unknown, failError: unknown, record: JobRecord) {
    super(`idem: ${record.namespace}/${record.key}: the handler failed (${messageOf(handlerError)}), and its failure was not recorded: ${messageOf(failError)}`, {
      cause: handlerError,
    });
    this.handlerError = handlerError;
    this.failError = failError;
    this.record = record;
  }
}

/**
 * PermanentError marks a handler's failure as permanent: see
 * {@link permanent}. Its message is the wrapped error's.
 */
export class PermanentError extends Error {
  override name = "PermanentError";
  constructor(cause: unknown) {
    super(messageOf(cause), { cause });
  }
}

/**
 * permanent marks err as a permanent failure: when a handler throws it,
 * {@link IdemClient.do} records the failure as permanent (FAILED), and every
 * later do() for the key throws a {@link JobFailedError} with its message
 * without calling the handler. Errors not marked release the record, so the
 * next delivery runs the handler again.
 *
 * ```ts
 * if (card.declined) throw permanent(new Error("card declined"));
 * ```
 */
export function permanent(err: unknown): PermanentError {
  return err instanceof PermanentError ? err : new PermanentError(err);
}

/** isPermanent reports whether err, or an error in its cause chain, is a {@link PermanentError}. */
export function isPermanent(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 32; e = e.cause, depth++) {
    if (e instanceof PermanentError) {
      return true;
    }
  }
  return false;
}

/**
 * errorReason returns idem's ErrorInfo reason of err: an {@link RpcError}'s,
 * or that of a ConnectError from a raw client; ErrorReason.UNSPECIFIED when
 * it has none.
 */
export function errorReason(err: unknown): ErrorReason {
  const decoded = RpcError.from(err);
  return decoded instanceof RpcError ? decoded.reason : ErrorReason.UNSPECIFIED;
}

/**
 * isTransient reports whether err is worth retrying with the same request:
 * UNAVAILABLE (the server or its database is unreachable, or the record was
 * contended), DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED with a RetryInfo
 * (idemd's per-tenant rate limit; without one it is a message over a size
 * limit, which no retry fixes), and a connection that failed under the
 * call, which Node's HTTP/2 reports as ABORTED (a reset), CANCELLED (a
 * stream closed by a peer that died) or INTERNAL (with the network error as
 * its cause) — none with an idem reason: idem's own ABORTED is LEASE_LOST.
 * A CANCELLED that your own AbortSignal caused passes this test too: check
 * the signal first.
 */
export function isTransient(err: unknown): boolean {
  if (!(err instanceof RpcError)) {
    return false;
  }
  switch (err.code) {
    case Code.Unavailable:
    case Code.DeadlineExceeded:
      return true;
    case Code.ResourceExhausted:
      return err.retryAfterMs !== undefined;
    case Code.Aborted:
    case Code.Canceled:
      return err.reasonName === "";
    case Code.Internal:
      return err.reasonName === "" && networkErrorIn(err.cause);
  }
  return false;
}

// The codes Node gives errors of sockets and HTTP/2 sessions: ECONNRESET,
// EPIPE, ERR_HTTP2_GOAWAY_SESSION, ERR_STREAM_PREMATURE_CLOSE, …
const networkErrorCode = /^(E[A-Z]+|ERR_HTTP2_[A-Z_]+|ERR_STREAM_[A-Z_]+)$/;

function networkErrorIn(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && networkErrorCode.test(code)) {
      return true;
    }
  }
  return false;
}

/** messageOf is the text of a thrown value: an Error's message, or the value as a string. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function reasonValue(name: string): ErrorReason {
  if (name === "") {
    return ErrorReason.UNSPECIFIED;
  }
  const v = (ErrorReason as unknown as Record<string, ErrorReason | string>)[name];
  return typeof v === "number" ? v : ErrorReason.UNSPECIFIED;
}

function messagePrefix(reasonName: string): string {
  return reasonName === "RESOLVED_BY_OPERATOR" ? "your result was not stored: the record was resolved by an operator: " : "";
}

const codeNames: Record<number, string> = {
  [Code.Canceled]: "CANCELLED",
  [Code.Unknown]: "UNKNOWN",
  [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED",
  [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "ALREADY_EXISTS",
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.FailedPrecondition]: "FAILED_PRECONDITION",
  [Code.Aborted]: "ABORTED",
  [Code.OutOfRange]: "OUT_OF_RANGE",
  [Code.Unimplemented]: "UNIMPLEMENTED",
  [Code.Internal]: "INTERNAL",
  [Code.Unavailable]: "UNAVAILABLE",
  [Code.DataLoss]: "DATA_LOSS",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
};

function codeNameOf(code: Code): string {
  return codeNames[code] ?? `CODE_${code}`;
}
