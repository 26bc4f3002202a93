//! What `run` writes: one JSONL row per reset or step, images as PNG files beside it.

use anyhow::{Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use vagen_runtime::{Image, Metric};

/// One row of the JSONL file.
#[derive(Serialize)]
pub struct TurnRecord {
    pub episode: usize,
    pub seed: u64,
    /// 0 for the observation after `reset`, then 1, 2, ... for each step.
    pub turn: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    pub observation: String,
    /// PNG paths, relative to the JSONL file's folder.
    pub images: Vec<String>,
    pub reward: f64,
    pub done: bool,
    pub success: bool,
    pub valid_actions: u32,
    pub effective_actions: u32,
    pub metrics: Vec<Metric>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where images go: `<out>.images/` beside `--out`, or a temporary folder for `human`.
pub struct ImageSink {
    dir: Option<PathBuf>,
    base: PathBuf,
}

impl ImageSink {
    pub fn new(out: Option<&Path>, fallback: Option<PathBuf>) -> Self {
        let dir = out.map(|o| o.with_extension("images")).or(fallback);
        let base = out.and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
        Self { dir, base }
    }

    pub fn save(&self, episode: usize, turn: u32, images: &[Image]) -> Result<Vec<String>> {
        let Some(dir) = &self.dir else {
            return Ok(Vec::new());
        };
        if images.is_empty() {
            return Ok(Vec::new());
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        images
            .iter()
            .enumerate()
            .map(|(k, img)| {
                let path = dir.join(format!("ep{episode:05}-t{turn:03}-{k}.png"));
                let buf = image::RgbImage::from_raw(img.width, img.height, img.rgb.clone())
                    .context("image size does not match its bytes")?;
                buf.save(&path).with_context(|| format!("writing {}", path.display()))?;
                let shown = path.strip_prefix(&self.base).unwrap_or(&path);
                Ok(shown.display().to_string())
            })
            .collect()
    }
}

pub fn write_jsonl(path: &Path, rows: impl Iterator<Item = TurnRecord>) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for row in rows {
        serde_json::to_writer(&mut w, &row)?;
        w.write_all(b"\n")?;
    }
    w.flush().with_context(|| format!("writing {}", path.display()))
}
