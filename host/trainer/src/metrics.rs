//! `metrics.jsonl`: one JSON object per step, verl/RAGEN-style names.

use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize)]
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

pub struct MetricsLog {
    path: PathBuf,
}

impl MetricsLog {
    pub fn open(path: &Path) -> Result<Self> {
        Ok(MetricsLog { path: path.to_path_buf() })
    }

    pub fn write(&self, m: &StepMetrics) -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        writeln!(f, "{}", serde_json::to_string(m)?)?;
        Ok(())
    }

    /// After a resume: drop the lines of steps past the checkpoint, which will be redone.
    pub fn truncate_after(&self, step: usize) -> Result<()> {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return Ok(());
        };
        let kept: String = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .ok()
                    .and_then(|v| v.get("step")?.as_u64())
                    .is_some_and(|s| s as usize <= step)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&self.path, kept)?;
        Ok(())
    }
}

/// Every line of a run's `metrics.jsonl`.
pub fn read(run_dir: &Path) -> Result<Vec<serde_json::Value>> {
    let path = run_dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}
