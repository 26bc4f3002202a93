//! `vagen-host eval-compare DIR...`: several evaluations' figures in one table. Results of
//! different env builds (by digest) or different settings (seeds, samples, temperature,
//! format, prompts, turns) are refused, naming what differs, unless told to compare anyway:
//! only the policy and the model may change between them.

use super::records::Settings;
use super::summary::Summary;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct CompareArgs {
    /// Evaluation folders (`eval --out`), each with its summary.json.
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// Compare results of different env builds (their plugins' sha256 differ).
    #[arg(long)]
    pub allow_different_env: bool,
    /// Compare results played with different settings (seeds, samples, temperature, …).
    #[arg(long)]
    pub allow_different_settings: bool,
    /// Print the table as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// What may differ between compared results: who answered.
const WHO: [&str; 4] = ["policy", "model", "config", "env.plugin"];

pub fn compare(a: CompareArgs) -> Result<()> {
    let summaries: Vec<Summary> = a.dirs.iter().map(|d| read(d)).collect::<Result<_>>()?;
    let first = &summaries[0].settings;
    for (dir, s) in a.dirs.iter().zip(&summaries).skip(1) {
        check(first, &s.settings, &a, &a.dirs[0], dir)?;
    }
    let ks: Vec<String> = summaries[0].pass_at_k.keys().cloned().collect();
    if a.json {
        for (dir, s) in a.dirs.iter().zip(&summaries) {
            let row = serde_json::json!({
                "dir": dir, "model": s.settings.model.name, "success": s.success,
                "pass_at_k": s.pass_at_k, "mean_reward": s.mean_reward, "lost": s.lost,
            });
            println!("{row}");
        }
        return Ok(());
    }
    let mut header = format!("{:<40} {:<24} {:>21}", "results", "model", format!("avg@{} [95%]", first.samples));
    for k in &ks {
        header += &format!(" {k:>8}");
    }
    println!("{header} {:>7} {:>5}", "reward", "lost");
    for (dir, s) in a.dirs.iter().zip(&summaries) {
        let success = s.success.map_or("-".into(), |e| format!("{:.3} [{:.3},{:.3}]", e.value, e.low, e.high));
        let mut line = format!(
            "{:<40} {:<24} {:>21}",
            tail(&dir.display().to_string(), 40),
            tail(&s.settings.model.name, 24),
            success
        );
        for k in &ks {
            line += &format!(" {:>8}", s.pass_at_k.get(k).map_or("-".into(), |e| format!("{:.3}", e.value)));
        }
        println!("{line} {:>7} {:>5}", s.mean_reward.map_or("-".into(), |r| format!("{r:.2}")), s.lost);
    }
    println!(
        "env {} {} (sha256 {})",
        first.env.name,
        first.env.version,
        &first.env.sha256[..first.env.sha256.len().min(16)]
    );
    Ok(())
}

/// `text`'s last `width` characters (a path's end tells paths apart), `…` for the rest.
fn tail(text: &str, width: usize) -> String {
    let n = text.chars().count();
    if n <= width {
        return text.to_string();
    }
    format!("…{}", text.chars().skip(n + 1 - width).collect::<String>())
}

fn read(dir: &std::path::Path) -> Result<Summary> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: no summary.json (an `eval --out` folder whose run finished?)", dir.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not an evaluation's summary", path.display()))
}

fn check(first: &Settings, other: &Settings, a: &CompareArgs, d0: &std::path::Path, d: &std::path::Path) -> Result<()> {
    if first.env.sha256 != other.env.sha256 && !a.allow_different_env {
        bail!(
            "{} and {} were played on different env builds ({} {} sha256 {} vs {} {} sha256 {}): \
             --allow-different-env to compare them anyway",
            d0.display(),
            d.display(),
            first.env.name,
            first.env.version,
            first.env.sha256,
            other.env.name,
            other.env.version,
            other.env.sha256
        );
    }
    let mut ignored = WHO.to_vec();
    ignored.extend(if a.allow_different_env { &["env"][..] } else { &["env.sha256", "env.version"][..] });
    let differ = first.differences(other, &ignored);
    if !differ.is_empty() && !a.allow_different_settings {
        bail!(
            "{} and {} were played with different settings: {}; --allow-different-settings to compare them anyway",
            d0.display(),
            d.display(),
            differ.join(", ")
        );
    }
    Ok(())
}
