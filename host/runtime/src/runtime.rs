//! The shared engine: one per process, with its epoch ticker, linker and code cache.

use crate::cache::{CodeCache, default_cache_dir};
use crate::sandbox::{MemoryPool, Sandbox};
use crate::{Error, Limits, NativePlugin, Plugin, WasmPlugin};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::Linker;
use wasmtime::{Config, Engine};

/// How often the engine's epoch advances; deadlines are whole ticks, so a call overruns
/// its budget by at most two ticks (see `arm`).
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Loads plugins. Cheap to clone; all clones share the engine and cache.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<Sandbox>,
    pub(crate) cache: Option<CodeCache>,
    pub(crate) limits: Limits,
    /// What all instances' linear memories hold together (`Limits::total_memory_mib`).
    pub(crate) memory: Arc<MemoryPool>,
}

impl Runtime {
    /// A runtime with the default on-disk cache (see [`Runtime::with_cache_dir`]).
    pub fn new(limits: Limits) -> Result<Self, Error> {
        Self::with_cache_dir(limits, default_cache_dir())
    }

    /// `cache_dir: None` compiles every plugin afresh.
    pub fn with_cache_dir(limits: Limits, cache_dir: Option<PathBuf>) -> Result<Self, Error> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.consume_fuel(limits.fuel_millions_per_call.is_some());
        let engine = Engine::new(&config).map_err(|e| internal(format!("creating the engine: {e}")))?;
        let mut linker = Linker::new(&engine);
        // Rust std guests import wasi:cli and wasi:io even when unused; the context behind
        // these functions grants nothing (see sandbox.rs).
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .and_then(|()| crate::sandbox::add_virtual_timers(&mut linker))
            .and_then(|()| crate::reward::add_judge(&mut linker))
            .map_err(|e| internal(format!("linking WASI: {e}")))?;
        spawn_ticker(&engine);
        let cache = cache_dir.map(|dir| CodeCache::new(dir, &engine));
        let memory = MemoryPool::new(limits.total_memory_bytes());
        Ok(Self { inner: Arc::new(Inner { engine, linker, cache, limits, memory }) })
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Loads a plugin by its name: `openenv+http://HOST:PORT` as an [`OpenEnvPlugin`](crate::OpenEnvPlugin)
    /// (a server, see [`crate::openenv`]), a path ending in the platform's native extension
    /// (`.so`) as a [`NativePlugin`] (trusted code, run unsandboxed), anything else as a
    /// sandboxed `.wasm` component. The bytes never decide: native code behind another
    /// name is refused, not run. For a path the user gave; a path read from a file that
    /// may come from someone else goes through [`Runtime::load_named_in`].
    pub fn load(&self, path: impl AsRef<Path>) -> Result<Arc<dyn Plugin>, Error> {
        self.load_with(path, crate::OpenEnvOptions::default())
    }

    /// [`Runtime::load`], where an `openenv+http://…` server takes `openenv` as its options
    /// (a config's `[env.openenv]` table; the URL's query overrides them).
    pub fn load_with(&self, path: impl AsRef<Path>, openenv: crate::OpenEnvOptions) -> Result<Arc<dyn Plugin>, Error> {
        let path = path.as_ref();
        if vagen_registry::is_oci(path) {
            Ok(Arc::new(self.load_wasm(path)?))
        } else if crate::openenv::is_openenv_url(path) {
            let spec = path.to_str().expect("an openenv URL is UTF-8");
            Ok(Arc::new(crate::OpenEnvPlugin::connect(spec, openenv, self.inner.limits.clone())?))
        } else if is_native_name(path) {
            Ok(Arc::new(NativePlugin::load(path, self.inner.limits.clone())?))
        } else {
            Ok(Arc::new(self.load_wasm(path)?))
        }
    }

    /// Loads a plugin whose path was read from `file` (a reproducer, a training config):
    /// as [`Runtime::load`], except that a native plugin is refused unless the user opted
    /// in (`allow_native`, the CLI's `--allow-native`): sharing such a file must not be a
    /// way to run native code on someone's machine.
    pub fn load_named_in(
        &self,
        path: impl AsRef<Path>,
        file: &Path,
        allow_native: bool,
    ) -> Result<Arc<dyn Plugin>, Error> {
        self.load_named_in_with(path, file, allow_native, crate::OpenEnvOptions::default())
    }

    /// [`Runtime::load_named_in`] with options for an OpenEnv server (see [`Runtime::load_with`]).
    pub fn load_named_in_with(
        &self,
        path: impl AsRef<Path>,
        file: &Path,
        allow_native: bool,
        openenv: crate::OpenEnvOptions,
    ) -> Result<Arc<dyn Plugin>, Error> {
        let path = path.as_ref();
        if is_native_name(path) && !allow_native {
            return Err(Error::NativeNotAllowed { path: path.into(), named_in: file.into() });
        }
        self.load_with(path, openenv)
    }

    /// Loads a `.wasm` component that implements the `vagen:env` environment world: a file,
    /// or an `oci://` reference (see [`locate`]).
    pub fn load_wasm(&self, path: impl AsRef<Path>) -> Result<WasmPlugin, Error> {
        WasmPlugin::load(self.clone(), &locate(path.as_ref())?)
    }
}

/// The file a component name stands for: an `oci://REGISTRY/REPO:TAG[@sha256:…]` reference
/// fetched into the user's component cache (verified against its digest, its signature
/// checked as the user's trust settings ask, [`vagen_registry::trust`]); a path as it is.
pub fn locate(name: &Path) -> Result<PathBuf, Error> {
    if !vagen_registry::is_oci(name) {
        return Ok(name.to_path_buf());
    }
    let registry = |e: vagen_registry::Error| Error::Registry(e.to_string());
    let text = name.to_str().expect("an oci:// reference is UTF-8");
    let reference = vagen_registry::OciRef::parse(text).map_err(registry)?;
    let trust = vagen_registry::trust().map_err(registry)?;
    let fetched =
        vagen_registry::fetch(&reference, &vagen_registry::Credentials::default(), &trust).map_err(registry)?;
    tracing::info!("{} is {} ({})", text, fetched.path.display(), fetched.reference);
    Ok(fetched.path)
}

/// Whether `path` names a native library (`.so` on Linux).
pub fn is_native_name(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
}

/// The most bytes a plugin file may have; a Python env with its interpreter is ~40 MB.
pub const MAX_PLUGIN_BYTES: u64 = 1 << 30;

/// A plugin file's bytes: a regular file (not `/dev/zero` or a pipe) of at most
/// [`MAX_PLUGIN_BYTES`], read with that cap whatever its metadata says.
pub(crate) fn read_plugin_file(path: &Path) -> Result<Vec<u8>, Error> {
    use vagen_files::ReadError;
    vagen_files::read_regular(path, vagen_files::Links::Follow, MAX_PLUGIN_BYTES).map_err(|e| match e {
        ReadError::Io(error) => Error::Io { path: path.into(), error },
        other => Error::NotWasm { path: path.into(), what: other.to_string() },
    })
}

fn internal(message: String) -> Error {
    Error::Failed { call: "runtime", message }
}

/// Advances the epoch until the engine is dropped.
fn spawn_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("vagen-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch thread");
}
