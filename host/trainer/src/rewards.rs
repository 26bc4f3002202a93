//! Reward functions (`[[reward]]`): components that score every turn of a step's episodes
//! after the rollout. A turn's score, times the entry's weight, is added to the turn's
//! reward, so it lands on the turn's last token like the env's (turn-level and bi-level
//! estimators see it). A turn a component could not score is never a 0: its trajectory
//! is left out of the update, counted, and more than `env.max_failure_rate` of the turns
//! failed stops the run naming the component and the first error.

use crate::config::{JudgeSection, RewardSection, TrainConfig};
use crate::openai_judge::{OpenAiJudge, OpenAiOptions};
use anyhow::{Context, Result, bail};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vagen_model::LoadOptions;
use vagen_policy::EndpointOptions;
use vagen_policy::LocalJudge;
use vagen_rollout::{Format, Trajectory};
use vagen_runtime::Runtime;
use vagen_runtime::reward::{Judge, JudgePart, JudgeRequest, Scorer, Turn};

pub(crate) struct RewardComponent {
    pub name: String,
    pub weight: f64,
    scorer: RefCell<Scorer>,
}

/// The run's reward functions, loaded and configured, and their judge.
pub(crate) struct Rewards {
    pub components: Vec<RewardComponent>,
    /// The judge as the components see it: keeps the last call's first exchanges.
    recorder: Option<Arc<Recording>>,
    /// The judge's counts at the last step's end.
    seen: Vec<usize>,
}

pub(crate) fn load(cfg: &TrainConfig, runtime: &Runtime, run_dir: &Path) -> Result<Rewards> {
    let judge: Option<Arc<dyn Judge>> = match &cfg.judge {
        None => None,
        Some(JudgeSection::Local { model, device, dtype }) => {
            let options = LoadOptions { device: device.resolve()?, dtype: *dtype, ..LoadOptions::default() };
            let model = model
                .load(vagen_model::DEFAULT_SEED, options)
                .with_context(|| format!("loading the judge model {model}"))?;
            Some(Arc::new(LocalJudge::new(model)))
        }
        Some(JudgeSection::Openai {
            url, model, concurrency, requests_per_minute, timeout_s, retries, cache, ..
        }) => {
            cfg.judge_access.check(url)?;
            let endpoint = EndpointOptions {
                url: url.clone(),
                model: model.clone(),
                api_key: cfg.judge_access.key(),
                concurrency: *concurrency,
                requests_per_minute: *requests_per_minute,
                timeout: Duration::from_secs_f64(*timeout_s),
                retries: *retries,
                backoff: Duration::from_millis(500),
            };
            let cache = cache.then(|| run_dir.join("judge-cache"));
            Some(Arc::new(OpenAiJudge::new(OpenAiOptions { endpoint, cache })?))
        }
    };
    let recorder = judge.map(|inner| Arc::new(Recording { inner, last: Mutex::new(vec![]) }));
    let judge = recorder.clone().map(|r| r as Arc<dyn Judge>);
    let components =
        cfg.rewards.iter().map(|r| RewardComponent::load(runtime, r, judge.clone())).collect::<Result<_>>()?;
    let seen = judge.as_ref().map_or(vec![], |j| j.counts().iter().map(|c| c.1).collect());
    Ok(Rewards { components, recorder, seen })
}

impl RewardComponent {
    fn load(runtime: &Runtime, r: &RewardSection, judge: Option<Arc<dyn Judge>>) -> Result<Self> {
        let plugin = runtime
            .load_reward(&r.plugin)
            .with_context(|| format!("loading the reward function {}", r.plugin.display()))?;
        let config = serde_json::to_string(&r.config)?;
        let scorer = plugin
            .create(&config, judge)
            .with_context(|| format!("configuring the reward function {}", r.plugin.display()))?;
        Ok(RewardComponent { name: plugin.manifest().name.clone(), weight: r.weight, scorer: RefCell::new(scorer) })
    }
}

impl Rewards {
    /// [`score`] with every component, and the judge's work this step (its
    /// [`Judge::counts`]: `calls` and `requests` for the local judge; `sent`, `cache_hits`,
    /// `retries` and `failed` for an endpoint), as `reward/judge/<name>`.
    pub fn score(&mut self, trajs: &mut [Trajectory], format: Format, max_failure_rate: f64) -> Result<Scored> {
        let mut scored = score(&self.components, trajs, format, max_failure_rate)?;
        if let Some(j) = &self.recorder {
            let now = j.counts();
            for ((name, n), before) in now.iter().zip(&self.seen) {
                scored.metrics.insert(format!("reward/judge/{name}"), (n - before) as f64);
            }
            self.seen = now.iter().map(|c| c.1).collect();
        }
        if let Some(r) = &self.recorder {
            scored.judged = std::mem::take(&mut *r.last.lock().unwrap_or_else(|p| p.into_inner()));
        }
        Ok(scored)
    }
}

/// Judge exchanges kept for the report.
const KEPT: usize = 6;

/// A judge that keeps the first [`KEPT`] requests of its last call and their answers.
struct Recording {
    inner: Arc<dyn Judge>,
    last: Mutex<Vec<(String, Result<String, String>)>>,
}

impl Judge for Recording {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        let answers = self.inner.complete(requests);
        let kept = requests
            .iter()
            .zip(&answers)
            .take(KEPT)
            .map(|(r, a)| {
                let text: Vec<String> = r
                    .messages
                    .iter()
                    .map(|m| {
                        let parts: String = m
                            .content
                            .iter()
                            .map(|p| match p {
                                JudgePart::Text(t) => t.clone(),
                                JudgePart::Image(i) => format!("[image {}x{}]", i.width, i.height),
                            })
                            .collect();
                        format!("{}: {parts}", m.role)
                    })
                    .collect();
                (text.join("\n"), a.clone())
            })
            .collect();
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = kept;
        answers
    }

    fn counts(&self) -> Vec<(&'static str, usize)> {
        self.inner.counts()
    }
}

/// What scoring did: figures for the step's log, and the trajectories to leave out.
#[derive(Debug, Default)]
pub(crate) struct Scored {
    /// `reward/<name>/<metric>` means over the scored turns, `reward/<name>/mean` and
    /// `reward/<name>/failed_turns`.
    pub metrics: BTreeMap<String, f64>,
    /// Trajectories with a turn some component could not score.
    pub unscored: Vec<usize>,
    /// For the report: the judge's last exchanges (prompt, answer), and per component a
    /// few turns' responses with what it paid or why not.
    pub judged: Vec<(String, Result<String, String>)>,
    pub examples: Vec<(String, String, Result<f64, String>)>,
}

/// The turns of `trajs` (failed ones aside) as reward functions see them, with where each
/// came from.
fn turns(trajs: &[Trajectory], format: Format) -> (Vec<Turn>, Vec<(usize, usize)>) {
    let format = serde_json::to_value(format).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    let mut out = vec![];
    let mut at = vec![];
    for (i, t) in trajs.iter().enumerate().filter(|(_, t)| t.failure.is_none()) {
        for (k, turn) in t.turns.iter().enumerate() {
            let after = t.turns.get(k + 1).map_or(&t.end_images, |next| &next.images);
            out.push(Turn {
                env_name: t.env.clone(),
                format: format.clone(),
                response: turn.response.clone(),
                think: turn.parsed.think.clone(),
                observation: turn.parsed.observation.clone(),
                prediction: turn.parsed.prediction.clone(),
                answer: turn.parsed.answer.clone(),
                format_ok: turn.parsed.format_ok,
                env_reward: turn.env_reward,
                done: turn.done,
                success: turn.success,
                state_before: turn.state_before.clone().unwrap_or_default(),
                state_after: turn.state_after.clone().unwrap_or_default(),
                images_before: turn.images.clone(),
                images_after: after.clone(),
            });
            at.push((i, k));
        }
    }
    (out, at)
}

/// Scores every turn with every component and adds the weighted rewards to the turns.
pub(crate) fn score(
    components: &[RewardComponent],
    trajs: &mut [Trajectory],
    format: Format,
    max_failure_rate: f64,
) -> Result<Scored> {
    let mut scored = Scored::default();
    if components.is_empty() {
        return Ok(scored);
    }
    let (turns, at) = turns(trajs, format);
    if turns.is_empty() {
        return Ok(scored);
    }
    let mut unscored = std::collections::BTreeSet::new();
    for c in components {
        let results = match c.scorer.borrow_mut().score(&turns) {
            Ok(r) => r,
            // The call failed as a whole (deadline, memory, trap, a wrong count): every turn
            // of it is unscored; the scorer is re-created for the next step.
            Err(e) => turns.iter().map(|_| Err(e.to_string())).collect(),
        };
        let mut sums: BTreeMap<String, f64> = BTreeMap::new();
        let (mut ok, mut first_error) = (0usize, None);
        let examples: Vec<Result<f64, String>> =
            results.iter().take(4).map(|r| r.as_ref().map(|s| s.reward).map_err(Clone::clone)).collect();
        for (&(i, k), r) in at.iter().zip(results) {
            match r {
                Ok(s) => {
                    let turn = &mut trajs[i].turns[k];
                    turn.reward += c.weight * s.reward;
                    turn.component_rewards.push((c.name.clone(), s.reward));
                    *sums.entry("mean".into()).or_default() += s.reward;
                    for m in s.metrics {
                        *sums.entry(m.name).or_default() += m.value;
                    }
                    ok += 1;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                    unscored.insert(i);
                }
            }
        }
        let failed = turns.len() - ok;
        for (&(i, k), r) in at.iter().zip(&examples).take(4) {
            let response = trajs[i].turns[k].response.clone();
            scored.examples.push((c.name.clone(), response, r.clone()));
        }
        for (name, sum) in sums {
            scored.metrics.insert(format!("reward/{}/{name}", c.name), sum / ok.max(1) as f64);
        }
        scored.metrics.insert(format!("reward/{}/failed_turns", c.name), failed as f64);
        if failed as f64 > max_failure_rate * turns.len() as f64 {
            bail!(
                "the reward function {} could not score {failed} of {} turns (more than env.max_failure_rate {max_failure_rate}): {}",
                c.name,
                turns.len(),
                first_error.unwrap_or_default()
            );
        }
    }
    scored.unscored = unscored.into_iter().collect();
    Ok(scored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::rc::Rc;
    use vagen_model::{GenerateOptions, LoadOptions, default_model};
    use vagen_policy::ModelPolicy;
    use vagen_rollout::{EpisodeShape, RolloutConfig, rollout};
    use vagen_runtime::Limits;

    fn built(path: &str) -> std::path::PathBuf {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
        assert!(p.is_file(), "{} is not built: run `cargo xtask test`", p.display());
        p
    }

    #[test]
    fn a_reward_lands_on_its_turns_last_token_in_the_estimators_input() {
        let runtime = Runtime::new(Limits::default()).unwrap();
        let section = RewardSection {
            plugin: built("target/rewards/hostile-reward.wasm"),
            config: toml::toml! { mode = "constant"
            value = 0.25 },
            weight: 2.0,
        };
        let components = vec![RewardComponent::load(&runtime, &section, None).unwrap()];
        let env = built("target/plugins/frozenlake.wasm");
        let plugin = runtime.load(&env).unwrap();
        let model = Rc::new(default_model(vagen_model::DEFAULT_SEED, LoadOptions::default()).unwrap());
        let options = GenerateOptions { max_new_tokens: 8, ..Default::default() };
        let mut policy = ModelPolicy::new(model.clone(), options);
        let config = RolloutConfig { format: Format::Grounding, ..Default::default() };
        let shape = EpisodeShape { record_states: true, ..EpisodeShape::groups_of(2).with_max_turns(3) };
        let mut trajs = rollout(plugin.as_ref(), "{}", &[0, 1], &config, &shape, &mut policy).unwrap();
        let before: Vec<f64> = trajs.iter().flat_map(|t| t.turns.iter().map(|u| u.reward)).collect();
        assert!(trajs.iter().flat_map(|t| &t.turns).all(|u| u.state_before.is_some() && u.state_after.is_some()));
        let scored = score(&components, &mut trajs, Format::Grounding, 0.0).unwrap();
        assert!(scored.unscored.is_empty());
        assert_eq!(scored.metrics["reward/hostile-reward/mean"], 0.25);
        assert_eq!(scored.metrics["reward/hostile-reward/failed_turns"], 0.0);
        let after: Vec<f64> = trajs.iter().flat_map(|t| t.turns.iter().map(|u| u.reward)).collect();
        for (b, a) in before.iter().zip(&after) {
            assert!((a - b - 0.5).abs() < 1e-12, "weight 2 x 0.25 on every turn: {b} -> {a}");
        }
        let text = format!("[env]\nplugin = {:?}\ngroups = 2\ngroup_size = 2\n", env.display().to_string());
        let cfg = TrainConfig::parse(&text, "test.toml", &[]).unwrap();
        let batch = crate::collect::lay_out(&cfg, &vagen_policy::ChatModel(model.as_ref()), &trajs).unwrap();
        let mut k = 0;
        for seq in 0..batch.len() {
            let start = batch.tokens_of(seq).start;
            for turn in batch.turns_of(seq) {
                let end = start + batch.turns.end[turn];
                assert_eq!(batch.tokens.rewards[end], after[k], "turn {k}'s reward on its last token");
                assert!(batch.tokens.loss_mask[end], "the last token is the turn's own answer");
                k += 1;
            }
        }
        assert_eq!(k, after.len());
    }

    #[test]
    fn a_failing_reward_leaves_its_trajectories_out_and_too_many_stop_the_run() {
        let runtime = Runtime::new(Limits { call_timeout_ms: 300, ..Limits::default() }).unwrap();
        let section = |mode: &str| RewardSection {
            plugin: built("target/rewards/hostile-reward.wasm"),
            config: [("mode".to_string(), toml::Value::String(mode.into()))].into_iter().collect(),
            weight: 1.0,
        };
        let mut t = Trajectory::empty("frozenlake", 0, 0, 0);
        t.turns = vec![crate::step_batch::tests::turn("a", 0.0, vagen_rollout::AnswerOrigin::Model)];
        let mut trajs = vec![t.clone(), t];
        let refusing = vec![RewardComponent::load(&runtime, &section("refuse"), None).unwrap()];
        let scored = score(&refusing, &mut trajs, Format::NoThink, 1.0).unwrap();
        assert_eq!(scored.unscored, vec![0, 1]);
        assert_eq!(scored.metrics["reward/hostile-reward/failed_turns"], 2.0);
        assert_eq!(trajs[0].turns[0].reward, 0.0, "nothing added for an unscored turn");
        let looping = vec![RewardComponent::load(&runtime, &section("loop"), None).unwrap()];
        let err = score(&looping, &mut trajs, Format::NoThink, 0.5).unwrap_err().to_string();
        assert!(err.contains("hostile-reward") && err.contains("2 of 2 turns") && err.contains("timed out"), "{err}");
    }
}
