// Runs componentize-js (installed by build.sh) on a bundle so that the same bundle always
// gives the same component, wherever and whenever it is built:
//   node componentize.mjs TOOLS_DIR BUNDLE.js WIT_DIR OUT.wasm [WORLD]   (cwd: the build folder)
// componentize-js snapshots SpiderMonkey after running the module's top level (wizer), and
// the snapshot keeps what the engine was given and read. So:
// - the build folder is the guest's "/" and the engine's arguments name files under it, not
//   host paths (componentize-js passes the host paths of its work folder and the sources);
// - that work folder's name comes from Math.random(), seeded here;
// - wizer runs with VAGEN_PRELOAD preloaded (fixed random bytes and clocks, see
//   sdk/build-args.sh);
// - the `clocks` feature is disabled, which stubs the clock with the time of the build:
//   Date.now() gives SOURCE_DATE_EPOCH (default 1980-01-01) instead.
import childProcess from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [tools, bundle, wit, out, world = "environment"] = process.argv.slice(2);
const build = process.cwd();
const epoch = Number(process.env.SOURCE_DATE_EPOCH || 315532800);

Date.now = () => epoch * 1000;
let seed = 1;
Math.random = () => {
  seed = (seed * 48271) % 2147483647;
  return seed / 2147483647;
};
process.env.TMPDIR = join(build, "tmp");
await mkdir(process.env.TMPDIR);

const spawnSync = childProcess.spawnSync;
let wizened = false;
childProcess.spawnSync = (bin, args, options) => {
  if (!String(bin).includes("wizer")) return spawnSync(bin, args, options);
  // componentize-js preopens its sources folder (inside the build folder) and maps the build
  // folder to "/": keep the latter only, and name files by their guest paths.
  if (!args.includes(`--mapdir=/::${build}`)) throw new Error(`unexpected wizer arguments: ${args.join(" ")}`);
  args = args.filter((a) => !a.startsWith("--dir="));
  const input = options.input.split(`${build}/`).join("/");
  if (input.includes(build)) throw new Error(`unexpected wizer input: ${input}`);
  const env = { ...options.env };
  if (process.env.VAGEN_PRELOAD) {
    env.LD_PRELOAD = process.env.VAGEN_PRELOAD;
    env.SOURCE_DATE_EPOCH = String(epoch);
  }
  wizened = true;
  return spawnSync(bin, args, { ...options, input, env });
};
syncBuiltinESMExports();

const cjs = join(tools, "node_modules/@bytecodealliance/componentize-js/src/componentize.js");
const { componentize } = await import(pathToFileURL(cjs));
const { component } = await componentize({
  sourcePath: bundle,
  witPath: resolve(wit),
  worldName: world,
  // No WASI stdio, clocks, randomness or HTTP imports: the env gets nothing from outside.
  disableFeatures: ["stdio", "random", "clocks", "http", "fetch-event"],
});
if (!wizened) throw new Error("componentize-js did not run wizer through this script");
await writeFile(out, component);
