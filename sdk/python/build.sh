#!/usr/bin/env bash
# Builds a Python environment into one component:
#   sdk/python/build.sh [-p DIR]... ENV_DIR OUT.wasm
# ENV_DIR holds `app.py` (your Env, decorated with @vagen.export_env) and any modules it
# imports; each `-p DIR` adds a folder of pure-Python modules and packages (a vendored
# library, a venv's site-packages) to the import path. Nothing else is importable: not the
# build machine's own site-packages. The first run installs componentize-py from PyPI into
# $XDG_CACHE_HOME/vagen/sdk-tools/python (~/.cache when unset; override with VAGEN_SDK_TOOLS).
#
# Builds are as reproducible as componentize-py allows: fixed random bytes and clocks while
# it runs the env's top level (see deterministic_preload in ../build-args.sh), sources
# copied to a fresh folder with fixed times. What still differs between two builds is under
# a hundred bytes of the interpreter's snapshot (times and inode numbers of the files it
# read, which it gets with raw system calls), which do not change what the env does; so the
# component also records, in a custom section `vagen-build-inputs`, the sha256 of
# everything the build read: equal for equal sources, SDK and toolchain.
set -euo pipefail
extra=()
while [ "${1:-}" != --tools-only ] && getopts p: opt; do
    case $opt in
    p)
        [ -d "$OPTARG" ] || { echo "$OPTARG is not a folder" >&2; exit 2; }
        extra+=("$(cd "$OPTARG" && pwd)")
        ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
usage="[-p DIR]... ENV_DIR OUT.wasm"
source "$(dirname "$0")/../build-args.sh"
toolchain=componentize-py==0.25.1
python_tool "$toolchain" componentize_py
deterministic_preload
[ -z "$tools_only" ] || exit 0
if [ ! -f "$env_dir/app.py" ]; then
    echo "$env_dir has no app.py" >&2
    exit 2
fi
# An app that exports a reward function becomes a `vagen:env/reward` component (the 0.3.0
# package); an environment keeps the 0.1.0 contract it was written against.
if grep -q "export_reward" "$env_dir/app.py"; then
    wit=$root/wit/v0.3.0 world=reward-function glue=reward.py
else
    wit=$root/wit/v0.1.0 world=environment glue=env.py
fi

# Build from a copy: the interpreter writes __pycache__ next to what it imports (into your
# folder, and the next build would load it), and only the copied folders are mounted
# (VIRTUAL_ENV names an empty one; without it componentize-py adds the site-packages of
# whichever `python3` is on PATH).
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
copy() {
    mkdir -p "$2"
    tar -C "$1" --exclude=__pycache__ --sort=name -cf - . | tar -C "$2" -xf -
}
copy "$env_dir" "$stage/env"
mkdir "$stage/sdk" "$stage/venv"
cp "$here/vagen.py" "$here/$glue" "$stage/sdk/"
paths=(-p "$stage/env" -p "$stage/sdk")
for i in "${!extra[@]}"; do
    copy "${extra[$i]}" "$stage/path$i"
    paths+=(-p "$stage/path$i")
done
mkdir -p "$stage/venv/lib/site-packages"
find "$stage" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-315532800}" {} +
(
    cd "$stage"
    VIRTUAL_ENV=$stage/venv PYTHONDONTWRITEBYTECODE=1 LD_PRELOAD=$preload \
        "$venv/bin/componentize-py" --quiet -d "$wit" -w "$world" componentize "${glue%.py}" \
        "${paths[@]}" -o "$out"
)

embed_metadata
# The custom section: sha256 over the toolchain, the preloaded library, this script and
# build-args.sh, the WIT, and every file of the copied folders (by name under its folder).
"$venv/bin/python" - "$out" "$toolchain" "${preload:-none}" "script=$0" "args=$here/../build-args.sh" \
    "wit=$wit" "$stage" <<'PY'
import hashlib, os, sys

out, toolchain, preload, *roots = sys.argv[1:]
stage = roots.pop()
roots += [f"{name}={stage}/{name}" for name in sorted(os.listdir(stage)) if name != "venv"]
h = hashlib.sha256(f"{toolchain}\n{os.path.basename(preload)}\n".encode())
for root in roots:
    name, path = root.split("=", 1)
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if "__pycache__" not in d)
    for f in files:
        with open(f, "rb") as fh:
            data = fh.read()
        rel = os.path.relpath(f, path) if f != path else ""
        h.update(f"{name}/{rel}\n{hashlib.sha256(data).hexdigest()}\n".encode())

def leb(n):
    b = bytearray()
    while True:
        b.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(b)

name = b"vagen-build-inputs"
payload = leb(len(name)) + name + f"sha256:{h.hexdigest()}".encode()
with open(out, "ab") as fh:
    fh.write(b"\x00" + leb(len(payload)) + payload)
PY
echo "built $out"
