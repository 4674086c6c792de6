// bin/worker.js's command line: --help and flag mistakes, without idemd.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'worker.js');
const worker = (...args) => spawnSync(process.execPath, [WORKER, ...args], { encoding: 'utf8', timeout: 30_000 });

describe('worker.js command line', () => {
  for (const flag of ['--help', '-h']) {
    it(`${flag} prints the usage with every default, and exits 0`, () => {
      const r = worker(flag);
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stderr, '');
      assert.match(r.stdout, /^Usage: node bin\/worker\.js --key KEY/);
      assert.match(r.stdout, /--namespace NS +the job's namespace \(default node_worker\)/);
      assert.match(r.stdout, /default 127\.0\.0\.1:7070/);
    });
  }

  for (const args of [['--nope'], [], ['--key']]) {
    it(`${JSON.stringify(args)} is one line on stderr, no stack trace, exit 2`, () => {
      const r = worker(...args);
      assert.equal(r.status, 2);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, /^worker: .*; run "node bin\/worker\.js --help" for the flags\n$/);
    });
  }
});
