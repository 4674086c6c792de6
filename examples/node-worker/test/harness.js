// Test harness: a real idemd on a Postgres schema of its own, started by the
// scenario harness of internal/testsupport/sdkharness (tenants with tokens; the worker
// tenant's token is the one the workers use), and helpers that run workers
// (Node and Go) as separate processes.
//
// IDEM_TEST_DATABASE_URL names the database, as for the Go tests (default:
// the local Postgres). SDKHARNESS_BIN, IDEMD_BIN and GO_ONCE_BIN name
// prebuilt binaries; without them the harness builds them with `go build`.

import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '..', '..', '..');
const WORKER = path.resolve(here, '..', 'bin', 'worker.js');

function goBuild(pkg, out) {
  execFileSync('go', ['build', '-o', out, pkg], { cwd: REPO, stdio: ['ignore', 'inherit', 'inherit'] });
  return out;
}

/**
 * startIdem builds (or takes) the harness, idemd and the Go worker, starts
 * idemd on PostgreSQL and returns {addr, token, dir, goOnce, stop}.
 */
export async function startIdem() {
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-node-test-'));
  let harness;
  const stop = async () => {
    if (harness && harness.exitCode === null) {
      const exited = new Promise((resolve) => harness.once('exit', resolve));
      harness.stdin.end(); // EOF: the harness stops idemd and drops its schema
      await Promise.race([exited, new Promise((r) => setTimeout(r, 30_000))]);
      harness.kill('SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const harnessBin = process.env.SDKHARNESS_BIN || goBuild('./internal/testsupport/sdkharness', path.join(dir, 'sdkharness'));
    const idemdBin = process.env.IDEMD_BIN || goBuild('./cmd/idemd', path.join(dir, 'idemd'));
    const goOnce = process.env.GO_ONCE_BIN || goBuild('./examples/node-worker/go-once', path.join(dir, 'go-once'));
    harness = spawn(harnessBin, ['--store', 'postgres', '--idemd-bin', idemdBin], { cwd: REPO, stdio: ['pipe', 'pipe', 'pipe'] });
    const log = [];
    readline.createInterface({ input: harness.stderr }).on('line', (line) => log.push(line));
    const info = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the harness printed nothing within 120 s:\n${log.join('\n')}`)), 120_000);
      readline.createInterface({ input: harness.stdout }).once('line', (line) => {
        clearTimeout(timer);
        resolve(JSON.parse(line));
      });
      harness.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the harness exited (${code}) before idemd served:\n${log.join('\n')}`));
      });
    });
    return { addr: info.grpc_addr, token: info.tokens.worker, dir, goOnce, stop };
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}

/**
 * spawnWorker starts a worker process (kind 'node' or 'go') and returns
 * {child, lines, result, waitFor}: lines is every JSON line it printed so
 * far, result a promise of its last JSON line (its outcome) once it exits.
 */
export function spawnWorker(kind, env, args) {
  const child =
    kind === 'node'
      ? spawn(process.execPath, [WORKER, '--addr', env.addr, '--token', env.token, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
      : spawn(env.goOnce, ['-addr', env.addr, '-token', env.token, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = [];
  const waiters = [];
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    lines.push(JSON.parse(line));
    for (const w of waiters.splice(0)) {
      w();
    }
  });
  const result = new Promise((resolve, reject) => {
    child.once('close', (code, signal) => {
      const last = lines.filter((l) => l.outcome).pop();
      if (!last) {
        reject(new Error(`${kind} worker ${args.join(' ')} exited (${code ?? signal}) without an outcome`));
        return;
      }
      resolve({ ...last, exitCode: code });
    });
  });
  /** waitFor resolves with the first printed line that pred accepts. */
  const waitFor = (pred, ms = 20_000) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`worker printed no matching line within ${ms}ms: ${JSON.stringify(lines)}`)), ms);
      const check = () => {
        const hit = lines.find(pred);
        if (hit) {
          clearTimeout(timer);
          resolve(hit);
        } else {
          waiters.push(check);
        }
      };
      check();
    });
  return { child, lines, result, waitFor };
}

/** effects returns the lines of an effect file: one per side effect performed. */
export function effects(file) {
  if (!existsSync(file)) {
    return [];
  }
  return readFileSync(file, 'utf8').split('\n').filter(Boolean);
}
