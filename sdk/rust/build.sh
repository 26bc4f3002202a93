#!/usr/bin/env bash
# Builds a Rust environment (a crate on vagen-sdk) into one component, as the other SDKs'
# build.sh do:
#   sdk/rust/build.sh CRATE_DIR OUT.wasm
# `cargo build --release --target wasm32-wasip2` (the target installed with rustup on first
# use), then the crate's Cargo.toml `[package]` (name, version, description, license,
# authors, repository; workspace-inherited fields looked up) written into the component's
# metadata by `vagen-env metadata`: VAGEN_ENV, else `vagen-env` on the PATH, else
# target/release/vagen-env.
set -euo pipefail
source "$(dirname "$0")/../build-args.sh"
rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
[ -z "$tools_only" ] || exit 0
if [ ! -f "$env_dir/Cargo.toml" ]; then
    echo "$env_dir has no Cargo.toml" >&2
    exit 2
fi
manifest=$env_dir/Cargo.toml
cargo build --quiet --release --target wasm32-wasip2 --lib --manifest-path "$manifest"
meta=$(cargo metadata --format-version 1 --no-deps --manifest-path "$manifest")
read -r target_dir name < <(python3 -c '
import json, sys, os
m = json.load(sys.stdin)
want = os.path.realpath(sys.argv[1])
pkg = next(p for p in m["packages"] if os.path.realpath(p["manifest_path"]) == want)
print(m["target_directory"], pkg["name"].replace("-", "_"))' "$manifest" <<<"$meta")
cp "$target_dir/wasm32-wasip2/release/$name.wasm" "$out"
embed_metadata
echo "built $out"
