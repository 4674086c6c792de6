import { create } from "@bufbuild/protobuf";
import { type Duration, DurationSchema, type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";
import {
  type Actor as ActorPb,
  type Record as RecordPb,
  type Step as StepPb,
  State,
  StepState,
  type TimelineEntry as TimelineEntryPb,
  TimelineEntryKind,
} from "./gen/idem/v1/idem_pb.js";

/**
 * JobRecord is the server's state for one (namespace, key). Times are from
 * the database's clock; a time that is unset is undefined.
 */
export interface JobRecord {
  namespace: string;
  key: string;
  state: State;
  /**
   * token is the fencing token of the latest acquisition. Pass it to
   * downstream systems that can reject writes from a superseded token.
   */
  token: bigint;
  /** attempt is how many times the record was acquired since it was created. */
  attempt: number;
  /** claimant is the claimant id of the latest acquiring Claim; "" if none. */
  claimant: string;
  /** fingerprint is the fingerprint stored when the record was created; empty if none. */
  fingerprint: Uint8Array;
  /** leaseExpiresAt is set while PROCESSING (and kept when EXPIRED). */
  leaseExpiresAt: Date | undefined;
  /** result is the stored result (COMPLETED only). */
  result: Uint8Array;
  /** error is the stored error (FAILED and RELEASED only). */
  error: string;
  createdAt: Date | undefined;
  updatedAt: Date | undefined;
  completedAt: Date | undefined;
  /** expiresAt is when the record may be purged; unset while PROCESSING and UNRESOLVED. */
  expiresAt: Date | undefined;
  /**
   * policy names the policy of idemd's config file that applied when the
   * record was acquired (its namespace globs joined by commas); "" for none.
   */
  policy: string;
  /**
   * hold is true when that policy holds the record for resolution when its
   * lease runs out (UNRESOLVED) instead of letting a Claim take it over.
   */
  hold: boolean;
  /** tenant is the record's tenant in AdminService answers; "" elsewhere. */
  tenant: string;
  /**
   * steps are the job's named steps in the order they were first recorded;
   * set in the answers of Claim, Lookup and the admin calls, empty in those
   * of Complete, Fail and Heartbeat.
   */
  steps: JobStep[];
  /**
   * holdUnfinished is true when the record's policy says on_unfinished_step:
   * hold: a takeover while a step is STARTED makes it UNRESOLVED instead.
   */
  holdUnfinished: boolean;
}

/** JobStep is one named step of a job (see {@link Attempt.step}). */
export interface JobStep {
  name: string;
  /** state is STARTED (its effect may or may not have happened) or FINISHED. */
  state: StepState;
  /** result is what CompleteStep recorded (FINISHED only; may be empty). */
  result: Uint8Array;
  /** token is the token of the holder that finished the step or, while STARTED, started it. */
  token: bigint;
  startedAt: Date | undefined;
  finishedAt: Date | undefined;
}

/** stepFromProto converts the generated message into a {@link JobStep}. */
export function stepFromProto(s: StepPb | undefined): JobStep {
  return {
    name: s?.name ?? "",
    state: s?.state ?? StepState.UNSPECIFIED,
    result: s?.result ?? new Uint8Array(),
    token: s?.token ?? 0n,
    startedAt: dateOf(s?.startedAt),
    finishedAt: dateOf(s?.finishedAt),
  };
}

/**
 * TimelineEntry is one exception in the life of a record's key (a
 * takeover, a failure, a hold, a resolution, a deletion, a refused
 * fingerprint), as Lookup with history returns it.
 */
export interface TimelineEntry {
  kind: TimelineEntryKind;
  at: Date | undefined;
  /** token is the record's token then; for TAKEN_OVER, the new one. */
  token: bigint;
  /** state is the state it left the record in. */
  state: State;
  previousToken: bigint;
  previousState: State;
  claimant: string;
  previousClaimant: string;
  error: string;
  /** actor is who resolved or deleted the record: tenant, operator name, resolver name. */
  actor: { tenant: string; operator: string; resolver: string };
  /** reason is the free text a resolution or deletion gave. */
  reason: string;
  fingerprint: Uint8Array;
}

/** timelineFromProto converts the generated message into a {@link TimelineEntry}. */
export function timelineFromProto(t: TimelineEntryPb): TimelineEntry {
  const actor: ActorPb | undefined = t.actor;
  return {
    kind: t.kind,
    at: dateOf(t.at),
    token: t.token,
    state: t.state,
    previousToken: t.previousToken,
    previousState: t.previousState,
    claimant: t.claimant,
    previousClaimant: t.previousClaimant,
    error: t.error,
    actor: { tenant: actor?.tenant ?? "", operator: actor?.operator ?? "", resolver: actor?.resolver ?? "" },
    reason: t.reason,
    fingerprint: t.fingerprint,
  };
}

/** recordFromProto converts the generated message into a {@link JobRecord}. */
export function recordFromProto(r: RecordPb | undefined): JobRecord {
  return {
    namespace: r?.namespace ?? "",
    key: r?.key ?? "",
    state: r?.state ?? State.UNSPECIFIED,
    token: r?.token ?? 0n,
    attempt: r?.attempt ?? 0,
    claimant: r?.claimant ?? "",
    fingerprint: r?.fingerprint ?? new Uint8Array(),
    leaseExpiresAt: dateOf(r?.leaseExpiresAt),
    result: r?.result ?? new Uint8Array(),
    error: r?.error ?? "",
    createdAt: dateOf(r?.createdAt),
    updatedAt: dateOf(r?.updatedAt),
    completedAt: dateOf(r?.completedAt),
    expiresAt: dateOf(r?.expiresAt),
    policy: r?.policy ?? "",
    hold: r?.hold ?? false,
    tenant: r?.tenant ?? "",
    steps: (r?.steps ?? []).map(stepFromProto),
    holdUnfinished: r?.holdUnfinished ?? false,
  };
}

function dateOf(ts: Timestamp | undefined): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}

/** durationMs converts a Duration into milliseconds; 0 when unset. */
export function durationMs(d: Duration | undefined): number {
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0;
}

/**
 * durationOf converts milliseconds into a Duration, leaving 0 and undefined
 * unset so that the server applies its default. field names the request
 * field for the error a negative or non-finite value gets.
 */
export function durationOf(ms: number | undefined, field: string): Duration | undefined {
  if (ms === undefined || ms === 0) {
    return undefined;
  }
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new RangeError(`idem: ${field} is ${String(ms)}; it must be a non-negative number of milliseconds`);
  }
  const nanos = Math.round(ms * 1e6);
  return create(DurationSchema, { seconds: BigInt(Math.floor(nanos / 1e9)), nanos: nanos % 1e9 });
}

const utf8 = new TextEncoder();

/** bytesOf encodes a string as UTF-8 and passes bytes through. */
export function bytesOf(v: Uint8Array | string): Uint8Array {
  return typeof v === "string" ? utf8.encode(v) : v;
}
