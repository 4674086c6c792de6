import { sha256 } from "./sha256.js";

const utf8 = new TextEncoder();

/**
 * fingerprint returns the SHA-256 (32 bytes) of payload, for
 * {@link Job.fingerprint} and {@link ClaimRequest.fingerprint}. A string is
 * hashed as its UTF-8 bytes.
 */
export function fingerprint(payload: Uint8Array | string): Uint8Array {
  return sha256(typeof payload === "string" ? utf8.encode(payload) : payload);
}

/**
 * fingerprintJSON returns the SHA-256 of the canonical JSON form of value
 * ({@link canonicalJSON}), the same bytes as the Go SDK's
 * client.FingerprintJSON and every other idem SDK's, so that workers in
 * different languages claiming one job send one fingerprint. To fingerprint
 * JSON text, pass `JSON.parse(text)`.
 */
export function fingerprintJSON(value: unknown): Uint8Array {
  return fingerprint(canonicalJSON(value));
}

/**
 * canonicalJSON returns the RFC 8785 (JSON Canonicalization Scheme) form of
 * a JSON value: the text JSON.stringify writes for it once every object's
 * members are sorted by key, keys compared as sequences of UTF-16 code units
 * (JavaScript's default sort order).
 *
 * It is written out rather than done with a JSON.stringify replacer because
 * JavaScript objects always list integer-like keys ("9", "10") first and in
 * numeric order, whatever order they were inserted in, while RFC 8785 puts
 * "10" before "9".
 *
 * Numbers are written as Number.prototype.toString writes them; one that is
 * not finite (Infinity, NaN) is a RangeError, and a bigint a TypeError (send
 * large ids as strings). Values JSON.stringify leaves out (undefined,
 * functions, symbols) are left out of objects and written as null in arrays,
 * and toJSON is honoured. A lone UTF-16 surrogate has no portable form and
 * should not be used. client/testdata/fingerprint_vectors.json in the idem
 * repository holds the vectors every SDK passes.
 */
export function canonicalJSON(value: unknown): string {
  const out = write(value, "");
  if (out === undefined) {
    throw new TypeError("idem: fingerprint: the value has no JSON form");
  }
  return out;
}

function write(value: unknown, key: string): string | undefined {
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON(key: string): unknown }).toJSON(key);
  }
  switch (typeof value) {
    case "string":
    case "boolean":
      return JSON.stringify(value);
    case "number":
      if (!Number.isFinite(value)) {
        throw new RangeError(`idem: fingerprint: ${value} has no JSON form`);
      }
      return JSON.stringify(value); // also writes -0 as 0
    case "bigint":
      throw new TypeError("idem: fingerprint: a bigint has no JSON form; send large ids as strings");
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
  }
  if (value === null) {
    return "null";
  }
  if (value instanceof Number || value instanceof String || value instanceof Boolean) {
    return write(value.valueOf(), key);
  }
  if (Array.isArray(value)) {
    return "[" + value.map((e, i) => write(e, String(i)) ?? "null").join(",") + "]";
  }
  const obj = value as { [k: string]: unknown };
  const members: string[] = [];
  for (const k of Object.keys(obj).sort()) {
    const v = write(obj[k], k);
    if (v !== undefined) {
      members.push(JSON.stringify(k) + ":" + v);
    }
  }
  return "{" + members.join(",") + "}";
}
