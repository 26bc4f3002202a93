//! The multi-turn driver: groups × members of one env, stepped in parallel, turn by turn,
//! until every episode is done, out of turns or actions, or failed.

use crate::config::{EpisodeShape, History, RolloutConfig};
use crate::failure::{FailedCall, Failure};
use crate::policy::{AnswerOrigin, Policy, PolicyError, Request, Response};
use crate::prompter::feedback;
use crate::{Format, Parsed};
use serde::Serialize;
use std::num::NonZeroU32;
use std::sync::Arc;
use vagen_runtime::{ActionSpace, EnvPool, Environment, Image, Manifest, Observation, Plugin, StepResult};

/// Why an episode ended early without failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Truncation {
    /// The next prompt left no room to answer in the policy's context window.
    Context,
    /// The policy gave no answer (a person ended input).
    Stopped,
}

/// One turn: what the policy saw last, what it wrote, what the env made of it.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRecord {
    pub user: String,
    /// The env's observation text inside `user` (with its state description when asked
    /// for), without the feedback on the previous answer or the format reminder. Part of
    /// `user`, so not written again.
    #[serde(skip)]
    pub observation: String,
    /// Images of the observation shown in `user`, in `<image>` order: held once here and
    /// shared (not copied) by later prompts and the training sequence.
    #[serde(skip)]
    pub images: Vec<Arc<Image>>,
    pub response: String,
    /// Who wrote the response.
    pub origin: AnswerOrigin,
    pub token_ids: Option<Vec<u32>>,
    pub logprobs: Option<Vec<f32>>,
    /// The weights' version that sampled each id (asynchronous RL; see [`Response::versions`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions: Option<Vec<u64>>,
    pub parsed: Parsed,
    /// What was sent to `step`.
    pub answer: String,
    pub env_reward: f64,
    pub format_reward: f64,
    /// env + format reward.
    pub reward: f64,
    pub done: bool,
    pub success: bool,
    pub valid_actions: u32,
    pub effective_actions: u32,
    pub metrics: Vec<(String, f64)>,
    /// The env's `describe_state` before and after the step (`EpisodeShape::record_states`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_after: Option<String>,
    /// What each reward function paid this turn (before its weight), by name; already in
    /// `reward` (weighted).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub component_rewards: Vec<(String, f64)>,
}

impl TurnRecord {
    /// A key of the env state this turn acted in (the observation and its images, not the
    /// feedback on how the episode got there): turns with equal keys acted in the same
    /// state, whatever the path to it. Stable within a process.
    /// The turn as the token layout (and a model's prompt) takes it.
    pub fn assistant_turn(&self) -> crate::AssistantTurn {
        crate::AssistantTurn {
            user: self.user.clone(),
            response: self.response.clone(),
            token_ids: self.token_ids.clone(),
            logprobs: self.logprobs.clone(),
            reward: self.reward as f32,
            images: self.images.clone(),
        }
    }

    pub fn state_key(&self) -> u64 {
        state_key(&self.observation, &self.images)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Trajectory {
    pub env: String,
    pub group: usize,
    pub member: usize,
    pub seed: u64,
    /// Env system prompt + format instructions.
    pub system: String,
    pub turns: Vec<TurnRecord>,
    pub done: bool,
    pub success: bool,
    /// Why the episode could not go on (an env fault): excluded from training.
    pub failure: Option<Failure>,
    /// Why it stopped before the env said done, when it was not out of turns: trained on
    /// as far as it went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncation>,
    /// The answer whose step failed, for a reproducer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_answer: Option<String>,
    /// The last observation the env gave (after the last step, or the reset's), which no
    /// turn acted on when the episode ended.
    #[serde(skip)]
    pub end_observation: String,
    #[serde(skip)]
    pub end_images: Vec<Arc<Image>>,
}

impl Trajectory {
    /// A trajectory not started yet.
    pub fn empty(env: &str, group: usize, member: usize, seed: u64) -> Self {
        Trajectory {
            env: env.to_string(),
            group,
            member,
            seed,
            system: String::new(),
            turns: vec![],
            done: false,
            success: false,
            failure: None,
            truncated: None,
            failed_answer: None,
            end_observation: String::new(),
            end_images: vec![],
        }
    }

    pub fn total_reward(&self) -> f64 {
        self.turns.iter().map(|t| t.reward).sum()
    }

    /// Every answer sent to `step`, the failing one included: replaying them from `seed`
    /// reproduces the episode.
    pub fn answers(&self) -> Vec<String> {
        self.turns.iter().map(|t| t.answer.clone()).chain(self.failed_answer.clone()).collect()
    }

    /// The turns as the token layout takes them.
    pub fn assistant_turns(&self) -> Vec<crate::AssistantTurn> {
        self.turns.iter().map(TurnRecord::assistant_turn).collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("creating {env} instances: {message}")]
    Create { env: String, message: String },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("the policy answered {got} of {asked} requests")]
    Answers { asked: usize, got: usize },
    /// A streaming policy answered a trajectory that has no request out.
    #[error("the policy answered trajectory {0}, which was not waiting for an answer")]
    Unasked(usize),
    /// The caller's handling of finished episodes (writing a log) failed.
    #[error("{0}")]
    Output(String),
}

/// Runs `seeds.len()` groups of `shape.group_size` episodes of `plugin`.
pub fn rollout(
    plugin: &dyn Plugin,
    env_config: &str,
    seeds: &[u64],
    config: &RolloutConfig,
    shape: &EpisodeShape,
    policy: &mut dyn Policy,
) -> Result<Vec<Trajectory>, RolloutError> {
    policy.begin_rollout();
    let mut play = Play::start(plugin, env_config, seeds, config, shape)?;
    let turns = plugin.max_turns(shape.max_turns.map(NonZeroU32::get)) as usize;
    let needs_oracle = policy.needs_oracle();
    match policy.streaming() {
        // Each episode on its own: its next prompt asked the moment its step returns.
        Some(streaming) if !needs_oracle && config.stream => play.stream(streaming, turns)?,
        _ => {
            for turn in 0..turns {
                if !play.turn(turn, policy)? {
                    break;
                }
            }
        }
    }
    Ok(play.finish())
}

/// The episodes of one `rollout` call. Turn by turn (`turn`): each turn asks the oracle
/// (when the policy wants it), asks the policy, parses, steps every active instance,
/// records. Or each episode on its own (`stream`, `stream.rs`).
pub(crate) struct Play<'a> {
    pub config: &'a RolloutConfig,
    pub shape: &'a EpisodeShape,
    manifest: Arc<Manifest>,
    seeds: &'a [u64],
    /// Members per group.
    g: usize,
    pub pool: EnvPool,
    /// One per instance of the pool, in its order.
    pub episodes: Vec<Episode>,
}

/// One episode: its record so far and what its instance needs to go on.
pub(crate) struct Episode {
    pub traj: Trajectory,
    /// The instance's own: its config may set another separator or per-turn limit than the
    /// manifest's defaults.
    space: Arc<ActionSpace>,
    /// What the episode shows the policy next; `None` once it has ended, and while a turn
    /// has it out (asked, not yet recorded).
    pub current: Option<Shown>,
    actions_sent: usize,
}

impl Episode {
    /// The episode goes no further: what it showed last is where it ended.
    fn end_at(&mut self, shown: Shown) {
        (self.traj.end_observation, self.traj.end_images) = (shown.observation, shown.images);
    }

    fn stop(&mut self) {
        if let Some(shown) = self.current.take() {
            self.end_at(shown);
        }
    }
}

/// An episode's turn between the policy's answer and the env's step: what it was shown,
/// the response, its parse, and what goes to `step`.
pub(crate) struct Answered {
    pub shown: Shown,
    pub response: Response,
    pub parsed: Parsed,
    pub answer: String,
}

/// What an episode's env did with an answer: the step, and the state descriptions before
/// and after it (when the records keep them).
pub(crate) type EnvTurn = Result<(StepResult, Option<(String, String)>), vagen_runtime::Error>;

impl<'a> Play<'a> {
    /// Instances created and reset; an episode that cannot start has failed.
    fn start(
        plugin: &dyn Plugin,
        env_config: &str,
        seeds: &'a [u64],
        config: &'a RolloutConfig,
        shape: &'a EpisodeShape,
    ) -> Result<Self, RolloutError> {
        let manifest = Arc::new(plugin.manifest().clone());
        let g = shape.group_size.get();
        let n = seeds.len() * g;
        let envs = (0..n)
            .map(|_| plugin.create(env_config))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RolloutError::Create { env: manifest.name.clone(), message: e.to_string() })?;
        let mut pool = EnvPool::new(envs);
        let spaces = pool.for_each(|_, env| Arc::new(env.action_space().clone()));
        let episodes = spaces
            .into_iter()
            .enumerate()
            .map(|(i, space)| Episode {
                traj: Trajectory::empty(&manifest.name, i / g, i % g, seeds[i / g]),
                space,
                current: None,
                actions_sent: 0,
            })
            .collect();
        let mut play = Play { config, shape, manifest, seeds, g, pool, episodes };
        play.reset_all();
        Ok(play)
    }

    /// The trajectories; episodes still going (out of turns) end where they are.
    fn finish(self) -> Vec<Trajectory> {
        self.episodes
            .into_iter()
            .map(|mut e| {
                e.stop();
                e.traj
            })
            .collect()
    }

    fn seed(&self, i: usize) -> u64 {
        self.seeds[i / self.g]
    }

    fn reset_all(&mut self) {
        let config = self.config;
        let seeds: Vec<u64> = (0..self.episodes.len()).map(|i| self.seed(i)).collect();
        let starts = self.pool.for_each(|i, env| -> Result<(String, Observation), vagen_runtime::Error> {
            let mut obs = env.reset(seeds[i])?;
            let system = env.system_prompt()?;
            if config.describe_state {
                obs.text = config.shown_observation(&obs.text, Some(&env.describe_state()?));
            }
            Ok((system, obs))
        });
        for (e, start) in self.episodes.iter_mut().zip(starts) {
            match start {
                Ok((system, obs)) => {
                    e.traj.system = config.system_message(&system, &self.manifest);
                    let user = config.user_message(None, &obs.text);
                    e.current = Some(Shown { user, observation: obs.text, images: shared(obs.images) });
                }
                Err(err) => e.traj.failure = Some(Failure::new(FailedCall::Reset, &err)),
            }
        }
    }

    /// One turn of every episode still going; false when none was.
    pub(crate) fn turn(&mut self, turn: usize, policy: &mut dyn Policy) -> Result<bool, RolloutError> {
        if self.episodes.iter().all(|e| e.current.is_none()) {
            return Ok(false);
        }
        let oracles = if policy.needs_oracle() { self.oracles(turn) } else { vec![None; self.episodes.len()] };
        // Each asked episode's prompt is out of it until the turn is recorded.
        let asked: Vec<(usize, Shown)> =
            self.episodes.iter_mut().enumerate().filter_map(|(i, e)| Some((i, e.current.take()?))).collect();
        if asked.is_empty() {
            return Ok(false);
        }
        let requests: Vec<Request> =
            asked.iter().map(|(i, shown)| self.request(*i, shown, turn, oracles[*i].clone())).collect();
        let responses = policy.respond(&requests)?;
        if responses.len() != requests.len() {
            return Err(RolloutError::Answers { asked: requests.len(), got: responses.len() });
        }
        let (asked, responses) = self.end_unanswered(turn, asked, responses);
        let mut answers = vec![None; self.episodes.len()];
        let mut parsed = vec![];
        for ((i, _), response) in asked.iter().zip(&responses) {
            let (answer, p) = self.parse_one(*i, response);
            answers[*i] = Some(answer);
            parsed.push(p);
        }
        let (config, record_states) = (self.config, self.shape.record_states);
        let mut results = self
            .pool
            .for_each(|i, env| answers[i].as_deref().map(|answer| env_turn(env, answer, config, record_states)));
        for (((i, shown), response), parsed) in asked.into_iter().zip(responses).zip(parsed) {
            let answer = answers[i].take().expect("answered");
            let result = results[i].take().expect("stepped");
            self.record_one(i, turn, Answered { shown, response, parsed, answer }, result);
        }
        Ok(true)
    }

    /// The oracle's answer for every active episode; an oracle that faults fails its
    /// episode (its policy would act on nothing).
    fn oracles(&mut self, turn: usize) -> Vec<Option<String>> {
        let episodes = &self.episodes;
        let answers = self.pool.for_each(|i, env| episodes[i].current.as_ref().map(|_| env.oracle()));
        let mut oracles = vec![None; self.episodes.len()];
        for ((e, answer), oracle) in self.episodes.iter_mut().zip(answers).zip(&mut oracles) {
            match answer {
                // Without a format there is no invalid answer to stand for "none": the
                // episode cannot go on as asked.
                Some(Ok(None)) if self.config.format == Format::Raw => {
                    let message = "the oracle gave no answer for this state".to_string();
                    e.traj.failure = Some(Failure { call: FailedCall::Oracle { turn }, kind: "no-answer", message });
                    e.stop();
                }
                Some(Ok(a)) => *oracle = a,
                Some(Err(err)) => {
                    e.traj.failure = Some(Failure::new(FailedCall::Oracle { turn }, &err));
                    e.stop();
                }
                None => {}
            }
        }
        oracles
    }

    pub(crate) fn request(&self, i: usize, shown: &Shown, turn: usize, oracle: Option<String>) -> Request {
        let (e, history, g) = (&self.episodes[i], self.config.history, self.g);
        let kept = kept_turns(&e.traj, history);
        Request {
            trajectory: i,
            group: i / g,
            turn,
            state: state_key(&shown.observation, &shown.images),
            system: e.traj.system.clone(),
            history: kept.iter().map(TurnRecord::assistant_turn).collect(),
            user: shown.user.clone(),
            images: shown.images.clone(),
            manifest: self.manifest.clone(),
            actions: e.space.clone(),
            oracle,
            last_reward: e.traj.turns.last().map(|t| t.env_reward),
            seed: self.seed(i).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add((turn * g + i % g) as u64),
        }
    }

    /// An episode whose prompt outgrew the context, or whose policy gave no answer, ends
    /// here, before its env is stepped.
    fn end_unanswered(
        &mut self,
        turn: usize,
        asked: Vec<(usize, Shown)>,
        responses: Vec<Response>,
    ) -> (Vec<(usize, Shown)>, Vec<Response>) {
        asked
            .into_iter()
            .zip(responses)
            .filter_map(|((i, shown), r)| self.unanswered(i, turn, shown, r).map(|(shown, r)| ((i, shown), r)))
            .unzip()
    }

    /// Episode `i`'s response, unless it ended the episode (no room, no answer, lost).
    pub(crate) fn unanswered(
        &mut self,
        i: usize,
        turn: usize,
        shown: Shown,
        mut r: Response,
    ) -> Option<(Shown, Response)> {
        let e = &mut self.episodes[i];
        if let Some(message) = r.lost.take() {
            let call = FailedCall::Policy { turn };
            e.traj.failure = Some(Failure { call, kind: "unanswered", message });
            e.end_at(shown);
            return None;
        }
        let end = match (r.out_of_context, r.stop) {
            (Some(_), _) => Truncation::Context,
            (None, true) => Truncation::Stopped,
            (None, false) => return Some((shown, r)),
        };
        e.traj.truncated = Some(end);
        e.end_at(shown);
        None
    }

    /// Episode `i`'s response read in the format, its actions capped per turn and per
    /// episode: what goes to `step`, and the parse.
    pub(crate) fn parse_one(&mut self, i: usize, response: &Response) -> (String, Parsed) {
        let (config, shape) = (self.config, self.shape);
        let e = &mut self.episodes[i];
        let space = &e.space;
        let mut p = config.read_answer(&response.text, space, shape.max_actions_per_turn);
        if let Some(limit) = shape.max_actions_per_episode {
            let left = limit.get().saturating_sub(e.actions_sent);
            p.actions.truncate(left);
        }
        e.actions_sent += p.actions.len();
        // Without a format the env gets the text as written, its own separators included.
        (config.step_answer(&response.text, &p, space), p)
    }

    /// Episode `i`'s turn recorded: the format reward, the next observation when it goes on,
    /// a failure when its step faulted.
    pub(crate) fn record_one(&mut self, i: usize, turn: usize, answered: Answered, result: EnvTurn) {
        let Answered { shown, response, parsed: p, answer } = answered;
        let config = self.config;
        let e = &mut self.episodes[i];
        let (step, states) = match result {
            Err(err) => {
                e.traj.failure = Some(Failure::new(FailedCall::Step { turn }, &err));
                e.traj.failed_answer = Some(answer);
                // The last observation is the one the failed step acted on.
                e.end_at(shown);
                return;
            }
            Ok(done) => done,
        };
        let format_reward = config.format_reward(&p, step.valid_actions);
        (e.traj.done, e.traj.success) = (step.done, step.success);
        let out_of_actions = self.shape.max_actions_per_episode.is_some_and(|m| e.actions_sent >= m.get());
        let next = step.observation;
        if !step.done && !out_of_actions {
            let feedback = feedback(&p, step.valid_actions, step.effective_actions);
            let user = config.user_message(Some(feedback), &next.text);
            e.current = Some(Shown { user, observation: next.text, images: shared(next.images) });
        } else {
            (e.traj.end_observation, e.traj.end_images) = (next.text, shared(next.images));
        }
        let Shown { user, observation, images } = shown;
        e.traj.turns.push(TurnRecord {
            user,
            observation,
            images,
            response: response.text,
            origin: response.origin,
            token_ids: response.token_ids,
            logprobs: response.logprobs,
            versions: response.versions,
            parsed: p,
            answer,
            env_reward: step.reward,
            format_reward,
            reward: step.reward + format_reward,
            done: step.done,
            success: step.success,
            valid_actions: step.valid_actions,
            effective_actions: step.effective_actions,
            metrics: step.metrics.into_iter().map(|m| (m.name, m.value)).collect(),
            state_before: states.as_ref().map(|(b, _)| b.clone()),
            state_after: states.map(|(_, a)| a),
            component_rewards: vec![],
        });
    }
}

/// The observation and its images hashed: equal for turns in the same state, whatever the
/// path to it (`TurnRecord::state_key`, `Request::state`). Stable within a process.
fn state_key(observation: &str, images: &[Arc<Image>]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    observation.hash(&mut h);
    for image in images {
        (image.width, image.height, &image.rgb).hash(&mut h);
    }
    h.finish()
}

/// What an active episode shows the policy next.
pub(crate) struct Shown {
    user: String,
    observation: String,
    images: Vec<Arc<Image>>,
}

/// What `env` makes of `answer`: the state descriptions before and after (when the records
/// keep them), the step, and the next observation with its state description (when the
/// prompts show it). A description the records or the prompt need and cannot have fails
/// the episode, as a failed step would.
pub(crate) fn env_turn(
    env: &mut dyn Environment,
    answer: &str,
    config: &RolloutConfig,
    record_states: bool,
) -> EnvTurn {
    let before = record_states.then(|| env.describe_state()).transpose()?;
    let mut step = env.step(answer)?;
    let after = record_states.then(|| env.describe_state()).transpose()?;
    if config.describe_state && !step.done {
        let text = env.describe_state()?;
        step.observation.text = config.shown_observation(&step.observation.text, Some(&text));
    }
    Ok((step, before.zip(after)))
}

fn shared(images: Vec<Image>) -> Vec<Arc<Image>> {
    images.into_iter().map(Arc::new).collect()
}

/// The turns the history window keeps.
fn kept_turns(t: &Trajectory, history: History) -> &[TurnRecord] {
    let keep = match history {
        History::All => t.turns.len(),
        History::Last(k) => k.min(t.turns.len()),
    };
    &t.turns[t.turns.len() - keep..]
}

/// Per-env figures over a rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RolloutMetrics {
    pub episodes: usize,
    pub failed: usize,
    /// Failed episodes by call and error kind (`step:trap`: 2).
    pub failures: std::collections::BTreeMap<String, usize>,
    /// Episodes ended because the prompt outgrew the context window.
    pub truncated_context: usize,
    pub success: f64,
    /// Groups with at least one success.
    pub pass_at_group: f64,
    pub mean_turns: f64,
    pub mean_reward: f64,
    /// Valid actions / actions sent.
    pub valid_action_rate: f64,
    /// Actions that changed the state / actions sent.
    pub effective_action_rate: f64,
    /// Answers whose format parsed / answers. The format reward also needs every action
    /// valid, so turns may show the penalty while this reads 1.
    pub format_correct_rate: f64,
    /// Mean response length in characters, and in tokens when the policy reports them.
    pub mean_response_chars: f64,
    pub mean_response_tokens: Option<f64>,
}

/// Success counts every episode, a failed one as a failure (4 of 8 faulted and the rest
/// won is 0.5, not 1.0); the per-turn figures are over the episodes that did not fail.
pub fn metrics(trajs: &[Trajectory]) -> RolloutMetrics {
    RolloutTotals::of(trajs).metrics()
}

/// The counts and sums [`RolloutMetrics`] divide, so that rollouts played apart (data-
/// parallel ranks, each its own groups) add up to the figures of all of them together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct RolloutTotals {
    pub episodes: usize,
    pub ok: usize,
    pub failures: std::collections::BTreeMap<String, usize>,
    pub truncated_context: usize,
    pub successes: usize,
    pub groups: usize,
    pub groups_won: usize,
    pub turns: usize,
    pub reward: f64,
    pub sent: u64,
    pub valid: u64,
    pub effective: u64,
    pub format_ok: usize,
    pub chars: usize,
    pub token_turns: usize,
    pub tokens: usize,
}

impl RolloutTotals {
    pub fn of(trajs: &[Trajectory]) -> Self {
        let ok: Vec<&Trajectory> = trajs.iter().filter(|t| t.failure.is_none()).collect();
        let turns: Vec<&TurnRecord> = ok.iter().flat_map(|t| &t.turns).collect();
        let groups: std::collections::BTreeMap<usize, bool> = trajs.iter().fold(Default::default(), |mut m, t| {
            *m.entry(t.group).or_insert(false) |= t.success;
            m
        });
        let token_counts: Vec<usize> = turns.iter().filter_map(|t| t.token_ids.as_ref().map(Vec::len)).collect();
        RolloutTotals {
            episodes: trajs.len(),
            ok: ok.len(),
            failures: crate::failure::count_failures(trajs),
            truncated_context: trajs.iter().filter(|t| t.truncated == Some(Truncation::Context)).count(),
            successes: ok.iter().filter(|t| t.success).count(),
            groups: groups.len(),
            groups_won: groups.values().filter(|&&s| s).count(),
            turns: turns.len(),
            reward: ok.iter().map(|t| t.total_reward()).sum(),
            sent: turns.iter().map(|t| t.parsed.actions.len() as u64).sum(),
            valid: turns.iter().map(|t| t.valid_actions as u64).sum(),
            effective: turns.iter().map(|t| t.effective_actions as u64).sum(),
            format_ok: turns.iter().filter(|t| t.parsed.format_ok).count(),
            chars: turns.iter().map(|t| t.response.chars().count()).sum(),
            token_turns: token_counts.len(),
            tokens: token_counts.iter().sum(),
        }
    }

    /// Both rollouts' totals (their groups are distinct).
    pub fn add(&mut self, o: &RolloutTotals) {
        for (k, v) in &o.failures {
            *self.failures.entry(k.clone()).or_insert(0) += v;
        }
        self.episodes += o.episodes;
        self.ok += o.ok;
        self.truncated_context += o.truncated_context;
        self.successes += o.successes;
        self.groups += o.groups;
        self.groups_won += o.groups_won;
        self.turns += o.turns;
        self.reward += o.reward;
        self.sent += o.sent;
        self.valid += o.valid;
        self.effective += o.effective;
        self.format_ok += o.format_ok;
        self.chars += o.chars;
        self.token_turns += o.token_turns;
        self.tokens += o.tokens;
    }

    pub fn metrics(&self) -> RolloutMetrics {
        let n = self.ok.max(1) as f64;
        let nt = self.turns.max(1) as f64;
        let ratio = |x: u64| if self.sent == 0 { 0.0 } else { x as f64 / self.sent as f64 };
        RolloutMetrics {
            episodes: self.episodes,
            failed: self.episodes - self.ok,
            failures: self.failures.clone(),
            truncated_context: self.truncated_context,
            success: self.successes as f64 / self.episodes.max(1) as f64,
            pass_at_group: self.groups_won as f64 / self.groups.max(1) as f64,
            mean_turns: self.turns as f64 / n,
            mean_reward: self.reward / n,
            valid_action_rate: ratio(self.valid),
            effective_action_rate: ratio(self.effective),
            format_correct_rate: self.format_ok as f64 / nt,
            mean_response_chars: self.chars as f64 / nt,
            mean_response_tokens: (self.token_turns > 0).then(|| self.tokens as f64 / self.token_turns as f64),
        }
    }
}
