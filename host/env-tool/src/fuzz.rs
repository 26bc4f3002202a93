//! `fuzz`: adversarial episodes against one plugin; reproducers for what breaks.

use crate::limits_arg::{limits_from, load};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use vagen_runtime::fuzz::{FuzzOptions, fuzz as run_fuzz};

#[derive(Args)]
pub struct FuzzArgs {
    /// The plugin file (`.wasm` or `.so`).
    #[arg(long)]
    plugin: PathBuf,
    /// Fuzz for this many seconds (default 60 unless --iterations is given).
    #[arg(long)]
    seconds: Option<f64>,
    /// Stop after this many episodes.
    #[arg(long)]
    iterations: Option<u64>,
    /// Seeds the fuzzer's choices; the same seed repeats the same campaign.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// JSON object overriding the plugin's default config.
    #[arg(long, default_value = "")]
    env_config: String,
    /// A call slower than this many milliseconds is a finding.
    #[arg(long, default_value_t = 250)]
    max_call_ms: u64,
    /// Memory growth beyond this many MiB across episodes is a leak.
    #[arg(long, default_value_t = 32)]
    leak_mib: u64,
    /// End at the first finding.
    #[arg(long)]
    stop_on_finding: bool,
    /// Where reproducers go (one JSON file per finding kind); by default beside the plugin,
    /// in `NAME-findings/` for `NAME.wasm`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sandbox limit override, e.g. `--limit call_timeout_ms=500` (repeatable).
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    limits: Vec<String>,
    /// The plugin is a reward function: score random batches of odd turns (`--iterations`
    /// batches, 200 by default; `--env-config` is its config).
    #[arg(long)]
    reward: bool,
}

pub fn fuzz(a: FuzzArgs) -> Result<()> {
    let out = a.out.clone().unwrap_or_else(|| findings_beside(&a.plugin));
    if a.reward {
        let batches = a.iterations.unwrap_or(200) as usize;
        let limits = limits_from(&a.limits)?;
        return crate::reward_tools::fuzz(&a.plugin, &a.env_config, limits, a.seed, batches, &out);
    }
    let plugin = load(&a.plugin, limits_from(&a.limits)?)?;
    let duration = match (a.seconds, a.iterations) {
        (Some(s), _) => Some(Duration::from_secs_f64(s)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(60)),
    };
    let opts = FuzzOptions {
        config: a.env_config,
        seed: a.seed,
        duration,
        iterations: a.iterations,
        max_call: Duration::from_millis(a.max_call_ms),
        leak_bytes: a.leak_mib << 20,
        stop_on_finding: a.stop_on_finding,
        ..FuzzOptions::default()
    };
    let report = run_fuzz(plugin.as_ref(), &opts)?;
    let name = plugin.manifest().name.clone();
    println!(
        "{name}: {} episodes, {} steps in {:.1} s ({:.0} episodes/s)",
        report.episodes,
        report.steps,
        report.elapsed.as_secs_f64(),
        report.episodes_per_sec()
    );
    for (outcome, n) in &report.outcomes {
        println!("  episodes ending {outcome:<14} {n}");
    }
    if report.episodes == 0 {
        bail!("no episode of {name} finished in the time given, so nothing was checked; give it more --seconds");
    }
    if report.findings.is_empty() {
        println!("no findings");
        return Ok(());
    }
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    println!("{:<16} {:>6}  {:<40}  reproducer", "finding", "count", "first seen");
    for f in &report.findings {
        let kind = serde_json::to_value(f.kind)?.as_str().unwrap_or("finding").to_string();
        // The name is the plugin's to choose: never a path.
        let file = out.join(format!("{}-{kind}.json", vagen_runtime::file_stem(&name)));
        std::fs::write(&file, serde_json::to_string_pretty(&f.reproducer)?)
            .with_context(|| format!("writing {}", file.display()))?;
        println!("{kind:<16} {:>6}  {:<40}  {}", f.count, f.message, file.display());
    }
    bail!(
        "{} kinds of finding in {name}; replay one with `{} run --replay FILE`",
        report.findings.len(),
        crate::program()
    )
}

/// Where a plugin's findings go unless the user says: `NAME-findings/` beside `NAME.wasm`
/// (or `.so`), never the working folder (except for an OpenEnv server, which has none).
pub fn findings_beside(plugin: &std::path::Path) -> PathBuf {
    // A server has no folder: the working folder, named for its address.
    if vagen_runtime::is_openenv_url(plugin) {
        let name = vagen_runtime::file_stem(&plugin.to_string_lossy());
        return PathBuf::from(format!("{name}-findings"));
    }
    let stem = plugin.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "plugin".into());
    plugin.with_file_name(format!("{stem}-findings"))
}
