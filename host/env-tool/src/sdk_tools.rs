//! The two steps an env author in C (or any language with a core-wasm compiler) needs
//! beyond the compiler, so that `vagen-host` and a C compiler are the whole toolchain:
//! bindings for the contract (wit-bindgen's C generator) and componentisation (wit-component
//! with the WASI preview 1 reactor adapter of the wasmtime release the host runs).

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use wit_bindgen_core::Files;
use wit_parser::Resolve;

/// The contract every env implements, frozen with this release.
const ENV_WIT: &str = include_str!("../../../wit/v0.1.0/env.wit");
const WORLD: &str = "environment";

#[derive(Args)]
pub struct CBindingsArgs {
    /// Folder to write the bindings into (created if missing).
    #[arg(long, default_value = "gen")]
    out_dir: PathBuf,
}

#[derive(Args)]
pub struct ComponentizeArgs {
    /// A core module (e.g. from `clang --target=wasm32-wasi -mexec-model=reactor`) that
    /// links `environment_component_type.o`.
    core: PathBuf,
    /// Where the component goes.
    #[arg(short, long)]
    out: PathBuf,
}

fn contract() -> Result<(Resolve, wit_parser::WorldId)> {
    let mut resolve = Resolve::default();
    let pkg = resolve.push_str("env.wit", ENV_WIT).context("parsing the embedded env.wit")?;
    let world = resolve.select_world(&[pkg], Some(WORLD))?;
    Ok((resolve, world))
}

pub fn c_bindings(a: CBindingsArgs) -> Result<()> {
    let (mut resolve, world) = contract()?;
    let mut files = Files::default();
    let mut generator = wit_bindgen_c::Opts::default().build();
    generator.generate(&mut resolve, world, &mut files).context("generating the C bindings")?;
    std::fs::create_dir_all(&a.out_dir).with_context(|| format!("creating {}", a.out_dir.display()))?;
    for (name, bytes) in files.iter() {
        let path = a.out_dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

pub fn componentize(a: ComponentizeArgs) -> Result<()> {
    use wasi_preview1_component_adapter_provider::{
        WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
    };
    let core = std::fs::read(&a.core).with_context(|| format!("reading {}", a.core.display()))?;
    if core.get(..4) != Some(b"\0asm") {
        bail!("{} is not a WebAssembly module", a.core.display());
    }
    let component = wit_component::ComponentEncoder::default()
        .module(&core)
        .with_context(|| {
            format!(
                "{}: no component type found; link the `environment_component_type.o` \
                 that `vagen-host c-bindings` wrote",
                a.core.display()
            )
        })?
        .validate(true)
        .adapter(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)?
        .encode()
        .with_context(|| format!("componentising {}", a.core.display()))?;
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&a.out, &component).with_context(|| format!("writing {}", a.out.display()))?;
    println!("wrote {} ({} bytes)", a.out.display(), component.len());
    Ok(())
}
