//! `check --reward` and `fuzz --reward`: the contract's checks and a fuzzing
//! campaign for a reward component (`vagen_runtime::reward::conformance`).

use anyhow::{Result, bail};
use std::path::Path;
use vagen_runtime::reward::conformance;
use vagen_runtime::{Limits, Runtime};

pub fn check(path: &Path, config: &str, limits: Limits) -> Result<()> {
    let plugin = Runtime::new(limits)?.load_reward(path)?;
    let findings = conformance::check(&plugin, config);
    for f in &findings {
        println!("{} {:<18} {}", if f.passed { "ok  " } else { "FAIL" }, f.check, f.detail);
    }
    let failed = findings.iter().filter(|f| !f.passed).count();
    if failed > 0 {
        bail!("{} failed {failed} of {} checks", path.display(), findings.len());
    }
    println!("{}: all {} checks passed", path.display(), findings.len());
    Ok(())
}

pub fn fuzz(path: &Path, config: &str, limits: Limits, seed: u64, batches: usize, out: &Path) -> Result<()> {
    let plugin = Runtime::new(limits)?.load_reward(path)?;
    let started = std::time::Instant::now();
    let report = conformance::fuzz(&plugin, config, seed, batches);
    println!(
        "{}: {} batches, {} turns in {:.1} s; {} turns refused by the component",
        plugin.manifest().name,
        report.batches,
        report.turns,
        started.elapsed().as_secs_f64(),
        report.refused
    );
    if report.findings.is_empty() {
        println!("no findings");
        return Ok(());
    }
    std::fs::create_dir_all(out)?;
    for (kind, detail, turns) in &report.findings {
        let file = out.join(format!("reward-{kind}.txt"));
        std::fs::write(&file, format!("{detail}\n\n{turns:#?}\n"))?;
        println!("FINDING {kind}: {detail} (the batch: {})", file.display());
    }
    bail!("{} finding(s)", report.findings.len())
}
