'use strict';
// Test harness: a real idemd on a fresh Postgres schema of its own, and
// helpers that run workers (Node and Go) as separate processes.
//
// IDEM_TEST_DATABASE_URL names the database, as for the Go tests (default:
// the local Postgres). IDEMD_BIN and GO_ONCE_BIN name prebuilt binaries;
// without them the harness builds both with `go build`.

const { spawn, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const { Client } = require('pg');

const REPO = path.resolve(__dirname, '..', '..', '..');
const WORKER = path.resolve(__dirname, '..', 'bin', 'worker.js');
const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable';

function redact(url) {
  try {
    const u = new URL(url);
    if (u.password) {
      u.password = 'xxxxx';
    }
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}

/** withSearchPath returns url with its search_path set to schema, as internal/testdb does. */
function withSearchPath(url, schema) {
  const u = new URL(url);
  u.searchParams.set('search_path', schema);
  return u.toString();
}

// pg reads sslmode=disable itself; it does not know search_path, so the admin
// connection gets a URL without it.
async function connectAdmin(base) {
  const u = new URL(base);
  u.searchParams.delete('search_path');
  const db = new Client({ connectionString: u.toString(), connectionTimeoutMillis: 10_000 });
  try {
    await db.connect();
  } catch (err) {
    throw new Error(
      `the Node worker tests need PostgreSQL and none answers at ${redact(base)}: ${err.message}\n` +
        'Start one (on Debian: pg_ctlcluster 15 main start) or point IDEM_TEST_DATABASE_URL at one.',
    );
  }
  return db;
}

function goBuild(pkg, out) {
  execFileSync('go', ['build', '-o', out, pkg], { cwd: REPO, stdio: ['ignore', 'inherit', 'inherit'] });
  return out;
}

/**
 * startIdem creates a schema, builds (or takes) idemd and the Go worker,
 * starts idemd on a free loopback port and returns {addr, dir, goOnce, stop}.
 */
async function startIdem() {
  const base = process.env.IDEM_TEST_DATABASE_URL || DEFAULT_DATABASE_URL;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idem-node-test-'));
  const admin = await connectAdmin(base);
  const schema = 'idem_node_test_' + crypto.randomBytes(6).toString('hex');
  await admin.query(`CREATE SCHEMA ${schema}`);

  let idemd;
  const stop = async () => {
    if (idemd && idemd.exitCode === null) {
      const exited = new Promise((resolve) => idemd.once('exit', resolve));
      idemd.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      idemd.kill('SIGKILL');
    }
    await admin.query(`DROP SCHEMA ${schema} CASCADE`);
    await admin.end();
    fs.rmSync(dir, { recursive: true, force: true });
  };

  try {
    const idemdBin = process.env.IDEMD_BIN || goBuild('./cmd/idemd', path.join(dir, 'idemd'));
    const goOnce = process.env.GO_ONCE_BIN || goBuild('./examples/node-worker/go-once', path.join(dir, 'go-once'));
    const env = { ...process.env };
    delete env.IDEM_DATABASE_URL; // a developer's own setting must not leak in
    idemd = spawn(
      idemdBin,
      ['serve', '--listen', '127.0.0.1:0', '--http-listen', '', '--json-listen', '', '--database-url', withSearchPath(base, schema), '--sweep-interval', '1s', '--log-format', 'json'],
      { env, stdio: ['ignore', 'inherit', 'pipe'] },
    );
    const addr = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('idemd did not log "idemd serving" within 30s')), 30_000);
      const lines = [];
      readline.createInterface({ input: idemd.stderr }).on('line', (line) => {
        lines.push(line);
        if (line.includes('"msg":"idemd serving"')) {
          clearTimeout(timer);
          resolve(JSON.parse(line).listen);
        }
      });
      idemd.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`idemd exited with ${code} before serving:\n${lines.join('\n')}`));
      });
    });
    return { addr, dir, goOnce, stop };
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}

/**
 * spawnWorker starts a worker process (kind 'node' or 'go') and returns
 * {child, lines, result}: lines is every JSON line it printed so far, result
 * a promise of its last JSON line (its outcome) once it exits.
 */
function spawnWorker(kind, env, args) {
  const child =
    kind === 'node'
      ? spawn(process.execPath, [WORKER, '--addr', env.addr, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
      : spawn(env.goOnce, ['-addr', env.addr, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = [];
  const waiters = [];
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    const msg = JSON.parse(line);
    lines.push(msg);
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
function effects(file) {
  if (!fs.existsSync(file)) {
    return [];
  }
  return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean);
}

module.exports = { startIdem, spawnWorker, effects, REPO };
