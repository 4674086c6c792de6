#!/usr/bin/env node
// A Node.js worker that handles one delivery of one job through idem, the
// way a queue consumer would, on the @idemhq/idem package: do() claims the
// job, performs the side effect (appends a line to --effect-file after
// --work-ms of "work") while it heartbeats, and completes it. It prints
// what happened as one JSON line on stdout:
//
//   {"worker":"node","key":"order-1","outcome":"ran","token":"7","attempt":1,"value":"{...}"}
//
// outcome is one of
//   ran          this worker acquired the job and performed the side effect
//   replayed     the job completed earlier: value is the stored result
//   in_progress  another worker holds it (a queue would redeliver later)
//   failed       the job failed for good earlier: error is the stored error
//   unresolved   the job waits for an operator's resolution: park the message
//   fn_failed    this worker's work failed (--fail): recorded with Fail
//   lease_lost   another worker took the job over (reason from ErrorInfo)
//
// Before working it prints {"event":"acquired",...}, so a test can pause it.
//
//   node bin/worker.js --addr 127.0.0.1:7070 --key order-1 --payload '{"amount_cents":500}' --effect-file /tmp/charges

import { appendFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const usage = `Usage: node bin/worker.js --key KEY [flags]

Handles one delivery of one job through idem: claims KEY, performs the side
effect (appends a line to --effect-file after --work-ms), completes the job,
and prints the outcome as one JSON line on stdout.

Flags:
  --addr HOST:PORT      idemd's gRPC address (IDEM_ADDR; default 127.0.0.1:7070)
  --token TOKEN         bearer token of your tenant (IDEM_TOKEN; default none)
  --tls                 connect over TLS (default plaintext)
  --namespace NS        the job's namespace (default node_worker)
  --key KEY             the job's idempotency key (required)
  --payload JSON        the job's payload, fingerprinted as canonical JSON (default {})
  --lease-ms N          lease of the claim, in milliseconds (default 2000)
  --work-ms N           how long the "work" takes before the side effect (default 100)
  --effect-file FILE    file the side effect appends to (default none: no side effect)
  --fail MESSAGE        fail the job for good with MESSAGE instead of completing it
  --wait-ms N           wait up to N milliseconds while another worker holds the job
                        (default 0: answer in_progress at once)
  -h, --help            print this help

Exit status: 0 for the outcomes ran, replayed, in_progress, failed,
unresolved, fn_failed and lease_lost; 1 for any other error; 2 for a mistake
in the flags.
`;

let opts;
try {
  ({ values: opts } = parseArgs({
    options: {
      addr: { type: 'string', default: process.env.IDEM_ADDR || '127.0.0.1:7070' },
      token: { type: 'string', default: process.env.IDEM_TOKEN || '' },
      tls: { type: 'boolean', default: false },
      namespace: { type: 'string', default: 'node_worker' },
      key: { type: 'string' },
      payload: { type: 'string', default: '{}' },
      'lease-ms': { type: 'string', default: '2000' },
      'work-ms': { type: 'string', default: '100' },
      'effect-file': { type: 'string' },
      fail: { type: 'string' },
      'wait-ms': { type: 'string', default: '0' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  }));
} catch (err) {
  // parseArgs throws on an unknown flag or a missing value: one line, no
  // stack trace.
  console.error(`worker: ${err.message}; run "node bin/worker.js --help" for the flags`);
  process.exit(2);
}
if (opts.help) {
  process.stdout.write(usage);
  process.exit(0);
}
if (!opts.key) {
  console.error('worker: --key is required; run "node bin/worker.js --help" for the flags');
  process.exit(2);
}

// Loaded after the flags, so that --help works before `npm ci`.
const idem = await import('@idemhq/idem');
const { grpcTransport } = await import('@idemhq/idem/node');

const print = (obj) => process.stdout.write(JSON.stringify({ worker: 'node', key: opts.key, ...obj }) + '\n');

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      reject(signal.reason);
    }, { once: true });
  });

const client = new idem.IdemClient(
  grpcTransport({ baseUrl: `${opts.tls ? 'https' : 'http'}://${opts.addr}`, token: opts.token || undefined }),
);
const payload = JSON.parse(opts.payload);
const job = {
  namespace: opts.namespace,
  key: opts.key,
  fingerprint: idem.fingerprintJSON(payload),
  leaseTtlMs: Number(opts['lease-ms']),
};

// The side effect: the "charge" is a line in the effect file, written only
// after the work and only while the lease is ours.
async function charge({ signal, token, number }) {
  print({ event: 'acquired', token: String(token), attempt: number });
  await sleep(Number(opts['work-ms']), signal);
  if (opts.fail) {
    throw idem.permanent(new Error(opts.fail));
  }
  signal.throwIfAborted();
  if (opts['effect-file']) {
    appendFileSync(opts['effect-file'], `node ${opts.key} ${token}\n`);
  }
  return JSON.stringify({ charged_by: 'node', token: String(token), payload });
}

try {
  const res = await client.do(job, charge, { waitMs: Number(opts['wait-ms']) });
  print({
    outcome: res.replayed ? 'replayed' : 'ran',
    token: String(res.record.token),
    attempt: res.record.attempt,
    value: res.text(),
  });
} catch (err) {
  if (err instanceof idem.InProgressError) {
    print({ outcome: 'in_progress', retry_after_ms: err.retryAfterMs });
  } else if (err instanceof idem.JobFailedError) {
    print({ outcome: 'failed', error: err.storedError });
  } else if (err instanceof idem.UnresolvedError) {
    print({ outcome: 'unresolved' });
  } else if (err instanceof idem.LeaseLostError) {
    print({ outcome: 'lease_lost', code: err.codeName, reason: err.reasonName });
  } else if (err instanceof idem.PermanentError) {
    print({ outcome: 'fn_failed', error: err.message });
  } else {
    print({ outcome: 'error', error: String(err?.message ?? err), reason: err?.reasonName });
    process.exitCode = 1;
  }
} finally {
  client.close();
}
