# Sourced by sdk/*/build.sh: checks `ENV_DIR OUT.wasm` and sets here (the SDK folder), root
# (the repository), env_dir, out (absolute) and tools (where toolchains are installed).
# `build.sh --tools-only` sets tools_only: the script installs its toolchain and stops (a
# machine image, or a test run fetching toolchains while it compiles something else).
tools_only=
if [ "$#" -eq 1 ] && [ "$1" = --tools-only ]; then
    tools_only=1
elif [ $# -ne 2 ]; then
    echo "usage: $0 ${usage:-ENV_DIR OUT.wasm} | --tools-only" >&2
    exit 2
elif [ ! -d "$1" ]; then
    echo "$1 is not a folder" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tools=${VAGEN_SDK_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/vagen/sdk-tools}
mkdir -p "$tools"
if [ -z "$tools_only" ]; then
    env_dir=$(cd "$1" && pwd)
    out=$(realpath -m "$2")
    mkdir -p "$(dirname "$out")"
fi

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

# Reproducible builds. A Python or JavaScript env is a snapshot of an interpreter's memory
# taken after the env's top level ran, at build time, inside the toolchain's own wasmtime
# (componentize-py; wizer under componentize-js). Whatever the interpreter read from the
# build machine while starting is in that snapshot: random bytes (Python's string-hash key,
# the random module's state, SpiderMonkey's seeds), the time of day, timer readings: left
# alone, two builds of the same source differ, and so does the order in which a Python env
# iterates a set of strings. deterministic_preload builds, once, with the machine's C
# compiler (`cc`, which every Rust toolchain needs anyway), a small library that the build
# scripts preload (LD_PRELOAD) into those tools only: it answers getrandom with fixed bytes
# and the clocks with a fixed instant, SOURCE_DATE_EPOCH (default 315532800, 1980-01-01).
# Sets preload to its path, or to "" with a warning where it cannot be had (not Linux, no
# working `cc`; override with HOST_CC).
deterministic_preload() {
    preload=
    if [ "$(uname -s)" != Linux ] || ! command -v "${HOST_CC:-cc}" >/dev/null; then
        echo "warning: no Linux C compiler (${HOST_CC:-cc}): this build's bytes depend on when and where it ran" >&2
        return 0
    fi
    local src so
    src=$(deterministic_c)
    so=$tools/deterministic-$(printf '%s' "$src" | sha256sum | cut -c1-16).so
    if [ ! -f "$so" ]; then
        if ! printf '%s\n' "$src" | "${HOST_CC:-cc}" -O2 -Wall -shared -fPIC -x c -o "$so.$$" - -ldl 2>"$so.log"; then
            rm -f "$so.$$"
            echo "warning: ${HOST_CC:-cc} could not build $so (see $so.log): this build's bytes depend on when and where it ran" >&2
            return 0
        fi
        mv -f "$so.$$" "$so"
        rm -f "$so.log"
    fi
    preload=$so
}

deterministic_c() {
    cat <<'C'
/* Preloaded into the toolchains that snapshot an interpreter (see sdk/build-args.sh). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>

/* The same bytes for every request. */
static void fill(void *buf, size_t len) {
    uint64_t s = 0x9e3779b97f4a7c15u;
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        p[i] = (unsigned char)(s >> 56);
    }
}

ssize_t getrandom(void *buf, size_t len, unsigned flags) {
    (void)flags;
    fill(buf, len);
    return (ssize_t)len;
}

int getentropy(void *buf, size_t len) {
    fill(buf, len);
    return 0;
}

/* Rust's getrandom crate asks through syscall(SYS_getrandom, ...); the rest passes through. */
long syscall(long n, ...) {
    static long (*real)(long, ...);
    long a[6];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_getrandom) {
        fill((void *)a[0], (size_t)a[1]);
        return a[1];
    }
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

typedef int (*clock_fn)(clockid_t, struct timespec *);
static clock_fn real_clock;
static struct timespec boot;
static long epoch = 315532800, reads;

static void start_clock(void) {
    clock_fn real = (clock_fn)dlsym(RTLD_NEXT, "clock_gettime");
    real(CLOCK_MONOTONIC, &boot);
    real_clock = real;
}

/* LD_PRELOAD and SOURCE_DATE_EPOCH must not reach the programs these tools run: wizer hands
   its environment to the interpreter it snapshots. */
__attribute__((constructor)) static void init(void) {
    const char *s = getenv("SOURCE_DATE_EPOCH");
    if (s && *s) epoch = strtol(s, NULL, 10);
    unsetenv("LD_PRELOAD");
    unsetenv("SOURCE_DATE_EPOCH");
    if (!real_clock) start_clock();
}

/* Time stands still: the wall clock reads the epoch; the monotonic clock reads the moment the
   tool started (the interpreter only sees time elapsed since then: none). A timed wait on
   either clock still returns (a monotonic deadline passes in real time, a wall-clock one is
   already past), and from the 2^26th reading on (a build takes about a million) time moves by
   1 us per reading, so a program that waits for the clock to move ends too. */
int clock_gettime(clockid_t id, struct timespec *ts) {
    struct timespec base;
    long n;
    if (!real_clock) start_clock(); /* called before this library's constructor ran */
    switch (id) {
    case CLOCK_REALTIME:
    case CLOCK_REALTIME_COARSE:
        base.tv_sec = epoch;
        base.tv_nsec = 0;
        break;
    case CLOCK_MONOTONIC:
    case CLOCK_MONOTONIC_COARSE:
    case CLOCK_MONOTONIC_RAW:
    case CLOCK_BOOTTIME:
        base = boot;
        break;
    default:
        return real_clock(id, ts);
    }
    n = __atomic_add_fetch(&reads, 1, __ATOMIC_RELAXED) - (1L << 26);
    n = (n < 0 ? 0 : n * 1000) + base.tv_nsec;
    ts->tv_sec = base.tv_sec + n / 1000000000;
    ts->tv_nsec = n % 1000000000;
    return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    clock_gettime(CLOCK_REALTIME, &ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
C
}

# embed_metadata: writes the env's package manifest (the first of pyproject.toml,
# package.json, package.toml, Cargo.toml in ENV_DIR) into $out as the standard metadata
# sections (name, version, description, license, authors, source: what `inspect` shows and a
# registry push turns into annotations), with `vagen-env metadata`. Without a manifest the
# component has none, and `check` says so.
embed_metadata() {
    local manifest=
    for f in pyproject.toml package.json package.toml Cargo.toml; do
        if [ -f "$env_dir/$f" ]; then
            manifest=$env_dir/$f
            break
        fi
    done
    [ -n "$manifest" ] || return 0
    local tool=${VAGEN_ENV:-$(command -v vagen-env || echo "$root/target/release/vagen-env")}
    if [ ! -x "$tool" ]; then
        echo "$tool not found (it writes $manifest into the component's metadata): install it with 'cargo install --path host/env-tool' (no libtorch needed) or set VAGEN_ENV" >&2
        exit 2
    fi
    "$tool" metadata "$out" --from "$manifest"
}
