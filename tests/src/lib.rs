//! Helpers for the integration tests: where the built plugins are, and a runtime with a
//! private cache folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use vagen_runtime::{Limits, Plugin, Runtime};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the workspace").to_path_buf()
}

/// `NAME.wasm` from `target/plugins`, `target/examples` or `target/test-plugins`.
pub fn plugin_path(name: &str) -> PathBuf {
    for dir in ["target/plugins", "target/examples", "target/test-plugins"] {
        let p = root().join(dir).join(format!("{name}.wasm"));
        if p.is_file() {
            return p;
        }
    }
    panic!("{name}.wasm is not built: run `cargo xtask plugins` (or `cargo xtask test`) first");
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
