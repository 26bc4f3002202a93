//! PrimitiveSkill (VAGEN's ManiSkill benchmark) as a native plugin: a Franka Panda on a
//! table picks, places and pushes cubes on command. Each instance owns a worker process
//! running ManiSkill 3 (`worker.rs`); the action language, text, rewards and oracle live
//! here, the physics, the primitives and the stage tests in the worker (`worker/worker.py`).

mod actions;
mod config;
mod task;
mod worker;

pub use actions::{Parsed, Primitive, Skill, parse};
pub use config::{Config, Observe, Renderer, machine_report};
pub use task::{Objects, Task, Workspace};

use std::time::Duration;

use serde_json::{Value, json};
use vagen_sdk::{ActionSpec, Env, EnvError, Image, Manifest, Modality, Observation, Step, echo, export_env};
use worker::{Launch, Reply, Worker};

pub struct PrimitiveSkill {
    config: Config,
    launch: Launch,
    spec: ActionSpec,
    worker: Option<Worker>,
    /// What the last reply said: objects in mm (VAGEN's order), held cubes, stage value.
    objects: Objects,
    held: Vec<String>,
    value: f64,
    success: bool,
    skills_done: u32,
}

/// What one reply holds, read once.
struct State {
    objects: Objects,
    held: Vec<String>,
    stage: i64,
    success: bool,
    reached: bool,
    steps: u64,
    image: Option<Image>,
}

impl Env for PrimitiveSkill {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        config.validate()?;
        let python = config.python_path()?;
        let renderer = config.vulkan(&python)?;
        let render = config.observation == Observe::Image;
        if render && renderer == Renderer::Missing {
            return Err(EnvError::BadConfig(format!(
                "observation \"image\" needs a Vulkan driver and this machine has none; run `cargo xtask maniskill` \
                 (it installs a CPU renderer beside {}), set vulkan_icd, or use observation \"text\"",
                python.display()
            )));
        }
        let launch = Launch {
            python,
            vulkan_icd: match renderer {
                Renderer::Icd(p) if render => Some(p),
                _ => None,
            },
            render,
            start_timeout: Duration::from_secs_f64(config.start_timeout_s),
        };
        let spec = ActionSpec::new(&Primitive::NAMES, &config.separator, config.max_actions_per_turn as usize);
        Ok(Self {
            config,
            launch,
            spec,
            worker: None,
            objects: Vec::new(),
            held: Vec::new(),
            value: 0.0,
            success: false,
            skills_done: 0,
        })
    }

    fn manifest() -> Manifest {
        let c = Config::default();
        Manifest {
            description: format!("{} This machine: {}.", env!("CARGO_PKG_DESCRIPTION"), machine_report()),
            modalities: vec![Modality::Text, Modality::Image],
            action_names: Primitive::NAMES.iter().map(|s| s.to_string()).collect(),
            action_separator: c.separator,
            max_actions_per_turn: c.max_actions_per_turn,
            // VAGEN's rollout default (`rollout_manager.max_turns: 5`): ten skills at two a turn.
            default_max_turns: 5,
            has_oracle: true,
            ..Manifest::default()
        }
    }

    fn action_spec(&self) -> Option<&ActionSpec> {
        Some(&self.spec)
    }

    fn presets() -> &'static [(&'static str, &'static str)] {
        config::PRESETS
    }

    fn reset(&mut self, _seed: u64) -> Observation {
        unreachable!("try_reset is the entry point")
    }

    fn step(&mut self, _answer: &str) -> Step {
        unreachable!("try_step is the entry point")
    }

    fn try_reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        let fresh = self.worker.is_none();
        let timeout = if fresh { self.launch.start_timeout } else { self.call_timeout() };
        let image_size = (self.launch.render).then_some(self.config.image_size);
        let request =
            json!({"op": "reset", "task": self.config.task.name(), "seed": sim_seed(seed), "image_size": image_size});
        let state = self.call(&request, timeout)?;
        self.skills_done = 0;
        self.absorb(&state);
        Ok(self.observe(None, state.image))
    }

    fn try_step(&mut self, answer: &str) -> Result<Step, EnvError> {
        let ws = self.config.task.workspace();
        let parsed = parse(answer, &self.config.separator, self.config.max_actions_per_turn as usize, &ws);
        let before = self.value;
        let mut step = Step::default();
        let mut executed = Vec::new();
        let mut image = None;
        let mut low_level = 0u64;
        for skill in &parsed.skills {
            if self.skills_done >= self.config.max_actions_per_episode || self.success {
                break;
            }
            let (a, b) = skill.points_m();
            let request = json!({"op": "skill", "skill": skill.primitive.name(), "a": a, "b": b});
            let state = self.call(&request, self.call_timeout())?;
            self.skills_done += 1;
            step.valid_actions += 1;
            step.effective_actions += u32::from(state.reached);
            low_level += state.steps;
            executed.push(skill.text());
            self.absorb(&state);
            image = state.image;
        }
        if image.is_none() && self.launch.render {
            // Nothing ran: the picture has not changed, but every observation carries one.
            image = Some(
                self.call(&json!({"op": "observe"}), self.call_timeout())?
                    .image
                    .ok_or_else(|| EnvError::Failed("the ManiSkill worker sent no image".into()))?,
            );
        }
        step.success = self.success;
        step.done = self.success || self.skills_done >= self.config.max_actions_per_episode;
        step.reward = self.value - before - self.config.skill_cost * f64::from(step.valid_actions);
        step.metrics = vec![
            ("stage-value".into(), self.value),
            ("low-level-steps".into(), low_level as f64),
            ("invalid-actions".into(), f64::from(u8::from(parsed.invalid.is_some()))),
        ];
        step.observation = self.observe(Some((&executed, parsed.invalid.as_deref())), image);
        Ok(step)
    }

    fn system_prompt(&self) -> String {
        format!(
            "{}\nYou can take up to {} action(s) at a time, separated by {}.",
            SYSTEM_PROMPT, self.config.max_actions_per_turn, self.config.separator
        )
    }

    fn describe_state(&self) -> String {
        if self.objects.is_empty() {
            return String::new();
        }
        let objects: Vec<String> = self
            .objects
            .iter()
            // Written as an action writes them, so a model copies a position digit by digit.
            .map(|(n, p)| format!("{} at ({},{},{})", n.replace('_', " "), p[0], p[1], p[2]))
            .collect();
        let held = match self.held.as_slice() {
            [] => "nothing".to_string(),
            h => h.iter().map(|c| format!("the {c} cube")).collect::<Vec<_>>().join(" and "),
        };
        format!("Positions in mm: {}. The gripper holds {held}.", objects.join("; "))
    }

    fn oracle(&self) -> Option<String> {
        let n = self.config.max_actions_per_turn as usize;
        let plan = self.config.task.oracle(&self.objects, &self.held, n)?;
        Some(plan.join(&self.config.separator))
    }
}

impl Drop for PrimitiveSkill {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.give_back(&self.launch);
        }
    }
}

/// ManiSkill seeds NumPy, which takes 32 bits: the two halves of a 64-bit seed folded, so
/// every seed below 2³² is itself.
fn sim_seed(seed: u64) -> u64 {
    (seed ^ (seed >> 32)) & 0xFFFF_FFFF
}

impl PrimitiveSkill {
    fn call_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.config.call_timeout_s)
    }

    /// One request to the worker and its state. See [`Self::exchange`].
    fn call(&mut self, request: &Value, timeout: Duration) -> Result<State, EnvError> {
        let reply = self.exchange(request, timeout)?;
        read_state(reply).inspect_err(|_| self.worker = None)
    }

    /// One request to the worker, started (or taken from the idle ones) first if there is
    /// none. Any failure, the worker's own exception included, ends this instance's use of
    /// the process; the next call starts another.
    fn exchange(&mut self, request: &Value, timeout: Duration) -> Result<Reply, EnvError> {
        let worker = match &mut self.worker {
            Some(worker) => worker,
            empty => empty.insert(Worker::take_or_spawn(&self.launch).map_err(EnvError::Failed)?),
        };
        worker.call(request, timeout).map_err(|e| {
            self.worker = None;
            EnvError::Failed(e.to_string())
        })
    }

    /// One empty request and its reply: what the pipe and the worker's loop cost a call
    /// (`examples/bench-primitive-skill.rs`). Starts the worker first if there is none.
    #[doc(hidden)]
    pub fn ping(&mut self) -> Result<Duration, EnvError> {
        if self.worker.is_none() {
            self.exchange(&json!({"op": "ping"}), self.launch.start_timeout)?;
        }
        let started = std::time::Instant::now();
        self.exchange(&json!({"op": "ping"}), self.call_timeout())?;
        Ok(started.elapsed())
    }

    fn absorb(&mut self, s: &State) {
        self.objects = s.objects.clone();
        self.held = s.held.clone();
        self.success = s.success;
        self.value =
            if s.success { self.config.success_reward } else { (s.stage + 1) as f64 * self.config.stage_reward };
    }

    /// VAGEN's observation text (`prompt.py`'s templates); the image marker where VAGEN
    /// puts its `<image>` when there is an image.
    fn observe(&self, turn: Option<(&[String], Option<&str>)>, image: Option<Image>) -> Observation {
        let c = &self.config;
        let mut obs = Observation::text(match turn {
            None => "[Initial Observation]:\n".to_string(),
            Some((executed, invalid)) => {
                let list: Vec<String> = executed.iter().map(|a| format!("'{a}'")).collect();
                let mut s = format!("After your answer, the extracted valid action(s) is [{}].\n", list.join(", "));
                if let Some(bad) = invalid {
                    s.push_str(&format!(
                        "Invalid action {:?}: write pick(x,y,z), place(x,y,z) or push(x1,y1,z1,x2,y2,z2) in millimetres.\n",
                        echo(bad)
                    ));
                }
                if self.success {
                    s.push_str("The task is complete.\n");
                } else if self.skills_done >= c.max_actions_per_episode {
                    s.push_str("No actions are left in this episode.\n");
                }
                s.push_str("After that, the observation is:\n");
                s
            }
        });
        if let Some(image) = image {
            obs.push_image(image);
            obs.text.push('\n');
        }
        let ws = c.task.workspace().0;
        let positions: Vec<String> =
            self.objects.iter().map(|(_, p)| format!("({}, {}, {})", p[0], p[1], p[2])).collect();
        obs.text.push_str(&format!(
            "Human Instruction: {}\nx_workspace_limit: ({}, {})\ny_workspace_limit: ({}, {})\nz_workspace_limit: ({}, {})\n\
             Object positions: \n[{}]\nOther information:\n{}\nDecide your next action(s).",
            c.task.instruction(),
            ws[0].0,
            ws[0].1,
            ws[1].0,
            ws[1].1,
            ws[2].0,
            ws[2].1,
            positions.join(", "),
            c.task.other_information(),
        ));
        obs
    }
}

/// A reply's fields, checked: positions finite and in range, so a broken worker is an
/// error here and not a strange observation.
fn read_state(reply: Reply) -> Result<State, EnvError> {
    let bad = |m: &str| EnvError::Failed(format!("the ManiSkill worker's reply {m}"));
    let j = &reply.json;
    let mut objects = Objects::new();
    for o in j["objects"].as_array().ok_or_else(|| bad("has no objects"))? {
        let name = o[0].as_str().ok_or_else(|| bad("names an object without a string"))?;
        let mut mm = [0i64; 3];
        for (k, v) in mm.iter_mut().enumerate() {
            let m = o[1][k]
                .as_f64()
                .filter(|v| v.is_finite() && v.abs() < 100.0)
                .ok_or_else(|| bad("has a bad position"))?;
            *v = (m * 1000.0).round() as i64;
        }
        objects.push((name.to_string(), mm));
    }
    let held = j["held"].as_array().map(|h| h.iter().filter_map(|v| v.as_str().map(str::to_string)).collect());
    let image = match (&j["image"], reply.rgb) {
        (Value::Object(size), Some(rgb)) => {
            let (w, h) = (size["width"].as_u64().unwrap_or(0) as u32, size["height"].as_u64().unwrap_or(0) as u32);
            if rgb.len() != w as usize * h as usize * 3 {
                return Err(bad("carries an image whose size does not match its pixels"));
            }
            Some(Image { width: w, height: h, rgb })
        }
        _ => None,
    };
    Ok(State {
        objects,
        held: held.ok_or_else(|| bad("has no held list"))?,
        stage: j["stage"].as_i64().filter(|s| (-1..=10).contains(s)).ok_or_else(|| bad("has no stage"))?,
        success: j["success"].as_bool().ok_or_else(|| bad("has no success flag"))?,
        reached: j["reached"].as_bool().unwrap_or(true),
        steps: j["steps"].as_u64().unwrap_or(0),
        image,
    })
}

/// VAGEN's system prompt (`prompt.py`'s `system_prompt`), its typos kept.
const SYSTEM_PROMPT: &str = include_str!("system_prompt.txt");

export_env!(PrimitiveSkill);

#[cfg(test)]
mod tests;
