//! `metrics.jsonl`: one JSON object per step, verl/RAGEN-style names.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::tensorboard::EventWriter;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepMetrics {
    pub step: usize,
    #[serde(flatten)]
    pub values: BTreeMap<String, f64>,
}

impl StepMetrics {
    pub fn new(step: usize) -> Self {
        StepMetrics { step, values: BTreeMap::new() }
    }
}

/// `metrics.jsonl`, and the same values as TensorBoard events in `tensorboard/` beside it.
pub struct MetricsLog {
    path: PathBuf,
    tensorboard: EventWriter,
}

impl MetricsLog {
    pub fn open(path: &Path) -> Result<Self> {
        let dir = path.parent().unwrap_or(Path::new(".")).join("tensorboard");
        Ok(MetricsLog { path: path.to_path_buf(), tensorboard: EventWriter::create(&dir)? })
    }

    /// A sample frame for TensorBoard's image tab.
    pub fn frame(&self, step: usize, tag: &str, image: &vagen_runtime::Image) -> Result<()> {
        let Some(bytes) = png(image) else { return Ok(()) };
        self.tensorboard.image(step, tag, image.width, image.height, &bytes)
    }

    /// One line's values as TensorBoard scalars: SFT lines at their own step (`sft/step`),
    /// RL lines at `step`.
    fn tensorboard_scalars(&self, m: &StepMetrics) -> Result<()> {
        let step = m.values.get("sft/step").map_or(m.step, |&s| s as usize);
        self.tensorboard.scalars(step, m.values.iter().map(|(k, v)| (k.as_str(), *v)))
    }

    pub fn write(&self, m: &StepMetrics) -> Result<()> {
        self.tensorboard_scalars(m)?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        // One write per line: a kill leaves a line whole or cut, never split in two writes.
        f.write_all(format!("{}\n", serde_json::to_string(m)?).as_bytes())?;
        Ok(())
    }

    /// A line saying which env build the run (or its resumed part) trains on. Not a step:
    /// [`read`] leaves it out.
    pub fn header(&self, env: &str) -> Result<()> {
        let line = serde_json::json!({ RUN: { "env": env, "vagen": env!("CARGO_PKG_VERSION") } });
        self.append_line(&line)
    }

    /// `line` appended as a line of its own (a line a kill cut short is ended first).
    fn append_line(&self, line: &serde_json::Value) -> Result<()> {
        let torn = std::fs::read(&self.path).is_ok_and(|b| b.last().is_some_and(|&c| c != b'\n'));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        f.write_all(format!("{}{line}\n", if torn { "\n" } else { "" }).as_bytes())?;
        Ok(())
    }

    /// After a resume: a line saying from where, so that readers drop the earlier lines
    /// of steps that will be redone. The file is only ever appended to: a run killed while
    /// resuming cannot lose its log.
    pub fn mark_resumed(&self, state: &crate::checkpoint::TrainerState) -> Result<()> {
        let mark = serde_json::json!({ RESUMED: { "step": state.step, "sft_steps_done": state.sft_steps_done } });
        self.append_line(&mark)?;
        // TensorBoard gets the log as it now stands: the redone steps' points are gone.
        self.tensorboard.restart()?;
        for line in read(self.path.parent().unwrap_or(Path::new(".")))? {
            // Every line the trainer writes is a `StepMetrics`.
            let Ok(m) = serde_json::from_value::<StepMetrics>(line) else { continue };
            self.tensorboard_scalars(&m)?;
        }
        Ok(())
    }
}

/// `img` as PNG bytes; `None` when its size and pixels disagree.
pub(crate) fn png(img: &vagen_runtime::Image) -> Option<Vec<u8>> {
    let buf = image::RgbImage::from_raw(img.width, img.height, img.rgb.clone())?;
    let mut bytes = Vec::new();
    buf.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).ok()?;
    Some(bytes)
}

/// The key of the line [`MetricsLog::mark_resumed`] writes.
const RESUMED: &str = "resumed_from";
const RUN: &str = "run";

/// A run's `metrics.jsonl` as the run now stands: at each resume mark, the earlier lines of
/// the RL steps (or SFT steps) past the checkpoint are dropped, since they were redone.
pub fn read(run_dir: &Path) -> Result<Vec<serde_json::Value>> {
    let path = run_dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines: Vec<serde_json::Value> = Vec::new();
    for line in text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
        if line.get(RUN).is_some() {
            continue;
        }
        let Some(mark) = line.get(RESUMED) else {
            lines.push(line);
            continue;
        };
        let (step, sft) = (mark["step"].as_u64().unwrap_or(0), mark["sft_steps_done"].as_u64().unwrap_or(0));
        lines.retain(|l| {
            let redone_rl = l["step"].as_u64().is_some_and(|s| s > step);
            let redone_sft = l["sft/step"].as_f64().is_some_and(|s| s as u64 > sft);
            // Resumed before RL: the evaluation that opens RL (step 0) is done again too.
            let redone_start = step == 0 && l["step"] == 0 && l.get("sft/step").is_none();
            !(redone_rl || redone_sft || redone_start)
        });
    }
    Ok(lines)
}
