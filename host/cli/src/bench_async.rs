//! `vagen-host bench async`: RL steps per minute at each `[async] max_staleness` on one
//! training config, and where each step's time goes (prints figures). Each k is its own
//! `train` run in a child process, on the same machine in one sitting.

use crate::bench::{JsonOutput, TimedConfig};
use crate::bench_dp::{mean_after_warm_up, timed_run};
use anyhow::{Context, Result};
use clap::Args;

#[derive(Args)]
pub struct BenchAsyncArgs {
    #[command(flatten)]
    runs: TimedConfig,
    /// Staleness bounds, comma-separated (0: the synchronous trainer).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    staleness: Vec<usize>,
    /// RL steps per run; the first is a warm-up and not counted.
    #[arg(long, default_value_t = 6)]
    steps: usize,
    // The JSON line: every row.
    #[command(flatten)]
    out: JsonOutput,
}

pub fn bench_async(a: BenchAsyncArgs) -> Result<()> {
    let exe = std::env::current_exe().context("finding this executable")?;
    println!("RL steps of {} ({} per run, the first a warm-up)", a.runs.config.display(), a.steps);
    println!("step: the trainer's; generate: the episodes' own time (on the generator thread when k > 0);");
    println!("wait: the trainer waiting for a batch; gen idle: the generator waiting for weights or");
    println!("for room in the queue; stale: the consumed tokens' mean age in updates");
    println!(
        "{:>2} {:>9} {:>7} {:>9} {:>7} {:>9} {:>8} {:>9} {:>6} {:>9}",
        "k", "steps/min", "step s", "generate", "wait s", "update s", "sync s", "gen idle", "stale", "speed-up"
    );
    let mut base = None;
    let mut rows = vec![];
    for &k in &a.staleness {
        let dir = tempfile::tempdir()?;
        let mut sets = a.runs.overrides.clone();
        sets.push(format!("schedule.steps={}", a.steps));
        sets.push(format!("async.max_staleness={k}"));
        let lines = timed_run(&exe, &a.runs.config, &dir.path().join("run"), &[], &sets)?;
        let mean = |key: &str| mean_after_warm_up(&lines, key);
        let step = mean("timing_s/step");
        // Synchronously, the rollout is the episodes' time and nothing waits.
        let (generate, wait) = match k {
            0 => (mean("timing_s/rollout"), 0.0),
            _ => (mean("timing_s/generate"), mean("timing_s/wait_batch")),
        };
        let speed = *base.get_or_insert(step) / step;
        let (update, sync, idle) =
            (mean("timing_s/update"), mean("timing_s/weight_sync"), mean("timing_s/generator_wait"));
        let stale = if k == 0 { 0.0 } else { mean("async/staleness") };
        let na = |x: f64| if k == 0 { "-".to_string() } else { format!("{x:.3}") };
        println!(
            "{k:>2} {:>9.2} {step:>7.2} {generate:>9.2} {wait:>7.2} {update:>9.2} {:>8} {:>9} {stale:>6.2} {speed:>8.2}x",
            60.0 / step,
            na(sync),
            na(idle),
        );
        rows.push(serde_json::json!({
            "max_staleness": k, "steps_per_min": 60.0 / step, "step_s": step, "generate_s": generate,
            "wait_batch_s": wait, "update_s": update, "weight_sync_s": sync, "generator_wait_s": idle,
            "staleness": stale, "speed_up": speed,
        }));
    }
    if a.out.json {
        println!("{}", serde_json::json!({ "bench_async": rows }));
    }
    Ok(())
}
