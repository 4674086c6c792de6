// A real idemd for the console's tests: build/idemd (npm test builds it
// from ../cmd/idemd) on SQLite in a temporary directory, on ports of its
// own, with a config of an operator (with a token that names its holder,
// alice@example.com), two tenants with a hold policy, and a tenant that is
// no admin.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { fileURLToPath } from "node:url";

export const CONSOLE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
export const IDEMD = process.env.IDEMD_BIN ?? path.join(CONSOLE_DIR, "build", "idemd");

/** OPERATOR_NAME is the name of the operator's named token (tokens.alice). */
export const OPERATOR_NAME = "alice@example.com";

/** HOLD_NAMESPACE matches the hold policy of acme and globex. */
export const HOLD_NAMESPACE = "payments";

export interface Idemd {
  /** url is the JSON listener: http://127.0.0.1:PORT. */
  url: string;
  /** consoleUrl is the console's address as idemd logged it (console_url). */
  consoleUrl: string;
  /**
   * tokens by tenant: ops (operator), acme and globex (admins), worker (no
   * admin); and alice, a token of ops named OPERATOR_NAME. Empty without a
   * config.
   */
  tokens: Record<string, string>;
  /** log is every line idemd wrote to stderr so far. */
  log: string[];
  stop(): Promise<void>;
}

function newToken(tenant: string, name = ""): { token: string; hash: string } {
  const out = execFileSync(IDEMD, ["token", "new", "--tenant", tenant, ...(name ? ["--name", name] : []), "-o", "json"], { encoding: "utf8" });
  return JSON.parse(out) as { token: string; hash: string };
}

/** startIdemd starts idemd with the tenants above, or with no config at all (withConfig false). */
export async function startIdemd(withConfig = true, extraArgs: string[] = []): Promise<Idemd> {
  const dir = mkdtempSync(path.join(tmpdir(), "idem-console-"));
  const args = [
    "serve",
    "--data-dir",
    path.join(dir, "data"),
    "--listen",
    "127.0.0.1:0",
    "--json-listen",
    "127.0.0.1:0",
    "--http-listen",
    "",
    "--sweep-interval",
    "1s",
    "--log-format",
    "json",
    ...extraArgs,
  ];
  const tokens: Record<string, string> = {};
  if (withConfig) {
    const tenants = [];
    const hold = [{ namespaces: [`${HOLD_NAMESPACE}*`], on_lease_expiry: "hold" }];
    for (const [name, role] of [
      ["ops", { operator: true }],
      ["acme", { admin: true, policies: hold }],
      ["globex", { admin: true, policies: hold }],
      ["worker", {}],
    ] as const) {
      const t = newToken(name);
      tokens[name] = t.token;
      tenants.push({ name, tokens: [t.hash], ...role });
    }
    const alice = newToken("ops", OPERATOR_NAME);
    tokens.alice = alice.token;
    Object.assign(tenants[0]!, { named_tokens: [{ name: OPERATOR_NAME, token: alice.hash }] });
    // JSON is YAML: the config file as one object.
    writeFileSync(path.join(dir, "idem.yaml"), JSON.stringify({ tenants }, null, 2));
    args.push("--config", path.join(dir, "idem.yaml"));
  }
  const child = spawn(IDEMD, args, { stdio: ["ignore", "ignore", "pipe"] });
  const log: string[] = [];
  const started = new Promise<{ url: string; consoleUrl: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`idemd did not start within 60 s:\n${log.join("\n")}`)), 60_000);
    readline.createInterface({ input: child.stderr! }).on("line", (line) => {
      log.push(line);
      if (process.env.IDEMD_LOG) {
        process.stderr.write(`[idemd] ${line}\n`);
      }
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      if (entry.msg === "idemd serving") {
        clearTimeout(timer);
        resolve({ url: `http://${String(entry.json_listen)}`, consoleUrl: String(entry.console_url) });
      }
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`idemd exited (${code ?? signal}) before it served:\n${log.join("\n")}`));
    });
  });
  const { url, consoleUrl } = await started;
  return {
    url,
    consoleUrl,
    tokens,
    log,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        await new Promise<void>((resolve) => {
          child.once("exit", () => resolve());
          child.kill("SIGTERM");
        });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** logEntries are idemd's JSON log lines with the message msg. */
export function logEntries(idemd: Idemd, msg: string): Record<string, unknown>[] {
  return idemd.log
    .map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        return {};
      }
    })
    .filter((e) => e.msg === msg);
}
