//! An evaluation's figures from its episode records: success over every sample (avg@n) with
//! a Wilson interval, pass@k by the unbiased estimator with a bootstrap interval over seeds,
//! mean reward and turns, the format-valid rate, how episodes ended; episodes lost to the
//! endpoint counted apart and left out of every figure.

use super::records::{EpisodeRecord, Finish, Settings};
use anyhow::Result;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// 95 %: the normal quantile of the intervals.
const Z95: f64 = 1.959_963_984_540_054;
const RESAMPLES: usize = 2000;

/// A figure with its 95 % interval and how the interval was made.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Seeds × samples.
    pub requested: usize,
    /// Episodes with an outcome (every one but those lost).
    pub judged: usize,
    /// Episodes the policy's server never answered.
    pub lost: usize,
    pub env_failures: usize,
    /// Successes over judged episodes (an env failure is no success): avg@n.
    pub success: Option<Estimate>,
    /// `wilson` (success), `bootstrap-seeds` (pass@k: seeds resampled).
    pub intervals: BTreeMap<String, String>,
    /// pass@k for k = 1, 2, 4, … and n, over the seeds with at least k judged samples.
    pub pass_at_k: BTreeMap<String, Estimate>,
    pub mean_reward: Option<f64>,
    pub mean_turns: Option<f64>,
    /// Turns whose answer was in the format / turns.
    pub format_valid_rate: Option<f64>,
    pub finish: BTreeMap<Finish, usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
    pub settings: Settings,
    pub wall_seconds: f64,
    /// Requests sent, retried and failed (`--policy openai`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, usize>,
}

impl Summary {
    pub fn of(
        records: &[EpisodeRecord],
        settings: &Settings,
        wall_seconds: f64,
        requests: Option<[(&'static str, usize); 3]>,
    ) -> Result<Self> {
        let judged: Vec<&EpisodeRecord> = records.iter().filter(|r| r.finish != Finish::Lost).collect();
        let played: Vec<&&EpisodeRecord> = judged.iter().filter(|r| r.finish != Finish::EnvFailure).collect();
        let wins = judged.iter().filter(|r| r.success).count();
        let success = match judged.len() {
            0 => None,
            n => {
                let (low, high) = vagen_algo::wilson_interval(wins, n, Z95)?;
                Some(Estimate { value: wins as f64 / n as f64, low, high })
            }
        };
        let mean = |f: &dyn Fn(&EpisodeRecord) -> f64| {
            (!played.is_empty()).then(|| played.iter().map(|r| f(r)).sum::<f64>() / played.len() as f64)
        };
        let turns: Vec<bool> = played.iter().flat_map(|r| r.steps.iter().map(|t| t.format_valid)).collect();
        let mut finish = BTreeMap::new();
        for r in records {
            *finish.entry(r.finish).or_insert(0) += 1;
        }
        let intervals = [("success", "wilson"), ("pass_at_k", "bootstrap-seeds")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(Summary {
            requested: settings.seeds * settings.samples,
            judged: judged.len(),
            lost: records.len() - judged.len(),
            env_failures: judged.len() - played.len(),
            success,
            intervals,
            pass_at_k: pass_at_ks(&judged, settings.samples)?,
            mean_reward: mean(&|r| r.reward),
            mean_turns: mean(&|r| r.turns as f64),
            format_valid_rate: (!turns.is_empty())
                .then(|| turns.iter().filter(|&&v| v).count() as f64 / turns.len() as f64),
            finish,
            first_failure: judged.iter().find_map(|r| r.error.clone()),
            settings: settings.clone(),
            wall_seconds,
            requests: requests.into_iter().flatten().map(|(k, v)| (k.to_string(), v)).collect(),
        })
    }

    /// The figures as a person reads them.
    pub fn print(&self, out: Option<&std::path::Path>) {
        let s = &self.settings;
        println!(
            "{} on {} {} ({} seeds from {}, {} sample{} each, temperature {})",
            s.model.name,
            s.env.name,
            s.env.version,
            s.seeds,
            s.seed_start,
            s.samples,
            if s.samples == 1 { "" } else { "s" },
            s.temperature
        );
        if let Some(e) = &self.success {
            println!("  success (avg@{})  {:.3}  [{:.3}, {:.3}] (95%, Wilson)", s.samples, e.value, e.low, e.high);
        }
        for (k, e) in &self.pass_at_k {
            println!("  {k:<16} {:.3}  [{:.3}, {:.3}] (95%, bootstrap over seeds)", e.value, e.low, e.high);
        }
        let shown = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        println!("  mean reward      {}", shown(self.mean_reward));
        println!("  mean turns       {}", shown(self.mean_turns));
        println!("  format valid     {}", shown(self.format_valid_rate));
        let ends: Vec<String> = self.finish.iter().map(|(f, n)| format!("{n} {}", finish_name(*f))).collect();
        println!("  ended            {}", ends.join(", "));
        if self.lost > 0 {
            println!("  lost             {} (the endpoint never answered; not counted)", self.lost);
        }
        if let Some(out) = out {
            println!("  results          {}", out.display());
        }
    }
}

pub fn finish_name(f: Finish) -> String {
    serde_json::to_value(f).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
}

/// pass@k per k, over the seeds with at least k judged samples.
fn pass_at_ks(judged: &[&EpisodeRecord], samples: usize) -> Result<BTreeMap<String, Estimate>> {
    let mut per_seed: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for r in judged {
        let e = per_seed.entry(r.seed).or_default();
        e.0 += 1;
        e.1 += usize::from(r.success);
    }
    let mut out = BTreeMap::new();
    for k in vagen_algo::reported_ks(samples) {
        let values: Vec<f64> = per_seed
            .values()
            .filter(|(n, _)| *n >= k)
            .map(|&(n, c)| vagen_algo::pass_at_k(n, c, k))
            .collect::<Result<_, _>>()?;
        if values.is_empty() {
            continue;
        }
        let value = values.iter().sum::<f64>() / values.len() as f64;
        let (low, high) = bootstrap_mean(&values, RESAMPLES, k as u64);
        out.insert(format!("pass@{k}"), Estimate { value, low, high });
    }
    Ok(out)
}

/// The 2.5th and 97.5th percentiles of `values`' mean over `resamples` resamplings (with
/// replacement, drawn from `seed`: the same records give the same interval).
fn bootstrap_mean(values: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = values.len();
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| values[(rng.next_u64() % n as u64) as usize]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    (at(0.025), at(0.975))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_interval_holds_the_mean_and_shrinks_with_more_seeds() {
        let few = [0.0, 1.0, 0.5, 0.25];
        let many: Vec<f64> = few.iter().cycle().take(400).copied().collect();
        let (l1, h1) = bootstrap_mean(&few, RESAMPLES, 1);
        let (l2, h2) = bootstrap_mean(&many, RESAMPLES, 1);
        let mean = 0.4375;
        assert!(l1 <= mean && mean <= h1 && l2 <= mean && mean <= h2);
        assert!(h2 - l2 < (h1 - l1) / 3.0, "{l1}..{h1} vs {l2}..{h2}");
        assert_eq!(bootstrap_mean(&[0.7; 5], 100, 3), (0.7, 0.7));
    }
}
