// The package as a user gets it: `npm pack` makes the tarball, a project
// created from scratch outside the repository installs it with npm (which
// fetches only its declared dependencies), type-checks against its
// declarations, and runs a worker that performs a side effect exactly once
// across two concurrent deliveries, then replays its result.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { PACKAGE_DIR, startHarness, type Harness } from "./harness.js";

const execFileP = promisify(execFile);

/** run runs a command and, when it fails, says what it printed. */
async function run(cmd: string, args: string[], opts: { cwd: string; maxBuffer?: number }): Promise<{ stdout: string }> {
  try {
    return await execFileP(cmd, args, opts);
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
  console.log(JSON.stringify({ outcome: res.replayed ? "replayed" : "ran", value: new TextDecoder().decode(res.value) }));
} catch (err) {
  if (!(err instanceof InProgressError)) throw err;
  console.log(JSON.stringify({ outcome: "in_progress", retryAfterMs: err.retryAfterMs }));
} finally {
  idem.close();
}
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

describe("the npm tarball in a project of its own", { timeout: 300_000 }, () => {
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

  it("installs with only its declared dependencies, type-checks, and runs a worker exactly once", async () => {
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", scratch], { cwd: PACKAGE_DIR, maxBuffer: 16 << 20 });
    const [packed] = JSON.parse(stdout.slice(stdout.indexOf("["))) as { filename: string; files: { path: string }[] }[];
    const files = packed!.files.map((f) => f.path).sort();
    assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts") && files.includes("dist/node.js"), files.join(" "));
    assert.ok(files.includes("README.md") && files.includes("package.json"));
    for (const f of files) {
      assert.match(f, /^(dist\/|README\.md$|package\.json$|LICENSE$)/, `the tarball holds ${f}`);
    }

    const project = path.join(scratch, "worker");
    mkdirSync(project);
    writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "scratch-worker", private: true, type: "module" }));
    await run("npm", ["install", "--no-audit", "--no-fund", path.join(scratch, packed!.filename)], { cwd: project, maxBuffer: 16 << 20 });
    const installed = readdirSync(path.join(project, "node_modules"), { withFileTypes: true })
      .filter((d) => d.isDirectory() && !d.name.startsWith("."))
      .flatMap((d) => (d.name.startsWith("@") ? readdirSync(path.join(project, "node_modules", d.name)).map((n) => `${d.name}/${n}`) : [d.name]))
      .sort();
    const declared = Object.keys((JSON.parse(readFileSync(path.join(PACKAGE_DIR, "package.json"), "utf8")) as { dependencies: Record<string, string> }).dependencies);
    assert.deepEqual(installed, ["@idemhq/idem", ...declared].sort());

    // The declarations resolve through the package's exports, for a
    // consumer on NodeNext resolution.
    writeFileSync(path.join(project, "consumer.ts"), CONSUMER_TS);
    writeFileSync(
      path.join(project, "tsconfig.json"),
      JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, lib: ["ES2022", "DOM"], types: [] }, files: ["consumer.ts"] }),
    );
    await run(path.join(PACKAGE_DIR, "node_modules", ".bin", "tsc"), ["-p", project], { cwd: project });

    writeFileSync(path.join(project, "worker.mjs"), WORKER);
    const effects = path.join(scratch, "effects");
    const deliver = async () => {
      const { stdout: line } = await run(process.execPath, ["worker.mjs", h.grpc_addr, h.tokens.worker, h.namespaces.plain, "order-1", effects], { cwd: project });
      return JSON.parse(line) as { outcome: string; value?: string };
    };
    const both = await Promise.all([deliver(), deliver()]);
    const ran = both.filter((r) => r.outcome === "ran");
    assert.equal(ran.length, 1, JSON.stringify(both));
    assert.ok(["in_progress", "replayed"].includes(both.find((r) => r !== ran[0])!.outcome), JSON.stringify(both));
    const lines = readFileSync(effects, "utf8").split("\n").filter(Boolean);
    assert.equal(lines.length, 1, `effects: ${JSON.stringify(lines)}`);

    const replay = await deliver();
    assert.equal(replay.outcome, "replayed");
    assert.equal(replay.value, ran[0]!.value);
    assert.equal(readFileSync(effects, "utf8").split("\n").filter(Boolean).length, 1);
  });
});
