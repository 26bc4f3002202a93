//! What `run` writes: one JSONL row per reset or step, images as PNG files beside it.

use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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

/// `--out` written as the run goes: each episode's rows go to a part file as they happen,
/// and whole episodes are appended to the log in episode order as soon as every earlier
/// one is in (parallel workers finish out of order; the file must not depend on it). A
/// killed run keeps every episode that was appended; memory holds no observation.
pub struct EpisodeLog {
    path: PathBuf,
    parts: PathBuf,
    state: Mutex<Appended>,
}

struct Appended {
    /// The next episode the log takes.
    next: usize,
    /// Episodes finished but waiting for an earlier one.
    waiting: BTreeSet<usize>,
    file: std::fs::File,
}

impl EpisodeLog {
    pub fn create(path: &Path) -> Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        // Beside the log, named for this process; never an existing folder of the user's.
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let parts = path.with_file_name(format!(".{name}.parts-{}", std::process::id()));
        std::fs::create_dir(&parts).with_context(|| format!("creating {}", parts.display()))?;
        let state = Mutex::new(Appended { next: 0, waiting: BTreeSet::new(), file });
        Ok(Self { path: path.to_path_buf(), parts, state })
    }

    fn part(&self, episode: usize) -> PathBuf {
        self.parts.join(format!("{episode}.jsonl"))
    }

    /// Where episode `episode` writes its rows, one `write_row` per reset or step.
    pub fn episode(&self, episode: usize) -> Result<std::io::BufWriter<std::fs::File>> {
        let path = self.part(episode);
        let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(std::io::BufWriter::new(file))
    }

    /// Episode `episode` is complete: append it, and every waiting one it unblocks.
    pub fn finish(&self, episode: usize) -> Result<()> {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut *guard;
        s.waiting.insert(episode);
        while s.waiting.remove(&s.next) {
            self.append(&mut s.file, s.next)?;
            s.next += 1;
        }
        Ok(())
    }

    /// The run is over (perhaps stopped early, leaving gaps): append what is left, in
    /// order, and remove the part files.
    pub fn close(self) -> Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for episode in std::mem::take(&mut s.waiting) {
            self.append(&mut s.file, episode)?;
        }
        s.file.sync_all().with_context(|| format!("writing {}", self.path.display()))?;
        drop(s);
        std::fs::remove_dir_all(&self.parts).with_context(|| format!("removing {}", self.parts.display()))
    }

    fn append(&self, file: &mut std::fs::File, episode: usize) -> Result<()> {
        let part = self.part(episode);
        let mut rows = std::fs::File::open(&part).with_context(|| format!("reading {}", part.display()))?;
        std::io::copy(&mut rows, file).with_context(|| format!("writing {}", self.path.display()))?;
        std::fs::remove_file(&part).with_context(|| format!("removing {}", part.display()))
    }
}

/// One row as a JSONL line.
pub fn write_row(w: &mut impl Write, row: &TurnRecord) -> Result<()> {
    serde_json::to_writer(&mut *w, row)?;
    w.write_all(b"\n")?;
    Ok(())
}
