//! `.wasm` component plugins: loading (with checks that name what is wrong), instances
//! that live in their own sandboxed store, and fault handling that discards and
//! re-creates an instance.

use crate::bindings::{self, EnvironmentPre, wit_env};
use crate::cache::sha256_hex;
use crate::checks;
use crate::runtime::{EPOCH_TICK, Runtime};
use crate::sandbox::{Determinism, Sandbox, grant};
use crate::types::Import;
use crate::{Environment, Error, Manifest, Observation, Plugin, PluginInfo, StepResult, WIT_VERSION};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::{Component, ResourceAny};
use wasmtime::{Store, Trap};

const EXPORT_PREFIX: &str = "vagen:env/env@";

/// A loaded, type-checked environment component.
#[derive(Clone)]
pub struct WasmPlugin {
    shared: Arc<Shared>,
}

struct Shared {
    runtime: Runtime,
    pre: EnvironmentPre<Sandbox>,
    manifest: Manifest,
    info: PluginInfo,
}

impl WasmPlugin {
    pub(crate) fn load(runtime: Runtime, path: &Path) -> Result<Self, Error> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.into(), source })?;
        check_header(path, &bytes)?;
        let sha256 = sha256_hex(&bytes);
        let started = Instant::now();
        let inner = &runtime.inner;
        let cached = inner.cache.as_ref().and_then(|c| c.get(&inner.engine, &sha256));
        let from_cache = cached.is_some();
        let component = match cached {
            Some(c) => c,
            None => {
                let c = Component::new(&inner.engine, &bytes)
                    .map_err(|e| Error::Compile { path: path.into(), detail: format!("{e:#}") })?;
                if let Some(cache) = &inner.cache {
                    cache.put(&sha256, &c);
                }
                c
            }
        };
        let load_ms = started.elapsed().as_secs_f64() * 1e3;
        let wit_version = check_exports(path, &component, &inner.engine)?;
        let imports = component
            .component_type()
            .imports(&inner.engine)
            .map(|(name, _)| {
                let (access, how) = grant(name);
                Import { name: name.to_string(), access, how }
            })
            .collect();
        let instance_pre = inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| Error::UnsupportedImport { path: path.into(), detail: format!("{e:#}") })?;
        let pre = EnvironmentPre::new(instance_pre).map_err(|e| Error::NotAPlugin {
            path: path.into(),
            reason: format!("its exports do not match vagen:env@{WIT_VERSION}: {e:#}"),
        })?;
        let info = PluginInfo {
            path: path.into(),
            sha256,
            size_bytes: bytes.len() as u64,
            kind: "wasm",
            wit_version,
            imports,
            load_ms,
            from_cache,
        };
        let manifest = read_manifest(&runtime, &pre)?;
        Ok(Self { shared: Arc::new(Shared { runtime, pre, manifest, info }) })
    }

    /// A new instance with its own sandbox; `config` is JSON (`""` for the defaults).
    pub fn instantiate(&self, config: &str) -> Result<WasmEnv, Error> {
        let mut env = WasmEnv { shared: self.shared.clone(), config: config.to_string(), live: None };
        env.live()?;
        Ok(env)
    }
}

impl Plugin for WasmPlugin {
    fn manifest(&self) -> &Manifest {
        &self.shared.manifest
    }

    fn info(&self) -> &PluginInfo {
        &self.shared.info
    }

    fn create(&self, config: &str) -> Result<Box<dyn Environment>, Error> {
        Ok(Box::new(self.instantiate(config)?))
    }
}

/// Says what a file is when it is not a component, before wasmtime gets to see it.
fn check_header(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let not_wasm = |what: &str| Err(Error::NotWasm { path: path.into(), what: what.into() });
    if bytes.len() < 8 {
        return not_wasm(&format!("only {} bytes long", bytes.len()));
    }
    if &bytes[..4] != b"\0asm" {
        return match &bytes[..4] {
            b"\x7fELF" => not_wasm("an ELF native binary"),
            b"PK\x03\x04" => not_wasm("a zip archive"),
            _ if bytes[..4].iter().all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace()) => {
                not_wasm(&format!("text starting with {:?}", String::from_utf8_lossy(&bytes[..bytes.len().min(16)])))
            }
            other => not_wasm(&format!("it starts with bytes {other:02x?}, not \\0asm")),
        };
    }
    // Bytes 4..8: version and layer; layer 1 is a component, layer 0 a core module.
    if bytes[6..8] == [0, 0] {
        return Err(Error::NotAPlugin {
            path: path.into(),
            reason: "it is a core WebAssembly module, not a component (build for wasm32-wasip2, \
                     or wrap the module with `wasm-tools component new`)"
                .into(),
        });
    }
    Ok(())
}

/// Finds the `vagen:env/env@X` export and checks X.
fn check_exports(path: &Path, component: &Component, engine: &wasmtime::Engine) -> Result<String, Error> {
    let exports: Vec<String> = component.component_type().exports(engine).map(|(n, _)| n.to_string()).collect();
    let Some(found) = exports.iter().find_map(|n| n.strip_prefix(EXPORT_PREFIX)) else {
        let listed = if exports.is_empty() { "nothing".to_string() } else { exports.join(", ") };
        return Err(Error::NotAPlugin {
            path: path.into(),
            reason: format!("it exports {listed}, not {EXPORT_PREFIX}{WIT_VERSION}"),
        });
    };
    if found != WIT_VERSION {
        return Err(Error::WrongWitVersion {
            path: path.into(),
            found: found.to_string(),
            supported: WIT_VERSION.to_string(),
        });
    }
    Ok(found.to_string())
}

fn read_manifest(runtime: &Runtime, pre: &EnvironmentPre<Sandbox>) -> Result<Manifest, Error> {
    let limits = &runtime.inner.limits;
    let (mut store, det) = new_store(runtime);
    arm(&mut store, limits.create_timeout(), limits.fuel_per_call());
    let raw = pre
        .instantiate(&mut store)
        .and_then(|b| b.vagen_env_env().call_get_manifest(&mut store))
        .map_err(|e| classify(e, "manifest", &store, &det, limits.create_timeout(), limits.fuel_per_call()))?;
    let manifest = bindings::manifest(raw);
    checks::manifest(&manifest)?;
    Ok(manifest)
}

fn new_store(runtime: &Runtime) -> (Store<Sandbox>, Determinism) {
    let limits = &runtime.inner.limits;
    let (sandbox, det) = Sandbox::new(limits.memory_bytes(), limits.output_bytes);
    let mut store = Store::new(&runtime.inner.engine, sandbox);
    store.limiter(|s| s.limiter());
    (store, det)
}

/// Sets the wall-clock deadline (and fuel) for the next call into the store.
fn arm(store: &mut Store<Sandbox>, timeout: Duration, fuel: Option<u64>) {
    // The epoch may advance right after this call, so one extra tick keeps the deadline
    // from firing early; it then fires within two ticks after the budget.
    let ticks = timeout.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64 + 1;
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();
    if let Some(fuel) = fuel {
        // Only fails when fuel is off in the engine, which `Runtime` ties to this option.
        let _ = store.set_fuel(fuel);
    }
}

/// Turns a wasmtime error into the typed error that says what happened.
fn classify(
    e: wasmtime::Error,
    call: &'static str,
    store: &Store<Sandbox>,
    det: &Determinism,
    timeout: Duration,
    fuel: Option<u64>,
) -> Error {
    let memory = &store.data().memory;
    if let Some(requested) = memory.refused {
        return Error::OutOfMemory {
            call,
            requested_mib: (requested as u64).div_ceil(1 << 20),
            cap_mib: (memory.cap() as u64) >> 20,
        };
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Error::Timeout { call, limit: timeout },
        Some(Trap::OutOfFuel) => Error::OutOfFuel { call, fuel: fuel.unwrap_or(0) },
        _ => Error::Trap { call, message: root_message(&e), stderr: det.stderr.take() },
    }
}

fn root_message(e: &wasmtime::Error) -> String {
    let mut msg = e.to_string();
    if let Some(trap) = e.downcast_ref::<Trap>() {
        msg = trap.to_string();
    }
    msg.lines().next().unwrap_or("").to_string()
}

/// One instance in its own store. After a fault the store is dropped and the next call
/// builds a fresh one from the pre-instantiated component (microseconds for compiled guests).
pub struct WasmEnv {
    shared: Arc<Shared>,
    config: String,
    live: Option<Live>,
}

struct Live {
    store: Store<Sandbox>,
    det: Determinism,
    bindings: bindings::Environment,
    handle: ResourceAny,
}

impl WasmEnv {
    pub fn plugin_path(&self) -> &PathBuf {
        &self.shared.info.path
    }

    fn live(&mut self) -> Result<&mut Live, Error> {
        if self.live.is_none() {
            self.live = Some(self.create_live()?);
        }
        Ok(self.live.as_mut().expect("just created"))
    }

    fn create_live(&self) -> Result<Live, Error> {
        let limits = &self.shared.runtime.inner.limits;
        let (timeout, fuel) = (limits.create_timeout(), limits.fuel_per_call());
        let (mut store, det) = new_store(&self.shared.runtime);
        arm(&mut store, timeout, fuel);
        let created = self.shared.pre.instantiate(&mut store).and_then(|bindings| {
            let created = bindings.vagen_env_env().environment().call_create(&mut store, &self.config)?;
            Ok((bindings, created))
        });
        match created {
            Ok((bindings, Ok(handle))) => Ok(Live { store, det, bindings, handle }),
            Ok((_, Err(e))) => Err(bindings::guest_error(e, "create")),
            Err(e) => Err(classify(e, "create", &store, &det, timeout, fuel)),
        }
    }

    /// Runs one call under the sandbox limits; a fault discards the instance.
    fn call<R>(
        &mut self,
        name: &'static str,
        f: impl FnOnce(&mut Store<Sandbox>, &wit_env::GuestEnvironment, ResourceAny) -> wasmtime::Result<R>,
    ) -> Result<R, Error> {
        let limits = &self.shared.runtime.inner.limits;
        let (timeout, fuel) = (limits.call_timeout(), limits.fuel_per_call());
        let live = self.live()?;
        arm(&mut live.store, timeout, fuel);
        let iface = live.bindings.vagen_env_env().environment();
        match f(&mut live.store, &iface, live.handle) {
            Ok(r) => Ok(r),
            Err(e) => {
                let err = classify(e, name, &live.store, &live.det, timeout, fuel);
                tracing::warn!(plugin = %self.shared.info.path.display(), error = %err, "instance discarded");
                self.live = None;
                Err(err)
            }
        }
    }

    /// A malformed result is the instance's fault too: drop it, like a trap.
    fn discard_on_fault<T>(&mut self, r: Result<T, Error>) -> Result<T, Error> {
        if matches!(r, Err(ref e) if e.is_fault()) {
            self.live = None;
        }
        r
    }
}

impl Environment for WasmEnv {
    fn manifest(&self) -> &Manifest {
        &self.shared.manifest
    }

    fn system_prompt(&mut self) -> Result<String, Error> {
        let text = self.call("system-prompt", |s, e, h| e.call_system_prompt(s, h))?;
        let r = checks::text(&text, &self.shared.runtime.inner.limits, "system-prompt").map(|()| text);
        self.discard_on_fault(r)
    }

    fn reset(&mut self, seed: u64) -> Result<Observation, Error> {
        self.live()?.det.reseed(seed);
        let r = self.call("reset", |s, e, h| e.call_reset(s, h, seed))?;
        let limits = &self.shared.runtime.inner.limits;
        let r = r.map_err(|e| bindings::guest_error(e, "reset")).and_then(|o| {
            let o = bindings::observation(o);
            checks::observation(&o, limits, "reset").map(|()| o)
        });
        self.discard_on_fault(r)
    }

    fn step(&mut self, answer: &str) -> Result<StepResult, Error> {
        if self.live.is_none() {
            return Err(Error::InvalidState("the instance was re-created after a fault; call reset".into()));
        }
        let r = self.call("step", |s, e, h| e.call_step(s, h, answer))?;
        let limits = &self.shared.runtime.inner.limits;
        let r = r.map_err(|e| bindings::guest_error(e, "step")).and_then(|s| {
            let s = bindings::step_result(s);
            checks::step(&s, limits).map(|()| s)
        });
        self.discard_on_fault(r)
    }

    fn describe_state(&mut self) -> Result<String, Error> {
        let text = self.call("describe-state", |s, e, h| e.call_describe_state(s, h))?;
        let r = checks::text(&text, &self.shared.runtime.inner.limits, "describe-state").map(|()| text);
        self.discard_on_fault(r)
    }

    fn oracle(&mut self) -> Result<Option<String>, Error> {
        let answer = self.call("oracle", |s, e, h| e.call_oracle(s, h))?;
        let r =
            checks::text(answer.as_deref().unwrap_or(""), &self.shared.runtime.inner.limits, "oracle").map(|()| answer);
        self.discard_on_fault(r)
    }

    fn memory_bytes(&self) -> Option<u64> {
        self.live.as_ref().map(|l| l.store.data().memory.used() as u64)
    }
}
