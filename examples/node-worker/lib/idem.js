'use strict';
// A small idem client for Node.js workers, on @grpc/grpc-js and
// @grpc/proto-loader. It loads proto/idem/v1/idem.proto from the repository
// at run time (no copy, no generated code), decodes idem's errors from the
// google.rpc.ErrorInfo in the grpc-status-details-bin trailer, and offers
// run(), the Node counterpart of the Go SDK's client.Do: claim, perform the
// side effect while heartbeating the lease, complete.

const crypto = require('node:crypto');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const { canonicalJSON, fingerprintJSON } = require('./fingerprint');

// The repository's proto/ directory. IDEM_PROTO_DIR points elsewhere, for a
// worker deployed without the repository.
const PROTO_DIR = process.env.IDEM_PROTO_DIR || path.resolve(__dirname, '..', '..', '..', 'proto');

const ERROR_DOMAIN = 'idem';

// Codes idem retries with the same request: the server or its database was
// unreachable, or the call ran out of time.
const TRANSIENT = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED, grpc.status.RESOURCE_EXHAUSTED]);

let service; // the loaded IdempotencyService constructor
function idemService() {
  if (!service) {
    const def = protoLoader.loadSync('idem/v1/idem.proto', {
      includeDirs: [PROTO_DIR], // google/protobuf/*.proto come with protobufjs
      keepCase: true, // field names as in the proto: lease_ttl, retry_after
      longs: String, // int64 tokens as decimal strings: no precision lost
      enums: String, // 'OUTCOME_ACQUIRED', 'STATE_COMPLETED'
      defaults: true,
      oneofs: true,
    });
    service = grpc.loadPackageDefinition(def).idem.v1.IdempotencyService;
  }
  return service;
}

let statusTypes; // google.rpc.Status and ErrorInfo
function rpcTypes() {
  if (!statusTypes) {
    const root = protobuf.loadSync(path.join(__dirname, '..', 'proto', 'google', 'rpc', 'status.proto'));
    statusTypes = { Status: root.lookupType('google.rpc.Status'), ErrorInfo: root.lookupType('google.rpc.ErrorInfo') };
  }
  return statusTypes;
}

/**
 * errorInfo returns the google.rpc.ErrorInfo ({reason, domain, metadata})
 * that the server attached to a gRPC error, or null when there is none. It
 * decodes the grpc-status-details-bin trailer as a google.rpc.Status and
 * looks for an ErrorInfo among its Any details.
 */
function errorInfo(err) {
  const raw = err && err.metadata && typeof err.metadata.get === 'function' ? err.metadata.get('grpc-status-details-bin') : [];
  if (!raw || raw.length === 0) {
    return null;
  }
  const { Status, ErrorInfo } = rpcTypes();
  let st;
  try {
    st = Status.decode(Buffer.isBuffer(raw[0]) ? raw[0] : Buffer.from(String(raw[0]), 'base64'));
  } catch {
    return null;
  }
  for (const any of st.details || []) {
    if (String(any.type_url || any.typeUrl).endsWith('/google.rpc.ErrorInfo')) {
      const info = ErrorInfo.toObject(ErrorInfo.decode(any.value), { defaults: true });
      return { reason: info.reason, domain: info.domain, metadata: info.metadata || {} };
    }
  }
  return null;
}

/**
 * Reason has one property per value of the proto enum idem.v1.ErrorReason
 * (proto/idem/v1/error_reason.proto), named and valued as the ErrorInfo
 * reason the server sends: Reason.LEASE_LOST === 'LEASE_LOST'. Compare
 * err.reason with these rather than with string literals: a misspelt name
 * is undefined here, and the list follows the proto.
 */
const Reason = (() => {
  const root = protobuf.loadSync(path.join(PROTO_DIR, 'idem', 'v1', 'error_reason.proto'));
  const names = Object.keys(root.lookupEnum('idem.v1.ErrorReason').values)
    .filter((name) => name !== 'ERROR_REASON_UNSPECIFIED')
    .map((name) => name.slice('ERROR_REASON_'.length));
  return Object.freeze(Object.fromEntries(names.map((reason) => [reason, reason])));
})();

/**
 * IdemError is a failed RPC: code is the gRPC status code, reason idem's
 * ErrorInfo reason, one of Reason's (LEASE_LOST, FINGERPRINT_MISMATCH,
 * ALREADY_TERMINAL, NOT_FOUND, INVALID_KEY, …; '' when the error carries
 * none, and a string Reason lacks when the server is newer).
 */
class IdemError extends Error {
  constructor(err, rpc) {
    const info = errorInfo(err);
    const reason = info && info.domain === ERROR_DOMAIN ? info.reason : '';
    super(`idem: ${rpc}: ${err.details || err.message}${reason ? ` (${reason})` : ''}`);
    this.name = 'IdemError';
    this.code = err.code;
    this.reason = reason;
    this.errorInfo = info;
    this.cause = err;
  }

  get transient() {
    return TRANSIENT.has(this.code);
  }
}

/** durationMs turns a google.protobuf.Duration into milliseconds. */
function durationMs(d) {
  return d ? Number(d.seconds) * 1000 + Math.round((d.nanos || 0) / 1e6) : 0;
}

/** toDuration turns milliseconds into a google.protobuf.Duration (null for 0: the server's default). */
function toDuration(ms) {
  if (!ms) {
    return null;
  }
  return { seconds: String(Math.floor(ms / 1000)), nanos: Math.round((ms % 1000) * 1e6) };
}

/**
 * Client talks to one idemd. Each method is one RPC and returns a promise of
 * the response message; errors are IdemErrors.
 */
class Client {
  /**
   * @param {string} target host:port of idemd
   * @param {object} [opts]
   * @param {string} [opts.token] bearer token, sent as "authorization: Bearer <token>"
   * @param {boolean} [opts.tls] connect with TLS and the system's roots (default: plaintext, for a local idemd)
   * @param {number} [opts.timeoutMs] deadline of each RPC; 10 s by default
   */
  constructor(target, opts = {}) {
    if (opts.token && !opts.tls && !isLocal(target)) {
      throw new Error(`idem: refusing to send the token in plaintext to ${target}: use tls, or a loopback target`);
    }
    let creds = opts.tls ? grpc.credentials.createSsl() : grpc.credentials.createInsecure();
    if (opts.token && opts.tls) {
      const bearer = grpc.credentials.createFromMetadataGenerator((_, cb) => {
        const md = new grpc.Metadata();
        md.set('authorization', `Bearer ${opts.token}`);
        cb(null, md);
      });
      creds = grpc.credentials.combineChannelCredentials(creds, bearer);
    }
    this.metadata = new grpc.Metadata();
    if (opts.token && !opts.tls) {
      // gRPC only attaches call credentials over TLS; plaintext is for a
      // server on this machine, so the token goes in the metadata.
      this.metadata.set('authorization', `Bearer ${opts.token}`);
    }
    this.timeoutMs = opts.timeoutMs || 10_000;
    const Service = idemService();
    this.stub = new Service(target, creds);
  }

  close() {
    this.stub.close();
  }

  call(rpc, req) {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + this.timeoutMs);
      this.stub[rpc](req, this.metadata, { deadline }, (err, resp) => (err ? reject(new IdemError(err, rpc)) : resolve(resp)));
    });
  }

  claim(req) {
    return this.call('Claim', req);
  }

  complete(req) {
    return this.call('Complete', req);
  }

  fail(req) {
    return this.call('Fail', req);
  }

  heartbeat(req) {
    return this.call('Heartbeat', req);
  }

  lookup(req) {
    return this.call('Lookup', req);
  }
}

/** isLocal reports whether target (host:port) names this machine, so that plaintext never crosses a network. */
function isLocal(target) {
  const host = target.replace(/^dns:\/\/\//, '').replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
  return host === 'localhost' || host === '::1' || /^127\./.test(host) || target.startsWith('unix:');
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** retrying calls fn until it succeeds or fails with an error that is not transient, at most 6 times. */
async function retrying(fn) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!(err instanceof IdemError) || !err.transient || attempt >= 6) {
        throw err;
      }
      const d = Math.min(100 * 2 ** (attempt - 1), 5000);
      await sleep(d / 2 + Math.random() * (d / 2));
    }
  }
}

/** permanent marks an error so that run() records a permanent failure (FAILED) instead of releasing the job. */
function permanent(err) {
  err.permanent = true;
  return err;
}

function toBytes(value) {
  if (value === undefined || value === null) {
    return Buffer.alloc(0);
  }
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) {
    return Buffer.from(value);
  }
  return Buffer.from(typeof value === 'string' ? value : JSON.stringify(value), 'utf8');
}

/**
 * run performs a job's side effect at most once per (namespace, key) across
 * every worker, in any language, and records its outcome: the Node
 * counterpart of the Go SDK's client.Do.
 *
 * It claims the job (with a fresh claimant id, reused when a Claim that failed
 * transiently is retried) and, by outcome:
 *   - ACQUIRED: calls fn({signal, token, attempt, takeover}) while it
 *     heartbeats the lease every third of leaseMs, then Completes with fn's
 *     value (a Buffer, a string, or anything JSON.stringify takes) and
 *     returns {outcome: 'ran', value, record}. The signal aborts when a
 *     heartbeat answers LEASE_LOST: another worker took over, so stop before
 *     the side effect. If fn throws, the job is released (Fail with
 *     retryable=true) so that the next delivery runs it, or failed for good
 *     for an error marked with permanent(); the error is rethrown.
 *   - IN_PROGRESS: returns {outcome: 'in_progress', retryAfterMs, record}:
 *     another worker holds it. Let the queue redeliver the job later.
 *   - COMPLETED: returns {outcome: 'replayed', value, record} with the
 *     stored result; fn is not called.
 *   - FAILED: returns {outcome: 'failed', error, record} with the stored
 *     error; fn is not called.
 *   - UNRESOLVED: returns {outcome: 'unresolved', record}: a lease ran out
 *     under a hold policy and nobody knows whether the side effect happened;
 *     fn is not called, and the message should be parked until the record
 *     is resolved (idem resolve).
 *
 * A lost lease (LEASE_LOST from a heartbeat or from Complete) throws an
 * IdemError with reason 'LEASE_LOST'; when fn had returned, the error's
 * value holds what it returned (the side effect may have run twice: that is
 * what the fencing token is for).
 *
 * @param {Client} client
 * @param {object} job {namespace, key, payload?, fingerprint?, leaseMs?, retentionMs?}
 *   payload, when given, is fingerprinted with fingerprintJSON.
 * @param {function} fn async ({signal, token, attempt, takeover}) => value
 */
async function run(client, job, fn) {
  const fingerprint = job.fingerprint || (job.payload !== undefined ? fingerprintJSON(job.payload) : Buffer.alloc(0));
  const claimant = crypto.randomUUID();
  const resp = await retrying(() =>
    client.claim({
      namespace: job.namespace,
      key: job.key,
      fingerprint,
      lease_ttl: toDuration(job.leaseMs),
      claimant,
      retention: toDuration(job.retentionMs),
    }),
  );
  const record = resp.record;
  switch (resp.outcome) {
    case 'OUTCOME_COMPLETED':
      return { outcome: 'replayed', value: record.result, record };
    case 'OUTCOME_FAILED':
      return { outcome: 'failed', error: record.error, record };
    case 'OUTCOME_IN_PROGRESS':
      return { outcome: 'in_progress', retryAfterMs: durationMs(resp.retry_after), record };
    case 'OUTCOME_UNRESOLVED':
      return { outcome: 'unresolved', record };
    case 'OUTCOME_ACQUIRED':
      return holdAndRun(client, job, record, fn);
    default:
      throw new Error(`idem: Claim answered with unknown outcome ${resp.outcome}`);
  }
}

async function holdAndRun(client, job, record, fn) {
  const { namespace, key } = job;
  const token = record.token;
  // The lease the server granted, on its own clock, when the job names none.
  const leaseMs = job.leaseMs || timestampMs(record.lease_expires_at) - timestampMs(record.updated_at) || 300_000;

  const abort = new AbortController();
  let lost = null; // the IdemError that ended the lease
  let beating = false;
  const beat = setInterval(async () => {
    if (beating || lost) {
      return; // the previous heartbeat is still out, or the lease is gone
    }
    beating = true;
    try {
      await retrying(() => client.heartbeat({ namespace, key, token, lease_ttl: toDuration(job.leaseMs) }));
    } catch (err) {
      // Transient failures are left to the next beat: the lease outlives two
      // missed beats, and a lapsed lease is still ours until a takeover.
      if (!(err instanceof IdemError && err.transient)) {
        lost = err;
        abort.abort(err);
      }
    } finally {
      beating = false;
    }
  }, Math.max(Math.floor(leaseMs / 3), 100));

  let value;
  try {
    value = await fn({ signal: abort.signal, token, attempt: record.attempt, takeover: record.attempt > 1 });
  } catch (fnErr) {
    clearInterval(beat);
    if (lost) {
      throw lost; // a successor holds the job; recording anything would be rejected
    }
    await retrying(() =>
      client.fail({ namespace, key, token, error: String(fnErr && fnErr.message ? fnErr.message : fnErr).slice(0, 4000), retryable: !fnErr?.permanent }),
    );
    throw fnErr;
  }
  clearInterval(beat);
  const result = toBytes(value);
  if (lost) {
    lost.value = result;
    throw lost;
  }
  try {
    const done = await retrying(() => client.complete({ namespace, key, token, result }));
    return { outcome: 'ran', value: result, record: done.record };
  } catch (err) {
    err.value = result; // the side effect ran; the caller must know
    throw err;
  }
}

/** timestampMs turns a google.protobuf.Timestamp into milliseconds since the epoch (0 when unset). */
function timestampMs(ts) {
  return ts ? Number(ts.seconds) * 1000 + Math.floor((ts.nanos || 0) / 1e6) : 0;
}

module.exports = { Client, IdemError, Reason, run, permanent, errorInfo, canonicalJSON, fingerprintJSON, durationMs, toDuration, timestampMs };
