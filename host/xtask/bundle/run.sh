#!/usr/bin/env bash
# The GPU bundle's one command (written by `cargo xtask gpu-bundle`):
#   run.sh [--cpu] [--quick] [--sections machine,parity,generation,rollout,training,lora,data_parallel,asynchronous,primitive_skill] OUT_DIR
# Needs a python3 with torch 2.11 (the libtorch vagen-host was built against) and
# transformers >= 5.17; `VAGEN_PYTHON` picks another Python. Writes OUT_DIR/gpu-report.json
# and OUT_DIR/gpu-report.md (see gpu_report.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${VAGEN_PYTHON:-python3}"
if ! torch_lib="$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"; then
    echo "run.sh: $python cannot import torch; vagen-host needs torch 2.11's libraries" >&2
    exit 2
fi
version="$("$python" -c 'import torch; print(torch.__version__.split("+")[0])')"
case "$version" in
    2.11.*) ;;
    *) echo "run.sh: $python has torch $version; vagen-host is built against torch 2.11" >&2; exit 2 ;;
esac
# The machine's own torch libraries (the binary's RUNPATH names the build machine's).
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VAGEN_REFERENCE_DIR="$here/reference"
export VAGEN_PYTHON="$python"
export PYTHONUNBUFFERED=1
exec "$python" "$here/gpu_report.py" "$@"
