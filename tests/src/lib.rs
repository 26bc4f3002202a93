//! Helpers for the integration tests: where the built plugins are, and a runtime with a
//! private cache folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use vagen_runtime::{Environment, Limits, Plugin, Runtime};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the workspace").to_path_buf()
}

/// `NAME.wasm` (or `NAME.so`, when `name` ends in `.so`) from `target/plugins`,
/// `target/examples` or `target/test-plugins`.
pub fn plugin_path(name: &str) -> PathBuf {
    let file = if name.ends_with(".so") { name.to_string() } else { format!("{name}.wasm") };
    for dir in ["target/plugins", "target/examples", "target/test-plugins", "target/rewards"] {
        let p = root().join(dir).join(&file);
        if p.is_file() {
            return p;
        }
    }
    panic!("{file} is not built: run `cargo xtask plugins` (or `cargo xtask test`) first");
}

/// Every reference plugin in `target/plugins`, as (name, wasm path, native path).
pub fn reference_plugins() -> Vec<(String, PathBuf, PathBuf)> {
    let dir = root().join("plugins");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("plugins/ exists")
        .flatten()
        // Environments built both ways: a reward function (`reward = true`) is another kind of
        // component, and a `native-only` env has no `.wasm` (plugins/primitive-skill has its
        // own tests).
        .filter(|e| {
            std::fs::read_to_string(e.path().join("Cargo.toml"))
                .is_ok_and(|t| !t.contains("reward = true") && !t.contains("native-only = true"))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().map(|n| (n.clone(), plugin_path(&n), plugin_path(&format!("{n}.so")))).collect()
}

/// A runtime whose compiled-code cache lives in a folder that dies with the test.
pub fn runtime(limits: Limits) -> (Runtime, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = Runtime::with_cache_dir(limits, Some(dir.path().to_path_buf())).expect("runtime");
    (rt, dir)
}

pub fn load(name: &str, limits: Limits) -> (Arc<dyn Plugin>, tempfile::TempDir) {
    let (rt, dir) = runtime(limits);
    let plugin = rt.load(plugin_path(name)).unwrap_or_else(|e| panic!("loading {name}: {e}"));
    (plugin, dir)
}

/// Plays one episode from `seed` for at most the manifest's turn limit, `answer` choosing
/// each answer; whether it ended in success.
pub fn play(env: &mut dyn Environment, seed: u64, mut answer: impl FnMut(&mut dyn Environment) -> String) -> bool {
    env.reset(seed).unwrap();
    for _ in 0..env.manifest().default_max_turns {
        let a = answer(env);
        let s = env.step(&a).unwrap();
        if s.done {
            return s.success;
        }
    }
    false
}
