// The scenario harness of internal/testsupport/sdkharness: a real idemd on PostgreSQL
// (behind a fault proxy) or SQLite, with the tenants and policies the
// scenarios name, and control endpoints that restart it or cut its store.
// `npm test` builds it and idemd into build/ (pretest); HARNESS_BIN and
// IDEMD_BIN name other binaries.

import { spawn, type ChildProcess } from "node:child_process";
import * as path from "node:path";
import * as readline from "node:readline";
import { fileURLToPath } from "node:url";

export const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
export const REPO = path.resolve(PACKAGE_DIR, "..", "..");

/** HarnessInfo is the line the harness prints once idemd answers. */
export interface HarnessInfo {
  grpc_addr: string;
  http_url: string;
  control_url: string;
  store: "postgres" | "sqlite";
  tokens: { worker: string; operator: string; limited: string };
  namespaces: { plain: string; held: string; step_held: string };
}

export interface Harness extends HarnessInfo {
  /** control POSTs to a control endpoint ("/restart?down_ms=1500") and resolves once it answered 200. */
  control(pathAndQuery: string): Promise<void>;
  /** stop ends the harness: it stops idemd and removes its schema or directory. */
  stop(): Promise<void>;
}

/** HarnessOptions change the idemd a harness runs. */
export interface HarnessOptions {
  /** maxResultBytes is idemd's --max-result-bytes; its default unless set. */
  maxResultBytes?: number;
}

/** startHarness starts the harness on store and resolves once idemd answers. */
export async function startHarness(store: "postgres" | "sqlite", options: HarnessOptions = {}): Promise<Harness> {
  const bin = process.env.HARNESS_BIN ?? path.join(PACKAGE_DIR, "build", "sdkharness");
  const idemd = process.env.IDEMD_BIN ?? path.join(PACKAGE_DIR, "build", "idemd");
  const args = ["--store", store, "--idemd-bin", idemd];
  if (options.maxResultBytes !== undefined) {
    args.push("--max-result-bytes", String(options.maxResultBytes));
  }
  const child = spawn(bin, args, { cwd: REPO, stdio: ["pipe", "pipe", "pipe"] });
  const log: string[] = [];
  readline.createInterface({ input: child.stderr! }).on("line", (line) => {
    log.push(line);
    if (log.length > 400) {
      log.shift();
    }
    if (process.env.HARNESS_LOG) {
      process.stderr.write(`[harness ${store}] ${line}\n`);
    }
  });
  const info = await new Promise<HarnessInfo>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the ${store} harness printed nothing within 120 s:\n${log.join("\n")}`)), 120_000);
    readline.createInterface({ input: child.stdout! }).once("line", (line) => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(line) as HarnessInfo);
      } catch (err) {
        reject(new Error(`the ${store} harness printed ${JSON.stringify(line)}: ${String(err)}`));
      }
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the ${store} harness exited (${code ?? signal}) before it printed its line:\n${log.join("\n")}`));
    });
  });
  return {
    ...info,
    async control(pathAndQuery) {
      const res = await fetch(info.control_url + pathAndQuery, { method: "POST" });
      const body = await res.text();
      if (res.status !== 200) {
        throw new Error(`POST ${pathAndQuery}: ${res.status} ${body}\n${log.slice(-40).join("\n")}`);
      }
    },
    stop: () => stopChild(child),
  };
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    child.stdin!.end(); // EOF: the harness cleans up and exits
  });
}
