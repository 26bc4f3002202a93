#!/usr/bin/env bash
# Builds a C environment into one component:
#   sdk/c/build.sh ENV_DIR OUT.wasm
# Compiles every .c file in ENV_DIR with the SDK (vagen.c) and the contract's bindings
# (written by `vagen-env c-bindings`), for wasm32-wasi as a reactor, then wraps the module
# with `vagen-env componentize`. The compiler is zig's clang from the PyPI `ziglang`
# package, installed on first use into $XDG_CACHE_HOME/vagen/sdk-tools/python (~/.cache
# when unset; override with VAGEN_SDK_TOOLS); set CC to use another WASI-capable clang instead. The env tool is
# VAGEN_ENV, else `vagen-env` on the PATH, else target/release/vagen-env.
set -euo pipefail
source "$(dirname "$0")/../build-args.sh"
if [ -z "${CC:-}" ]; then
    python_tool ziglang==0.15.1 ziglang
    export ZIG_GLOBAL_CACHE_DIR=$tools/zig-cache ZIG_LOCAL_CACHE_DIR=$tools/zig-cache
    cc=("$venv/bin/python" -m ziglang cc --target=wasm32-wasi)
else
    cc=("$CC" --target=wasm32-wasi)
fi
[ -z "$tools_only" ] || exit 0
tool=${VAGEN_ENV:-$(command -v vagen-env || echo "$root/target/release/vagen-env")}
if [ ! -x "$tool" ]; then
    echo "$tool not found: install it with 'cargo install --path host/env-tool' (no libtorch needed) or set VAGEN_ENV" >&2
    exit 2
fi
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
"$tool" c-bindings --out-dir "$build/gen" >/dev/null
shopt -s nullglob
sources=("$env_dir"/*.c)
if [ ${#sources[@]} -eq 0 ]; then
    echo "$env_dir has no .c files" >&2
    exit 2
fi
"${cc[@]}" -mexec-model=reactor -O2 -s -Wall -Werror -I"$here" -I"$build/gen" \
    "${sources[@]}" "$here/vagen.c" "$build/gen/environment.c" "$build/gen/environment_component_type.o" \
    -o "$build/core.wasm"
"$tool" componentize "$build/core.wasm" -o "$out" >/dev/null
embed_metadata
echo "built $out"
