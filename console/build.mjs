// Builds the console: src/ into dist/ (what idemd embeds), byte for byte the
// same on every machine with the lockfile's packages.
//
//   node build.mjs           write dist/
//   node build.mjs --check   fail if dist/ differs from what a build writes
//   node build.mjs --tests   bundle test/*.test.ts into build/test/ for node --test
//
// @idemhq/idem, the TypeScript client, is bundled from its sources in
// ../clients/typescript/src, and every import of @bufbuild/protobuf and
// @connectrpc/connect, the client's included, resolves to this package's
// node_modules: one copy of each, whatever else is installed elsewhere.
import * as esbuild from "esbuild";
import { mkdtempSync, readdirSync, readFileSync, rmSync, mkdirSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const clientEntry = resolve(here, "../clients/typescript/src/index.ts");

/** oneCopy resolves the client and its runtime packages as described above. */
const oneCopy = {
  name: "one-copy",
  setup(build) {
    build.onResolve({ filter: /^@idemhq\/idem$/ }, () => ({ path: clientEntry }));
    build.onResolve({ filter: /^@(bufbuild\/protobuf|connectrpc\/connect)(\/|$)/ }, async (args) => {
      if (args.pluginData === "one-copy") {
        return undefined;
      }
      const r = await build.resolve(args.path, { kind: args.kind, resolveDir: here, pluginData: "one-copy" });
      if (r.errors.length > 0) {
        return { errors: r.errors };
      }
      return { path: r.path, external: r.external };
    });
  },
};

const common = {
  bundle: true,
  plugins: [oneCopy],
  logLevel: "warning",
  charset: "utf8",
  legalComments: "eof",
  jsx: "automatic",
  jsxImportSource: "preact",
  target: "es2022",
  write: false,
};

/** buildApp returns dist/'s files: name → bytes. */
async function buildApp() {
  const out = await esbuild.build({
    ...common,
    entryPoints: { app: join(here, "src/main.tsx") },
    outdir: "/dist",
    format: "esm",
    platform: "browser",
    minify: true,
    sourcemap: false,
    metafile: false,
  });
  const files = new Map();
  for (const f of out.outputFiles) {
    files.set(relative("/dist", f.path), Buffer.from(f.contents));
  }
  files.set("index.html", readFileSync(join(here, "src/index.html")));
  files.set("favicon.svg", readFileSync(join(here, "src/favicon.svg")));
  return files;
}

function readDist(dir) {
  const files = new Map();
  if (!existsSync(dir)) {
    return files;
  }
  for (const name of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (name.isFile()) {
      const path = join(name.parentPath ?? name.path, name.name);
      files.set(relative(dir, path), readFileSync(path));
    }
  }
  return files;
}

const dist = join(here, "dist");
const mode = process.argv[2] ?? "";
if (mode === "") {
  const files = await buildApp();
  rmSync(dist, { recursive: true, force: true });
  for (const [name, body] of files) {
    mkdirSync(dirname(join(dist, name)), { recursive: true });
    writeFileSync(join(dist, name), body);
  }
  console.log(`console/dist: ${[...files].map(([n, b]) => `${n} (${b.length} bytes)`).join(", ")}`);
} else if (mode === "--check") {
  const want = await buildApp();
  const have = readDist(dist);
  const stale = [];
  for (const [name, body] of want) {
    if (!have.has(name)) {
      stale.push(`${name} is missing`);
    } else if (!have.get(name).equals(body)) {
      stale.push(`${name} differs`);
    }
  }
  for (const name of have.keys()) {
    if (!want.has(name)) {
      stale.push(`${name} is not built from src/`);
    }
  }
  if (stale.length > 0) {
    console.error(`console/dist is stale (${stale.join("; ")}): run \`make console\` (or npm run build in console/) and commit console/dist`);
    process.exit(1);
  }
  console.log("console/dist is up to date");
} else if (mode === "--tests") {
  const outdir = join(here, "build/test");
  rmSync(outdir, { recursive: true, force: true });
  const entries = readdirSync(join(here, "test")).filter((n) => n.endsWith(".test.ts")).map((n) => join(here, "test", n));
  await esbuild.build({
    ...common,
    write: true,
    entryPoints: entries,
    outdir,
    outExtension: { ".js": ".mjs" },
    format: "esm",
    platform: "node",
    packages: "external",
    sourcemap: "inline",
  });
} else {
  console.error(`build.mjs: unknown argument ${mode}; use none, --check or --tests`);
  process.exit(2);
}
