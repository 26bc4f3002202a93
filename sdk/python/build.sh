#!/usr/bin/env bash
# Builds a Python environment into one component:
#   sdk/python/build.sh ENV_DIR OUT.wasm
# ENV_DIR holds `app.py` (your Env, decorated with @vagen.export_env) and any modules it
# imports. The first run installs componentize-py from PyPI into target/sdk-tools/python
# (override with VAGEN_SDK_TOOLS).
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 ENV_DIR OUT.wasm" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
env_dir=$(cd "$1" && pwd)
out=$2
if [ ! -f "$env_dir/app.py" ]; then
    echo "$env_dir has no app.py" >&2
    exit 2
fi
tools=${VAGEN_SDK_TOOLS:-$root/target/sdk-tools}
venv=$tools/python
mkdir -p "$tools"
# One installer at a time (builds may run in parallel, e.g. in tests).
(
    flock 9
    if [ ! -x "$venv/bin/componentize-py" ]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --no-cache-dir --quiet componentize-py==0.25.1
    fi
) 9>"$tools/.install.lock"
mkdir -p "$(dirname "$out")"
"$venv/bin/componentize-py" --quiet -d "$root/wit/v0.1.0" -w environment componentize env \
    -p "$env_dir" -p "$here" -o "$out"
echo "built $out"
