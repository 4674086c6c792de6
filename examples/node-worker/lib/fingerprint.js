'use strict';
// Fingerprints of job payloads, computed exactly as the Go SDK's
// client.FingerprintJSON does: SHA-256 of the payload's canonical JSON form
// (RFC 8785, the JSON Canonicalization Scheme). A Go worker and a Node worker
// that claim the same job therefore send the same fingerprint, and idem does
// not mistake them for two different requests (FINGERPRINT_MISMATCH).
//
// client/testdata/fingerprint_vectors.json holds the shared test vectors.

const crypto = require('node:crypto');

/**
 * canonicalJSON returns the RFC 8785 form of a JSON value: JSON.stringify's
 * text for it with every object's members sorted by key, keys compared as
 * sequences of UTF-16 code units (JavaScript's default sort order).
 *
 * It is written out rather than done with a JSON.stringify replacer because
 * JavaScript objects always list integer-like keys ("9", "10") first and in
 * numeric order, whatever order they were inserted in, while RFC 8785 puts
 * "10" before "9".
 *
 * Numbers are written as Number.prototype.toString writes them, as
 * JSON.stringify does; a number that is not finite (Infinity, NaN, or a
 * JSON literal beyond the range of a double) is an error, as in the Go SDK.
 * Values JSON.stringify leaves out (undefined, functions, symbols) are left
 * out of objects and written as null in arrays, and toJSON is honoured.
 */
function canonicalJSON(value) {
  const out = write(value, '');
  if (out === undefined) {
    throw new TypeError('idem: fingerprint: the value has no JSON form');
  }
  return out;
}

function write(value, key) {
  if (value !== null && typeof value === 'object' && typeof value.toJSON === 'function') {
    value = value.toJSON(key);
  }
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) {
        throw new RangeError(`idem: fingerprint: ${value} has no JSON form (a number beyond the range of a double?)`);
      }
      return JSON.stringify(value); // also writes -0 as 0
    case 'bigint':
      throw new TypeError('idem: fingerprint: a BigInt has no JSON form; send large ids as strings');
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
  }
  if (value === null) {
    return 'null';
  }
  if (value instanceof Number || value instanceof String || value instanceof Boolean) {
    return write(value.valueOf(), key);
  }
  if (Array.isArray(value)) {
    return '[' + value.map((e, i) => write(e, String(i)) ?? 'null').join(',') + ']';
  }
  const members = [];
  for (const k of Object.keys(value).sort()) {
    const v = write(value[k], k);
    if (v !== undefined) {
      members.push(JSON.stringify(k) + ':' + v);
    }
  }
  return '{' + members.join(',') + '}';
}

/** fingerprintJSON returns the SHA-256 (a 32-byte Buffer) of canonicalJSON(value). */
function fingerprintJSON(value) {
  return crypto.createHash('sha256').update(canonicalJSON(value), 'utf8').digest();
}

module.exports = { canonicalJSON, fingerprintJSON };
