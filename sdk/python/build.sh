#!/usr/bin/env bash
# Builds a Python environment into one component:
#   sdk/python/build.sh ENV_DIR OUT.wasm
# ENV_DIR holds `app.py` (your Env, decorated with @vagen.export_env) and any modules it
# imports. The first run installs componentize-py from PyPI into target/sdk-tools/python
# (override with VAGEN_SDK_TOOLS).
set -euo pipefail
source "$(dirname "$0")/../build-args.sh"
if [ ! -f "$env_dir/app.py" ]; then
    echo "$env_dir has no app.py" >&2
    exit 2
fi
python_tool componentize-py==0.25.1 componentize_py
"$venv/bin/componentize-py" --quiet -d "$root/wit/v0.1.0" -w environment componentize env \
    -p "$env_dir" -p "$here" -o "$out"
echo "built $out"
