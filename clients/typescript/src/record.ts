import { create } from "@bufbuild/protobuf";
import { type Duration, DurationSchema, type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";
import { type Record as RecordPb, State } from "./gen/idem/v1/idem_pb.js";

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
