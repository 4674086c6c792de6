// The package's prepare script: it builds dist/ from src/. npm runs it
// before it packs the package (make release-npm), after `npm install` in
// this folder, and in this folder when another project installs the folder
// (`npm install path/to/clients/typescript`). That last install links the
// folder and installs none of its dependencies, so when they are missing
// here this script installs them first, as package-lock.json pins them.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const dir = path.dirname(fileURLToPath(import.meta.url));
const pkg = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8"));
const needed = [...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.devDependencies ?? {})];
const missing = needed.filter((name) => !existsSync(path.join(dir, "node_modules", name, "package.json")));

if (missing.length > 0) {
  // The npm that runs this script passes its settings down as npm_config_*
  // variables, among them the installing project's prefix; the install here
  // keeps only those that say where and how to fetch.
  const fetchSetting = /^npm_config_(cache|userconfig|globalconfig|registry|cafile|ca|cert|key|proxy|https_proxy|http_proxy|noproxy|strict_ssl|offline|prefer_offline|prefer_online|fetch_.*|@.*|\/\/.*)$/i;
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) || fetchSetting.test(k)));
  const npmCli = process.env.npm_execpath;
  const [cmd, args] = npmCli && /\.[cm]?js$/.test(npmCli) ? [process.execPath, [npmCli]] : ["npm", []];
  console.error(`@idemhq/idem: installing ${missing.join(", ")} into ${dir} (npm ci), to build the package`);
  // --ignore-scripts: no prepare within prepare, and no dependency's scripts.
  execFileSync(cmd, [...args, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], { cwd: dir, env, stdio: ["ignore", 2, 2] });
}

rmSync(path.join(dir, "dist"), { recursive: true, force: true });
execFileSync(process.execPath, [path.join(dir, "node_modules", "typescript", "bin", "tsc"), "-p", path.join(dir, "tsconfig.build.json")], {
  cwd: dir,
  stdio: ["ignore", 2, 2],
});
