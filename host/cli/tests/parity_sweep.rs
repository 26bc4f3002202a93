//! The randomized parity sweep (`host/model/reference/parity_sweep.py`): 24 random
//! Qwen2.5-VL shapes (plus issue 39's) × 3 prompts and 12 random Qwen2 shapes × 3 prompts,
//! built by transformers, against this build's `vagen-host parity-dump`, f32 on the CPU.
//! A failing case is printed with its config, image sizes and the command replaying it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> PathBuf {
    PathBuf::from(std::env::var("VAGEN_PYTHON").expect(
        "VAGEN_PYTHON is not set: run the tests with `cargo xtask test`, or point it at a Python with transformers",
    ))
}

#[test]
fn random_shapes_match_transformers_in_f32() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/reference/parity_sweep.py");
    let report = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(python())
        .arg(&script)
        .args(["--host", env!("CARGO_BIN_EXE_vagen-host")])
        .args(["--vl", "24", "--text", "12", "--prompts", "3", "--seed", "0", "--json"])
        .arg(report.path())
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(out.status.success(), "parity sweep failed:\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(report.path()).unwrap()).unwrap();
    let s = &r["summary"];
    assert_eq!((s["vl_cases"].as_u64(), s["text_cases"].as_u64()), (Some(25), Some(12)), "{s}");
    assert_eq!(s["prompts"].as_u64(), Some(37 * 3), "{s}");
    assert!(s["max_relative_error"].as_f64().unwrap() <= 1e-5, "{s}");
    assert!(s["failed"].as_array().unwrap().is_empty(), "{s}");
}
