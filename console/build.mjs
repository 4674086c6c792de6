// Builds the console: src/ into dist/ (what idemd embeds), byte for byte the
// same on every machine with the lockfile's packages.
//
//   node build.mjs           write dist/
//   node build.mjs --check   fail if dist/ differs from what a build writes
//   node build.mjs --tests   bundle test/*.test.ts into build/test/ for node --test,
//                            and test/screenshots.ts into build/tools/screenshots.mjs
//
// @idemhq/idem, the TypeScript client, is bundled from its sources in
// ../clients/typescript/src, and every import of @bufbuild/protobuf and
// @connectrpc/connect, the client's included, resolves to this package's
// node_modules (tsconfig.bundle.json): one copy of each, whatever else is
// installed elsewhere.
import * as esbuild from "esbuild";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

const common = {
  bundle: true,
  // The paths of tsconfig.bundle.json, for every file (the client's too).
  // Not a resolve plugin: esbuild's output with one was not the same from
  // run to run.
  tsconfig: join(here, "tsconfig.bundle.json"),
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
    metafile: true,
  });
  const files = new Map();
  for (const f of out.outputFiles) {
    files.set(relative("/dist", f.path), Buffer.from(f.contents));
  }
  files.set("licenses.txt", Buffer.from(licenses(out.metafile)));
  files.set("index.html", readFileSync(join(here, "src/index.html")));
  files.set("favicon.svg", readFileSync(join(here, "src/favicon.svg")));
  return files;
}

/**
 * licenses lists the packages bundled into the app, with their license and,
 * where the package ships one, the license's text.
 */
function licenses(metafile) {
  const dirs = new Set();
  for (const input of Object.keys(metafile.inputs)) {
    const m = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input);
    if (m) {
      dirs.add(m[1]);
    }
  }
  const parts = ["The idem console bundles these packages:\n"];
  for (const dir of [...dirs].sort()) {
    const pkg = JSON.parse(readFileSync(join(here, dir, "package.json"), "utf8"));
    parts.push(`\n${pkg.name} ${pkg.version}: ${pkg.license}${pkg.repository?.url ? ` (${pkg.repository.url})` : ""}\n`);
    for (const name of ["LICENSE", "LICENSE.md", "LICENSE.txt"]) {
      if (existsSync(join(here, dir, name))) {
        parts.push(`\n${readFileSync(join(here, dir, name), "utf8").trim()}\n`);
        break;
      }
    }
  }
  return parts.join("");
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
  const entries = readdirSync(join(here, "test"))
    .filter((n) => n.endsWith(".test.ts"))
    .map((n) => join(here, "test", n));
  await esbuild.build({
    ...common,
    write: true,
    entryPoints: [join(here, "test/screenshots.ts")],
    outfile: join(here, "build/tools/screenshots.mjs"),
    format: "esm",
    platform: "node",
    packages: "external",
  });
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
