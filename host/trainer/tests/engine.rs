//! The rollout engine under the rollout driver: FrozenLake episodes answered by the default
//! model sample the same whether cached keys and values are reused or not, and a history
//! window makes every later turn a counted fallback.

mod common;

use std::num::NonZeroUsize;
use std::rc::Rc;
use vagen_model::{EngineOptions, EngineStats, GenerateOptions, LoadOptions, default_model};
use vagen_policy::ModelPolicy;
use vagen_rollout::{EpisodeShape, Format, History, RolloutConfig, Trajectory, rollout};
use vagen_runtime::{Limits, Runtime};

fn play(engine: EngineOptions, history: History) -> (Vec<Trajectory>, EngineStats) {
    let runtime = Runtime::new(Limits::default()).unwrap();
    let plugin = runtime.load(common::plugin()).unwrap();
    let model = Rc::new(default_model(vagen_model::DEFAULT_SEED, LoadOptions::default()).unwrap());
    let options = GenerateOptions {
        max_new_tokens: 12,
        temperature: 1.0,
        stop: Format::NoThink.stop_strings(),
        seed: 3,
        ..Default::default()
    };
    let mut policy = ModelPolicy::new(model, options).with_engine(&engine);
    let config = RolloutConfig { format: Format::NoThink, history, ..Default::default() };
    let shape = EpisodeShape::groups_of(4).with_max_turns(4);
    let trajs = rollout(plugin.as_ref(), "{}", &[0, 1], &config, &shape, &mut policy).unwrap();
    (trajs, policy.engine_stats().expect("the continuous engine"))
}

fn turns(trajs: &[Trajectory]) -> Vec<(Vec<u32>, Vec<f32>)> {
    trajs.iter().flat_map(|t| &t.turns).map(|t| (t.token_ids.clone().unwrap(), t.logprobs.clone().unwrap())).collect()
}

fn assert_same(a: &[Trajectory], b: &[Trajectory]) {
    let (a, b) = (turns(a), turns(b));
    assert_eq!(a.len(), b.len());
    for ((ids, lp), (ids2, lp2)) in a.iter().zip(&b) {
        assert_eq!(ids, ids2);
        assert!(lp.iter().zip(lp2).all(|(x, y)| (x - y).abs() <= 1e-4), "{lp:?} vs {lp2:?}");
    }
}

#[test]
fn rollouts_sample_the_same_with_and_without_reuse() {
    let (reused, s) = play(EngineOptions::default(), History::All);
    let (full, f) = play(EngineOptions { reuse: false, ..Default::default() }, History::All);
    let (narrow, _) =
        play(EngineOptions { max_batch: NonZeroUsize::new(3).unwrap(), ..Default::default() }, History::All);
    assert_same(&reused, &full);
    assert_same(&reused, &narrow);
    assert!(turns(&reused).len() > 8, "several turns of 8 episodes");
    assert_eq!(s.prompt_tokens, f.prompt_tokens);
    assert!(s.prefilled_tokens * 2 < f.prefilled_tokens, "{s:?} vs {f:?}");
    assert_eq!(s.fallbacks, 0, "with the whole history each turn extends the last: {s:?}");
}

#[test]
fn a_history_window_falls_back_and_counts_it() {
    let (windowed, s) = play(EngineOptions::default(), History::Last(1));
    let (full, _) = play(EngineOptions { reuse: false, ..Default::default() }, History::Last(1));
    assert_same(&windowed, &full);
    // From the third turn on, the prompt leaves out the first turn: no extension.
    let late_turns = windowed.iter().map(|t| t.turns.len().saturating_sub(2)).sum::<usize>();
    assert!(late_turns > 0);
    assert_eq!(s.fallbacks, late_turns, "{s:?}");
}
