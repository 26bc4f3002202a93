//! `train --seeds N`: one config trained from N seeds (`schedule.seed`, then +1, …), each in
//! `RUN_DIR/seed-S/`, then each seed's held-out figures and their mean ± standard deviation,
//! printed and written to `RUN_DIR/seeds.json`. The same command again continues: a seed
//! that finished is read back, one that stopped part-way resumes from its last checkpoint,
//! one that stopped before any starts over (its folder set aside, not deleted). A seed's
//! folder holding another config than the command's (the seed aside) is refused: one mean
//! never mixes two configs.

use crate::eval::write_whole;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use vagen_trainer::{JudgeAccess, TrainConfig, Trainer};

/// What one seed's run ended with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SeedFigures {
    pub seed: u64,
    /// Held-out success RL started from (after SFT, or the model as loaded).
    pub start: f64,
    /// Held-out success after RL.
    pub end: f64,
}

/// Mean and sample standard deviation (n − 1; 0 for a single value).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub sd: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var =
            if values.len() > 1 { values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
        Spread { mean, sd: var.sqrt() }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} ± {:.3}", self.mean, self.sd)
    }
}

/// `RUN_DIR/seeds.json`.
#[derive(Debug, Serialize)]
struct Summary {
    seeds: Vec<SeedFigures>,
    start: Spread,
    end: Spread,
    gain: Spread,
}

/// The runs of `cfg` (as read, with its overrides) over `n` seeds.
pub struct SeedRuns {
    pub cfg: TrainConfig,
    pub n: usize,
    pub run_dir: PathBuf,
    pub overrides: Vec<String>,
    pub allow_native: bool,
    pub access: JudgeAccess,
}

impl SeedRuns {
    pub fn run(mut self) -> Result<()> {
        if self.n == 0 {
            bail!("--seeds 0: nothing to train (give at least 1)");
        }
        std::fs::create_dir_all(&self.run_dir).with_context(|| format!("creating {}", self.run_dir.display()))?;
        let base = self.cfg.schedule.seed;
        // Every seed on the same component bytes: a registry tag is resolved once, here.
        self.cfg.pin_components().context("resolving the config's oci:// components")?;
        let mut figures = Vec::with_capacity(self.n);
        for k in 0..self.n as u64 {
            // A TOML integer is an i64.
            let seed = base.checked_add(k).filter(|&s| s <= i64::MAX as u64);
            let seed = seed.context("schedule.seed + --seeds passes the largest seed a config can hold")?;
            let dir = self.run_dir.join(format!("seed-{seed}"));
            self.check_same_config(seed, &dir)?;
            let f = match read_figures(&dir)? {
                Some(done) => {
                    eprintln!("seed {seed}: done before ({})", dir.display());
                    done
                }
                None => self.train_one(seed, &dir)?,
            };
            figures.push(f);
        }
        let summary = summarise(figures);
        print_summary(&summary, self.cfg.sft.steps > 0);
        let path = self.run_dir.join("seeds.json");
        write_whole(&path, serde_json::to_string_pretty(&summary)?.as_bytes())?;
        println!("run folders: {}/seed-*; figures: {}", self.run_dir.display(), path.display());
        Ok(())
    }

    /// The command's config with `seed`.
    fn config(&self, seed: u64) -> TrainConfig {
        let mut cfg = self.cfg.clone();
        cfg.schedule.seed = seed;
        cfg
    }

    /// Records the command's config for `seed` beside its folder (`seed-S.config.toml`: the
    /// trainer starts only in an empty folder) before the run starts, or refuses a folder
    /// recorded with another one. The comparison is with this record, not
    /// the run's `config.toml`, which the trainer completes (derived settings, pinned
    /// components) and which a run started otherwise than by `--seeds` also has. A record
    /// written by an older version is read again first, so settings added since (at their
    /// defaults) do not make it another config.
    fn check_same_config(&self, seed: u64, dir: &Path) -> Result<()> {
        let (record, ours) = (dir.with_extension("config.toml"), self.config(seed).to_toml());
        let same = |theirs: &str| {
            theirs == ours
                || TrainConfig::parse(theirs, &record.display().to_string(), &[]).is_ok_and(|c| c.to_toml() == ours)
        };
        match std::fs::read_to_string(&record) {
            Ok(theirs) if same(&theirs) => Ok(()),
            Ok(_) => bail!(
                "{} was trained with another config than this command's (seed aside): give another --run-dir, \
                 or the config and --set it was run with",
                dir.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if dir.join("config.toml").exists() {
                    bail!("{} holds a run not started by --seeds: give another --run-dir", dir.display());
                }
                write_whole(&record, ours.as_bytes())
            }
            Err(e) => Err(e).with_context(|| format!("reading {}", record.display())),
        }
    }

    /// Trains `seed` in `dir` (resuming what a stopped run left), and records its figures.
    fn train_one(&self, seed: u64, dir: &Path) -> Result<SeedFigures> {
        let started = dir.join("config.toml").exists();
        let mut t = if started && vagen_trainer::latest_checkpoint(dir)?.is_some() {
            eprintln!("seed {seed}: resuming {}", dir.display());
            // The run's own seed last: a `--set schedule.seed` chose the first seed only.
            let mut overrides = self.overrides.clone();
            overrides.push(format!("schedule.seed={seed}"));
            Trainer::resume_ranked(dir, &overrides, self.allow_native, self.access.clone(), None)?
        } else {
            if started {
                let aside = vagen_trainer::set_run_aside(dir)?;
                eprintln!(
                    "seed {seed}: the run in {} stopped before a checkpoint; set aside as {}",
                    dir.display(),
                    aside.display()
                );
            }
            eprintln!("seed {seed}: {}", dir.display());
            Trainer::new_ranked(self.config(seed), dir, None)?
        };
        let (start, end) = t.run().with_context(|| format!("seed {seed} ({})", dir.display()))?;
        let f = SeedFigures { seed, start, end };
        write_whole(&dir.join(FIGURES), serde_json::to_string_pretty(&f)?.as_bytes())?;
        Ok(f)
    }
}

/// A seed's figures, written once its run has ended.
const FIGURES: &str = "seed-figures.json";

fn read_figures(dir: &Path) -> Result<Option<SeedFigures>> {
    let path = dir.join(FIGURES);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map(Some).with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn summarise(seeds: Vec<SeedFigures>) -> Summary {
    let column = |f: fn(&SeedFigures) -> f64| Spread::of(&seeds.iter().map(f).collect::<Vec<_>>());
    let (start, end, gain) = (column(|s| s.start), column(|s| s.end), column(|s| s.end - s.start));
    Summary { seeds, start, end, gain }
}

fn print_summary(s: &Summary, sft: bool) {
    let from = if sft { "after SFT" } else { "before RL" };
    println!("{:>6} {:>10} {:>9} {:>7}", "seed", from, "after RL", "gain");
    for f in &s.seeds {
        println!("{:>6} {:>10.3} {:>9.3} {:>+7.3}", f.seed, f.start, f.end, f.end - f.start);
    }
    println!(
        "held-out success over {} seeds (mean ± sd): {} {from} -> {} after RL (gain {})",
        s.seeds.len(),
        s.start,
        s.end,
        s.gain
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_the_mean_and_the_sample_standard_deviation() {
        let s = Spread::of(&[0.5, 0.7, 0.9]);
        assert!((s.mean - 0.7).abs() < 1e-12 && (s.sd - 0.2).abs() < 1e-12, "{s:?}");
        assert_eq!(Spread::of(&[0.4]), Spread { mean: 0.4, sd: 0.0 });
        assert_eq!(s.to_string(), "0.700 ± 0.200");
        let summary = summarise(vec![
            SeedFigures { seed: 0, start: 0.4, end: 0.8 },
            SeedFigures { seed: 1, start: 0.5, end: 0.7 },
        ]);
        assert!((summary.gain.mean - 0.3).abs() < 1e-12);
        assert!((summary.gain.sd - (0.02f64).sqrt()).abs() < 1e-12, "{:?}", summary.gain);
    }
}
