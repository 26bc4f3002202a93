//! `.wasm` component plugins: loading (with checks that name what is wrong), instances
//! that live in their own sandboxed store, and fault handling that discards and
//! re-creates an instance.

use crate::bindings::{self, Bindings, Pre, v0_1, v0_2, v0_3, with_env};
use crate::cache::sha256_hex;
use crate::checks;
use crate::runtime::{EPOCH_TICK, Runtime};
use crate::sandbox::{Determinism, Sandbox, grant};
use crate::types::Import;
use crate::{
    ActionSpace, Environment, Error, Manifest, Observation, Plugin, PluginInfo, StepResult, WIT_VERSION, guest_text,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::{Component, ResourceAny};
use wasmtime::{Store, Trap, UpdateDeadline};

const EXPORT_PREFIX: &str = "vagen:env/env@";

/// A loaded, type-checked environment component.
#[derive(Clone)]
pub struct WasmPlugin {
    shared: Arc<Shared>,
}

struct Shared {
    runtime: Runtime,
    pre: Pre,
    manifest: Manifest,
    info: PluginInfo,
}

impl WasmPlugin {
    pub(crate) fn load(runtime: Runtime, path: &Path) -> Result<Self, Error> {
        let bytes = crate::runtime::read_plugin_file(path)?;
        check_header(path, &bytes)?;
        let sha256 = sha256_hex(&bytes);
        let started = Instant::now();
        let inner = &runtime.inner;
        let (component, from_cache) = compile(&runtime, path, &bytes, &sha256)?;
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
        let mismatch = |e: wasmtime::Error| Error::NotAPlugin {
            path: path.into(),
            reason: format!("its exports do not match vagen:env@{wit_version}: {e:#}"),
        };
        let pre = match wit_version.as_str() {
            "0.1.0" => Pre::V0_1(v0_1::EnvironmentPre::new(instance_pre).map_err(mismatch)?),
            "0.2.0" => Pre::V0_2(v0_2::EnvironmentPre::new(instance_pre).map_err(mismatch)?),
            _ => Pre::V0_3(v0_3::EnvironmentPre::new(instance_pre).map_err(mismatch)?),
        };
        let info = PluginInfo {
            path: path.into(),
            sha256,
            build_inputs: build_inputs(&bytes),
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
        let actions = ActionSpace::of(&self.shared.manifest);
        let mut env =
            WasmEnv { shared: self.shared.clone(), config: config.to_string(), live: None, actions, episode_bytes: 0 };
        env.live()?;
        // A 0.1.0 component cannot say: its manifest's fields stand for the instance.
        let space = env.call("action-space", |s, b, h| match b {
            Bindings::V0_1(_) => Ok(None),
            Bindings::V0_2(b) => b.vagen_env_env().environment().call_action_space(s, h).map(Some),
            Bindings::V0_3(b) => b.vagen_env_env().environment().call_action_space(s, h).map(|a| {
                Some(v0_2::wit::ActionSpace {
                    action_names: a.action_names,
                    action_separator: a.action_separator,
                    max_actions_per_turn: a.max_actions_per_turn,
                })
            }),
        })?;
        if let Some(space) = space {
            let space = bindings::action_space(space);
            checks::action_space(&space, "action-space")?;
            env.actions = space;
        }
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

    fn limits(&self) -> &crate::Limits {
        &self.shared.runtime.inner.limits
    }

    fn create(&self, config: &str) -> Result<Box<dyn Environment>, Error> {
        Ok(Box::new(self.instantiate(config)?))
    }
}

/// The component from the code cache, or compiled (and cached); whether it was cached.
pub(crate) fn compile(runtime: &Runtime, path: &Path, bytes: &[u8], sha256: &str) -> Result<(Component, bool), Error> {
    let inner = &runtime.inner;
    if let Some(c) = inner.cache.as_ref().and_then(|c| c.get(&inner.engine, sha256)) {
        return Ok((c, true));
    }
    let c = Component::new(&inner.engine, bytes)
        .map_err(|e| Error::Compile { path: path.into(), detail: format!("{e:#}") })?;
    if let Some(cache) = &inner.cache {
        cache.put(sha256, &c);
    }
    Ok((c, false))
}

/// The payload of the component's `vagen-build-inputs` custom section, when it has one
/// that is text.
fn build_inputs(bytes: &[u8]) -> Option<String> {
    wasmparser::Parser::new(0).parse_all(bytes).find_map(|payload| match payload {
        Ok(wasmparser::Payload::CustomSection(s)) if s.name() == "vagen-build-inputs" => {
            std::str::from_utf8(s.data()).ok().map(str::to_string)
        }
        _ => None,
    })
}

/// Says what a file is when it is not a component, before wasmtime gets to see it.
pub(crate) fn check_header(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let not_wasm = |what: &str| Err(Error::NotWasm { path: path.into(), what: what.into() });
    if bytes.len() < 8 {
        return not_wasm(&format!("only {} bytes long", bytes.len()));
    }
    if &bytes[..4] != b"\0asm" {
        return match &bytes[..4] {
            b"\x7fELF" => not_wasm(&format!(
                "an ELF native binary; native plugins load only from a .{} path, never under another name",
                std::env::consts::DLL_EXTENSION
            )),
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

/// Finds the `vagen:env/env@X` export and checks that this host loads X.
fn check_exports(path: &Path, component: &Component, engine: &wasmtime::Engine) -> Result<String, Error> {
    let exports: Vec<String> = component.component_type().exports(engine).map(|(n, _)| n.to_string()).collect();
    let Some(found) = exports.iter().find_map(|n| n.strip_prefix(EXPORT_PREFIX)) else {
        if let Some(reward) = exports.iter().find(|n| n.starts_with("vagen:env/reward@")) {
            return Err(Error::NotAPlugin {
                path: path.into(),
                reason: format!(
                    "it is a reward function ({reward}), not an environment: give it to `inspect`, \
                     `check` or `fuzz` with --reward, or to training as a [[reward]]"
                ),
            });
        }
        let listed = if exports.is_empty() { "nothing".to_string() } else { exports.join(", ") };
        return Err(Error::NotAPlugin {
            path: path.into(),
            reason: format!("it exports {listed}, not {EXPORT_PREFIX}{WIT_VERSION}"),
        });
    };
    if !bindings::VERSIONS.contains(&found) {
        return Err(Error::WrongWitVersion {
            path: path.into(),
            found: found.to_string(),
            supported: bindings::VERSIONS.join(" or "),
        });
    }
    Ok(found.to_string())
}

fn read_manifest(runtime: &Runtime, pre: &Pre) -> Result<Manifest, Error> {
    let limits = &runtime.inner.limits;
    let (mut store, det) = new_store(runtime);
    arm(&mut store, limits.create_timeout(), limits.fuel_per_call());
    let manifest = match pre {
        Pre::V0_1(pre) => pre
            .instantiate(&mut store)
            .and_then(|b| b.vagen_env_env().call_get_manifest(&mut store))
            .map(v0_1::manifest),
        Pre::V0_2(pre) => pre
            .instantiate(&mut store)
            .and_then(|b| b.vagen_env_env().call_get_manifest(&mut store))
            .map(v0_2::manifest),
        Pre::V0_3(pre) => pre
            .instantiate(&mut store)
            .and_then(|b| b.vagen_env_env().call_get_manifest(&mut store))
            .map(v0_3::manifest),
    }
    .map_err(|e| classify(e, "manifest", &store, &det, limits.create_timeout(), limits.fuel_per_call()))?;
    checks::manifest(&manifest)?;
    Ok(manifest)
}

pub(crate) fn new_store(runtime: &Runtime) -> (Store<Sandbox>, Determinism) {
    let limits = &runtime.inner.limits;
    let (sandbox, det) = Sandbox::new(limits.memory_bytes(), runtime.inner.memory.clone(), limits.output_bytes);
    let mut store = Store::new(&runtime.inner.engine, sandbox);
    store.limiter(|s| s.limiter());
    (store, det)
}

/// Sets the wall-clock deadline (and fuel) for the next call into the store.
/// Time the host really spends answering a reward function's judge is not the component's:
/// it is credited back, in whole ticks and up to `judge_credit_ms`, when the deadline comes
/// (an environment has no judge, so no credit).
pub(crate) fn arm(store: &mut Store<Sandbox>, timeout: Duration, fuel: Option<u64>) {
    // The epoch may advance right after this call, so one extra tick keeps the deadline
    // from firing early; it then fires within two ticks after the budget.
    let ticks = timeout.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64 + 1;
    store.set_epoch_deadline(ticks);
    store.data_mut().judge_use =
        crate::sandbox::JudgeUse { started: Some(std::time::Instant::now()), timeout, ..Default::default() };
    store.epoch_deadline_callback(|ctx| {
        // The call may run until its own budget plus the judge time credited, counted from
        // its start: the deadline is moved to that instant, never past it.
        let judge = &ctx.data().judge_use;
        match judge.end().and_then(|end| end.checked_duration_since(std::time::Instant::now())) {
            Some(left) if !judge.granted.is_zero() && !left.is_zero() => {
                Ok(UpdateDeadline::Continue(left.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64))
            }
            _ => Err(Trap::Interrupt.into()),
        }
    });
    if let Some(fuel) = fuel {
        // Only fails when fuel is off in the engine, which `Runtime` ties to this option.
        let _ = store.set_fuel(fuel);
    }
}

/// Turns a wasmtime error into the typed error that says what happened.
pub(crate) fn classify(
    e: wasmtime::Error,
    call: &'static str,
    store: &Store<Sandbox>,
    det: &Determinism,
    timeout: Duration,
    fuel: Option<u64>,
) -> Error {
    let memory = &store.data().memory;
    if memory.refused.is_some() && memory.refused_by_pool {
        return Error::OutOfTotalMemory { call, cap_mib: (memory.pool_cap() as u64) >> 20 };
    }
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
        _ => Error::Trap { call, message: guest_text(&root_message(&e)), stderr: det.stderr.take() },
    }
}

/// What ended the call, in one line: the trap, an `exit` the guest called, or the
/// innermost cause (wasmtime's outer message is only "error while executing at wasm
/// backtrace:").
fn root_message(e: &wasmtime::Error) -> String {
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return format!("the plugin called exit({})", exit.0);
    }
    if let Some(trap) = e.downcast_ref::<Trap>() {
        return trap.to_string();
    }
    let cause = e.chain().last().map(ToString::to_string).unwrap_or_default();
    cause.lines().map(str::trim).find(|l| !l.is_empty() && !l.ends_with("backtrace:")).unwrap_or("unknown").to_string()
}

/// One instance in its own store. After a fault the store is dropped and the next call
/// builds a fresh one from the pre-instantiated component (microseconds for compiled guests).
pub struct WasmEnv {
    shared: Arc<Shared>,
    config: String,
    live: Option<Live>,
    /// Read once at creation: a re-created instance has the same config.
    actions: ActionSpace,
    /// Observation bytes of the current episode (`Limits::max_episode_mib`).
    episode_bytes: u64,
}

struct Live {
    store: Store<Sandbox>,
    det: Determinism,
    bindings: Bindings,
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
        let bindings = match &self.shared.pre {
            Pre::V0_1(pre) => pre.instantiate(&mut store).map(Bindings::V0_1),
            Pre::V0_2(pre) => pre.instantiate(&mut store).map(Bindings::V0_2),
            Pre::V0_3(pre) => pre.instantiate(&mut store).map(Bindings::V0_3),
        };
        let created = bindings.and_then(|bindings| {
            let created = with_env!(&bindings, |v, env| env
                .call_create(&mut store, &self.config)?
                .map_err(|e| v::guest_error(e, "create")));
            Ok((bindings, created))
        });
        match created {
            Ok((bindings, Ok(handle))) => Ok(Live { store, det, bindings, handle }),
            Ok((_, Err(e))) => Err(e),
            Err(e) => Err(classify(e, "create", &store, &det, timeout, fuel)),
        }
    }

    /// Runs one call under the sandbox limits; a fault discards the instance.
    fn call<R>(
        &mut self,
        name: &'static str,
        f: impl FnOnce(&mut Store<Sandbox>, &Bindings, ResourceAny) -> wasmtime::Result<R>,
    ) -> Result<R, Error> {
        let limits = &self.shared.runtime.inner.limits;
        let (timeout, fuel) = (limits.call_timeout(), limits.fuel_per_call());
        let live = self.live()?;
        arm(&mut live.store, timeout, fuel);
        match f(&mut live.store, &live.bindings, live.handle) {
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

    fn action_space(&self) -> &ActionSpace {
        &self.actions
    }

    fn system_prompt(&mut self) -> Result<String, Error> {
        let text = self.call("system-prompt", |s, b, h| with_env!(b, |_v, env| env.call_system_prompt(s, h)))?;
        let r = checks::text(&text, &self.shared.runtime.inner.limits, "system-prompt").map(|()| text);
        self.discard_on_fault(r)
    }

    fn reset(&mut self, seed: u64) -> Result<Observation, Error> {
        self.live()?.det.reseed(seed);
        let r = self.call("reset", |s, b, h| {
            Ok(with_env!(b, |v, env| env
                .call_reset(s, h, seed)?
                .map(v::observation)
                .map_err(|e| v::guest_error(e, "reset"))))
        })?;
        let limits = &self.shared.runtime.inner.limits;
        let r = r.and_then(|o| checks::reset(&o, limits, &mut self.episode_bytes).map(|()| o));
        self.discard_on_fault(r)
    }

    fn step(&mut self, answer: &str) -> Result<StepResult, Error> {
        if self.live.is_none() {
            return Err(Error::InvalidState("the instance was re-created after a fault; call reset".into()));
        }
        let answer = self.shared.runtime.inner.limits.cut_answer(answer);
        let r = self.call("step", |s, b, h| {
            Ok(with_env!(b, |v, env| env
                .call_step(s, h, answer)?
                .map(v::step_result)
                .map_err(|e| v::guest_error(e, "step"))))
        })?;
        let limits = &self.shared.runtime.inner.limits;
        let r = r.and_then(|s| checks::step(&s, limits, &self.actions, &mut self.episode_bytes).map(|()| s));
        self.discard_on_fault(r)
    }

    fn describe_state(&mut self) -> Result<String, Error> {
        let text = self.call("describe-state", |s, b, h| with_env!(b, |_v, env| env.call_describe_state(s, h)))?;
        let r = checks::text(&text, &self.shared.runtime.inner.limits, "describe-state").map(|()| text);
        self.discard_on_fault(r)
    }

    fn oracle(&mut self) -> Result<Option<String>, Error> {
        let answer = self.call("oracle", |s, b, h| with_env!(b, |_v, env| env.call_oracle(s, h)))?;
        let r =
            checks::text(answer.as_deref().unwrap_or(""), &self.shared.runtime.inner.limits, "oracle").map(|()| answer);
        self.discard_on_fault(r)
    }

    fn memory_bytes(&self) -> Option<u64> {
        self.live.as_ref().map(|l| l.store.data().memory.used() as u64)
    }
}
