//! An environment whose `step` does what its config's `mode` says, so the test suite can
//! check that the host survives it. With `mode = "healthy"` it is a normal 3-step game.

use serde::{Deserialize, Serialize};
use vagen_sdk::{Env, EnvError, Image, Manifest, Observation, Step, export_env};

mod probe;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// healthy | loop | alloc | panic | open-file | wrong-image | nan-reward | chatty | random | sleep | nondeterministic |
    /// rare-trap | flaky | leak | huge-image | step-fails | reset-fails | noisy-image | spin |
    /// huge-error | huge-reward | max-valid | oracle-traps | oracle-none | exit | drift-late |
    /// read-file | read-env | connect | send-udp | lookup (probes in `reset`, see probe.rs)
    pub mode: String,
    /// What a probe aims at: a host path, an env var name, an address or a host name.
    pub target: String,
    /// For `spin`: millions of loop iterations each step burns (slow, but within deadlines).
    pub spin_millions: u32,
}

pub struct Hostile {
    mode: String,
    spin_millions: u32,
    target: String,
    steps: u32,
    seed: u64,
    last_answer: String,
    /// Resets of this instance (`drift-late`).
    resets: u64,
}

/// Grows by 1 MiB per episode in `leak` mode and is never freed.
static LEAKED: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

impl Env for Hostile {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        let known = [
            "",
            "healthy",
            "loop",
            "alloc",
            "panic",
            "open-file",
            "wrong-image",
            "nan-reward",
            "chatty",
            "random",
            "sleep",
            "nondeterministic",
            "drift-late",
            "rare-trap",
            "flaky",
            "leak",
            "huge-image",
            "step-fails",
            "reset-fails",
            "noisy-image",
            "spin",
            "read-file",
            "read-env",
            "connect",
            "send-udp",
            "lookup",
            "huge-error",
            "huge-reward",
            "max-valid",
            "oracle-traps",
            "oracle-none",
            "exit",
        ];
        if !known.contains(&config.mode.as_str()) {
            return Err(EnvError::BadConfig(format!("unknown mode {:?}", config.mode)));
        }
        Ok(Self {
            mode: config.mode,
            target: config.target,
            spin_millions: config.spin_millions,
            steps: 0,
            seed: 0,
            last_answer: String::new(),
            resets: 0,
        })
    }

    fn manifest() -> Manifest {
        Manifest { action_names: vec!["go".into()], has_oracle: true, default_max_turns: 5, ..Manifest::default() }
    }

    fn reset(&mut self, seed: u64) -> Observation {
        self.steps = 0;
        self.seed = seed;
        self.last_answer.clear();
        if let Some(report) = probe::run(&self.mode, &self.target) {
            return Observation::text(report);
        }
        if self.mode == "leak" {
            LEAKED.lock().unwrap_or_else(|e| e.into_inner()).push(std::hint::black_box(vec![7u8; 1 << 20]));
        }
        if self.mode == "drift-late" {
            // Deterministic for a dozen episodes, then state from earlier ones shows.
            self.resets += 1;
            if self.resets > 12 {
                return Observation::text(format!("seed {seed}, after {} resets", self.resets));
            }
            return Observation::text(format!("seed {seed}"));
        }
        if self.mode == "nondeterministic" {
            // State that outlives episodes: the same seed shows something new each time.
            static RESETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = RESETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Observation::text(format!("seed {seed}, reset number {n}"));
        }
        Observation::text(format!("seed {seed}"))
    }

    fn step(&mut self, answer: &str) -> Step {
        self.steps += 1;
        let previous = std::mem::replace(&mut self.last_answer, answer.trim().to_string());
        let mut step = Step { valid_actions: 1, ..Step::default() };
        step.observation = Observation::text(format!("step {}", self.steps));
        match self.mode.as_str() {
            "loop" => {
                let mut x = self.seed;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
                }
            }
            "panic" => panic!("hostile plugin panics on purpose"),
            "exit" => std::process::exit(3),
            // Only the exact pair "go" then "GO" in consecutive steps: rare under random input.
            "rare-trap" if previous == "go" && answer.trim() == "GO" => panic!("rare sequence go, GO"),
            // One step in twenty, decided by seed and step number (reproducible).
            "flaky" if (self.seed.wrapping_mul(31).wrapping_add(u64::from(self.steps))) % 20 == 7 => {
                panic!("flaky plugin fails at step {} of seed {}", self.steps, self.seed)
            }
            "huge-image" => {
                step.observation.text.push_str("<image>");
                step.observation.images.push(Image { width: 100_000, height: 100_000, rgb: Vec::new() });
            }
            "open-file" => {
                let outcome = match std::fs::read_to_string("/etc/passwd") {
                    Ok(text) => format!("opened /etc/passwd ({} bytes)", text.len()),
                    Err(e) => format!("open failed: {e}"),
                };
                let listing = match std::fs::read_dir(".") {
                    Ok(_) => "listed .".to_string(),
                    Err(e) => format!("list failed: {e}"),
                };
                let env = std::env::vars().count();
                step.observation = Observation::text(format!("{outcome}; {listing}; {env} env vars"));
            }
            "spin" => {
                let mut x = self.seed;
                for _ in 0..u64::from(self.spin_millions) * 1_000_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                step.metrics.push(("spun".into(), (x % 2) as f64));
            }
            "noisy-image" => {
                // Text and outcome stay put; one pixel counts the steps this instance took.
                static STEPS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
                let n = STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut rgb = vec![0u8; 2 * 2 * 3];
                rgb[5] = n;
                step.observation.text.push_str(" <image>");
                step.observation.images.push(Image { width: 2, height: 2, rgb });
            }
            "wrong-image" => {
                step.observation.images.push(Image { width: 4, height: 4, rgb: vec![0; 48] });
            }
            "nan-reward" => step.reward = f64::NAN,
            // Infinite once summed in f32.
            "huge-reward" => step.reward = 1e39,
            "max-valid" => (step.valid_actions, step.effective_actions) = (u32::MAX, u32::MAX),
            "sleep" => {
                let start = std::time::Instant::now();
                std::thread::sleep(std::time::Duration::from_secs(3600));
                step.observation = Observation::text(format!("slept {} s", start.elapsed().as_secs()));
            }
            "chatty" => {
                for i in 0..100_000 {
                    println!("line {i} of chatter that nobody asked for");
                }
            }
            "random" => {
                // Both come from WASI, which the host makes a function of the seed.
                let mut bytes = [0u8; 8];
                getrandom::fill(&mut bytes).expect("wasi:random answers");
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                let nanos = now.map(|d| d.as_nanos()).unwrap_or(0);
                step.observation = Observation::text(format!("random {bytes:?} time {nanos}"));
            }
            _ => {}
        }
        step.done = self.steps >= 3;
        step.success = step.done;
        step.reward = if step.reward.is_nan() || self.mode == "huge-reward" {
            step.reward
        } else if step.done {
            1.0
        } else {
            0.0
        };
        step
    }

    fn oracle(&self) -> Option<String> {
        match self.mode.as_str() {
            "oracle-traps" => panic!("the oracle traps"),
            "oracle-none" => None,
            _ => Some("go".into()),
        }
    }

    fn try_reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        // One seed in three: an env that cannot start some episodes, as a raising Python
        // `reset` does.
        if self.mode == "reset-fails" && seed % 3 == 1 {
            return Err(EnvError::Failed(format!("cannot start seed {seed}")));
        }
        Ok(self.reset(seed))
    }

    fn try_step(&mut self, answer: &str) -> Result<Step, EnvError> {
        if self.mode == "step-fails" {
            return Err(EnvError::Failed(format!("step always fails (answer {:?})", answer.trim())));
        }
        if self.mode == "huge-error" {
            // 100 MB, with a fake log line and terminal escapes in it.
            let mut message = String::with_capacity((100 << 20) + 64);
            message.push_str("\u{1b}[2J\u{1b}[31mred alert\nINFO all good\u{202e}");
            message.push_str(&"x".repeat(100 << 20));
            return Err(EnvError::Failed(message));
        }
        Ok(self.step(answer))
    }
}

export_env!(Hostile);
