#!/usr/bin/env node
'use strict';
// A Node.js worker that handles one delivery of one job through idem, the
// way a queue consumer would: claim, perform the side effect (append a line
// to --effect-file, after --work-ms of "work"), complete. It prints what
// happened as one JSON line on stdout:
//
//   {"worker":"node","key":"order-1","outcome":"ran","token":"7","attempt":1,"value":"{...}"}
//
// outcome is one of
//   ran          this worker acquired the job and performed the side effect
//   replayed     the job completed earlier: value is the stored result
//   in_progress  another worker holds it (a queue would redeliver later)
//   failed       the job failed for good earlier: error is the stored error
//   fn_failed    this worker's work failed (--fail): recorded with Fail
//   lease_lost   another worker took the job over (reason from ErrorInfo)
//
// and, with --wait, IN_PROGRESS is polled until the job is done or acquired.
// Before working it prints {"event":"acquired",...}, so a test can pause it.
//
//   node bin/worker.js --addr 127.0.0.1:7070 --key order-1 --payload '{"amount_cents":500}' --effect-file /tmp/charges

const fs = require('node:fs');
const { parseArgs } = require('node:util');

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
  --wait                poll while another worker holds the job, until done or acquired
  --wait-ms N           how long --wait polls, in milliseconds (default 30000)
  -h, --help            print this help

Exit status: 0 for the outcomes ran, replayed, in_progress, failed, fn_failed
and lease_lost; 1 for any other error; 2 for a mistake in the flags.
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
      wait: { type: 'boolean', default: false },
      'wait-ms': { type: 'string', default: '30000' },
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
const { Client, IdemError, Reason, run, permanent } = require('../lib/idem');

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        reject(signal.reason);
      },
      { once: true },
    );
  });

function print(obj) {
  process.stdout.write(JSON.stringify({ worker: 'node', key: opts.key, ...obj }) + '\n');
}

async function main() {
  const client = new Client(opts.addr, { token: opts.token, tls: opts.tls });
  const payload = JSON.parse(opts.payload);
  const job = { namespace: opts.namespace, key: opts.key, payload, leaseMs: Number(opts['lease-ms']) };

  // The side effect: the "charge" is a line in the effect file, written only
  // after the work and only while the lease is ours.
  const charge = async ({ signal, token, attempt }) => {
    print({ event: 'acquired', token, attempt });
    await sleep(Number(opts['work-ms']), signal);
    if (opts.fail) {
      throw permanent(new Error(opts.fail));
    }
    signal.throwIfAborted();
    if (opts['effect-file']) {
      fs.appendFileSync(opts['effect-file'], `node ${opts.key} ${token}\n`);
    }
    return { charged_by: 'node', token, payload };
  };

  const waitUntil = Date.now() + Number(opts['wait-ms']);
  try {
    for (;;) {
      let res;
      try {
        res = await run(client, job, charge);
      } catch (err) {
        if (err instanceof IdemError && err.reason === Reason.LEASE_LOST) {
          print({ outcome: 'lease_lost', code: err.code, reason: err.reason, domain: err.errorInfo?.domain });
          return;
        }
        if (err instanceof IdemError) {
          print({ outcome: 'error', code: err.code, reason: err.reason, error: err.message });
          process.exitCode = 1;
          return;
        }
        if (opts.fail && err.permanent) {
          print({ outcome: 'fn_failed', error: err.message });
          return;
        }
        throw err;
      }
      if (res.outcome === 'in_progress' && opts.wait && Date.now() < waitUntil) {
        await sleep(Math.min(Math.max(res.retryAfterMs, 50), 200));
        continue;
      }
      print({
        outcome: res.outcome,
        token: res.record.token,
        attempt: res.record.attempt,
        value: res.value ? Buffer.from(res.value).toString('utf8') : undefined,
        error: res.error || undefined,
        retry_after_ms: res.retryAfterMs,
      });
      return;
    }
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error('worker:', err);
  process.exit(1);
});
