//! What a raw `run` writes: one JSONL row per reset or step, images as PNG files beside it.

use anyhow::{Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vagen_rollout::{FailedCall, Trajectory};
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

    pub fn save(&self, episode: usize, turn: u32, images: &[Arc<Image>]) -> Result<Vec<String>> {
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

/// A raw run's rows for one played episode: its reset, each step, and its failure.
pub fn episode_rows(episode: usize, t: &Trajectory, images: &ImageSink) -> Result<Vec<TurnRecord>> {
    // The observation turn k saw, or after the last step, the one the episode ended in.
    let seen = |k: usize| match t.turns.get(k) {
        Some(turn) => (&turn.observation, &turn.images),
        None => (&t.end_observation, &t.end_images),
    };
    let blank = |turn: usize| TurnRecord {
        episode,
        seed: t.seed,
        turn: turn as u32,
        answer: None,
        observation: String::new(),
        images: Vec::new(),
        reward: 0.0,
        done: false,
        success: false,
        valid_actions: 0,
        effective_actions: 0,
        metrics: Vec::new(),
        error: None,
    };
    let row = |turn: usize, answer: Option<String>| -> Result<TurnRecord> {
        let (observation, shown) = seen(turn);
        let images = images.save(episode, turn as u32, shown)?;
        Ok(TurnRecord { answer, observation: observation.clone(), images, ..blank(turn) })
    };
    let reset_failed = t.failure.as_ref().is_some_and(|f| f.call == FailedCall::Reset);
    let mut rows = Vec::with_capacity(t.turns.len() + 2);
    if !reset_failed {
        rows.push(row(0, None)?);
    }
    for (k, turn) in t.turns.iter().enumerate() {
        let mut r = row(k + 1, Some(turn.answer.clone()))?;
        (r.reward, r.done, r.success) = (turn.env_reward, turn.done, turn.success);
        (r.valid_actions, r.effective_actions) = (turn.valid_actions, turn.effective_actions);
        r.metrics = turn.metrics.iter().map(|(name, value)| Metric { name: name.clone(), value: *value }).collect();
        rows.push(r);
    }
    if let Some(f) = &t.failure {
        rows.push(TurnRecord { error: Some(f.to_string()), ..blank(t.turns.len() + 1) });
    }
    Ok(rows)
}

/// One row as a JSONL line.
pub fn write_row(w: &mut impl Write, row: &TurnRecord) -> Result<()> {
    serde_json::to_writer(&mut *w, row)?;
    w.write_all(b"\n")?;
    Ok(())
}
