//! SVG reconstruction as in VAGEN: the agent sees an icon and answers with SVG code; the
//! plugin draws that code with resvg and scores the drawing against the icon. Renderer,
//! scorer and icon set all live in the `.wasm`: no service, no download at run time.

mod config;
mod describe;
mod document;
mod icons;
mod metrics;

pub use config::{Config, Split};
pub use document::Limits;
pub use vagen_sdk::ObservationMode;

use vagen_sdk::{Env, EnvError, Image, Manifest, Modality, Observation, Rng, Step, export_env};

/// The three terms of a score and their weighted mean.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    pub edges: f64,
    pub ssim: f64,
    pub colour: f64,
    pub total: f64,
}

pub struct SvgEnv {
    config: Config,
    limits: Limits,
    /// Indices into `icons::all()` of the configured split.
    pool: Vec<usize>,
    /// The episode's icon, its rendering, and that rendering's half of the score.
    target: usize,
    target_rgb: Vec<u8>,
    reference: metrics::Reference,
}

impl Env for SvgEnv {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        config.validate()?;
        let pool: Vec<usize> = icons::all()
            .iter()
            .enumerate()
            .filter(|(_, icon)| match config.split {
                Split::All => true,
                Split::Train => !icons::held_out(icon.name, config.split_seed, config.test_fraction),
                Split::Test => icons::held_out(icon.name, config.split_seed, config.test_fraction),
            })
            .map(|(i, _)| i)
            .collect();
        if pool.is_empty() {
            return Err(EnvError::BadConfig(format!(
                "the {:?} split of {} icons is empty with test_fraction {}",
                config.split,
                icons::all().len(),
                config.test_fraction
            )));
        }
        let limits = config.limits();
        let (target_rgb, side) = (vec![255; 3], 1);
        let reference = metrics::Reference::new(&target_rgb, side);
        Ok(Self { config, limits, pool, target: 0, target_rgb, reference })
    }

    fn manifest() -> Manifest {
        Manifest {
            modalities: vec![Modality::Text, Modality::Image],
            action_names: Vec::new(),
            max_actions_per_turn: 1,
            default_max_turns: 3,
            has_oracle: true,
            ..Manifest::default()
        }
    }

    fn presets() -> &'static [(&'static str, &'static str)] {
        config::PRESETS
    }

    fn try_reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        let mut rng = Rng::new(seed);
        self.target = self.pool[rng.below(self.pool.len())];
        let icon = &icons::all()[self.target];
        // build.rs drew every embedded icon with the default limits; a config may lower them.
        let tree = document::parse(icon.svg, &self.limits, self.config.image_size).map_err(|e| {
            EnvError::Failed(format!("icon {:?} does not draw under this config's limits: {e}", icon.name))
        })?;
        self.target_rgb = document::render(&tree, self.config.image_size);
        self.reference = metrics::Reference::new(&self.target_rgb, self.config.image_size as usize);
        let mut text = String::from("Reproduce this icon as SVG code.");
        if self.config.observation != ObservationMode::Image {
            text.push(' ');
            text.push_str(&self.describe_state());
        }
        Ok(self.observe(text, self.target_rgb.clone()))
    }

    fn reset(&mut self, seed: u64) -> Observation {
        self.try_reset(seed).unwrap_or_else(|e| Observation::text(e.to_string()))
    }

    fn step(&mut self, answer: &str) -> Step {
        let side = self.config.image_size;
        let drawn = document::extract(answer, &self.limits).and_then(|svg| document::parse(&svg, &self.limits, side));
        let mut step = Step::default();
        match drawn {
            Err(why) => {
                step.reward = self.config.invalid_reward;
                let blank = vec![255; (side * side * 3) as usize];
                step.observation = self.observe(format!("Your answer could not be drawn: {why}."), blank);
                step.metrics = vec![("score".into(), 0.0)];
            }
            Ok(tree) => {
                let rgb = document::render(&tree, side);
                let s = self.score(&rgb);
                step.valid_actions = 1;
                step.effective_actions = u32::from(s.total > 0.0);
                step.reward = s.total;
                step.success = s.total >= self.config.success_threshold;
                step.done = step.success;
                let feedback = format!(
                    "Your SVG scored {:.2} (edges {:.2}, structure {:.2}, colour {:.2}). Your drawing:",
                    s.total, s.edges, s.ssim, s.colour
                );
                step.observation = self.observe(feedback, rgb);
                step.metrics = vec![
                    ("score".into(), s.total),
                    ("edge-iou".into(), s.edges),
                    ("ssim".into(), s.ssim),
                    ("colour".into(), s.colour),
                ];
            }
        }
        step
    }

    fn system_prompt(&self) -> String {
        let l = &self.limits;
        format!(
            "You are an SVG artist. You are shown an icon; write SVG code that reproduces it.\n\
             Answer with one <svg> element, for example:\n\
             <svg viewBox=\"0 0 48 48\"><circle cx=\"24\" cy=\"24\" r=\"20\" fill=\"#2196F3\"/></svg>\n\
             Draw with path, rect, circle, ellipse, line, polyline and polygon; g, use, gradients, \
             clip paths, masks and patterns work too. Text, images, filters and markers are not drawn.\n\
             Your drawing is rendered on a white {side} × {side} canvas and scored from 0 to 1 by how \
             well its edges, structure and colours match the icon; {threshold} or more solves the task.\n\
             An answer over {bytes} bytes or {elements} elements is not drawn.",
            side = self.config.image_size,
            threshold = self.config.success_threshold,
            bytes = l.max_bytes,
            elements = l.max_elements,
        )
    }

    fn describe_state(&self) -> String {
        describe::describe(icons::all()[self.target].svg, self.config.image_size)
    }

    /// The icon's own source: it draws the target pixel for pixel.
    fn oracle(&self) -> Option<String> {
        Some(icons::all()[self.target].svg.to_string())
    }
}

impl SvgEnv {
    /// The weighted mean of the three terms for a rendering of the target's size.
    pub fn score(&self, rgb: &[u8]) -> Score {
        let c = &self.config;
        let metrics::Terms { edges, ssim, colour } = self.reference.terms(rgb);
        let total = (c.edge_weight * edges + c.ssim_weight * ssim + c.colour_weight * colour)
            / (c.edge_weight + c.ssim_weight + c.colour_weight);
        Score { edges, ssim, colour, total: total.clamp(0.0, 1.0) }
    }

    /// The episode's icon, by name.
    pub fn target_name(&self) -> &'static str {
        icons::all()[self.target].name
    }

    /// The episode's target as drawn.
    pub fn target_image(&self) -> Image {
        Image { width: self.config.image_size, height: self.config.image_size, rgb: self.target_rgb.clone() }
    }

    fn observe(&self, text: String, rgb: Vec<u8>) -> Observation {
        let mut obs = Observation::text(text);
        if self.config.observation != ObservationMode::Text {
            obs.text.push('\n');
            obs.push_image(Image { width: self.config.image_size, height: self.config.image_size, rgb });
        }
        obs
    }
}

export_env!(SvgEnv);

#[cfg(test)]
mod tests;
