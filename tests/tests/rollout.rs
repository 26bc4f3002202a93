//! The rollout driver end to end on real plugins: every policy through prompt → parse →
//! step; groups share seeds; faults fail only their trajectory; model rollouts lay out.

use std::num::NonZeroUsize;
use vagen_model::{GenerateOptions, LoadOptions, Model};
use vagen_policy::{ChatModel, ModelPolicy};
use vagen_rollout::{
    ContextOverflow, EpisodeShape, Format, History, LayoutOptions, OraclePolicy, Policy, PolicyError, RandomPolicy,
    Request, Response, RolloutConfig, ScriptedPolicy, Truncation, layout, metrics, rollout,
};
use vagen_runtime::Limits;
use vagen_tests::load;

#[test]
fn oracle_through_the_full_path_solves_frozenlake_and_sokoban_in_every_format() {
    for env in ["frozenlake", "sokoban"] {
        let (plugin, _cache) = load(env, Limits::default());
        for format in Format::ALL {
            let (config, pairs) = (RolloutConfig { format, ..Default::default() }, EpisodeShape::groups_of(2));
            let seeds: Vec<u64> = (0..25).collect();
            let trajs = rollout(plugin.as_ref(), "", &seeds, &config, &pairs, &mut OraclePolicy { format }).unwrap();
            let m = metrics(&trajs);
            assert_eq!(m.episodes, 50);
            assert_eq!(m.failed, 0);
            assert_eq!(m.success, 1.0, "{env} {}: {m:?}", format.name());
            assert_eq!(m.format_correct_rate, 1.0);
            assert_eq!(m.valid_action_rate, 1.0);
            // Members of a group share the seed, so the oracle plays them identically.
            for pair in trajs.chunks(2) {
                assert_eq!(pair[0].seed, pair[1].seed);
                let answers =
                    |t: &vagen_rollout::Trajectory| t.turns.iter().map(|x| x.answer.clone()).collect::<Vec<_>>();
                assert_eq!(answers(&pair[0]), answers(&pair[1]));
            }
            // The format bonus is paid on every turn.
            assert!(trajs.iter().flat_map(|t| &t.turns).all(|t| t.format_reward == 0.5));
            assert!(trajs[0].system.contains(&format.pattern()));
        }
    }
}

#[test]
fn random_answers_follow_the_instances_separator_and_action_limit() {
    // RAGEN's preset: `||` between up to 5 actions, where the manifest says `,` and 3.
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let (config, pairs) = (RolloutConfig { format: Format::NoThink, ..Default::default() }, EpisodeShape::groups_of(2));
    let seeds: Vec<u64> = (0..40).collect();
    let ragen = r#"{"preset": "ragen"}"#;
    let trajs = rollout(plugin.as_ref(), ragen, &seeds, &config, &pairs, &mut RandomPolicy { format: Format::NoThink })
        .unwrap();
    let turns: Vec<_> = trajs.iter().flat_map(|t| &t.turns).collect();
    let most = turns.iter().map(|t| t.parsed.actions.len()).max().unwrap();
    assert_eq!(most, 5, "answers carry up to the preset's 5 actions");
    // Every action of an answer is valid, unless the episode ended (a hole, the goal, the
    // preset's 10 actions) before all of them ran.
    for t in turns.iter().filter(|t| !t.done) {
        assert_eq!(t.valid_actions as usize, t.parsed.actions.len(), "{:?}", t.answer);
    }
    assert!(turns.iter().any(|t| t.answer.contains("||")), "multi-action answers are joined with ||");
}

#[test]
fn extra_actions_can_count_as_an_invalid_answer() {
    // One action per turn; the scripted answers carry one, then two.
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let seeds: Vec<u64> = (0..20).collect();
    let script = vec!["<answer>Down</answer>".to_string(), "<answer>Down, Right</answer>".to_string()];
    let run = |extra_actions_invalid| {
        let format_reward = vagen_rollout::FormatReward { bonus: 0.5, penalty: -1.0, extra_actions_invalid };
        let config = RolloutConfig { format: Format::NoThink, format_reward, ..Default::default() };
        let two_turns = EpisodeShape::default().with_max_turns(2);
        let policy = &mut ScriptedPolicy { scripts: vec![script.clone(); seeds.len()] };
        let trajs =
            rollout(plugin.as_ref(), r#"{"max_actions_per_turn": 1}"#, &seeds, &config, &two_turns, policy).unwrap();
        // The episodes whose first move did not end them.
        let second: Vec<(String, f64)> =
            trajs.iter().filter_map(|t| t.turns.get(1)).map(|t| (t.answer.clone(), t.format_reward)).collect();
        assert!(!second.is_empty());
        assert!(trajs.iter().all(|t| t.turns[0].format_reward == 0.5));
        second
    };
    // Either way only `Down` is sent; the extra action is fined only when asked.
    assert!(run(false).iter().all(|(a, r)| a == "Down" && *r == 0.5));
    assert!(run(true).iter().all(|(a, r)| a == "Down" && *r == -1.0));
}

#[test]
fn random_policy_metrics_are_plausible() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let (config, fours) = (RolloutConfig::default(), EpisodeShape::groups_of(4));
    let seeds: Vec<u64> = (100..150).collect();
    let trajs =
        rollout(plugin.as_ref(), "", &seeds, &config, &fours, &mut RandomPolicy { format: Format::FreeThink }).unwrap();
    let m = metrics(&trajs);
    assert_eq!(m.episodes, 200);
    assert!(m.success > 0.0 && m.success < 0.7, "{m:?}");
    assert!(m.pass_at_group >= m.success, "{m:?}");
    assert!(m.mean_turns >= 1.0 && m.mean_turns <= plugin.manifest().default_max_turns as f64);
    // Random picks action names; the ones after an episode ends mid-turn are not executed.
    assert!(m.valid_action_rate > 0.8 && m.valid_action_rate <= 1.0, "{m:?}");
    assert!(m.effective_action_rate > 0.3 && m.effective_action_rate < 1.0, "{m:?}");
    assert_eq!(m.format_correct_rate, 1.0);
    // Same seeds, same rollout.
    let again =
        rollout(plugin.as_ref(), "", &seeds, &config, &fours, &mut RandomPolicy { format: Format::FreeThink }).unwrap();
    let answers = |ts: &[vagen_rollout::Trajectory]| {
        ts.iter().flat_map(|t| t.turns.iter().map(|x| x.answer.clone())).collect::<Vec<_>>()
    };
    assert_eq!(answers(&trajs), answers(&again));
}

#[test]
fn bad_responses_are_invalid_turns_and_the_next_prompt_says_so() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let scripts = vec![vec![
        "I think Left".to_string(),                                                  // no answer
        "<answer>Left</answer>".to_string(),                                         // wrong format for free-think
        "<think>ok</think><answer>Jump</answer>".to_string(),                        // unknown action
        "<think>x</think><answer>Left, Left, Left, Left, Left</answer>".to_string(), // over the cap
    ]];
    let (config, four_turns) = (RolloutConfig::default(), EpisodeShape::default().with_max_turns(4));
    // The first seed whose episode survives the one "Left" that is executed.
    let trajs = (0..50)
        .map(|seed| {
            rollout(
                plugin.as_ref(),
                "",
                &[seed],
                &config,
                &four_turns,
                &mut ScriptedPolicy { scripts: scripts.clone() },
            )
            .unwrap()
        })
        .find(|t| t[0].turns.len() == 4)
        .expect("some seed lasts four turns");
    let t = &trajs[0].turns;
    assert!(t[0].parsed.answer.is_none() && t[0].answer.is_empty() && t[0].format_reward == 0.0);
    assert!(t[1].user.contains("no <answer>"), "{}", t[1].user);
    assert!(!t[1].parsed.format_ok && t[1].parsed.actions == ["Left"] && t[1].format_reward == 0.0);
    assert_eq!(t[2].valid_actions, 0);
    assert_eq!(t[3].parsed.actions.len(), plugin.manifest().max_actions_per_turn as usize);
}

#[test]
fn history_window_and_action_budget_are_honoured() {
    let (plugin, _cache) = load("sokoban", Limits::default());
    let mut seen = Vec::new();
    struct Spy<'a>(&'a mut Vec<usize>);
    impl vagen_rollout::Policy for Spy<'_> {
        fn name(&self) -> &'static str {
            "spy"
        }
        fn respond(
            &mut self,
            r: &[vagen_rollout::Request],
        ) -> Result<Vec<vagen_rollout::Response>, vagen_rollout::PolicyError> {
            self.0.extend(r.iter().map(|x| x.messages().len()));
            Ok(r.iter().map(|_| vagen_rollout::Response::text("<think>t</think><answer>Up, Up</answer>")).collect())
        }
    }
    let config = RolloutConfig { history: History::Last(1), ..Default::default() };
    let shape =
        EpisodeShape { max_actions_per_episode: NonZeroUsize::new(5), ..EpisodeShape::default().with_max_turns(5) };
    let trajs = rollout(plugin.as_ref(), "", &[3], &config, &shape, &mut Spy(&mut seen)).unwrap();
    // system + user, then system + one earlier turn (2 messages) + user.
    assert_eq!(seen[0], 2);
    assert!(seen[1..].iter().all(|&n| n == 4), "{seen:?}");
    let sent: usize = trajs[0].turns.iter().map(|t| t.parsed.actions.len()).sum();
    assert!(sent <= 5, "{sent} actions sent");
}

#[test]
fn an_env_fault_fails_only_its_trajectory() {
    let (plugin, _cache) = load("hostile", Limits::default());
    let config = RolloutConfig { format: Format::NoThink, ..Default::default() };
    let seeds: Vec<u64> = (0..40).collect();
    let trajs = rollout(
        plugin.as_ref(),
        r#"{"mode":"flaky"}"#,
        &seeds,
        &config,
        &EpisodeShape::default(),
        &mut OraclePolicy { format: Format::NoThink },
    )
    .unwrap();
    let failed: Vec<_> = trajs.iter().filter(|t| t.failure.is_some()).collect();
    assert!(!failed.is_empty() && failed.len() < trajs.len(), "{} of {} failed", failed.len(), trajs.len());
    assert!(failed.iter().all(|t| t.failure.as_ref().unwrap().to_string().contains("flaky plugin fails")));
    let m = metrics(&trajs);
    assert_eq!(m.failed, failed.len());
    assert!(trajs.iter().filter(|t| t.failure.is_none()).all(|t| !t.turns.is_empty()));
}

/// The oracle, except that its server "never answers" trajectory 1 at turn 1.
struct LosesOne(OraclePolicy);

impl Policy for LosesOne {
    fn name(&self) -> &'static str {
        "loses-one"
    }
    fn needs_oracle(&self) -> bool {
        true
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let answers = self.0.respond(requests)?;
        let lose = |r: &Request| r.trajectory == 1 && r.turn == 1;
        Ok(requests
            .iter()
            .zip(answers)
            .map(|(r, a)| if lose(r) { Response::lost("HTTP 503 after 3 tries") } else { a })
            .collect())
    }
}

#[test]
fn an_answer_lost_by_the_policy_fails_its_episode_alone_as_the_policys() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let config = RolloutConfig { format: Format::NoThink, ..Default::default() };
    let trajs = rollout(
        plugin.as_ref(),
        // One move a turn: the oracle needs several turns on every map.
        r#"{"max_actions_per_turn": 1}"#,
        &[0, 1, 2],
        &config,
        &EpisodeShape::default(),
        &mut LosesOne(OraclePolicy { format: Format::NoThink }),
    )
    .unwrap();
    let f = trajs[1].failure.as_ref().expect("the lost episode failed");
    assert_eq!((f.call, f.kind), (vagen_rollout::FailedCall::Policy { turn: 1 }, "unanswered"));
    assert!(f.to_string().contains("HTTP 503 after 3 tries"), "{f}");
    assert_eq!(trajs[1].turns.len(), 1, "the turn before the loss is kept");
    assert!(trajs[0].success && trajs[2].success, "the others went on to solve theirs");
}

#[test]
fn a_model_rollout_records_sampled_ids_that_lay_out_for_training() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let model = std::rc::Rc::new(Model::from_spec("default", LoadOptions::default()).unwrap());
    let options = GenerateOptions {
        max_new_tokens: 24,
        temperature: 1.0,
        stop: vec!["</answer>".into()],
        seed: 5,
        ..Default::default()
    };
    let mut policy = ModelPolicy::new(model.clone(), options);
    let (config, shape) = (RolloutConfig::default(), EpisodeShape::groups_of(2).with_max_turns(2));
    let trajs = rollout(plugin.as_ref(), "", &[1, 2], &config, &shape, &mut policy).unwrap();
    assert_eq!(trajs.len(), 4);
    for t in &trajs {
        assert!(t.failure.is_none());
        let seq =
            layout(&ChatModel(model.as_ref()), &t.system, &t.assistant_turns(), &LayoutOptions::default()).unwrap();
        assert_eq!(seq.turn_ends.len(), t.turns.len());
        let masked: usize = seq.loss_mask.iter().filter(|&&m| m).count();
        assert_eq!(masked, t.turns.iter().map(|x| x.token_ids.as_ref().unwrap().len()).sum::<usize>());
        for turn in &t.turns {
            assert_eq!(turn.token_ids.as_ref().unwrap().len(), turn.logprobs.as_ref().unwrap().len());
        }
    }
    assert!(metrics(&trajs).mean_response_tokens.unwrap() > 0.0);
}

/// The default model answering up to `max_new_tokens`, and the first prompt's length of
/// each of `SEEDS`' FrozenLake episodes (from a turn that fits anywhere).
fn first_prompts(
    plugin: &dyn vagen_runtime::Plugin,
    max_new_tokens: usize,
) -> (std::rc::Rc<Model>, GenerateOptions, Vec<usize>) {
    let model = std::rc::Rc::new(Model::from_spec("default", LoadOptions::default()).unwrap());
    let options = GenerateOptions { max_new_tokens, stop: vec!["</answer>".into()], seed: 3, ..Default::default() };
    let once = EpisodeShape::default().with_max_turns(1);
    let first = rollout(
        plugin,
        "",
        &SEEDS,
        &RolloutConfig::default(),
        &once,
        &mut ModelPolicy::new(model.clone(), options.clone()),
    )
    .unwrap();
    let prompts = first
        .iter()
        .map(|t| {
            vagen_rollout::prompt_ids(&ChatModel(model.as_ref()), &t.system, &[], &t.turns[0].user, &[])
                .unwrap()
                .ids
                .len()
        })
        .collect();
    (model, options, prompts)
}

const SEEDS: [u64; 3] = [4, 5, 6];

#[test]
fn a_prompt_that_outgrows_the_context_ends_its_episode_not_the_rollout() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let (model, options, prompts) = first_prompts(plugin.as_ref(), 64);
    let (config, seeds) = (RolloutConfig::default(), SEEDS);
    let six_turns = EpisodeShape::default().with_max_turns(6);
    // Room for a short first answer and no second prompt.
    let window = prompts.iter().max().unwrap() + 10;
    let mut tight = ModelPolicy::new(model.clone(), options).with_context_window(window);
    let trajs = rollout(plugin.as_ref(), "", &seeds, &config, &six_turns, &mut tight).unwrap();
    for (t, prompt) in trajs.iter().zip(&prompts) {
        assert!(t.failure.is_none(), "{:?}", t.failure);
        assert_eq!(t.turns.len(), 1, "only the first turn fits");
        let answer = t.turns[0].token_ids.as_ref().unwrap().len();
        assert!(answer <= window - prompt, "the answer ({answer} tokens) is capped at what is left");
        if !t.done {
            assert_eq!(t.truncated, Some(Truncation::Context));
        }
    }
    let m = metrics(&trajs);
    assert_eq!(m.truncated_context, trajs.iter().filter(|t| !t.done).count());
    assert!(m.truncated_context > 0 && m.failed == 0, "{m:?}");
}

#[test]
fn drop_oldest_keeps_episodes_going_in_a_window_that_ends_them() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let (model, options, prompts) = first_prompts(plugin.as_ref(), 24);
    let (config, seeds) = (RolloutConfig::default(), SEEDS);
    let six_turns = EpisodeShape::default().with_max_turns(6);
    let longest = *prompts.iter().max().unwrap();
    // A full answer after the first prompt, and room for a later one's feedback line (which
    // echoes up to 24 tokens of answer), but not for two turns of history on top of it.
    let window = longest + 24 + 60;
    let policy =
        |overflow| ModelPolicy::new(model.clone(), options.clone()).with_context_window(window).with_overflow(overflow);
    let ended = rollout(plugin.as_ref(), "", &seeds, &config, &six_turns, &mut policy(ContextOverflow::End)).unwrap();
    let going =
        rollout(plugin.as_ref(), "", &seeds, &config, &six_turns, &mut policy(ContextOverflow::DropOldest)).unwrap();
    assert!(metrics(&ended).truncated_context > 0, "{:?}", metrics(&ended));
    assert_eq!(metrics(&going).truncated_context, 0, "{:?}", metrics(&going));
    for (e, g) in ended.iter().zip(&going) {
        assert!(g.turns.len() >= e.turns.len());
        if !g.done {
            assert_eq!(g.turns.len(), 6, "an episode that did not end ran all its turns");
        }
    }
    // The later turns were asked without their history: with it, their prompts would not
    // have left a full answer's room.
    let history_dropped = going.iter().any(|t| {
        let turns = t.assistant_turns();
        (1..turns.len()).any(|k| {
            let full =
                vagen_rollout::prompt_ids(&ChatModel(model.as_ref()), &t.system, &turns[..k], &turns[k].user, &[])
                    .unwrap();
            full.ids.len() + 24 > window
        })
    });
    assert!(history_dropped);
    let turns = |ts: &[vagen_rollout::Trajectory]| ts.iter().map(|t| t.turns.len()).sum::<usize>();
    assert!(turns(&going) > turns(&ended), "{} vs {}", turns(&going), turns(&ended));
}

#[test]
fn observations_can_carry_the_env_state_description() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let (config, three_turns) =
        (RolloutConfig { describe_state: true, ..Default::default() }, EpisodeShape::default().with_max_turns(3));
    let trajs =
        rollout(plugin.as_ref(), "", &[4, 5], &config, &three_turns, &mut RandomPolicy { format: Format::FreeThink })
            .unwrap();
    for t in &trajs {
        assert!(t.turns.iter().all(|x| x.user.contains("The goal is")), "{:?}", t.turns[0].user);
    }
    let plain = rollout(
        plugin.as_ref(),
        "",
        &[4],
        &RolloutConfig::default(),
        &three_turns,
        &mut RandomPolicy { format: Format::FreeThink },
    )
    .unwrap();
    assert!(!plain[0].turns[0].user.contains("The goal is"));
    // Without the env's text observation the description stands in for the grid: the
    // same episode (same seed, same answers) with the grid lines left out.
    let only = RolloutConfig { observation_text: false, ..config };
    let short =
        rollout(plugin.as_ref(), "", &[4, 5], &only, &three_turns, &mut RandomPolicy { format: Format::FreeThink })
            .unwrap();
    for (full, short) in trajs.iter().zip(&short) {
        assert_eq!(full.turns.len(), short.turns.len());
        for (a, b) in full.turns.iter().zip(&short.turns) {
            assert_eq!(a.response, b.response);
            assert!(b.user.contains("The goal is") && b.user.len() < a.user.len(), "{:?}", b.user);
            let grid = a.user.lines().find(|l| l.contains('P')).expect("the grid shows the player");
            assert!(!b.user.contains(grid), "{:?}", b.user);
            let description = a.user.lines().find(|l| l.starts_with("The goal is")).unwrap();
            assert!(b.user.contains(description));
        }
    }
}

/// FrozenLake prompted with its state description alone.
fn description_only() -> RolloutConfig {
    RolloutConfig { describe_state: true, observation_text: false, ..Default::default() }
}

/// Groups of `group_size` episodes of four turns.
fn four_turns(group_size: usize) -> EpisodeShape {
    EpisodeShape::groups_of(group_size).with_max_turns(4)
}

/// A random policy that notes each request's (trajectory, turn, group, state).
struct Noting(RandomPolicy, Vec<(usize, usize, usize, u64)>);

impl Policy for Noting {
    fn name(&self) -> &'static str {
        "noting"
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        self.1.extend(requests.iter().map(|r| (r.trajectory, r.turn, r.group, r.state)));
        self.0.respond(requests)
    }
}

#[test]
fn turns_in_the_same_state_share_a_state_key_whatever_the_path_to_it() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    // The description alone: FrozenLake's own text also reports the last actions.
    let mut policy = Noting(RandomPolicy { format: Format::FreeThink }, vec![]);
    let trajs = rollout(plugin.as_ref(), "", &[7, 8], &description_only(), &four_turns(16), &mut policy).unwrap();
    let turns: Vec<_> = trajs.iter().flat_map(|t| t.turns.iter().map(move |x| (t.group, x))).collect();
    let mut across_paths = 0;
    for (ga, a) in &turns {
        assert!(!a.observation.contains("Your actions") && a.user.contains(&a.observation), "{:?}", a.user);
        for (gb, b) in &turns {
            if ga != gb {
                continue;
            }
            assert_eq!(a.state_key() == b.state_key(), a.observation == b.observation);
            // Same state, told differently how it got there (an edge bump, another route).
            across_paths += usize::from(a.observation == b.observation && a.user != b.user);
        }
    }
    assert!(across_paths > 0, "no state reached by two paths: the test checks nothing");
    // The policy was told each turn's group and state key before it answered.
    assert_eq!(policy.1.len(), turns.len());
    for &(traj, turn, group, state) in &policy.1 {
        assert_eq!((group, state), (trajs[traj].group, trajs[traj].turns[turn].state_key()));
    }
}

#[test]
fn feedback_and_reminder_lines_can_be_left_out_of_user_turns() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let config = description_only();
    let bare = RolloutConfig { feedback: false, reminder: false, ..config.clone() };
    let run = |c: &RolloutConfig| {
        rollout(plugin.as_ref(), "", &[3, 9], c, &four_turns(2), &mut RandomPolicy { format: Format::FreeThink })
            .unwrap()
    };
    let (full, short) = (run(&config), run(&bare));
    let mut later_turns = 0;
    for (a, b) in full.iter().zip(&short) {
        assert_eq!(a.answers(), b.answers(), "the prompt lines change nothing the random policy does");
        for (k, (x, y)) in a.turns.iter().zip(&b.turns).enumerate() {
            assert_eq!(y.user, y.observation);
            assert_eq!(x.observation, y.observation);
            assert!(x.user.ends_with(&Format::FreeThink.reminder()));
            if k > 0 {
                assert!(x.user.starts_with("Your actions:"), "{:?}", x.user);
                later_turns += 1;
            }
        }
    }
    assert!(later_turns > 0);
    // The reminder alone.
    let reminder = run(&RolloutConfig { feedback: false, ..config });
    for t in reminder.iter().flat_map(|t| &t.turns) {
        assert_eq!(t.user, format!("{}\n{}", t.observation, Format::FreeThink.reminder()));
    }
}

#[test]
fn format_instructions_can_be_left_out_of_the_system_prompt() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let config =
        RolloutConfig { format: Format::NoThink, system_prompt: Some("FrozenLake.".into()), ..description_only() };
    let run = |c: &RolloutConfig| {
        rollout(plugin.as_ref(), "", &[3, 9], c, &four_turns(2), &mut RandomPolicy { format: Format::NoThink }).unwrap()
    };
    let with = run(&config);
    let without = run(&RolloutConfig { instructions: false, ..config });
    for (a, b) in with.iter().zip(&without) {
        assert_eq!(a.system, format!("FrozenLake.\n\n{}", Format::NoThink.instructions("Left")));
        assert_eq!(b.system, "FrozenLake.");
        assert_eq!(a.answers(), b.answers());
        assert_eq!(
            a.turns.iter().map(|t| &t.user).collect::<Vec<_>>(),
            b.turns.iter().map(|t| &t.user).collect::<Vec<_>>()
        );
    }
}

/// `inner`'s instances, each slow in one step of eight: instance k (in the order they
/// were made) at its turns k, k + 8, … before `last`, so at each turn one member in eight
/// is slow, a different one each turn. A slow step waits until another member starts a step of a later
/// turn (the episodes went on without it), or `delay` at most; `log` records each slow
/// step's member and whether it was released that way.
struct Sleepy {
    inner: std::sync::Arc<dyn vagen_runtime::Plugin>,
    delay: std::time::Duration,
    last: usize,
    made: std::sync::atomic::AtomicUsize,
    log: StepLog,
}

#[derive(Default)]
struct Steps {
    /// (member, turn) of every step started.
    started: std::sync::Mutex<Vec<(usize, usize)>>,
    more: std::sync::Condvar,
    /// (member, released before `delay`) of every slow step.
    slow: std::sync::Mutex<Vec<(usize, bool)>>,
}

type StepLog = std::sync::Arc<Steps>;

struct SleepyEnv {
    inner: Box<dyn vagen_runtime::Environment>,
    delay: std::time::Duration,
    last: usize,
    index: usize,
    turns: usize,
    log: StepLog,
}

impl vagen_runtime::Plugin for Sleepy {
    fn manifest(&self) -> &vagen_runtime::Manifest {
        self.inner.manifest()
    }
    fn info(&self) -> &vagen_runtime::PluginInfo {
        self.inner.info()
    }
    fn limits(&self) -> &Limits {
        self.inner.limits()
    }
    fn create(&self, config: &str) -> Result<Box<dyn vagen_runtime::Environment>, vagen_runtime::Error> {
        let index = self.made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let inner = self.inner.create(config)?;
        let (delay, last, log) = (self.delay, self.last, self.log.clone());
        Ok(Box::new(SleepyEnv { inner, delay, last, index, turns: 0, log }))
    }
}

impl vagen_runtime::Environment for SleepyEnv {
    fn manifest(&self) -> &vagen_runtime::Manifest {
        self.inner.manifest()
    }
    fn action_space(&self) -> &vagen_runtime::ActionSpace {
        self.inner.action_space()
    }
    fn system_prompt(&mut self) -> Result<String, vagen_runtime::Error> {
        self.inner.system_prompt()
    }
    fn reset(&mut self, seed: u64) -> Result<vagen_runtime::Observation, vagen_runtime::Error> {
        self.turns = 0;
        self.inner.reset(seed)
    }
    fn step(&mut self, answer: &str) -> Result<vagen_runtime::StepResult, vagen_runtime::Error> {
        let (me, turn) = (self.index, self.turns);
        let mut started = self.log.started.lock().unwrap();
        started.push((me, turn));
        self.log.more.notify_all();
        if turn % 8 == me % 8 && turn < self.last {
            let later = |s: &mut Vec<(usize, usize)>| !s.iter().any(|&(i, t)| i != me && t > turn);
            let (started, waited) = self.log.more.wait_timeout_while(started, self.delay, later).unwrap();
            drop(started);
            self.log.slow.lock().unwrap().push((me, !waited.timed_out()));
        } else {
            drop(started);
        }
        self.turns += 1;
        self.inner.step(answer)
    }
    fn describe_state(&mut self) -> Result<String, vagen_runtime::Error> {
        self.inner.describe_state()
    }
    fn oracle(&mut self) -> Result<Option<String>, vagen_runtime::Error> {
        self.inner.oracle()
    }
}

/// The model's answers asked a turn at a time (it does not offer to stream).
struct TurnByTurn(ModelPolicy);

impl vagen_rollout::Policy for TurnByTurn {
    fn name(&self) -> &'static str {
        "turn-by-turn"
    }
    fn respond(
        &mut self,
        requests: &[vagen_rollout::Request],
    ) -> Result<Vec<vagen_rollout::Response>, vagen_rollout::PolicyError> {
        self.0.respond(requests)
    }
    fn begin_rollout(&mut self) {
        self.0.begin_rollout()
    }
}

#[test]
fn a_slow_env_step_holds_its_own_episode_not_the_batch() {
    let model = std::rc::Rc::new(Model::from_spec("default", LoadOptions::default()).unwrap());
    let options = GenerateOptions { max_new_tokens: 4, seed: 9, ..Default::default() };
    let shape = EpisodeShape::groups_of(8).with_max_turns(5);
    // The episodes' answers, and each slow step: its member and whether the other members'
    // episodes went on (a step of a later turn started) while it was held.
    let play = |policy: &mut dyn vagen_rollout::Policy, delay| {
        let (inner, _cache) = load("frozenlake", Limits::default());
        let log = StepLog::default();
        let plugin = Sleepy { inner, delay, last: 4, made: Default::default(), log: log.clone() };
        let trajs = rollout(&plugin, "", &[3], &RolloutConfig::default(), &shape, policy).unwrap();
        let answers: Vec<Vec<String>> =
            trajs.iter().map(|t| t.turns.iter().map(|x| x.response.clone()).collect()).collect();
        let mut slow = log.slow.lock().unwrap().clone();
        slow.sort();
        (answers, slow)
    };
    // Streamed, a slow step is held until the others start a later turn, which takes a
    // turn's generation (~0.1 s here; 5 s leaves room for a loaded machine). Turn by turn
    // none can start, whatever the wait: 0.2 s.
    let seconds = std::time::Duration::from_secs_f64;
    let (streamed, went_on) = play(&mut ModelPolicy::new(model.clone(), options.clone()), seconds(5.0));
    let (lockstep, held) = play(&mut TurnByTurn(ModelPolicy::new(model.clone(), options)), seconds(0.2));
    // Members 0 to 3 are each slow once, at their turn before the last (the untrained
    // model's answers keep every episode going for 5 turns).
    assert_eq!(went_on.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 1, 2, 3], "{streamed:?}");
    // The same episodes whichever way they were played.
    assert_eq!(streamed, lockstep);
    // Streamed, the others go on while a member is slow; turn by turn, every slow step
    // holds them all until it ends.
    assert!(went_on.iter().all(|s| s.1), "{went_on:?}");
    assert!(held.iter().all(|s| !s.1), "{held:?}");
}
