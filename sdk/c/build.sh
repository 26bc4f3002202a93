#!/usr/bin/env bash
# Builds a C environment into one component:
#   sdk/c/build.sh ENV_DIR OUT.wasm
# Compiles every .c file in ENV_DIR with the SDK (vagen.c) and the contract's bindings
# (written by `vagen-host c-bindings`), for wasm32-wasi as a reactor, then wraps the module
# with `vagen-host componentize`. The compiler is zig's clang from the PyPI `ziglang`
# package, installed on first use into target/sdk-tools/python (override with
# VAGEN_SDK_TOOLS); set CC to use another WASI-capable clang instead. vagen-host is
# target/release/vagen-host unless VAGEN_HOST says otherwise.
set -euo pipefail
source "$(dirname "$0")/../build-args.sh"
host=${VAGEN_HOST:-$root/target/release/vagen-host}
if [ ! -x "$host" ]; then
    echo "$host not found: build it with 'cargo build --release -p vagen-host' or set VAGEN_HOST" >&2
    exit 2
fi
if [ -z "${CC:-}" ]; then
    python_tool ziglang==0.15.1 ziglang
    export ZIG_GLOBAL_CACHE_DIR=$tools/zig-cache ZIG_LOCAL_CACHE_DIR=$tools/zig-cache
    cc=("$venv/bin/python" -m ziglang cc --target=wasm32-wasi)
else
    cc=("$CC" --target=wasm32-wasi)
fi
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
"$host" c-bindings --out-dir "$build/gen" >/dev/null
shopt -s nullglob
sources=("$env_dir"/*.c)
if [ ${#sources[@]} -eq 0 ]; then
    echo "$env_dir has no .c files" >&2
    exit 2
fi
"${cc[@]}" -mexec-model=reactor -O2 -s -Wall -Werror -I"$here" -I"$build/gen" \
    "${sources[@]}" "$here/vagen.c" "$build/gen/environment.c" "$build/gen/environment_component_type.o" \
    -o "$build/core.wasm"
"$host" componentize "$build/core.wasm" -o "$out" >/dev/null
echo "built $out"
