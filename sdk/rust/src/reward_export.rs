//! The reward world's WebAssembly export: generated WIT types in, SDK types out.

use crate::__private::reward_bindings::exports::vagen::env::reward as wit_reward;
use crate::__private::reward_bindings::vagen::env::{judge as wit_judge, reward_types as wit, types as wit_types};
use crate::reward::{
    Image, Judge, JudgeRequest, Part, Reward, RewardPackage, Turn, TurnScore, default_config, read_config,
};
use std::cell::RefCell;
use std::marker::PhantomData;

/// The exported component: `RewardComponent<MyReward>`.
pub struct RewardComponent<T>(PhantomData<T>);

/// One exported `scorer` resource.
pub struct ScorerInstance<T>(RefCell<T>);

impl<T: Reward + RewardPackage> wit_reward::Guest for RewardComponent<T> {
    type Scorer = ScorerInstance<T>;

    fn get_manifest() -> wit::RewardManifest {
        wit::RewardManifest {
            name: T::NAME.into(),
            version: T::VERSION.into(),
            description: T::DESCRIPTION.into(),
            default_config: default_config::<T>(),
        }
    }
}

struct HostJudge;

impl Judge for HostJudge {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        let requests: Vec<wit_judge::Request> = requests
            .iter()
            .map(|r| wit_judge::Request {
                messages: r
                    .messages
                    .iter()
                    .map(|m| wit_judge::Message {
                        role: m.role.clone(),
                        content: m
                            .content
                            .iter()
                            .map(|p| match p {
                                Part::Text(t) => wit_judge::Part::Text(t.clone()),
                                Part::Image(i) => wit_judge::Part::Image(wit_types::Image {
                                    width: i.width,
                                    height: i.height,
                                    rgb: i.rgb.clone(),
                                }),
                            })
                            .collect(),
                    })
                    .collect(),
                max_tokens: r.max_tokens,
                temperature: r.temperature,
            })
            .collect();
        wit_judge::complete(&requests)
    }
}

fn image(i: wit_types::Image) -> Image {
    Image { width: i.width, height: i.height, rgb: i.rgb }
}

impl<T: Reward + RewardPackage> wit_reward::GuestScorer for ScorerInstance<T> {
    fn create(config: String) -> Result<wit_reward::Scorer, wit::RewardError> {
        let config = read_config::<T>(&config).map_err(wit::RewardError::BadConfig)?;
        let scorer = T::new(config).map_err(wit::RewardError::BadConfig)?;
        Ok(wit_reward::Scorer::new(ScorerInstance(RefCell::new(scorer))))
    }

    fn score(&self, turns: Vec<wit::Turn>) -> Vec<Result<wit::TurnScore, String>> {
        let turns: Vec<Turn> = turns
            .into_iter()
            .map(|t| Turn {
                env_name: t.env_name,
                format: t.format,
                response: t.response,
                think: t.think,
                observation: t.observation,
                prediction: t.prediction,
                answer: t.answer,
                format_ok: t.format_ok,
                env_reward: t.env_reward,
                done: t.done,
                success: t.success,
                state_before: t.state_before,
                state_after: t.state_after,
                images_before: t.images_before.into_iter().map(image).collect(),
                images_after: t.images_after.into_iter().map(image).collect(),
            })
            .collect();
        self.0
            .borrow_mut()
            .score(&turns, &HostJudge)
            .into_iter()
            .map(|r| {
                r.map(|s: TurnScore| wit::TurnScore {
                    reward: s.reward,
                    metrics: s.metrics.into_iter().map(|(name, value)| wit_types::Metric { name, value }).collect(),
                })
            })
            .collect()
    }
}
