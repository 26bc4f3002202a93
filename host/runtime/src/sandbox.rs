//! The store state of one instance: a WASI context that grants nothing, randomness and
//! clocks that depend only on the episode seed, capped output capture, and the memory cap.

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use rand_core::{SeedableRng, TryRng};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime::{ResourceLimiter, Result as WtResult};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamError, subscribe};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

/// Per-instance store data.
pub(crate) struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    clock: VirtualClock,
    pub(crate) memory: MemoryCap,
    /// A reward component's judge (`None` for environments).
    pub(crate) judge: Option<std::sync::Arc<dyn crate::reward::Judge>>,
    /// The judge's use in the current call, and what it may use.
    pub(crate) judge_use: JudgeUse,
    pub(crate) judge_budget: JudgeBudget,
}

/// The judge's use within one call into a reward component (reset by `arm`).
#[derive(Default)]
pub(crate) struct JudgeUse {
    pub calls: u32,
    /// When the call began and its own time budget.
    pub started: Option<std::time::Instant>,
    pub timeout: std::time::Duration,
    /// Judge time credited so far in this call (at most `JudgeBudget::credit`).
    pub granted: std::time::Duration,
}

impl JudgeUse {
    /// The instant the call must end by: its own budget plus the judge time credited,
    /// counted from its start.
    pub fn end(&self) -> Option<std::time::Instant> {
        self.started.map(|s| s + self.timeout + self.granted)
    }
}

/// `Limits::max_judge_calls` and `judge_credit_ms`, as the store needs them.
#[derive(Clone, Copy, Default)]
pub(crate) struct JudgeBudget {
    pub calls: u32,
    pub credit: std::time::Duration,
}

/// Handles the host keeps to re-seed an instance's world at every `reset`.
#[derive(Clone)]
pub(crate) struct Determinism {
    random: SeededRandom,
    clock: VirtualClock,
    pub(crate) stderr: Capture,
}

impl Determinism {
    /// Same seed → same random bytes and same clock readings inside the guest.
    pub(crate) fn reseed(&self, seed: u64) {
        self.random.reseed(seed);
        self.clock.reset();
    }
}

impl Sandbox {
    /// No preopened directories, no environment variables or arguments, no sockets or
    /// name lookups, stdin closed; stdout and stderr go to capped in-memory buffers.
    /// Preopens, env vars, args and stdin are the builder's defaults (nothing here adds
    /// any), so `tests/tests/capabilities.rs` checks them from inside a guest: a
    /// wasmtime-wasi upgrade could change a default. Keep `GRANTS` below in step.
    pub(crate) fn new(memory_cap: usize, pool: std::sync::Arc<MemoryPool>, output_bytes: usize) -> (Self, Determinism) {
        let random = SeededRandom::new(0);
        let clock = VirtualClock::default();
        let stdout = Capture::new(output_bytes);
        let stderr = Capture::new(output_bytes);
        let wasi = WasiCtx::builder()
            .stdout(stdout)
            .stderr(stderr.clone())
            .secure_random(random.clone())
            .insecure_random(random.clone())
            .insecure_random_seed(0)
            .wall_clock(clock.clone())
            .monotonic_clock(clock.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let sandbox = Sandbox {
            wasi,
            table: ResourceTable::new(),
            clock: clock.clone(),
            memory: MemoryCap::new(memory_cap, pool),
            judge: None,
            judge_use: JudgeUse::default(),
            judge_budget: JudgeBudget::default(),
        };
        (sandbox, Determinism { random, clock, stderr })
    }
}

/// What a guest reaches through each interface the linker provides, as `Sandbox::new`
/// builds the context; `vagen-host inspect` prints it beside a plugin's imports, and
/// `tests/tests/capabilities.rs` checks the denials from inside a guest.
const GRANTS: &[(&str, &str, &str)] = &[
    ("wasi:filesystem/preopens", "denied", "no preopened directories: get-directories is empty"),
    ("wasi:filesystem/types", "denied", "no descriptor to call it on (no preopens): no host file or directory"),
    ("wasi:cli/environment", "denied", "no env vars (the host's are not inherited), no args, no initial cwd"),
    ("wasi:cli/stdin", "denied", "closed: every read ends at once"),
    ("wasi:cli/stdout", "virtual", "kept in memory up to output_bytes, never read: not the host's stdout"),
    ("wasi:cli/stderr", "virtual", "kept in memory up to output_bytes, shown only in a trap's error"),
    ("wasi:cli/exit", "granted", "ends the call as a trap; the instance is discarded"),
    ("wasi:cli/terminal-input", "denied", "no terminal"),
    ("wasi:cli/terminal-output", "denied", "no terminal"),
    ("wasi:cli/terminal-stdin", "denied", "no terminal"),
    ("wasi:cli/terminal-stdout", "denied", "no terminal"),
    ("wasi:cli/terminal-stderr", "denied", "no terminal"),
    ("wasi:clocks/wall-clock", "virtual", "from 2025-01-01T00:00:00Z, +1 us per reading, rewound at every reset"),
    (
        "wasi:clocks/monotonic-clock",
        "virtual",
        "+1 us per reading, rewound at every reset; timers fire at once and move time to their deadline",
    ),
    ("wasi:random/random", "virtual", "ChaCha8 seeded with the episode seed at every reset (0 before the first)"),
    ("wasi:random/insecure", "virtual", "the same seeded ChaCha8 stream as wasi:random/random"),
    ("wasi:random/insecure-seed", "virtual", "always 0"),
    ("wasi:io/error", "granted", "errors of the stdio streams; reaches nothing else"),
    ("wasi:io/poll", "granted", "waits on the stdio streams and virtual timers; reaches nothing else"),
    ("wasi:io/streams", "granted", "the stdio streams (see wasi:cli); reaches nothing else"),
    ("wasi:sockets/instance-network", "denied", "a network handle that every use refuses"),
    ("wasi:sockets/network", "denied", "error codes and address types only"),
    ("wasi:sockets/tcp-create-socket", "denied", "TCP not allowed: access-denied (and every address is refused)"),
    ("wasi:sockets/tcp", "denied", "no TCP socket can be created"),
    ("wasi:sockets/udp-create-socket", "denied", "UDP not allowed: access-denied (and every address is refused)"),
    ("wasi:sockets/udp", "denied", "no UDP socket can be created"),
    ("wasi:sockets/ip-name-lookup", "denied", "lookups not allowed: permanent-resolver-failure"),
    ("vagen:env/types", "granted", "the environment world's own types; no functions"),
    ("vagen:env/judge", "granted", "a reward function's judge: the run's language model, or an error when it has none"),
];

/// `(access, how)` for an imported interface (`name@version`); see [`Import`](crate::types::Import).
pub(crate) fn grant(import: &str) -> (&'static str, &'static str) {
    let interface = import.split_once('@').map_or(import, |(name, _)| name);
    GRANTS
        .iter()
        .find(|(name, ..)| *name == interface)
        .map_or(("unknown", "missing from the sandbox's capability table (sandbox.rs)"), |&(_, access, how)| {
            (access, how)
        })
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// ChaCha8 behind a shared handle so the host can re-seed it between episodes.
#[derive(Clone)]
struct SeededRandom(Arc<Mutex<ChaCha8Rng>>);

impl SeededRandom {
    fn new(seed: u64) -> Self {
        Self(Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))))
    }

    fn reseed(&self, seed: u64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = ChaCha8Rng::seed_from_u64(seed);
    }
}

impl TryRng for SeededRandom {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).try_next_u32()
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).try_next_u64()
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).try_fill_bytes(dst)
    }
}

/// A clock that advances 1 µs per reading: time-based guest code stays deterministic and
/// loops that wait for time to pass still end. Wall time starts at 2025-01-01T00:00:00Z.
#[derive(Clone, Default)]
struct VirtualClock(Arc<AtomicU64>);

const CLOCK_EPOCH: Duration = Duration::from_secs(1_735_689_600);
const CLOCK_STEP_NS: u64 = 1_000;

impl VirtualClock {
    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    fn tick(&self) -> u64 {
        self.0.fetch_add(CLOCK_STEP_NS, Ordering::Relaxed) + CLOCK_STEP_NS
    }

    /// Moves time forward to `when` (monotonic nanoseconds) if it lies ahead.
    fn advance_to(&self, when: u64) {
        self.0.fetch_max(when, Ordering::Relaxed);
    }

    fn advance_by(&self, nanos: u64) {
        let now = self.0.load(Ordering::Relaxed);
        self.advance_to(now.saturating_add(nanos));
    }
}

/// Replaces WASI's timers: a real sleep would block the host thread where no epoch
/// deadline can reach it (a guest's one-hour `sleep` held a test for an hour). Here every
/// timer is ready at once and virtual time jumps to its deadline, so sleeping guests stay
/// deterministic and a sleep loop is still ended by the call's deadline.
pub(crate) fn add_virtual_timers(linker: &mut Linker<Sandbox>) -> WtResult<()> {
    linker.allow_shadowing(true);
    let mut clocks = linker.instance(MONOTONIC_CLOCK)?;
    clocks.func_wrap("subscribe-duration", |mut store: StoreContextMut<'_, Sandbox>, (nanos,): (u64,)| {
        store.data().clock.advance_by(nanos);
        Ok((ready_pollable(&mut store.data_mut().table)?,))
    })?;
    clocks.func_wrap("subscribe-instant", |mut store: StoreContextMut<'_, Sandbox>, (when,): (u64,)| {
        store.data().clock.advance_to(when);
        Ok((ready_pollable(&mut store.data_mut().table)?,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The WASI clocks version wasmtime-wasi 48 implements; guests importing any 0.2.x match it.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

struct Ready;

#[wasmtime_wasi::async_trait]
impl Pollable for Ready {
    async fn ready(&mut self) {}
}

fn ready_pollable(table: &mut ResourceTable) -> WtResult<Resource<DynPollable>> {
    let ready = table.push(Ready)?;
    subscribe(table, ready)
}

impl HostWallClock for VirtualClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(CLOCK_STEP_NS)
    }
    fn now(&self) -> Duration {
        CLOCK_EPOCH + Duration::from_nanos(self.tick())
    }
}

impl HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        CLOCK_STEP_NS
    }
    fn now(&self) -> u64 {
        self.tick()
    }
}

/// An output stream that keeps the first `cap` bytes and drops the rest without telling
/// the guest: a chatty plugin must not fail (a Rust `println!` panics on a write error).
#[derive(Clone)]
pub(crate) struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl Capture {
    fn new(cap: usize) -> Self {
        Self { buf: Arc::new(Mutex::new(Vec::new())), cap }
    }

    fn push(&self, bytes: &[u8]) {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let room = self.cap.saturating_sub(buf.len());
        buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// Everything captured so far, emptied: each call's error shows that call's output.
    pub(crate) fn take(&self) -> String {
        let bytes = std::mem::take(&mut *self.buf.lock().unwrap_or_else(|e| e.into_inner()));
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// The linear memory all instances of one runtime hold together, against one cap: the
/// trainer creates groups × group_size instances, each allowed `memory_mib`.
pub(crate) struct MemoryPool {
    cap: usize,
    used: std::sync::atomic::AtomicUsize,
}

impl MemoryPool {
    pub(crate) fn new(cap: usize) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self { cap, used: Default::default() })
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Takes `bytes` from the pool if they fit under its cap.
    fn reserve(&self, bytes: usize) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.used.fetch_update(SeqCst, SeqCst, |u| u.checked_add(bytes).filter(|&t| t <= self.cap)).is_ok()
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Caps the total linear memory of an instance (all its memories together), and of all
/// the runtime's instances through their pool, and remembers a refusal, so the resulting
/// trap is reported as out-of-memory.
pub(crate) struct MemoryCap {
    cap: usize,
    used: usize,
    pool: std::sync::Arc<MemoryPool>,
    pub(crate) refused: Option<usize>,
    /// The refusal was the pool's: this instance was within its own cap.
    pub(crate) refused_by_pool: bool,
}

impl Drop for MemoryCap {
    fn drop(&mut self) {
        self.pool.release(self.used);
    }
}

impl MemoryCap {
    fn new(cap: usize, pool: std::sync::Arc<MemoryPool>) -> Self {
        Self { cap, used: 0, pool, refused: None, refused_by_pool: false }
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    pub(crate) fn used(&self) -> usize {
        self.used
    }

    pub(crate) fn pool_cap(&self) -> usize {
        self.pool.cap()
    }
}

/// Tables hold function references, a few per export; this many is far beyond any real plugin.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, current: usize, desired: usize, max: Option<usize>) -> WtResult<bool> {
        // wasmtime checks the memory's own maximum only after asking us, and then tells us
        // nothing of that failure: refused here, before anything is reserved, the guest sees
        // its `memory.grow` fail as the module declared it would.
        if max.is_some_and(|m| desired > m) {
            return Ok(false);
        }
        let delta = desired.saturating_sub(current);
        let total = self.used.saturating_add(delta);
        if total > self.cap {
            self.refused = Some(total);
            wasmtime::bail!("memory cap of {} bytes exceeded (wanted {total})", self.cap);
        }
        if !self.pool.reserve(delta) {
            (self.refused, self.refused_by_pool) = (Some(total), true);
            wasmtime::bail!("the instances' total memory cap of {} bytes would be exceeded", self.pool.cap());
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> WtResult<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Lets the limiter be reached from the store: `store.limiter(|s| &mut s.memory)`.
impl Sandbox {
    pub(crate) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.memory
    }
}
