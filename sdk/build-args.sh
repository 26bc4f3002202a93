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
