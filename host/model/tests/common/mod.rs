#![allow(dead_code)]

use std::path::{Path, PathBuf};
use tch::Tensor;
use vagen_model::{Image, LoadOptions, Message, Model};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn expected() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap()).unwrap()
}

pub fn load(name: &str) -> Model {
    Model::load(&fixtures().join(name), LoadOptions::default()).unwrap()
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// max |a - b| / max |b|.
pub fn relative_error(a: &Tensor, b: &Tensor) -> f64 {
    let diff = (a - b).abs().max().double_value(&[]);
    diff / b.abs().max().double_value(&[])
}

/// Logits `[seq, vocab]` of one unpadded sequence.
pub fn logits(model: &Model, seq: &[u32]) -> Tensor {
    let _g = tch::no_grad_guard();
    let ids = Tensor::from_slice(&seq.iter().map(|&t| t as i64).collect::<Vec<_>>()).unsqueeze(0);
    let pos = Tensor::arange(seq.len() as i64, tch::kind::INT64_CPU).unsqueeze(0);
    model.lm.forward(&ids, &pos, None, None).unwrap().squeeze_dim(0)
}

/// The project venv's Python (with transformers), as `cargo xtask test` exports it.
pub fn python() -> PathBuf {
    PathBuf::from(std::env::var("VAGEN_PYTHON").expect(
        "VAGEN_PYTHON is not set: run the tests with `cargo xtask test`, or point it at a Python with transformers",
    ))
}

/// A reference script's JSON answer: `reference/SCRIPT` run by the venv's Python with
/// `args` and `input` on its stdin (`Null` when it prints nothing).
pub fn reference<I: AsRef<std::ffi::OsStr>>(script: &str, args: &[I], input: &str) -> serde_json::Value {
    use std::io::Write;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("reference").join(script);
    let mut child = std::process::Command::new(python())
        .arg(path)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{script} failed");
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// `[rows, width]` from a JSON list of equally long rows.
pub fn rows(v: &serde_json::Value) -> Tensor {
    let rows: Vec<Vec<f32>> = serde_json::from_value(v.clone()).unwrap();
    let n = rows.len() as i64;
    Tensor::from_slice(&rows.concat()).view([n, -1])
}

/// transformers' outputs for `ids` from a saved folder (`causal` logits or `critic` values).
pub fn transformers_outputs(dir: &Path, kind: &str, ids: &[Vec<u32>]) -> (Vec<Tensor>, String) {
    let input = serde_json::json!({ "ids": ids }).to_string();
    let v = reference("reload.py", &[dir.as_os_str(), kind.as_ref()], &input);
    let tensors = v["outputs"].as_array().unwrap().iter().map(rows).collect();
    (tensors, v["class"].as_str().unwrap().to_string())
}

pub fn vl_expected() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("vl-expected.json")).unwrap()).unwrap()
}

pub fn image(name: &str) -> Image {
    let img = image::open(fixtures().join(format!("vl-images/{name}.png"))).unwrap().to_rgb8();
    Image { width: img.width(), height: img.height(), rgb: img.into_raw() }
}

pub fn prompt_inputs(p: &serde_json::Value) -> (Vec<Message>, Vec<Image>) {
    let messages: Vec<Message> = serde_json::from_value(p["messages"].clone()).unwrap();
    let images = p["images"].as_array().unwrap().iter().map(|n| image(n.as_str().unwrap())).collect();
    (messages, images)
}
