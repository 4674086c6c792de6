// The kit needs an idemd binary: IDEMD_BIN, or idemd on the PATH
// (`make test-examples-node` builds one).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Case, checkHandler, inspectHandler } from '@idemhq/idem/testkit';
import { handler, naiveHandler, Provider } from '../charge.js';

const job = { namespace: 'payments', key: 'order-1042' };

// The fixed handler, as a worker's test would check it: every duplicate
// delivery the kit makes charges the card once.
test('the fixed handler charges once', async (t) => {
  const provider = new Provider();
  await checkHandler((job) => handler(provider, job, { id: job.key, amount_cents: 1250 }), () => provider.chargesApplied, {
    job,
    log: (report) => report.split('\n').forEach((l) => t.diagnostic(l)),
  });
});

// The naive handler: checkHandler would fail this test with the report
// below; inspectHandler returns it, so that the test can show that the
// report names the window and the remedy.
test('the naive handler charges twice when the worker dies after the charge', async (t) => {
  const provider = new Provider();
  const report = await inspectHandler((job) => naiveHandler(provider, { id: job.key, amount_cents: 1250 }), () => provider.chargesApplied, { job });
  const crash = String(report.case(Case.CrashAfterEffect));
  crash.split('\n').forEach((l) => t.diagnostic(l));
  for (const want of [
    'crash-after-effect: the effect ran 2 times for one job; want once',
    'window: between the side effect and Complete',
    "remedy: pass the record's key (payments/order-1042.crash-after-effect) to the downstream system as its own idempotency key",
  ]) {
    assert.ok(crash.includes(want), `the report does not say ${JSON.stringify(want)}:\n${crash}`);
  }
});
