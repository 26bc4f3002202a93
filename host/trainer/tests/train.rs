//! Smoke tests of the training loop: every estimator runs two steps with finite losses,
//! checkpoints reload, a resumed run continues exactly, bad configs are refused up front.

mod common;

use common::{config, hostile_config, metrics, parse, step_line};
use tch::Tensor;
use vagen_model::{LoadOptions, Model};
use vagen_trainer::Trainer;

/// With `env.val_samples` answers a seed, evaluations log pass@k beside avg@n: pass@1 is the
/// success rate, pass@k grows with k and stays within [0, 1]. Only the evaluation runs.
#[test]
fn several_answers_a_held_out_seed_log_pass_at_k() {
    let dir = tempfile::tempdir().unwrap();
    let sets = ["env.val_samples=4", "rollout.val_temperature=1.0", "env.val_episodes=3", "schedule.steps=0"];
    let mut t = Trainer::new(parse(&config("grpo", ""), &sets).unwrap(), dir.path()).unwrap();
    t.run().unwrap();
    let m = metrics(dir.path()).into_iter().rfind(|m| m.get("val/success").is_some()).unwrap();
    let at = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} in {m}"));
    assert!((at("val/pass@1") - at("val/success")).abs() < 1e-12, "{m}");
    assert!(
        at("val/pass@1") <= at("val/pass@2") && at("val/pass@2") <= at("val/pass@4") && at("val/pass@4") <= 1.0,
        "{m}"
    );
    assert!(m.get("val/pass@3").is_none(), "k = 1, 2, 4: {m}");
}

#[test]
fn two_steps_of_each_estimator_have_finite_losses() {
    for estimator in ["gae", "bi-level-gae", "turn-gae", "grpo", "brpo", "reinforce", "gigpo"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = parse(&config(estimator, ""), &[]).unwrap();
        let mut t = Trainer::new(cfg, dir.path()).unwrap();
        t.run().unwrap();
        for step in [1, 2] {
            let m = step_line(dir.path(), step);
            for key in ["actor/pg_loss", "actor/entropy", "actor/grad_norm", "train/reward"] {
                assert!(m[key].as_f64().unwrap().is_finite(), "{estimator} step {step}: {key} = {}", m[key]);
            }
            let critic = ["gae", "bi-level-gae", "turn-gae"].contains(&estimator);
            assert_eq!(m.get("critic/vf_loss").is_some(), critic, "{estimator}: {m}");
            if critic {
                assert!(m["critic/vf_loss"].as_f64().unwrap().is_finite());
            }
        }
        assert!(dir.path().join("report.html").is_file());
        assert!(dir.path().join("checkpoints/step-000002/actor/model.safetensors").is_file());
    }
}

#[test]
fn per_turn_sequences_train_with_credit_from_their_episode() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("grpo", ""), &["rollout.per_turn=true", "sft.steps=2", "sft.episodes_per_step=4"]).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    let m = step_line(dir.path(), 2);
    assert!(m["actor/pg_loss"].as_f64().unwrap().is_finite());
    // One sequence per turn: as many kept sequences as turns played.
    let turns = m["train/turns"].as_f64().unwrap() * 4.0;
    assert_eq!(m["rollout/kept_trajectories"].as_f64().unwrap(), turns, "{m}");
    let sft: Vec<_> = metrics(dir.path()).into_iter().filter(|m| m.get("sft/loss").is_some()).collect();
    assert_eq!(sft.len(), 2);
}

/// The metrics of a one-step grpo run in either layout, with or without reused log-probs.
fn one_grpo_step(per_turn: &str, reuse: &str, extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let per_turn = format!("rollout.per_turn={per_turn}");
    let reuse = format!("rollout.reuse_logprobs={reuse}");
    let mut overrides = vec![per_turn.as_str(), reuse.as_str(), "schedule.steps=1"];
    overrides.extend_from_slice(extra);
    let cfg = parse(&config("grpo", ""), &overrides).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    step_line(dir.path(), 1)
}

/// The training forward must see exactly the prompt generation saw (else the update is
/// off-policy without anyone noticing); then generation's log-probs can stand in for it.
#[test]
fn generation_log_probs_agree_with_the_training_forward() {
    for per_turn in ["false", "true"] {
        let run = |reuse: &str| one_grpo_step(per_turn, reuse, &[]);
        let recomputed = run("false");
        let diff = recomputed["rollout/logprob_diff_max"].as_f64().unwrap();
        assert!(diff < 1e-4, "per_turn {per_turn}: generation and training log-probs differ by {diff}");
        // Reused: no second forward, no diff to report, and the same update to within it.
        let reused = run("true");
        assert!(reused.get("rollout/logprob_diff_max").is_none(), "{reused}");
        for key in ["actor/pg_loss", "actor/ppo_kl", "actor/grad_norm"] {
            let (a, b) = (recomputed[key].as_f64().unwrap(), reused[key].as_f64().unwrap());
            assert!((a - b).abs() < 1e-3, "per_turn {per_turn}: {key} {a} vs {b}");
        }
    }
}

/// Turns answered by exploration were not sampled, so they have no generation log-probs:
/// with reuse on, theirs come from a forward, and the update is the one a full second
/// forward gives.
#[test]
fn explored_turns_get_their_old_log_probs_from_a_forward() {
    for per_turn in ["false", "true"] {
        let run = |reuse: &str| one_grpo_step(per_turn, reuse, &["rollout.explore=0.5"]);
        let recomputed = run("false");
        assert!(recomputed["rollout/explored_turns"].as_f64().unwrap() > 0.0, "{recomputed}");
        // Only sampled turns are compared with generation.
        let diff = recomputed["rollout/logprob_diff_max"].as_f64().unwrap();
        assert!(diff < 1e-4, "per_turn {per_turn}: {diff}");
        let reused = run("true");
        assert_eq!(reused["rollout/explored_turns"], recomputed["rollout/explored_turns"]);
        for key in ["actor/pg_loss", "actor/ppo_kl", "actor/grad_norm"] {
            let (a, b) = (recomputed[key].as_f64().unwrap(), reused[key].as_f64().unwrap());
            assert!((a - b).abs() < 1e-3, "per_turn {per_turn}: {key} {a} vs {b}");
        }
    }
}

/// Sequences whose every advantage is 0 leave the update, the others stay: counted, and
/// kept + dropped is every sequence of the step.
#[test]
fn zero_advantage_sequences_can_be_left_out_of_the_update() {
    let run = |drop: &str| {
        let dir = tempfile::tempdir().unwrap();
        let drop = format!("algorithm.filter.drop_zero_advantage={drop}");
        let overrides = ["rollout.per_turn=true", "env.groups=3", "algorithm.policy_loss.entropy_coef=0", &drop];
        let cfg = parse(&config("grpo", ""), &overrides).unwrap();
        Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
        (1..=2).map(|s| step_line(dir.path(), s)).collect::<Vec<_>>()
    };
    let (all, dropped) = (run("false"), run("true"));
    let n = |m: &serde_json::Value, k: &str| m[k].as_f64().unwrap();
    // The first step's rollouts are the same either way (same seeds, same weights).
    let (a, d) = (&all[0], &dropped[0]);
    assert_eq!(n(a, "rollout/zero_advantage_dropped"), 0.0);
    assert_eq!(
        n(d, "rollout/kept_trajectories") + n(d, "rollout/zero_advantage_dropped"),
        n(a, "rollout/kept_trajectories")
    );
    // A random policy in groups of two: some groups score alike (both fail), so some drop.
    assert!(dropped.iter().any(|m| n(m, "rollout/zero_advantage_dropped") > 0.0), "{dropped:?}");
}

#[test]
fn a_kl_penalty_pulls_towards_the_policy_rl_started_from() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "[algorithm.policy_loss.kl]\nkind = \"k3\"\ncoef = 0.1\n";
    let cfg = parse(&config("grpo", extra), &["optim.actor_lr=1e-2", "schedule.steps=2"]).unwrap();
    let mut t = Trainer::new(cfg, dir.path()).unwrap();
    let start = logits(&t.actor);
    t.run().unwrap();
    // The reference is the actor as RL began, saved once; the KL to it is measured and
    // grows once the actor has moved away.
    let reference = Model::load(&dir.path().join("reference"), LoadOptions::default()).unwrap();
    assert!(logits(&reference).allclose(&start, 0.0, 0.0, false));
    let kl: Vec<f64> = (1..=2).map(|s| step_line(dir.path(), s)["actor/kl"].as_f64().unwrap()).collect();
    assert!(kl.iter().all(|k| k.is_finite() && *k >= 0.0), "{kl:?}");
    assert!(kl[1] > 0.0, "{kl:?}");
    // Without a KL penalty there is no reference and no KL figure.
    let plain = tempfile::tempdir().unwrap();
    Trainer::new(parse(&config("grpo", ""), &["schedule.steps=1"]).unwrap(), plain.path()).unwrap().run().unwrap();
    assert!(!plain.path().join("reference").exists());
    assert!(step_line(plain.path(), 1).get("actor/kl").is_none());
}

/// A fixed handful of oracle turns must be memorised: the policy conditions on the prompt.
#[test]
fn sft_fits_a_small_fixed_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let overrides = [
        "rollout.per_turn=true",
        "sft.steps=60",
        "sft.lr=1e-3",
        "sft.episodes_per_step=4",
        "sft.dataset_steps=1",
        "schedule.steps=0",
        "env.val_episodes=1",
    ];
    let cfg = parse(&config("grpo", ""), &overrides).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    let losses: Vec<f64> =
        metrics(dir.path()).iter().filter_map(|m| m.get("sft/loss").and_then(|v| v.as_f64())).collect();
    assert_eq!(losses.len(), 60);
    // Played once, then replayed from memory.
    let replayed: Vec<f64> = metrics(dir.path()).iter().filter_map(|m| m.get("sft/replayed")?.as_f64()).collect();
    assert_eq!(replayed.len(), 60);
    assert_eq!((replayed[0], replayed[1..].iter().all(|&r| r == 1.0)), (0.0, true), "{replayed:?}");
    let last = losses.last().unwrap();
    assert!(*last < 0.05, "loss {} -> {last}", losses[0]);
}

fn logits(model: &Model) -> Tensor {
    let ids = Tensor::from_slice(&[5i64, 17, 300, 42]).unsqueeze(0);
    let pos = Tensor::arange(4, tch::kind::INT64_CPU).unsqueeze(0);
    tch::no_grad(|| model.lm.forward(&ids, &pos, None, None).unwrap())
}

#[test]
fn a_checkpoint_reloads_with_identical_logits() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("grpo", ""), &["schedule.steps=1"]).unwrap();
    let mut t = Trainer::new(cfg, dir.path()).unwrap();
    t.run().unwrap();
    let saved = Model::load(&dir.path().join("checkpoints/step-000001/actor"), LoadOptions::default()).unwrap();
    let diff = (logits(&t.actor) - logits(&saved)).abs().max().double_value(&[]);
    assert_eq!(diff, 0.0);
}

#[test]
fn a_resumed_run_continues_at_its_step_with_identical_rollouts() {
    // Interrupted after step 1 (its checkpoint complete, a later save cut short), resumed.
    let (whole, cut) = common::whole_and_resumed(&config("gae", ""), |cut| {
        std::fs::create_dir_all(cut.join("checkpoints/.step-000002.partial/actor")).unwrap();
        std::fs::create_dir_all(cut.join("checkpoints/step-000003")).unwrap(); // no state.json: incomplete
    });
    let equal = ["train/reward", "train/success", "rollout/response_length", "throughput/response_tokens"];
    common::assert_same_step(whole.path(), cut.path(), 2, &equal, &["actor/pg_loss"]);
    // The metrics log holds each step once, and so does TensorBoard (rewritten on resume).
    assert_eq!(metrics(cut.path()).iter().filter(|m| m["step"] == 2 && m.get("train/reward").is_some()).count(), 1);
    assert!(common::assert_tensorboard_matches_metrics(cut.path()) > 50);
}

#[test]
fn bad_configs_are_refused_before_any_work_naming_the_field() {
    let good = config("grpo", "");
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        (good.replace("[optim]", "[optim]\nlearning_rate = 1.0"), vec![], "learning_rate"),
        (good.replace("groups = 2", "groups = \"two\""), vec![], "groups"),
        (good.replace("frozenlake.wasm", "nope.wasm"), vec![], "env.plugin"),
        (good.clone(), vec!["env.group_size=1"], "env.group_size"),
        (good.clone(), vec!["optim.micro_batch=3"], "optim.micro_batch"),
        (good.clone(), vec!["rollout.format=\"free-thinking\""], "free-thinking"),
        (good.clone(), vec!["sft.action_noise=2"], "sft.action_noise"),
        (good.clone(), vec!["rollout.explore=-0.1"], "rollout.explore"),
        (good.clone(), vec!["optim.lr_schedule=\"cosine\""], "cosine"),
        (good.clone(), vec!["rollout.observation_text=false"], "rollout.observation_text"),
        (good.clone(), vec!["env.max_failure_rate=1.5"], "env.max_failure_rate"),
        (config("gae", ""), vec!["rollout.per_turn=true"], "rollout.per_turn"),
        (good.clone(), vec!["algorithm.filter.drop_zero_advantage=true"], "algorithm.filter.drop_zero_advantage"),
        (good.clone(), vec!["nonsense"], "nonsense"),
        (good.clone(), vec!["model.dtype=\"f64\""], "model.dtype"),
        (good.clone(), vec!["model.device=\"gpu\""], "expected cpu, cuda, cuda:N or auto\nin `model.device`"),
        (good.clone(), vec!["model.path=\"default@x\""], "must be a whole number\nin `model.path`"),
        // `[rollout]` is read by three parts: a key none takes, or a bad value for one, is
        // still refused by name.
        (good.clone(), vec!["rollout.temprature=0.5"], "rollout.temprature: unknown key"),
        (good.clone(), vec!["rollout.temperature=\"hot\""], "rollout"),
        (good.clone(), vec!["rollout.format_reward.bonsu=1"], "bonsu"),
        (good.clone(), vec!["env.max_turns=-1"], "max_turns"),
        (good.clone(), vec!["engine.max_batch=0"], "max_batch"),
        // A plugin or a harness (an agent program), one of them.
        (good.clone(), vec!["env.plugin=\"\""], "env.plugin"),
        (good.clone(), vec!["env.harness={command=[\"python3\"]}"], "not both"),
        (good.clone(), vec!["env.plugin=\"\"", "env.harness={command=[]}"], "command"),
        (good.clone(), vec!["env.plugin=\"\"", "env.harness={command=[\"python3\"], timeout_s=0}"], "timeout_s"),
        // A harness has no oracle: SFT and the embedded vocabulary read `sft.data`.
        (good.clone(), vec!["env.plugin=\"\"", "env.harness={command=[\"python3\"]}"], "sft.data"),
    ];
    for (text, overrides, needle) in cases {
        let err = parse(&text, &overrides).expect_err(needle);
        assert!(err.contains(needle), "{err} should name {needle}");
    }
    // An env config the plugin refuses leaves no run folder behind.
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let refused = parse(&good.replace("[model]", "[env.config]\nobservation = \"smell\"\n[model]"), &[]).unwrap();
    let err = format!("{:#}", Trainer::new(refused, &run).err().unwrap());
    assert!(err.contains("smell"), "{err}");
    assert!(!run.exists(), "{} was left behind", run.display());
    // A typo in a `--set` is named as that `--set`, not as the file; one in the file as the file.
    let err = parse(&good, &["optim.actr_lr=1e-5"]).unwrap_err();
    assert!(err.starts_with("--set optim.actr_lr=1e-5:") && err.contains("actr_lr"), "{err}");
    let bad_file = good.replace("[optim]", "[optim]\nlearning_rate = 1.0");
    let err = parse(&bad_file, &["optim.actor_lr=1e-5"]).unwrap_err();
    assert!(err.starts_with("test.toml:") && err.contains("learning_rate"), "{err}");
    // Refused means no run folder either.
    let dir = tempfile::tempdir().unwrap();
    assert!(parse(&good, &["env.group_size=1"]).is_err());
    assert!(!dir.path().join("config.toml").exists());
    // An existing run is not overwritten.
    let cfg = parse(&good, &["schedule.steps=0"]).unwrap();
    Trainer::new(cfg.clone(), dir.path()).unwrap();
    let err = Trainer::new(cfg, dir.path()).err().unwrap().to_string();
    assert!(err.contains("holds a run") && err.contains("--restart"), "{err}");
}

#[test]
fn a_faulting_plugin_fails_only_its_trajectories_until_the_rate_stops_the_run() {
    // One step in twenty faults: a few trajectories fail, the run goes on.
    let flaky = hostile_config("flaky", "");
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&flaky, &["env.groups=6", "env.max_turns=3", "schedule.steps=1"]).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    let m = step_line(dir.path(), 1);
    assert!(m["train/failed_trajectories"].as_f64().unwrap() >= 1.0, "{m}");
    // Every step faults: the run stops, names the plugin, and leaves a reproducer.
    let panics = hostile_config("panic", "");
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&panics, &["schedule.steps=1"]).unwrap();
    let err = Trainer::new(cfg, dir.path()).unwrap().run().unwrap_err().to_string();
    assert!(err.contains("hostile.wasm") && err.contains("reproducer"), "{err}");
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("failure-"));
    let text = std::fs::read_to_string(file.expect("a reproducer file").path()).unwrap();
    assert!(text.contains("\"seed\""));
}

#[test]
fn train_config_applies_to_training_episodes_only_and_is_checked_up_front() {
    let text = hostile_config("healthy", "").replace("[model]", "[env.train_config]\nmode = \"panic\"\n[model]");
    // Evaluation runs `env.config`: the healthy game.
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::new(parse(&text, &["schedule.steps=1"]).unwrap(), dir.path()).unwrap();
    assert!(t.evaluate().is_ok());
    // Training runs `env.train_config` over it: every episode panics and the run stops.
    let err = t.run().unwrap_err().to_string();
    assert!(err.contains("reproducer"), "{err}");
    // A value the plugin refuses stops the run before any work, naming the table.
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&text, &["env.train_config.mode=\"sideways\""]).unwrap();
    let err = Trainer::new(cfg, dir.path()).err().expect("refused").to_string();
    assert!(err.contains("env.train_config") && err.contains("sideways"), "{err}");
    assert!(!dir.path().join("metrics.jsonl").exists());
}

#[test]
fn reward_functions_join_the_turn_rewards_and_are_logged() {
    let reward = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/rewards/hostile-reward.wasm");
    assert!(reward.is_file(), "{} is not built: run `cargo xtask test`", reward.display());
    let extra = format!(
        "[[reward]]\nplugin = {:?}\nweight = 2.0\nconfig = {{ mode = \"constant\", value = 0.25 }}\n",
        reward.display().to_string()
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("bi-level-gae", &extra), &["schedule.steps=1"]).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    let m = step_line(dir.path(), 1);
    assert_eq!(m["reward/hostile-reward/mean"], 0.25, "{m}");
    assert_eq!(m["reward/hostile-reward/paid"], 1.0);
    assert_eq!(m["reward/hostile-reward/failed_turns"], 0.0);
    assert!(m["critic/vf_loss"].as_f64().unwrap().is_finite());
    let missing = extra.replace("hostile-reward.wasm", "no-such-reward.wasm");
    let err = parse(&config("grpo", &missing), &[]).and_then(|c| c.validate().map_err(|e| e.to_string())).unwrap_err();
    assert!(err.contains("reward.plugin") && err.contains("no-such-reward.wasm"), "{err}");
}

#[test]
fn the_local_judge_answers_a_steps_requests_in_one_generation() {
    let reward = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/rewards/hostile-reward.wasm");
    let extra = format!(
        "[judge]\nbackend = \"local\"\nmodel = \"default\"\ndevice = \"cpu\"\n[[reward]]\nplugin = {:?}\nconfig = {{ mode = \"judge\" }}\n",
        reward.display().to_string()
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("grpo", &extra), &["schedule.steps=2"]).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    for step in [1, 2] {
        let m = step_line(dir.path(), step);
        // Every turn asks once; the step's requests go to the engine together.
        let turns = m["train/turns"].as_f64().unwrap() * 4.0;
        assert_eq!(m["reward/judge/calls"], 1.0, "{m}");
        assert_eq!(m["reward/judge/requests"].as_f64().unwrap(), turns, "{m}");
        assert_eq!(m["reward/hostile-reward/failed_turns"], 0.0);
    }
    // The report shows the last step's judged turns: the judge's prompt and its answer.
    let report = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    let section = &report[report.find("Reward functions and the judge").expect("a rewards section")..];
    assert!(section.contains("Is this right?") && section.contains("hostile-reward"), "{section}");
    let bad = extra.replace("backend = \"local\"", "backend = \"oracle\"");
    let err = parse(&config("grpo", &bad), &[]).unwrap_err();
    assert!(err.contains("oracle") && err.contains("local"), "{err}");
}

/// A loopback stand-in for an OpenAI-compatible judge: answers every request "YES" and
/// keeps each request's `Authorization` header (or "" when none came).
fn recording_judge_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut auth, mut length) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if lower.starts_with("authorization:") {
                    auth = line["authorization:".len()..].trim().to_string();
                }
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            record.lock().unwrap().push(auth);
            let answer = r#"{"choices":[{"message":{"role":"assistant","content":"YES"}}]}"#;
            let mut out = stream;
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (url, seen)
}

/// Issue 41: `[judge] url = <any host>` with `api_key_env = "AWS_SECRET_ACCESS_KEY"` sent
/// the secret there. Now the key's variable and the hosts come from the user (command line
/// or `~/.config/vagen/judge.toml`), never from a run's config, and the key is nowhere in
/// the run folder.
#[test]
fn a_config_cannot_send_a_secret_anywhere() {
    let reward = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/rewards/hostile-reward.wasm");
    let judge = |url: &str, more: &str| {
        format!(
            "[judge]\nbackend = \"openai\"\nurl = {url:?}\nmodel = \"m\"\nretries = 0\n{more}[[reward]]\nplugin = {:?}\nconfig = {{ mode = \"judge\" }}\n",
            reward.display().to_string()
        )
    };
    let err = parse(&config("grpo", &judge("http://127.0.0.1:9/v1", "api_key_env = \"AWS_SECRET_ACCESS_KEY\"\n")), &[])
        .unwrap_err();
    assert!(err.contains("judge.api_key_env") && err.contains("--judge-key-env"), "{err}");
    // A host off this machine is refused before any work, unless the user allows it.
    let far = parse(&config("grpo", &judge("https://collector.example/v1", "")), &["schedule.steps=1"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let err = Trainer::new(far.clone(), dir.path()).err().unwrap().to_string();
    assert!(err.contains("--judge-host collector.example"), "{err}");
    let mut allowed = far;
    allowed.judge_access = vagen_trainer::JudgeAccess { key_env: None, hosts: vec!["collector.example".into()] };
    Trainer::new(allowed, tempfile::tempdir().unwrap().path()).unwrap();
    // On loopback: no key unless the user names its variable (OPENAI_API_KEY is not read
    // by default any more); named, it is sent and written nowhere.
    // SAFETY: variables no other test reads, set before the trainers that read them start.
    unsafe {
        std::env::set_var("OPENAI_API_KEY", "sk-default-not-sent");
        std::env::set_var("VAGEN_TEST_JUDGE_KEY", "sk-named-1234");
    }
    let (url, seen) = recording_judge_server();
    for key_env in [None, Some("VAGEN_TEST_JUDGE_KEY")] {
        seen.lock().unwrap().clear();
        let mut cfg = parse(&config("grpo", &judge(&url, "cache = false\n")), &["schedule.steps=1"]).unwrap();
        cfg.judge_access = vagen_trainer::JudgeAccess { key_env: key_env.map(String::from), hosts: vec![] };
        let dir = tempfile::tempdir().unwrap();
        Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
        let auth = seen.lock().unwrap().clone();
        assert!(!auth.is_empty(), "the judge was asked");
        let want = if key_env.is_some() { "Bearer sk-named-1234" } else { "" };
        assert!(auth.iter().all(|a| a == want), "{key_env:?}: {auth:?}");
        for file in walk(dir.path()) {
            let bytes = std::fs::read(&file).unwrap();
            assert!(!bytes.windows(7).any(|w| w == b"sk-name"), "the key is in {}", file.display());
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

/// Issue 41: the judge cache was trusted blindly (an entry rewritten to `YES` paid 1.0 with
/// no request sent; an entry linked to `/dev/zero` grew to 3 GB). Now an entry counts only
/// when sealed for its request by this user's key, is a regular file and is small.
#[test]
fn a_judge_cache_entry_is_believed_only_when_sealed_for_its_request() {
    use std::sync::atomic::Ordering;
    use vagen_runtime::reward::{Judge, JudgeMessage, JudgePart, JudgeRequest};
    let (url, seen) = recording_judge_server();
    let cache = tempfile::tempdir().unwrap();
    let endpoint = vagen_policy::EndpointOptions {
        url,
        model: "m".into(),
        api_key: None,
        concurrency: 1,
        requests_per_minute: 0,
        timeout: std::time::Duration::from_secs(10),
        retries: 0,
        backoff: std::time::Duration::from_millis(10),
    };
    let options = vagen_trainer::OpenAiOptions { endpoint, cache: Some(cache.path().into()) };
    let ask = JudgeRequest {
        messages: vec![JudgeMessage { role: "user".into(), content: vec![JudgePart::Text("Is it?".into())] }],
        max_tokens: 2,
        temperature: 0.0,
    };
    let judge = vagen_trainer::OpenAiJudge::new(options.clone()).unwrap();
    assert_eq!(judge.complete(std::slice::from_ref(&ask)), vec![Ok("YES".to_string())]);
    assert_eq!(judge.complete(std::slice::from_ref(&ask)), vec![Ok("YES".to_string())]);
    assert_eq!((seen.lock().unwrap().len(), judge.counts.cache_hits.load(Ordering::SeqCst)), (1, 1));
    let entry = std::fs::read_dir(cache.path()).unwrap().flatten().map(|e| e.path()).next().unwrap();
    let sealed = std::fs::read(&entry).unwrap();
    // Edited to another answer, a link to an endless file, a pipe, an entry moved to another
    // request: each is a miss, and the server is asked again.
    let mut forged = sealed.clone();
    let n = forged.len();
    forged[n - 3..].copy_from_slice(b"NO!");
    for plant in ["edited", "link", "fifo"] {
        std::fs::remove_file(&entry).unwrap();
        match plant {
            "edited" => std::fs::write(&entry, &forged).unwrap(),
            "link" => std::os::unix::fs::symlink("/dev/zero", &entry).unwrap(),
            _ => assert!(std::process::Command::new("mkfifo").arg(&entry).status().unwrap().success()),
        }
        let before = seen.lock().unwrap().len();
        let judge = vagen_trainer::OpenAiJudge::new(options.clone()).unwrap();
        assert_eq!(judge.complete(std::slice::from_ref(&ask)), vec![Ok("YES".to_string())], "{plant}");
        assert_eq!(seen.lock().unwrap().len(), before + 1, "{plant}: asked again");
        assert_eq!(judge.counts.cache_hits.load(Ordering::SeqCst), 0, "{plant}");
    }
    let other = JudgeRequest { max_tokens: 3, ..ask.clone() };
    let judge = vagen_trainer::OpenAiJudge::new(options).unwrap();
    judge.complete(std::slice::from_ref(&other));
    let entries: Vec<_> = std::fs::read_dir(cache.path()).unwrap().flatten().map(|e| e.path()).collect();
    let theirs = entries.iter().find(|p| **p != entry).unwrap();
    std::fs::copy(&entry, theirs).unwrap();
    let before = seen.lock().unwrap().len();
    judge.complete(std::slice::from_ref(&other));
    assert_eq!(seen.lock().unwrap().len(), before + 1, "an entry moved to another request is not believed");
}
