#!/usr/bin/env bash
# Builds a JavaScript environment into one component:
#   sdk/js/build.sh ENV_DIR OUT.wasm
# ENV_DIR holds `app.js`, an ES module that imports from "vagen" and calls exportEnv, and
# the modules it imports (relative imports stay inside ENV_DIR; packages come from its
# node_modules). It is bundled with the SDK by esbuild, then componentised by
# componentize-js (StarlingMonkey), both from npm at the versions in package-lock.json,
# installed on first use into $XDG_CACHE_HOME/vagen/sdk-tools/node (~/.cache when unset;
# override with VAGEN_SDK_TOOLS). Needs node and npm. The same sources give the same bytes, wherever and whenever they are built
# (componentize.mjs says how).
set -euo pipefail
source "$(dirname "$0")/../build-args.sh"
for tool in node npm; do
    command -v $tool >/dev/null || { echo "$tool is needed to build JavaScript environments" >&2; exit 2; }
done
deterministic_preload
tools=$tools/node
mkdir -p "$tools"
# Install the locked packages (again when the lock changes), one installer at a time; builds
# hold the lock shared while they use them (builds may run in parallel, e.g. in tests).
exec 9>"$tools/.install.lock"
flock 9
if ! cmp -s "$here/package-lock.json" "$tools/.installed-lock.json" || [ ! -x "$tools/node_modules/.bin/esbuild" ]; then
    rm -f "$tools/.installed-lock.json"
    cp "$here/package.json" "$here/package-lock.json" "$tools/"
    npm install --prefix "$tools" --no-audit --no-fund --loglevel=error
    cp "$here/package-lock.json" "$tools/.installed-lock.json"
fi
[ -z "$tools_only" ] || exit 0
flock -s 9
if [ ! -f "$env_dir/app.js" ]; then
    echo "$env_dir has no app.js" >&2
    exit 2
fi
# An app that exports a reward function becomes a `vagen:env/reward` component (the 0.3.0
# package); an environment keeps the 0.1.0 contract it was written against.
if grep -q "exportReward" "$env_dir/app.js"; then
    wit=v0.3.0 world=reward-function entry='export { reward } from "./vagen-reward.js";'
else
    wit=v0.1.0 world=environment entry='export { env } from "vagen";'
fi
# Everything the bundle is made of is copied into a fresh folder, named the same in every
# build (esbuild writes each module's path, relative to its working folder, into the bundle).
build=$(mktemp -d "$tools/build.XXXXXX")
trap 'rm -rf "$build"' EXIT
cp -r "$root/wit/$wit" "$build/wit"
cp -r "$env_dir" "$build/env"
cp "$here/vagen.js" "$here/vagen-reward.js" "$build/"
printf 'import "./env/app.js";\n%s\n' "$entry" > "$build/entry.js"
(
    cd "$build"
    "$tools/node_modules/.bin/esbuild" entry.js --bundle --format=esm --platform=neutral \
        --alias:vagen=./vagen.js --external:vagen:env/* --outfile=bundle.js --log-level=warning
    VAGEN_PRELOAD=$preload node "$here/componentize.mjs" "$tools" bundle.js wit "$out" "$world"
)
embed_metadata
echo "built $out"
