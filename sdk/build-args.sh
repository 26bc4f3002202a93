# Sourced by sdk/*/build.sh: checks `ENV_DIR OUT.wasm` and sets here (the SDK folder), root
# (the repository), env_dir, out (absolute) and tools (where toolchains are installed).
if [ $# -ne 2 ]; then
    echo "usage: $0 ENV_DIR OUT.wasm" >&2
    exit 2
fi
if [ ! -d "$1" ]; then
    echo "$1 is not a folder" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
env_dir=$(cd "$1" && pwd)
out=$(realpath -m "$2")
tools=${VAGEN_SDK_TOOLS:-$root/target/sdk-tools}
mkdir -p "$tools" "$(dirname "$out")"

# python_tool PACKAGE==VERSION MODULE: makes sure the PyPI package is in the tools venv
# ($tools/python, shared by the SDKs), installing it under a lock (builds may run in
# parallel, e.g. in tests). Sets venv.
python_tool() {
    venv=$tools/python
    (
        flock 9
        if ! "$venv/bin/python" -c "import $2" 2>/dev/null; then
            [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
            "$venv/bin/pip" install --no-cache-dir --quiet "$1"
        fi
    ) 9>"$tools/.install.lock"
}
