//! Native plugins: a `.so` built from the same SDK crate, loaded with libloading behind the
//! same `Environment` trait. Native code is trusted: it runs in the host process with no
//! sandbox, deadline or memory cap. Panics are caught inside the plugin and reported as
//! traps; a crash (segfault, abort) takes the process down.

use crate::cache::sha256_hex;
use crate::checks;
use crate::{
    ActionSpace, Environment, Error, Limits, Manifest, Metric, Observation, Plugin, PluginInfo, StepResult, guest_text,
};
use libloading::Library;
use std::ffi::c_void;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use vagen_abi::{self as abi, Buffer, NATIVE_ABI_VERSION, OLDEST_NATIVE_ABI_VERSION, Op, status, symbols};

#[derive(Clone)]
pub struct NativePlugin {
    shared: Arc<Shared>,
}

struct Shared {
    fns: Fns,
    /// The plugin's ABI version: from 2 on, instances say their action space.
    abi_version: u32,
    manifest: Manifest,
    info: PluginInfo,
    limits: Limits,
    // Last: the function pointers above point into it.
    _lib: Library,
}

#[derive(Clone, Copy)]
struct Fns {
    create: abi::CreateFn,
    call: abi::CallFn,
    destroy: abi::DestroyFn,
    free: abi::FreeFn,
}

impl NativePlugin {
    pub(crate) fn load(path: &Path, limits: Limits) -> Result<Self, Error> {
        let bytes = crate::runtime::read_plugin_file(path)?;
        let started = Instant::now();
        let not_plugin = |reason: String| Error::NotAPlugin { path: path.into(), reason };
        // The path as given: a bare `x.so` would otherwise be looked up on the loader's
        // search path (LD_LIBRARY_PATH, system folders) rather than in this folder.
        let absolute = std::path::absolute(path).map_err(|error| Error::Io { path: path.into(), error })?;
        // SAFETY: loading runs the library's initialisers: native plugins are trusted code.
        // libloading's message is "dlopen failed"; the loader's reason is its source.
        let lib = unsafe { Library::new(&absolute) }.map_err(|e| {
            let reason = std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
            not_plugin(format!("cannot load it: {e}{reason}"))
        })?;
        let symbol = |name: &[u8]| {
            let shown = String::from_utf8_lossy(&name[..name.len() - 1]).into_owned();
            move |e: libloading::Error| {
                not_plugin(format!("it has no `{shown}` ({e}); build it with vagen-sdk's export_env!"))
            }
        };
        // SAFETY: each symbol is declared with the type vagen-abi gives it. The version comes
        // first, so a library built for another ABI is named as such, not as "missing X".
        let version =
            unsafe { *lib.get::<abi::AbiVersionFn>(symbols::ABI_VERSION).map_err(symbol(symbols::ABI_VERSION))? };
        // SAFETY: a plain function of no arguments.
        let found = unsafe { version() };
        if !(OLDEST_NATIVE_ABI_VERSION..=NATIVE_ABI_VERSION).contains(&found) {
            let supported = format!("{OLDEST_NATIVE_ABI_VERSION} to {NATIVE_ABI_VERSION}");
            return Err(Error::WrongAbiVersion { path: path.into(), found, supported });
        }
        let (manifest_fn, fns) = unsafe {
            let manifest = *lib.get::<abi::ManifestFn>(symbols::MANIFEST).map_err(symbol(symbols::MANIFEST))?;
            let fns = Fns {
                create: *lib.get(symbols::CREATE).map_err(symbol(symbols::CREATE))?,
                call: *lib.get(symbols::CALL).map_err(symbol(symbols::CALL))?,
                destroy: *lib.get(symbols::DESTROY).map_err(symbol(symbols::DESTROY))?,
                free: *lib.get(symbols::FREE).map_err(symbol(symbols::FREE))?,
            };
            (manifest, fns)
        };
        let mut out = Buffer::empty();
        // SAFETY: `out` is a valid Buffer to write.
        let code = unsafe { manifest_fn(&mut out) };
        let manifest: Manifest = take(&fns, out, code, "manifest")?;
        checks::manifest(&manifest)?;
        let info = PluginInfo {
            path: path.into(),
            sha256: sha256_hex(&bytes),
            build_inputs: None,
            size_bytes: bytes.len() as u64,
            kind: "native",
            wit_version: format!("native-abi-{found}"),
            imports: Vec::new(),
            load_ms: started.elapsed().as_secs_f64() * 1e3,
            from_cache: false,
        };
        Ok(Self { shared: Arc::new(Shared { fns, abi_version: found, manifest, info, limits, _lib: lib }) })
    }

    pub fn instantiate(&self, config: &str) -> Result<NativeEnv, Error> {
        let handle = create(&self.shared, config)?;
        let actions = ActionSpace::of(&self.shared.manifest);
        let mut env = NativeEnv {
            shared: self.shared.clone(),
            config: config.to_string(),
            handle: Some(handle),
            actions,
            episode_bytes: 0,
        };
        if self.shared.abi_version >= 2 {
            let space: ActionSpace = env.call(Op::ActionSpace, &[], "action-space")?;
            checks::action_space(&space, "action-space")?;
            env.actions = space;
        }
        Ok(env)
    }
}

impl Plugin for NativePlugin {
    fn manifest(&self) -> &Manifest {
        &self.shared.manifest
    }

    fn info(&self) -> &PluginInfo {
        &self.shared.info
    }

    fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    fn create(&self, config: &str) -> Result<Box<dyn Environment>, Error> {
        Ok(Box::new(self.instantiate(config)?))
    }
}

fn create(shared: &Shared, config: &str) -> Result<Handle, Error> {
    let mut env: *mut c_void = std::ptr::null_mut();
    let mut out = Buffer::empty();
    // SAFETY: pointers to live locals and to `config`'s bytes.
    let code = unsafe { (shared.fns.create)(config.as_ptr(), config.len(), &mut env, &mut out) };
    take::<()>(&shared.fns, out, code, "create")?;
    if env.is_null() {
        return Err(Error::Malformed { call: "create", detail: "no instance returned".into() });
    }
    Ok(Handle(env))
}

/// Decodes a result buffer by status, then hands it back to the plugin to free.
fn take<T: serde::de::DeserializeOwned>(fns: &Fns, out: Buffer, code: i32, call: &'static str) -> Result<T, Error> {
    // SAFETY: the plugin wrote `out` in this call and keeps it alive until freed.
    let bytes = unsafe { out.as_slice() }.to_vec();
    // SAFETY: returned exactly once to the allocator that made it.
    unsafe { (fns.free)(out) };
    match code {
        status::OK => abi::decode(&bytes).map_err(|detail| Error::Malformed { call, detail }),
        status::ENV_ERROR => {
            let e: abi::EnvError = abi::decode(&bytes).map_err(|detail| Error::Malformed { call, detail })?;
            Err(match e {
                abi::EnvError::BadConfig(m) => Error::BadConfig(guest_text(&m)),
                abi::EnvError::InvalidState(m) => Error::InvalidState(guest_text(&m)),
                abi::EnvError::Failed(m) => Error::Failed { call, message: guest_text(&m) },
            })
        }
        status::PANIC => {
            Err(Error::Trap { call, message: guest_text(&String::from_utf8_lossy(&bytes)), stderr: String::new() })
        }
        other => Err(Error::Malformed { call, detail: format!("unknown status {other}") }),
    }
}

/// An instance pointer owned by the plugin.
struct Handle(*mut c_void);

/// One native instance. After a panic it is destroyed and re-created on the next call,
/// as a faulted `.wasm` instance is.
pub struct NativeEnv {
    shared: Arc<Shared>,
    config: String,
    handle: Option<Handle>,
    /// Read once at creation: a re-created instance has the same config.
    actions: ActionSpace,
    /// Observation bytes of the current episode (`Limits::max_episode_mib`).
    episode_bytes: u64,
}

// SAFETY: an instance is only ever used by one thread at a time (`&mut self`), and the SDK's
// instances own their state; moving one between threads is what the pool does.
unsafe impl Send for NativeEnv {}

impl Drop for NativeEnv {
    fn drop(&mut self) {
        if let Some(Handle(p)) = self.handle.take() {
            // SAFETY: created by this plugin, dropped once.
            unsafe { (self.shared.fns.destroy)(p) };
        }
    }
}

impl NativeEnv {
    fn call<T: serde::de::DeserializeOwned>(&mut self, op: Op, arg: &[u8], name: &'static str) -> Result<T, Error> {
        if self.handle.is_none() {
            self.handle = Some(create(&self.shared, &self.config)?);
        }
        let env = self.handle.as_ref().expect("just created").0;
        let mut out = Buffer::empty();
        // SAFETY: a live instance of this plugin, a valid argument slice and out buffer.
        let code = unsafe { (self.shared.fns.call)(env, op as u32, arg.as_ptr(), arg.len(), &mut out) };
        let r = take(&self.shared.fns, out, code, name);
        if matches!(r, Err(ref e) if e.is_fault()) {
            self.discard();
        }
        r
    }

    fn discard(&mut self) {
        if let Some(Handle(p)) = self.handle.take() {
            // SAFETY: as in Drop.
            unsafe { (self.shared.fns.destroy)(p) };
        }
    }

    fn checked<T>(&mut self, r: Result<T, Error>) -> Result<T, Error> {
        if matches!(r, Err(ref e) if e.is_fault()) {
            self.discard();
        }
        r
    }
}

impl Environment for NativeEnv {
    fn manifest(&self) -> &Manifest {
        &self.shared.manifest
    }

    fn action_space(&self) -> &ActionSpace {
        &self.actions
    }

    fn system_prompt(&mut self) -> Result<String, Error> {
        let t: String = self.call(Op::SystemPrompt, &[], "system-prompt")?;
        let r = checks::text(&t, &self.shared.limits, "system-prompt").map(|()| t);
        self.checked(r)
    }

    fn reset(&mut self, seed: u64) -> Result<Observation, Error> {
        let o: Observation = self.call(Op::Reset, &seed.to_le_bytes(), "reset")?;
        let r = checks::reset(&o, &self.shared.limits, &mut self.episode_bytes).map(|()| o);
        self.checked(r)
    }

    fn step(&mut self, answer: &str) -> Result<StepResult, Error> {
        if self.handle.is_none() {
            return Err(Error::InvalidState("the instance was re-created after a fault; call reset".into()));
        }
        let answer = self.shared.limits.cut_answer(answer);
        let s: abi::Step = self.call(Op::Step, answer.as_bytes(), "step")?;
        let s = StepResult {
            observation: s.observation,
            reward: s.reward,
            done: s.done,
            success: s.success,
            valid_actions: s.valid_actions,
            effective_actions: s.effective_actions,
            metrics: s.metrics.into_iter().map(|(name, value)| Metric { name, value }).collect(),
        };
        let r = checks::step(&s, &self.shared.limits, &self.actions, &mut self.episode_bytes).map(|()| s);
        self.checked(r)
    }

    fn describe_state(&mut self) -> Result<String, Error> {
        let t: String = self.call(Op::DescribeState, &[], "describe-state")?;
        let r = checks::text(&t, &self.shared.limits, "describe-state").map(|()| t);
        self.checked(r)
    }

    fn oracle(&mut self) -> Result<Option<String>, Error> {
        let a: Option<String> = self.call(Op::Oracle, &[], "oracle")?;
        let r = checks::text(a.as_deref().unwrap_or(""), &self.shared.limits, "oracle").map(|()| a);
        self.checked(r)
    }
}
