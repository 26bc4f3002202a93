//! Navigation as VAGEN plays it on AI2-THOR (REFERENCE.md in the design notes), without the
//! simulator: indoor rooms generated from the seed, seen first-person through a software
//! rasteriser inside the plugin; walk to the object the instruction names.

mod config;
mod geom;
mod mesh;
mod objects;
mod raster;
mod scene;
mod task;
mod walk;
mod words;

pub use config::{Config, Instruction};
pub use objects::{Colour, Kind};
pub use task::Task;
pub use vagen_sdk::ObservationMode;
pub use walk::{ACTIONS, Action, Pose};

use geom::v3;
use raster::{Camera, Frame};
use vagen_sdk::{ActionSpec, Env, EnvError, Image, Manifest, Modality, Observation, Step, echo, export_env};

/// Eye height above the floor (metres), AI2-THOR's agent camera.
const EYE_HEIGHT: f32 = 1.5;
const BACKGROUND: [u8; 3] = [20, 20, 24];

pub struct Navigation {
    config: Config,
    spec: ActionSpec,
    task: Task,
    pose: Pose,
    actions_taken: u32,
    frame: Frame,
    /// Objects in the current view (indices), nearest first.
    visible: Vec<usize>,
}

impl Navigation {
    pub fn task(&self) -> &Task {
        &self.task
    }

    pub fn pose(&self) -> Pose {
        self.pose
    }

    fn position(&self) -> (f32, f32) {
        self.task.walk.centre(&self.pose)
    }

    fn out_of_actions(&self) -> bool {
        self.actions_taken >= self.config.max_actions_per_episode
    }

    fn at_target(&self) -> bool {
        let (x, z) = self.position();
        self.task.reached(&self.config, x, z)
    }

    /// Renders the current view and works out which objects it shows.
    fn render(&mut self) {
        let (x, z) = self.position();
        let (hx, hz) = walk::HEADINGS[self.pose.heading as usize];
        let pitch = -(self.pose.pitch as f32) * 30f32.to_radians();
        let camera = Camera::new(
            v3(x, EYE_HEIGHT, z),
            (hx as f32, hz as f32),
            pitch,
            (self.config.fov_degrees as f32).to_radians(),
        );
        self.frame.render(&self.task.tris, &camera, BACKGROUND);
        let counts = self.frame.id_counts(self.task.objects.len() + 1);
        // Enough pixels to make the object out: 1/2000 of the frame, at least 4.
        let enough = ((self.frame.width * self.frame.height) as u32 / 2000).max(4);
        let mut visible: Vec<usize> = (0..self.task.objects.len()).filter(|&i| counts[i + 1] >= enough).collect();
        let objects = &self.task.objects;
        visible.sort_by(|&a, &b| objects[a].distance(x, z).total_cmp(&objects[b].distance(x, z)));
        self.visible = visible;
    }

    /// Feedback, the instruction, then the view (image, words or both).
    fn observe(&mut self, feedback: &str) -> Observation {
        self.render();
        let mut obs = Observation::text(feedback);
        if !feedback.is_empty() {
            obs.text.push('\n');
        }
        obs.text.push_str(&format!("Instruction: {}\n", self.task.instruction));
        let mode = self.config.observation;
        if mode != ObservationMode::Image {
            let (pos, heading) = (self.position(), self.pose.heading);
            obs.text.push_str(&words::view(&self.task.objects, &self.visible, pos, heading));
            obs.text.push('\n');
        }
        if mode != ObservationMode::Text {
            obs.text.push_str("Your view: ");
            obs.push_image(Image {
                width: self.frame.width as u32,
                height: self.frame.height as u32,
                rgb: self.frame.rgb.clone(),
            });
        }
        obs
    }
}

impl Env for Navigation {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        config.validate()?;
        let spec = ActionSpec::new(&ACTIONS, &config.separator, config.max_actions_per_turn as usize);
        // A config no house can satisfy is refused here, not discovered by a trap in reset.
        let task = Task::try_generate(&config, 0).ok_or_else(|| EnvError::BadConfig(task::UNSATISFIABLE.into()))?;
        let frame = Frame::new(config.image_width as usize, config.image_height as usize);
        let pose = task.start;
        Ok(Self { config, spec, task, pose, actions_taken: 0, frame, visible: Vec::new() })
    }

    fn manifest() -> Manifest {
        let c = Config::default();
        Manifest {
            modalities: vec![Modality::Image, Modality::Text],
            action_names: ACTIONS.iter().map(|s| s.to_string()).collect(),
            action_separator: c.separator,
            max_actions_per_turn: c.max_actions_per_turn,
            default_max_turns: 10,
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

    fn reset(&mut self, seed: u64) -> Observation {
        self.task = Task::generate(&self.config, seed);
        self.pose = self.task.start;
        self.actions_taken = 0;
        self.observe("")
    }

    fn step(&mut self, answer: &str) -> Step {
        let parsed = self.spec.parse(answer);
        let mut step = Step::default();
        let mut done_words = Vec::new();
        for &a in &parsed.actions {
            if self.out_of_actions() || step.success {
                break;
            }
            let action = Action::ALL[a];
            self.actions_taken += 1;
            step.valid_actions += 1;
            step.reward += self.config.step_reward;
            match self.task.walk.apply(self.pose, action) {
                Some(p) => {
                    self.pose = p;
                    step.effective_actions += 1;
                    done_words.push(action.name().to_string());
                }
                None if matches!(action, Action::LookUp | Action::LookDown) => {
                    done_words.push(format!("{} (not executed: the view is tilted as far as it goes)", action.name()))
                }
                None => done_words.push(format!("{} (blocked)", action.name())),
            }
            step.success = self.at_target();
        }
        if step.success {
            step.reward += self.config.success_reward;
        }
        step.done = step.success || self.out_of_actions();
        let mut feedback = if done_words.is_empty() {
            "No valid action was executed.".to_string()
        } else {
            format!("Executed: {}.", done_words.join(", "))
        };
        if let Some(bad) = parsed.invalid.first() {
            feedback.push_str(&format!(" Invalid action {:?}: valid actions are {}.", echo(bad), ACTIONS.join(", ")));
        }
        if step.success {
            feedback.push_str(&format!(" You reached the {}: success.", self.task.target().kind.name()));
        } else if step.done {
            feedback.push_str(" No actions are left in this episode.");
        }
        step.observation = self.observe(&feedback);
        let (x, z) = self.position();
        step.metrics = vec![
            ("distance-to-target".into(), self.task.target().distance(x, z) as f64),
            ("target-in-view".into(), f64::from(u8::from(self.visible.contains(&self.task.target)))),
            ("blocked-actions".into(), (step.valid_actions - step.effective_actions) as f64),
            ("invalid-actions".into(), parsed.invalid.len() as f64),
        ];
        step
    }

    fn system_prompt(&self) -> String {
        let c = &self.config;
        format!(
            "You are a home robot navigating indoor rooms. You see the room through your own eyes \
             ({fov:.0}° field of view).\n\
             Goal: follow the instruction and get within {sd} m of the object it means.\n\
             Actions:\n\
             - moveahead, moveback, moveright, moveleft: move {step} m forwards, backwards, right or left without turning;\n\
             - rotateright, rotateleft: turn 90° in place;\n\
             - lookup, lookdown: tilt your view by 30° (at most 30° up and 60° down).\n\
             A move that would bump into a wall or furniture is blocked and leaves you where you are.\n\
             Rewards: {succ:+} when you reach the object{step_r}.\n\
             You can take up to {n} action(s) at a time, separated by {sep:?}; an episode allows {m} actions.",
            fov = c.fov_degrees,
            sd = c.success_distance,
            step = c.step_size,
            succ = c.success_reward,
            step_r = if c.step_reward != 0.0 { format!(", {:+} per action", c.step_reward) } else { String::new() },
            n = c.max_actions_per_turn,
            sep = c.separator,
            m = c.max_actions_per_episode,
        )
    }

    fn describe_state(&self) -> String {
        let pos = self.position();
        let heading = self.pose.heading;
        let target = self.task.target();
        let in_view = if self.visible.contains(&self.task.target) { "in view" } else { "not in view" };
        let mut s = format!(
            "Target: {} ({in_view}). You face {}; {} of {} actions left.",
            words::locate(target, pos, heading),
            walk::HEADING_NAMES[heading as usize],
            self.config.max_actions_per_episode.saturating_sub(self.actions_taken),
            self.config.max_actions_per_episode,
        );
        let others: Vec<String> = self
            .visible
            .iter()
            .filter(|&&i| i != self.task.target)
            .take(4)
            .map(|&i| words::locate(&self.task.objects[i], pos, heading))
            .collect();
        if others.is_empty() {
            s.push_str(" No other objects in view.");
        } else {
            s.push_str(&format!(" Nearest other objects in view: {}.", others.join("; ")));
        }
        s
    }

    fn oracle(&self) -> Option<String> {
        let plan = self.task.walk.plan(self.pose, |x, z| self.task.reached(&self.config, x, z))?;
        let moves: Vec<usize> = plan.iter().take(self.spec.max_per_turn).map(|&a| a as usize).collect();
        (!moves.is_empty()).then(|| self.spec.join(&moves))
    }
}

export_env!(Navigation);

#[cfg(test)]
mod tests;
