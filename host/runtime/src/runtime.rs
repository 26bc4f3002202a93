//! The shared engine: one per process, with its epoch ticker, linker and code cache.

use crate::cache::{CodeCache, default_cache_dir};
use crate::sandbox::Sandbox;
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
            .map_err(|e| internal(format!("linking WASI: {e}")))?;
        spawn_ticker(&engine);
        let cache = cache_dir.map(|dir| CodeCache::new(dir, &engine));
        Ok(Self { inner: Arc::new(Inner { engine, linker, cache, limits }) })
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Loads a plugin: a native shared library (ELF) as a [`NativePlugin`], anything else
    /// as a `.wasm` component implementing the `vagen:env` environment world.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<Arc<dyn Plugin>, Error> {
        let path = path.as_ref();
        if is_elf(path)? {
            Ok(Arc::new(NativePlugin::load(path, self.inner.limits.clone())?))
        } else {
            Ok(Arc::new(self.load_wasm(path)?))
        }
    }

    /// Loads a `.wasm` component that implements the `vagen:env` environment world.
    pub fn load_wasm(&self, path: impl AsRef<Path>) -> Result<WasmPlugin, Error> {
        WasmPlugin::load(self.clone(), path.as_ref())
    }
}

fn is_elf(path: &Path) -> Result<bool, Error> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|source| Error::Io { path: path.into(), source })?;
    Ok(file.read_exact(&mut magic).is_ok() && &magic == b"\x7fELF")
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
