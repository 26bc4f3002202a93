//! `check`: does a plugin honour the contract? One line per check; exit 1 on
//! any failure.

use crate::limits_arg::{limits_from, load};
use anyhow::{Result, bail};
use clap::Args;
use std::path::PathBuf;
use vagen_runtime::conformance::{CheckOptions, check as run_checks};

#[derive(Args)]
pub struct CheckArgs {
    /// The plugin file (`.wasm` or `.so`).
    #[arg(long)]
    plugin: PathBuf,
    /// JSON object overriding the plugin's default config.
    #[arg(long, default_value = "")]
    env_config: String,
    /// Episodes the oracle plays (when the plugin has one).
    #[arg(long, default_value_t = 20)]
    oracle_episodes: u64,
    /// Fraction of them it must win (lower it for stochastic envs, e.g. slippery ice).
    #[arg(long, default_value_t = 1.0)]
    oracle_min_success: f64,
    /// Sandbox limit override, e.g. `--limit call_timeout_ms=500` (repeatable).
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    limits: Vec<String>,
    /// The plugin is a reward function (`--env-config` is then its config).
    #[arg(long)]
    reward: bool,
}

pub fn check(a: CheckArgs) -> Result<()> {
    if a.reward {
        return crate::reward_tools::check(&a.plugin, &a.env_config, limits_from(&a.limits)?);
    }
    let plugin = load(&a.plugin, limits_from(&a.limits)?)?;
    let opts = CheckOptions {
        config: a.env_config,
        oracle_episodes: a.oracle_episodes,
        oracle_min_success: a.oracle_min_success,
        ..CheckOptions::default()
    };
    let report = run_checks(plugin.as_ref(), &opts);
    for f in &report.findings {
        println!("{} {:<18} {}", if f.passed { "ok  " } else { "FAIL" }, f.check, f.detail);
    }
    let failed = report.failures().count();
    if failed > 0 {
        bail!("{} failed {failed} of {} checks", a.plugin.display(), report.findings.len());
    }
    println!("{}: all {} checks passed", a.plugin.display(), report.findings.len());
    if plugin.info().kind == "wasm" {
        let missing = crate::share::read_metadata(&plugin.info().path)?.missing();
        if !missing.is_empty() {
            println!(
                "warning: no {} in the component's metadata: sharing it, add them (`{} metadata FILE --from Cargo.toml`, or the SDK build reads them)",
                missing.join(", "),
                crate::program()
            );
        }
    }
    Ok(())
}
