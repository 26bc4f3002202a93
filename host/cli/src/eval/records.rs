//! What an evaluation writes: its settings (which env build, which model, how sampled), one
//! `results.jsonl` line per episode (appended and synced as episodes end, so a killed run
//! loses at most the episodes in flight), the images beside them, and at the end
//! `summary.json` and `report.html`, each written whole or not at all.

use super::summary::Summary;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vagen_rollout::{FailedCall, Image, Trajectory, Truncation};

/// The env build a figure came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvIdentity {
    pub name: String,
    pub version: String,
    /// The plugin file's sha256: two builds are the same env only when these agree.
    pub sha256: String,
    /// Where it was loaded from (not compared: a copy elsewhere is the same build).
    pub plugin: String,
}

/// Who answered: a local model (its folder's digest) or an endpoint and the name asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelIdentity {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// Everything that decides an evaluation's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub env: EnvIdentity,
    pub env_config: String,
    /// The rollout settings (format, prompts, history), as `[rollout]` writes them.
    pub rollout: serde_json::Value,
    pub max_turns: u32,
    pub seed_start: u64,
    pub seeds: usize,
    pub samples: usize,
    pub temperature: f64,
    pub max_new_tokens: usize,
    pub policy: String,
    pub model: ModelIdentity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

impl Settings {
    /// The dotted keys whose values differ between `self` and `other`, leaving out those
    /// in `ignored` (and their children).
    pub fn differences(&self, other: &Settings, ignored: &[&str]) -> Vec<String> {
        let (a, b) = (flatten(self), flatten(other));
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        keys.into_iter()
            .filter(|k| !ignored.iter().any(|i| k.as_str() == *i || k.starts_with(&format!("{i}."))))
            .filter(|k| a.get(*k) != b.get(*k))
            .map(|k| format!("{k} ({} vs {})", shown(a.get(k)), shown(b.get(k))))
            .collect()
    }
}

fn shown(v: Option<&serde_json::Value>) -> String {
    v.map_or("absent".into(), |v| v.to_string())
}

fn flatten(s: &Settings) -> BTreeMap<String, serde_json::Value> {
    fn walk(prefix: &str, v: serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    walk(&if prefix.is_empty() { k } else { format!("{prefix}.{k}") }, v, out);
                }
            }
            v => {
                out.insert(prefix.to_string(), v);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", serde_json::to_value(s).expect("plain data"), &mut out);
    out
}

/// How an episode ended, as the summary counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Finish {
    Success,
    /// The env said done without a success.
    Done,
    /// Out of turns.
    MaxTurns,
    /// The prompt outgrew the model's context window.
    Context,
    Stopped,
    /// The env faulted (a failure of the env, counted against `--max-failure-rate`).
    EnvFailure,
    /// The policy's server never answered: not the model's outcome; `--resume` plays it again.
    Lost,
}

/// One turn as `results.jsonl` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnRow {
    /// The user message (observation, feedback, reminder); images are `images`.
    pub prompt: String,
    /// What the policy wrote.
    pub answer: String,
    /// The actions read from it, and what was sent to the env's `step`.
    pub actions: Vec<String>,
    pub sent: String,
    pub format_valid: bool,
    pub env_reward: f64,
    pub format_reward: f64,
    /// env + format reward (and reward functions', in a run's config).
    pub reward: f64,
    pub done: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

/// One episode: `results.jsonl`'s line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpisodeRecord {
    pub seed: u64,
    pub sample: usize,
    pub success: bool,
    pub reward: f64,
    pub turns: usize,
    pub finish: Finish,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall seconds of the batch it was played in (episodes of a batch step together).
    pub batch_seconds: f64,
    pub model: String,
    pub system: String,
    pub steps: Vec<TurnRow>,
}

impl EpisodeRecord {
    /// `t` (the `sample`-th episode of its seed), its images saved under `images` when given.
    pub fn of(t: &Trajectory, sample: usize, model: &str, images: Option<&ImageDir>) -> Result<Self> {
        let finish = match (&t.failure, t.truncated) {
            (Some(f), _) if matches!(f.call, FailedCall::Policy { .. }) => Finish::Lost,
            (Some(_), _) => Finish::EnvFailure,
            (None, Some(Truncation::Context)) => Finish::Context,
            (None, Some(Truncation::Stopped)) => Finish::Stopped,
            (None, None) if t.success => Finish::Success,
            (None, None) if t.done => Finish::Done,
            (None, None) => Finish::MaxTurns,
        };
        let steps = t
            .turns
            .iter()
            .enumerate()
            .map(|(k, turn)| {
                let saved = match images {
                    Some(dir) => dir.save(t.seed, sample, k, &turn.images)?,
                    None => vec![],
                };
                Ok(TurnRow {
                    prompt: turn.user.clone(),
                    answer: turn.response.clone(),
                    actions: turn.parsed.actions.clone(),
                    sent: turn.answer.clone(),
                    format_valid: turn.parsed.format_ok,
                    env_reward: turn.env_reward,
                    format_reward: turn.format_reward,
                    reward: turn.reward,
                    done: turn.done,
                    images: saved,
                })
            })
            .collect::<Result<_>>()?;
        Ok(EpisodeRecord {
            seed: t.seed,
            sample,
            success: t.success && t.failure.is_none(),
            reward: t.total_reward(),
            turns: t.turns.len(),
            finish,
            error: t.failure.as_ref().map(ToString::to_string),
            batch_seconds: 0.0,
            model: model.to_string(),
            system: t.system.clone(),
            steps,
        })
    }
}

/// `DIR/images/`: each turn's pictures as PNG files, named by seed, sample and turn.
pub struct ImageDir(pub PathBuf);

impl ImageDir {
    fn save(&self, seed: u64, sample: usize, turn: usize, images: &[Arc<Image>]) -> Result<Vec<String>> {
        if images.is_empty() {
            return Ok(vec![]);
        }
        std::fs::create_dir_all(&self.0).with_context(|| format!("creating {}", self.0.display()))?;
        images
            .iter()
            .enumerate()
            .map(|(k, img)| {
                let name = format!("s{seed}-n{sample}-t{turn:03}-{k}.png");
                let buf = image::RgbImage::from_raw(img.width, img.height, img.rgb.clone())
                    .context("an image whose size does not match its bytes")?;
                let path = self.0.join(&name);
                buf.save(&path).with_context(|| format!("writing {}", path.display()))?;
                Ok(format!("images/{name}"))
            })
            .collect()
    }
}

/// An evaluation's folder.
pub struct ResultsDir {
    pub dir: PathBuf,
    /// Episodes a resumed run keeps (every complete line but those lost to the endpoint).
    pub kept: Vec<EpisodeRecord>,
    results: std::fs::File,
}

const SETTINGS: &str = "settings.json";
const RESULTS: &str = "results.jsonl";

impl ResultsDir {
    /// A new folder for `settings`, or with `resume` the one a run with the same settings
    /// left: its complete lines kept (a line cut by a kill is dropped, as are episodes lost
    /// to the endpoint), the rest to play.
    pub fn open(dir: &Path, settings: &Settings, resume: bool) -> Result<Self> {
        let results = dir.join(RESULTS);
        let kept = if resume {
            let text = std::fs::read_to_string(dir.join(SETTINGS))
                .with_context(|| format!("--resume: {} holds no evaluation to finish", dir.display()))?;
            let theirs: Settings = serde_json::from_str(&text).with_context(|| {
                format!("--resume: {} is not an evaluation's settings", dir.join(SETTINGS).display())
            })?;
            // Where the files or the server are is not what was played: the same model may be
            // served from another port when the run is finished.
            let differ = theirs.differences(settings, &["env.plugin", "config", "model.endpoint"]);
            if !differ.is_empty() {
                bail!("--resume: {} was started with other settings: {}", dir.display(), differ.join(", "));
            }
            read_kept(&results)?
        } else {
            // An empty file is a run that ended before its first episode (a bad env config).
            if std::fs::metadata(&results).is_ok_and(|m| m.len() > 0) {
                bail!("{} already holds results: `--resume` finishes them, or choose another --out", dir.display());
            }
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            write_whole(&dir.join(SETTINGS), serde_json::to_string_pretty(settings)?.as_bytes())?;
            vec![]
        };
        // Rewritten whole with the kept lines: a torn last line must not prefix the next.
        let lines: String =
            kept.iter().map(|r| serde_json::to_string(r).map(|l| l + "\n")).collect::<Result<_, _>>()?;
        write_whole(&results, lines.as_bytes())?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&results)
            .with_context(|| format!("opening {}", results.display()))?;
        Ok(ResultsDir { dir: dir.to_path_buf(), kept, results: file })
    }

    pub fn images(&self) -> ImageDir {
        ImageDir(self.dir.join("images"))
    }

    /// Episodes that just ended, on disk before the next batch starts.
    pub fn append(&mut self, records: &[EpisodeRecord]) -> Result<()> {
        let mut lines = String::new();
        for r in records {
            lines += &serde_json::to_string(r)?;
            lines.push('\n');
        }
        self.results.write_all(lines.as_bytes())?;
        self.results.sync_data().with_context(|| format!("writing {}", self.dir.join(RESULTS).display()))
    }

    /// `summary.json` and `report.html`.
    pub fn finish(&self, summary: &Summary, records: &[EpisodeRecord]) -> Result<()> {
        write_whole(&self.dir.join("summary.json"), serde_json::to_string_pretty(summary)?.as_bytes())?;
        write_whole(&self.dir.join("report.html"), super::report::html(summary, records).as_bytes())
    }
}

/// The complete lines of a results file, the last of each (seed, sample), without those
/// lost to the endpoint.
fn read_kept(path: &Path) -> Result<Vec<EpisodeRecord>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut by_episode = BTreeMap::new();
    for line in text.lines() {
        if let Ok(r) = serde_json::from_str::<EpisodeRecord>(line) {
            by_episode.insert((r.seed, r.sample), r);
        }
    }
    Ok(by_episode.into_values().filter(|r| r.finish != Finish::Lost).collect())
}

/// `bytes` at `path`, through a temporary file renamed over it: never half a file.
pub fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_data()
    });
    written.and_then(|()| std::fs::rename(&tmp, path)).with_context(|| format!("writing {}", path.display()))
}
