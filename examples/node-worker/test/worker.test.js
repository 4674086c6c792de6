// The Node worker against a real idemd (built from ./cmd/idemd) on a fresh
// Postgres schema. Workers run as separate processes, so every race here is
// a race between processes, as between real queue consumers.

import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { effects, spawnWorker, startIdem } from './harness.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

describe('node worker against idemd', { timeout: 180_000 }, () => {
  let env;
  before(async () => {
    env = await startIdem();
  });
  after(async () => {
    await env?.stop();
  });

  let n = 0;
  // fresh returns a key and an effect file that no other test uses.
  const fresh = (name) => {
    n++;
    return { key: `${name}-${n}`, file: path.join(env.dir, `effects-${name}-${n}`) };
  };

  it('Node workers given the same job concurrently (three processes): one side effect, then replays of the stored result', async () => {
    const { key, file } = fresh('concurrent');
    const args = ['--key', key, '--payload', '{"order":"o-1","amount_cents":1250}', '--work-ms', '800', '--effect-file', file];
    const workers = [spawnWorker('node', env, args), spawnWorker('node', env, args), spawnWorker('node', env, args)];
    const results = await Promise.all(workers.map((w) => w.result));
    const ran = results.filter((r) => r.outcome === 'ran');
    assert.equal(ran.length, 1, JSON.stringify(results));
    for (const r of results.filter((r) => r.outcome !== 'ran')) {
      assert.ok(['in_progress', 'replayed'].includes(r.outcome), JSON.stringify(r));
    }
    assert.deepEqual(effects(file), [`node ${key} ${ran[0].token}`]);

    // A later delivery replays the stored result and performs nothing.
    const replay = await spawnWorker('node', env, args).result;
    assert.equal(replay.outcome, 'replayed');
    assert.equal(replay.value, ran[0].value);
    assert.equal(replay.token, ran[0].token);
    assert.equal(effects(file).length, 1);
  });

  it('a permanent failure is replayed to later deliveries, which perform nothing', async () => {
    const { key, file } = fresh('declined');
    const first = await spawnWorker('node', env, ['--key', key, '--fail', 'card declined', '--effect-file', file]).result;
    assert.equal(first.outcome, 'fn_failed', JSON.stringify(first));
    const again = await spawnWorker('node', env, ['--key', key, '--effect-file', file]).result;
    assert.equal(again.outcome, 'failed', JSON.stringify(again));
    assert.equal(again.error, 'card declined');
    assert.deepEqual(effects(file), []);
  });

  it('heartbeats keep the lease while the work outlasts it', async () => {
    const { key, file } = fresh('long');
    // Work for almost three leases. Without heartbeats (every 500 ms) the
    // waiting worker would take the job over after one lease and perform the
    // effect a second time.
    const holder = spawnWorker('node', env, ['--key', key, '--lease-ms', '1500', '--work-ms', '4000', '--effect-file', file]);
    await holder.waitFor((l) => l.event === 'acquired');
    const waiter = await spawnWorker('node', env, ['--key', key, '--lease-ms', '1500', '--wait-ms', '30000', '--effect-file', file]).result;
    const held = await holder.result;
    assert.equal(held.outcome, 'ran', JSON.stringify(held));
    assert.equal(waiter.outcome, 'replayed', JSON.stringify(waiter));
    assert.equal(waiter.value, held.value);
    assert.equal(effects(file).length, 1);
  });

  it('a worker paused past its lease is taken over, gets LEASE_LOST on its next heartbeat and performs nothing', async () => {
    const { key, file } = fresh('paused');
    const slow = spawnWorker('node', env, ['--key', key, '--lease-ms', '1000', '--work-ms', '20000', '--effect-file', file]);
    const acquired = await slow.waitFor((l) => l.event === 'acquired');
    slow.child.kill('SIGSTOP'); // a long GC pause, a frozen VM
    try {
      await sleep(1200); // the lease runs out
      const successor = await spawnWorker('node', env, ['--key', key, '--lease-ms', '1000', '--wait-ms', '30000', '--work-ms', '50', '--effect-file', file]).result;
      assert.equal(successor.outcome, 'ran', JSON.stringify(successor));
      assert.equal(successor.attempt, 2);
      assert.ok(BigInt(successor.token) > BigInt(acquired.token), 'the takeover has a greater fencing token');
    } finally {
      slow.child.kill('SIGCONT');
    }
    const lost = await slow.result;
    assert.equal(lost.outcome, 'lease_lost', JSON.stringify(lost));
    assert.equal(lost.reason, 'LEASE_LOST');
    assert.equal(lost.code, 'ABORTED');
    assert.equal(effects(file).length, 1, 'only the successor performed the effect');
  });

  it('a Go worker and a Node worker racing on one key: one side effect per key', async () => {
    const rounds = 6;
    const file = path.join(env.dir, 'effects-race');
    const winners = { go: 0, node: 0 };
    for (let i = 0; i < rounds; i++) {
      const key = `race-${i}`;
      // The same payload written in two key orders: the fingerprints must
      // agree, or the loser would get FINGERPRINT_MISMATCH instead.
      const nodeRun = spawnWorker('node', env, ['--key', key, '--payload', `{"order":"${key}","amount_cents":500}`, '--work-ms', '300', '--effect-file', file]);
      const goRun = spawnWorker('go', env, ['-key', key, '-payload', `{"amount_cents":5e2,"order":"${key}"}`, '-work', '300ms', '-effect-file', file]);
      const results = await Promise.all([nodeRun.result, goRun.result]);
      const ran = results.filter((r) => r.outcome === 'ran');
      assert.equal(ran.length, 1, JSON.stringify(results));
      const other = results.find((r) => r.outcome !== 'ran');
      assert.ok(['in_progress', 'replayed'].includes(other.outcome), JSON.stringify(results));
      winners[ran[0].worker]++;
      assert.deepEqual(
        effects(file).filter((l) => l.split(' ')[1] === key),
        [`${ran[0].worker} ${key} ${ran[0].token}`],
      );

      // Each language replays what the other stored.
      const replays = await Promise.all([
        spawnWorker('node', env, ['--key', key, '--payload', `{"order":"${key}","amount_cents":500}`, '--effect-file', file]).result,
        spawnWorker('go', env, ['-key', key, '-payload', `{"order":"${key}","amount_cents":500}`, '-effect-file', file]).result,
      ]);
      for (const r of replays) {
        assert.equal(r.outcome, 'replayed', JSON.stringify(r));
        assert.equal(r.value, ran[0].value);
      }
    }
    assert.equal(effects(file).length, rounds);
    // Which language wins is up to the scheduler; both taking part is enough.
    assert.equal(winners.go + winners.node, rounds);
  });
});
