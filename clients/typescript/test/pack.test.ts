// The package as a user gets it, both ways the README gives: from the
// tarball `make release-npm` writes, and from the folder of a fresh clone
// (`npm install path/to/clients/typescript`: npm links the folder and runs
// its prepare script, which installs the folder's dependencies as its
// lockfile pins them and builds dist/). In a project created from scratch
// outside the repository, each installs, type-checks against its
// declarations (the tarball), imports as an ES module and from CommonJS, and
// runs a worker that performs a side effect exactly once across two
// concurrent deliveries, then replays its result.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { PACKAGE_DIR, REPO, startHarness, type Harness } from "./harness.js";

const execFileP = promisify(execFile);

/** run runs a command and, when it fails, says what it printed. */
async function run(cmd: string, args: string[], opts: { cwd: string; maxBuffer?: number; env?: NodeJS.ProcessEnv }): Promise<{ stdout: string }> {
  try {
    return await execFileP(cmd, args, { maxBuffer: 16 << 20, ...opts });
  } catch (err) {
    const e = err as Error & { stdout?: string; stderr?: string };
    throw new Error(`${cmd} ${args.join(" ")}: ${e.message}\n${e.stdout ?? ""}\n${e.stderr ?? ""}`);
  }
}

const WORKER = `import { appendFileSync } from "node:fs";
import { IdemClient, InProgressError, fingerprintJSON } from "@idemhq/idem";
import { grpcTransport } from "@idemhq/idem/node";

const [addr, token, namespace, key, effects] = process.argv.slice(2);
const idem = new IdemClient(grpcTransport({ baseUrl: "http://" + addr, token }));
const payload = { order: key, amount_cents: 1250 };
try {
  const res = await idem.do({ namespace, key, fingerprint: fingerprintJSON(payload) }, async ({ token, signal }) => {
    await new Promise((r) => setTimeout(r, 800));
    signal.throwIfAborted();
    appendFileSync(effects, key + " " + token + "\\n");
    return JSON.stringify({ charged: payload.amount_cents, token: String(token) });
  });
  console.log(JSON.stringify({ outcome: res.replayed ? "replayed" : "ran", value: res.text(), charged: res.json().charged }));
} catch (err) {
  if (!(err instanceof InProgressError)) throw err;
  console.log(JSON.stringify({ outcome: "in_progress", retryAfterMs: err.retryAfterMs }));
} finally {
  idem.close();
}
`;

// A CommonJS module of the same project: the package is ESM, which
// CommonJS loads with import().
const CJS_CHECK = `const [url, token, namespace, key] = process.argv.slice(2);
import("@idemhq/idem").then(async ({ IdemClient, connectTransport }) => {
  const idem = new IdemClient(connectTransport({ baseUrl: url, token }));
  const res = await idem.do({ namespace, key }, () => JSON.stringify({ from: "cjs" }));
  console.log(JSON.stringify({ replayed: res.replayed, value: res.json() }));
}).catch((err) => { console.error(err); process.exit(1); });
`;

// A TypeScript consumer, type-checked against the installed declarations.
const CONSUMER_TS = `import { IdemClient, connectTransport, permanent, LeaseLostError, ErrorReason, State, type DoResult, type JobRecord } from "@idemhq/idem";
import { grpcTransport } from "@idemhq/idem/node";
import { checkHandler, Case, type MakeHandler, type Report } from "@idemhq/idem/testkit";

export async function check(): Promise<Report> {
  let charges = 0;
  const handler: MakeHandler = (job) => async ({ token }) => { charges++; return job.key + " " + String(token); };
  const report = await checkHandler(handler, () => charges, { job: { namespace: "n", key: "k" } });
  void report.case(Case.CrashAfterEffect)?.window;
  return report;
}

export async function work(grpc: boolean): Promise<DoResult> {
  const idem = new IdemClient(grpc ? grpcTransport({ baseUrl: "http://127.0.0.1:7070" }) : connectTransport({ baseUrl: "http://127.0.0.1:7072" }));
  const rec: JobRecord = await idem.lookup({ namespace: "n", key: "k" });
  const token: bigint = rec.token;
  const done: boolean = rec.state === State.COMPLETED;
  void token; void done;
  try {
    return await idem.do({ namespace: "n", key: "k", leaseTtlMs: 30_000 }, async ({ signal, takeover }) => {
      signal.throwIfAborted();
      if (takeover) throw permanent(new Error("no"));
      return new Uint8Array([1]);
    }, { waitMs: 1000 });
  } catch (err) {
    if (err instanceof LeaseLostError && err.reason === ErrorReason.LEASE_LOST) throw err;
    throw err;
  }
}
`;

/** project makes an empty npm project (as `npm init -y` does) in a new directory of scratch. */
function project(scratch: string, name: string): string {
  const dir = path.join(scratch, name);
  mkdirSync(dir);
  writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name, version: "1.0.0", private: true }));
  return dir;
}

/** installedPackages lists the packages in dir's node_modules, scoped ones as @scope/name. */
function installedPackages(dir: string): string[] {
  const nm = path.join(dir, "node_modules");
  return readdirSync(nm, { withFileTypes: true })
    .filter((d) => (d.isDirectory() || d.isSymbolicLink()) && !d.name.startsWith("."))
    .flatMap((d) => (d.name.startsWith("@") ? readdirSync(path.join(nm, d.name)).map((n) => `${d.name}/${n}`) : [d.name]))
    .sort();
}

const declared = () => Object.keys((JSON.parse(readFileSync(path.join(PACKAGE_DIR, "package.json"), "utf8")) as { dependencies: Record<string, string> }).dependencies);

/** withoutMake is the environment without what a make above this test passes its children. */
function withoutMake(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "VERSION", "DIST"]) {
    delete env[k];
  }
  return env;
}

describe("the npm package in a project of its own", { timeout: 600_000 }, () => {
  let h: Harness;
  let scratch: string;

  before(async () => {
    scratch = mkdtempSync(path.join(tmpdir(), "idem-ts-consumer-"));
    h = await startHarness("sqlite");
  });
  after(async () => {
    await h?.stop();
    if (scratch) {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  /**
   * works runs, in the project dir, two concurrent deliveries of one job and
   * then a third through the ESM worker, and one job through the CommonJS
   * module: the effect once, the value replayed, the result read with text()
   * and json().
   */
  async function works(dir: string, key: string): Promise<void> {
    writeFileSync(path.join(dir, "worker.mjs"), WORKER);
    writeFileSync(path.join(dir, "check.cjs"), CJS_CHECK);
    const effects = path.join(dir, "effects");
    const deliver = async () => {
      const { stdout: line } = await run(process.execPath, ["worker.mjs", h.grpc_addr, h.tokens.worker, h.namespaces.plain, key, effects], { cwd: dir });
      return JSON.parse(line) as { outcome: string; value?: string; charged?: number };
    };
    const both = await Promise.all([deliver(), deliver()]);
    const ran = both.filter((r) => r.outcome === "ran");
    assert.equal(ran.length, 1, JSON.stringify(both));
    assert.equal(ran[0]!.charged, 1250, "json() reads the result");
    assert.ok(["in_progress", "replayed"].includes(both.find((r) => r !== ran[0])!.outcome), JSON.stringify(both));
    const lines = readFileSync(effects, "utf8").split("\n").filter(Boolean);
    assert.equal(lines.length, 1, `effects: ${JSON.stringify(lines)}`);

    const replay = await deliver();
    assert.equal(replay.outcome, "replayed");
    assert.equal(replay.value, ran[0]!.value);
    assert.equal(readFileSync(effects, "utf8").split("\n").filter(Boolean).length, 1);

    for (const replayed of [false, true]) {
      const { stdout } = await run(process.execPath, ["check.cjs", h.http_url, h.tokens.worker, h.namespaces.plain, `${key}-cjs`], { cwd: dir });
      assert.deepEqual(JSON.parse(stdout), { replayed, value: { from: "cjs" } });
    }
  }

  it("from make release-npm's tarball: dist only, its declared dependencies only, type-checks, and runs a worker exactly once", async () => {
    const dist = path.join(scratch, "dist");
    const { stdout } = await run("make", ["--no-print-directory", "release-npm", `DIST=${dist}`, "VERSION=v1.2.3"], { cwd: REPO, env: withoutMake() });
    const tarball = path.join(dist, "idemhq-idem-1.2.3.tgz");
    assert.equal(stdout.trim().split("\n").at(-1), `${dist}/idemhq-idem-1.2.3.tgz`);
    const { stdout: listing } = await run("tar", ["-tzf", tarball], { cwd: scratch });
    const files = listing.split("\n").filter(Boolean).map((f) => f.replace(/^package\//, "")).sort();
    assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts") && files.includes("dist/node.js"), files.join(" "));
    assert.ok(files.includes("README.md") && files.includes("package.json") && files.includes("LICENSE"), files.join(" "));
    for (const f of files) {
      assert.match(f, /^(dist\/|README\.md$|package\.json$|LICENSE$)/, `the tarball holds ${f}`);
    }

    const dir = project(scratch, "from-tarball");
    await run("npm", ["install", "--no-audit", "--no-fund", tarball], { cwd: dir });
    assert.deepEqual(installedPackages(dir), ["@idemhq/idem", ...declared()].sort());
    assert.equal((JSON.parse(readFileSync(path.join(dir, "node_modules", "@idemhq", "idem", "package.json"), "utf8")) as { version: string }).version, "1.2.3");

    // The declarations resolve through the package's exports, for a
    // consumer on NodeNext resolution.
    writeFileSync(path.join(dir, "consumer.ts"), CONSUMER_TS);
    writeFileSync(
      path.join(dir, "tsconfig.json"),
      JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, lib: ["ES2022", "DOM"], types: [] }, files: ["consumer.ts"] }),
    );
    await run(path.join(PACKAGE_DIR, "node_modules", ".bin", "tsc"), ["-p", dir], { cwd: dir });

    await works(dir, "order-tarball");
  });

  it("from the folder of a fresh clone: npm links it, its prepare script installs its dependencies and builds it, and it runs a worker exactly once", async () => {
    // The package's folder as a clone has it: the files git knows, and no
    // node_modules, dist or build.
    const clone = path.join(scratch, "idem", "clients", "typescript");
    const { stdout: tracked } = await run("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z", "."], { cwd: PACKAGE_DIR });
    for (const f of tracked.split("\0").filter(Boolean)) {
      if (existsSync(path.join(PACKAGE_DIR, f))) {
        mkdirSync(path.dirname(path.join(clone, f)), { recursive: true });
        cpSync(path.join(PACKAGE_DIR, f), path.join(clone, f));
      }
    }
    for (const absent of ["node_modules", "dist", "build"]) {
      assert.ok(!existsSync(path.join(clone, absent)), `the copy has ${absent}`);
    }

    const dir = project(scratch, "from-folder");
    await run("npm", ["install", "--no-audit", "--no-fund", path.relative(dir, clone)], { cwd: dir });
    assert.ok(lstatSync(path.join(dir, "node_modules", "@idemhq", "idem")).isSymbolicLink(), "npm links a folder");
    assert.ok(existsSync(path.join(clone, "dist", "index.js")), "prepare built dist/");
    for (const d of declared()) {
      assert.ok(existsSync(path.join(clone, "node_modules", d, "package.json")), `prepare installed ${d} in the folder`);
    }
    assert.deepEqual(installedPackages(dir), ["@idemhq/idem"], "the project gets the link alone");

    await works(dir, "order-folder");
  });
});
