#!/usr/bin/env bash
# Builds a JavaScript environment into one component:
#   sdk/js/build.sh ENV_DIR OUT.wasm
# ENV_DIR holds `app.js`, an ES module that imports from "vagen" and calls exportEnv. It is
# bundled with the SDK by esbuild, then componentised by componentize-js (StarlingMonkey),
# both from npm, installed on first use into target/sdk-tools/node (override with
# VAGEN_SDK_TOOLS). Needs node and npm.
set -euo pipefail
source "$(dirname "$0")/../build-args.sh"
if [ ! -f "$env_dir/app.js" ]; then
    echo "$env_dir has no app.js" >&2
    exit 2
fi
for tool in node npm; do
    command -v $tool >/dev/null || { echo "$tool is needed to build JavaScript environments" >&2; exit 2; }
done
tools=$tools/node
mkdir -p "$tools"
# One installer at a time (builds may run in parallel, e.g. in tests).
(
    flock 9
    if [ ! -x "$tools/node_modules/.bin/componentize-js" ] || [ ! -x "$tools/node_modules/.bin/esbuild" ]; then
        npm install --prefix "$tools" --no-save --no-audit --no-fund --loglevel=error \
            @bytecodealliance/componentize-js@0.23.0 esbuild@0.28.2
    fi
) 9>"$tools/.install.lock"
# componentize-js wants the WIT folder inside its working directory.
build=$(mktemp -d "$tools/build.XXXXXX")
trap 'rm -rf "$build"' EXIT
cp -r "$root/wit/v0.1.0" "$build/wit"
printf 'import "%s";\nexport { env } from "vagen";\n' "$env_dir/app.js" > "$build/entry.js"
"$tools/node_modules/.bin/esbuild" "$build/entry.js" --bundle --format=esm --platform=neutral \
    --alias:vagen="$here/vagen.js" --outfile="$build/bundle.js" --log-level=warning
# No WASI stdio, clocks, randomness or HTTP imports: the env gets nothing from outside.
(cd "$build" && "$tools/node_modules/.bin/componentize-js" bundle.js --wit wit -n environment \
    -d stdio random clocks http fetch-event -o "$out" >/dev/null)
echo "built $out"
