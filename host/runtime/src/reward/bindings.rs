//! The reward world's generated bindings, their conversions, and the host side of `judge`.

use super::{JudgeMessage, JudgePart, JudgeRequest, RewardManifest, Turn, TurnScore};
use crate::sandbox::Sandbox;
use crate::{Error, Image, Limits, Metric, guest_text};

wasmtime::component::bindgen!({
    world: "reward-function",
    path: "../../wit/v0.3.0",
    // A component that misuses the judge (no requests, too many calls) has its call
    // trapped, naming why.
    imports: { "vagen:env/judge.complete": trappable },
});

pub(crate) use vagen::env::reward_types as wit;
pub(crate) type RewardPre<T> = RewardFunctionPre<T>;

pub(crate) fn manifest(m: wit::RewardManifest) -> RewardManifest {
    RewardManifest {
        name: guest_text(&m.name),
        version: guest_text(&m.version),
        description: guest_text(&m.description),
        default_config: m.default_config,
    }
}

fn image(i: &Image) -> vagen::env::types::Image {
    vagen::env::types::Image { width: i.width, height: i.height, rgb: i.rgb.clone() }
}

pub(crate) fn turn(t: &Turn) -> wit::Turn {
    wit::Turn {
        env_name: t.env_name.clone(),
        format: t.format.clone(),
        response: t.response.clone(),
        think: t.think.clone(),
        observation: t.observation.clone(),
        prediction: t.prediction.clone(),
        answer: t.answer.clone(),
        format_ok: t.format_ok,
        env_reward: t.env_reward,
        done: t.done,
        success: t.success,
        state_before: t.state_before.clone(),
        state_after: t.state_after.clone(),
        images_before: t.images_before.iter().map(|i| image(i)).collect(),
        images_after: t.images_after.iter().map(|i| image(i)).collect(),
    }
}

/// A score as the host keeps it: a non-finite reward or metric, or more metrics than the
/// limits allow, is that turn's error (never a silent 0).
pub(crate) fn turn_score(s: wit::TurnScore, limits: &Limits) -> Result<TurnScore, String> {
    if !s.reward.is_finite() {
        return Err(format!("the reward is {}, not a finite number", s.reward));
    }
    // The bound environments' rewards have: sums and weights stay finite in f32.
    if s.reward.abs() > limits.max_abs_reward {
        return Err(format!("reward {:e} is beyond ±{:e} (max_abs_reward)", s.reward, limits.max_abs_reward));
    }
    if s.metrics.len() > limits.max_metrics {
        return Err(format!("{} metrics, over max_metrics {}", s.metrics.len(), limits.max_metrics));
    }
    if let Some(m) = s.metrics.iter().find(|m| !m.value.is_finite()) {
        return Err(format!("metric {:?} is {}", guest_text(&m.name), m.value));
    }
    Ok(TurnScore {
        reward: s.reward,
        metrics: s.metrics.into_iter().map(|m| Metric { name: guest_text(&m.name), value: m.value }).collect(),
    })
}

pub(crate) fn guest_error(e: wit::RewardError, call: &'static str) -> Error {
    match e {
        wit::RewardError::BadConfig(m) => Error::BadConfig(guest_text(&m)),
        wit::RewardError::Failed(m) => Error::Failed { call, message: guest_text(&m) },
    }
}

fn request(r: vagen::env::judge::Request) -> JudgeRequest {
    JudgeRequest {
        messages: r
            .messages
            .into_iter()
            .map(|m| JudgeMessage {
                role: m.role,
                content: m
                    .content
                    .into_iter()
                    .map(|p| match p {
                        vagen::env::judge::Part::Text(t) => JudgePart::Text(t),
                        vagen::env::judge::Part::Image(i) => {
                            JudgePart::Image(Image { width: i.width, height: i.height, rgb: i.rgb })
                        }
                    })
                    .collect(),
            })
            .collect(),
        max_tokens: r.max_tokens,
        temperature: r.temperature,
    }
}

impl vagen::env::types::Host for Sandbox {}

impl vagen::env::judge::Host for Sandbox {
    fn complete(&mut self, requests: Vec<vagen::env::judge::Request>) -> wasmtime::Result<Vec<Result<String, String>>> {
        if requests.is_empty() {
            wasmtime::bail!("the component called the judge with no requests");
        }
        self.judge_use.calls += 1;
        if self.judge_use.calls > self.judge_budget.calls {
            wasmtime::bail!(
                "the component called the judge more than {} times in one call (limit max_judge_calls)",
                self.judge_budget.calls
            );
        }
        // Epoch ticks are only seen in guest code and may lag on a loaded machine: a call
        // already past its end must not start one more judge call before they catch up.
        if self.judge_use.end().is_some_and(|end| std::time::Instant::now() >= end) {
            return Err(wasmtime::Trap::Interrupt.into());
        }
        let Some(judge) = self.judge.clone() else {
            return Ok(requests.iter().map(|_| Err("this run has no judge configured".to_string())).collect());
        };
        let requests: Vec<JudgeRequest> = requests.into_iter().map(request).collect();
        let started = std::time::Instant::now();
        let mut answers = judge.complete(&requests);
        // The judge's time is the host's, not the component's: what it really took is
        // credited to the call's deadline, up to the call's budget.
        let room = self.judge_budget.credit.saturating_sub(self.judge_use.granted);
        let credit = started.elapsed().min(room);
        self.judge_use.granted += credit;
        answers.resize_with(requests.len(), || Err("the judge gave no answer".into()));
        Ok(answers)
    }
}

/// Puts `judge` (and the types it uses) in the linker every component is instantiated with.
pub(crate) fn add_judge(linker: &mut wasmtime::component::Linker<Sandbox>) -> wasmtime::Result<()> {
    vagen::env::judge::add_to_linker::<Sandbox, wasmtime::component::HasSelf<Sandbox>>(linker, |s| s)?;
    vagen::env::types::add_to_linker::<Sandbox, wasmtime::component::HasSelf<Sandbox>>(linker, |s| s)
}
