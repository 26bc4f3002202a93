//! Harness episodes (`[env] harness`): each task run by the user's agent program against the
//! run's recording endpoint (`vagen_serve`), K runs of a task forming its group. An episode
//! becomes a [`Trajectory`] of one turn per chat call (what it was asked, what the model
//! wrote), so rewards, figures and credit treat it as any other, and its calls' recorded
//! sequences are what training lays out.

use crate::config::TrainConfig;
use anyhow::Result;
use std::collections::BTreeMap;
use vagen_model::{Model, SamplingFor};
use vagen_rollout::{AnswerOrigin, FailedCall, Failure, Outcome, Recorded, Trajectory, TurnRecord};
use vagen_serve::harness::{HarnessConfig, HarnessFailure, HarnessRun, Task};
use vagen_serve::{EpisodeSampling, Reported};

/// A batch of harness episodes: trajectories in group order, and each one's recording.
pub(crate) struct HarnessPlayed {
    pub outcome: Outcome,
    /// By trajectory.
    pub recorded: Vec<Recorded>,
    /// `harness/…` figures over this batch: prefix breaks, calls, seconds, and the means of
    /// what the harnesses reported as metrics.
    pub metrics: BTreeMap<String, f64>,
}

/// `seeds` (groups of `group_size` runs each, numbered from `first_group`) run by the
/// config's harness with `model` answering, for `purpose`; answers are recorded as policy
/// `version` and drawn from `draws` (each run its own stream, so a group's runs differ).
#[allow(clippy::too_many_arguments)]
pub(crate) fn play_harness(
    cfg: &TrainConfig,
    model: &Model,
    seeds: &[u64],
    group_size: usize,
    first_group: usize,
    purpose: SamplingFor,
    version: u64,
    draws: u64,
) -> Result<HarnessPlayed> {
    let harness = cfg.env.harness.as_ref().expect("a harness run");
    let tasks = harness_tasks(cfg, seeds, group_size, first_group, purpose, draws)?;
    // Without reward functions the harness's own report is the only reward.
    let need_reward = cfg.rewards.is_empty();
    let runs = vagen_serve::host_episodes(model, harness, tasks, harness_sampling(cfg, purpose), version, need_reward)?;
    let metrics = figures(&runs);
    let (trajectories, recorded) = harness_trajectories(runs, group_size, first_group);
    let verdict = vagen_rollout::FailurePolicy::new(cfg.env.max_failure_rate).check(&trajectories);
    let requested = trajectories.len();
    Ok(HarnessPlayed { outcome: Outcome { trajectories, requested, verdict }, recorded, metrics })
}

/// The held-out episodes of a harness config as its run evaluates them: `env.val_episodes`
/// seeds from `env.val_seed_start`, `samples` runs each, and how they are sampled (at
/// `temperature`, the config's `val_temperature` unless given).
pub fn held_out_harness(
    cfg: &TrainConfig,
    samples: usize,
    temperature: Option<f64>,
) -> Result<(Vec<Task>, EpisodeSampling)> {
    let seeds: Vec<u64> = (0..cfg.env.val_episodes as u64).map(|i| cfg.env.val_seed_start + i).collect();
    let tasks = harness_tasks(cfg, &seeds, samples, 0, SamplingFor::HeldOut, cfg.schedule.seed)?;
    let mut sampling = harness_sampling(cfg, SamplingFor::HeldOut);
    sampling.temperature = temperature.unwrap_or(sampling.temperature);
    Ok((tasks, sampling))
}

/// `seeds`' tasks, each `group_size` times, their draws apart (see [`play_harness`]).
fn harness_tasks(
    cfg: &TrainConfig,
    seeds: &[u64],
    group_size: usize,
    first_group: usize,
    purpose: SamplingFor,
    draws: u64,
) -> Result<Vec<Task>> {
    let harness = cfg.env.harness.as_ref().expect("a harness run");
    let records = harness.read_tasks().map_err(anyhow::Error::msg)?;
    let split = match purpose {
        SamplingFor::Training => "train",
        SamplingFor::HeldOut => "eval",
    };
    Ok(seeds
        .iter()
        .flat_map(|&s| std::iter::repeat_n(Task::of(s, split, &records), group_size))
        .enumerate()
        .map(|(i, t)| {
            // The run's place in the whole step (every rank's), so ranks draw apart too.
            let run = ((first_group * group_size + i) as u64).wrapping_add(1);
            t.drawing(draws ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        })
        .collect())
}

/// How the run samples harness calls for `purpose`.
fn harness_sampling(cfg: &TrainConfig, purpose: SamplingFor) -> EpisodeSampling {
    let options = cfg.rollout.sampling.options(purpose, vec![], 0);
    EpisodeSampling {
        temperature: options.temperature,
        top_p: options.top_p,
        top_k: options.top_k,
        max_new_tokens: options.max_new_tokens,
        context: cfg.rollout.sequences.max_sequence_tokens,
    }
}

/// Runs in task order (groups of `group_size`, numbered from `first_group`) as trajectories,
/// with their recordings.
pub fn harness_trajectories(
    runs: Vec<HarnessRun>,
    group_size: usize,
    first_group: usize,
) -> (Vec<Trajectory>, Vec<Recorded>) {
    runs.into_iter().enumerate().map(|(i, run)| trajectory(run, first_group + i / group_size, i % group_size)).unzip()
}

/// The stable name of a harness failure (`harness:<kind>` in the failure counts).
fn kind(f: &HarnessFailure) -> &'static str {
    match f {
        HarnessFailure::Spawn { .. } => "spawn",
        HarnessFailure::Crashed(_) => "crashed",
        HarnessFailure::TimedOut(_) => "timeout",
        HarnessFailure::Flooded(_) => "flooded",
        HarnessFailure::NoReward => "no-reward",
        HarnessFailure::BadReward(_) => "bad-reward",
    }
}

/// A run as a trajectory: a turn per call, the episode's reward on the last (with each
/// call's own reward, when reported, on its turn), and its recording.
fn trajectory(run: HarnessRun, group: usize, member: usize) -> (Trajectory, Recorded) {
    let HarnessRun { task, record, failure, stderr_tail, .. } = run;
    let mut t = Trajectory::empty("harness", group, member, task.seed);
    let reported = record.reported.clone().unwrap_or(Reported {
        reward: 0.0,
        success: Some(false),
        call_rewards: vec![],
        metrics: BTreeMap::new(),
    });
    let last = record.calls.len().saturating_sub(1);
    for (k, call) in record.calls.iter().enumerate() {
        let mut reward = reported.call_rewards.get(k).copied().unwrap_or(0.0);
        let end = k == last;
        if end {
            reward += reported.reward;
        }
        t.turns.push(TurnRecord {
            user: call.asked.clone(),
            observation: call.asked.clone(),
            images: vec![],
            response: call.answer.clone(),
            origin: AnswerOrigin::Model,
            token_ids: None,
            logprobs: None,
            versions: None,
            parsed: Default::default(),
            answer: call.answer.clone(),
            env_reward: reward,
            format_reward: 0.0,
            reward,
            done: end,
            success: end && reported.solved(),
            valid_actions: 0,
            effective_actions: 0,
            metrics: if end { reported.metrics.clone().into_iter().collect() } else { vec![] },
            state_before: None,
            state_after: None,
            component_rewards: vec![],
        });
    }
    t.done = true;
    t.success = reported.solved();
    if let Some(f) = failure {
        let tail = stderr_tail.trim();
        let message = if tail.is_empty() { f.to_string() } else { format!("{f}; its stderr ends: {tail}") };
        t.failure = Some(Failure { call: FailedCall::Harness, kind: kind(&f), message });
        t.success = false;
    }
    (t, record.recorded)
}

/// The batch's `harness/…` figures.
fn figures(runs: &[HarnessRun]) -> BTreeMap<String, f64> {
    let n = runs.len().max(1) as f64;
    let mut m = BTreeMap::new();
    let breaks: usize = runs.iter().map(|r| r.record.recorded.breaks).sum();
    m.insert("harness/prefix_breaks".into(), breaks as f64);
    m.insert("harness/calls".into(), runs.iter().map(|r| r.record.calls.len()).sum::<usize>() as f64 / n);
    m.insert("harness/seconds".into(), runs.iter().map(|r| r.seconds).sum::<f64>() / n);
    let mut reported: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (name, value) in runs.iter().filter_map(|r| r.record.reported.as_ref()).flat_map(|r| &r.metrics) {
        let e = reported.entry(format!("harness/{name}")).or_default();
        (e.0, e.1) = (e.0 + value, e.1 + 1.0);
    }
    m.extend(reported.into_iter().map(|(k, (sum, count))| (k, sum / count)));
    m
}

/// The harness of a run, for messages.
pub(crate) fn describe(h: &HarnessConfig) -> String {
    format!("the harness `{}`", h.command.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainConfig;

    /// One call, then a reward of its seed's parity; seed 11's run crashes instead.
    const AGENT: &str = r#"
import json, os, sys, urllib.request
task = json.loads(sys.stdin.readline())
headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
body = {"messages": [{"role": "user", "content": "seed %d" % task["seed"]}], "max_tokens": 3}
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(), headers)
urllib.request.urlopen(request).read()
if task["seed"] == 11:
    sys.exit("no luck")
print(json.dumps({"reward": task["seed"] % 2, "metrics": {"seed": task["seed"]}}))
"#;

    #[test]
    fn k_runs_of_a_task_form_its_group_and_lay_out_with_their_rewards() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("agent.py"), AGENT).unwrap();
        let chats = r#"{"messages": [{"role": "user", "content": "seed 1"}, {"role": "assistant", "content": "ok"}]}"#;
        std::fs::write(dir.path().join("chats.jsonl"), chats).unwrap();
        let text = format!(
            "[env]\nharness = {{ command = [\"python3\", \"agent.py\"], dir = {:?}, concurrency = 4 }}\n\
             groups = 2\ngroup_size = 3\nmax_failure_rate = 0.5\n[sft]\ndata = {:?}\n[rollout]\nmax_new_tokens = 4\n",
            dir.path().display().to_string(),
            dir.path().join("chats.jsonl").display().to_string(),
        );
        let cfg = TrainConfig::parse(&text, "test.toml", &[]).unwrap();
        let model = vagen_model::default_model(vagen_model::DEFAULT_SEED, Default::default()).unwrap();
        let played = play_harness(&cfg, &model, &[10, 11], 3, 5, SamplingFor::Training, 2, 0).unwrap();
        let trajs = &played.outcome.trajectories;
        let shape: Vec<(usize, usize, u64)> = trajs.iter().map(|t| (t.group, t.member, t.seed)).collect();
        assert_eq!(shape, [(5, 0, 10), (5, 1, 10), (5, 2, 10), (6, 0, 11), (6, 1, 11), (6, 2, 11)]);
        for t in &trajs[..3] {
            assert_eq!(t.failure, None);
            assert_eq!((t.turns.len(), t.turns[0].reward, t.success), (1, 0.0, false), "seed 10: reward 0");
        }
        for t in &trajs[3..] {
            let f = t.failure.as_ref().expect("seed 11's runs crash");
            assert_eq!(f.label(), "harness:crashed");
            assert!(f.message.contains("no luck"), "the stderr's tail is in the message: {}", f.message);
        }
        assert!(played.outcome.verdict.is_ok(), "3 of 6 failed, within max_failure_rate 0.5");
        assert_eq!(played.metrics["harness/seed"], 10.0, "reported metrics are averaged");
        assert_eq!(played.metrics["harness/calls"], 1.0);
        let answers: Vec<&Vec<u32>> = played.recorded[..3].iter().map(|r| &r.sequences[0].ids).collect();
        assert!(answers[0] != answers[1] || answers[1] != answers[2], "the runs of one task draw apart");
        let batch = crate::collect::lay_out_recorded(trajs, played.recorded);
        assert_eq!(batch.len(), 3, "failed episodes are not laid out");
        assert_eq!(batch.seqs.group, vec![5, 5, 5]);
        for seq in 0..batch.len() {
            let range = batch.tokens_of(seq);
            let end = range.start + batch.turns.end[batch.turns_of(seq).start];
            assert_eq!(end, range.end - 1, "the turn ends on the sequence's last (sampled) token");
            assert!(batch.tokens.loss_mask[end] && batch.tokens.by_model[end]);
        }
    }
}
