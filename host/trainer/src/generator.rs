//! `[async] max_staleness = k` (k ≥ 1): the RL step's episodes are played on a thread of
//! their own, up to k steps ahead of the update, by a copy of the actor on the same device.
//!
//! The trainer publishes each update's trainable weights as a version. Batch n (0-based)
//! starts only once the weights after update n − k are there (clamped to the first version
//! this run has), so no token it holds is more than k updates older than the update that
//! consumes it. With `refresh = "batch"` (the default) the whole batch is played with
//! exactly that version: the staleness is k once the pipeline is full and a run's figures
//! stay a function of its seed and config, not of timing. With `refresh = "decode-step"`
//! the generator loads the newest published version before every decode step (PipelineRL's
//! in-flight updates): a trajectory in flight continues with the new weights, its running
//! rows recomputed by the engine, each token recording the version that sampled it. Fresher
//! tokens, but which version samples which token depends on timing, so seeds no longer
//! reproduce a run. k = 0 is the synchronous trainer itself (no thread).
//!
//! A consumed batch whose oldest token is more than k versions behind the trainer is
//! dropped and counted; the start gate above means this does not happen in one process.
//!
//! A resumed run starts the generator at the checkpoint's weights: its first k batches are
//! fresher than an uninterrupted run's (the queue is not saved).

use crate::collect::{Played, play};
use crate::config::TrainConfig;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use tch::Tensor;
use vagen_runtime::Plugin;

/// `[async]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AsyncSection {
    /// How many updates behind the trainer a batch's weights may be (0: synchronous).
    pub max_staleness: usize,
    /// When the generator takes newer weights.
    pub refresh: Refresh,
}

/// `[async] refresh`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refresh {
    /// Before a batch, exactly k versions behind: reproducible.
    #[default]
    Batch,
    /// Before every decode step, the newest published: fresher, timing-dependent.
    DecodeStep,
}

/// Published weights by version, until the generator is past them.
#[derive(Default)]
struct Versions {
    weights: BTreeMap<usize, Vec<(String, Tensor)>>,
    /// The trainer is gone: stop.
    closed: bool,
}

/// The versions, and their arrival.
struct Shared(Mutex<Versions>, Condvar);

/// The generator model's trainable variables and the version they hold.
struct Loader {
    shared: Arc<Shared>,
    vars: std::collections::HashMap<String, Tensor>,
    loaded: Option<usize>,
}

impl Loader {
    /// Loads the version `pick` chooses among the published ones (unless held already),
    /// waiting for one when `wait`; `None` when the trainer is gone, or when none is there
    /// and it does not wait.
    fn load(
        &mut self,
        wait: bool,
        pick: impl Fn(&BTreeMap<usize, Vec<(String, Tensor)>>) -> Option<usize>,
    ) -> Result<Option<usize>> {
        let mut v = self.shared.0.lock().expect("the trainer never panics holding it");
        loop {
            if v.closed {
                return Ok(None);
            }
            if let Some(n) = pick(&v.weights) {
                if self.loaded != Some(n) {
                    let _guard = tch::no_grad_guard();
                    for (name, t) in &v.weights[&n] {
                        let dst = self.vars.get(name).with_context(|| format!("the generator has no {name}"))?;
                        dst.shallow_clone().copy_(t);
                    }
                    // Older versions are never needed again.
                    v.weights = v.weights.split_off(&n);
                    self.loaded = Some(n);
                }
                return Ok(Some(n));
            }
            if !wait {
                return Ok(None);
            }
            v = self.shared.1.wait(v).expect("the trainer never panics holding it");
        }
    }
}

pub(crate) struct Generator {
    batches: Option<Receiver<Result<Played, String>>>,
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

/// A deep copy of the trainable weights, for another thread.
pub(crate) fn snapshot(vars: &std::collections::HashMap<String, Tensor>) -> Vec<(String, Tensor)> {
    let _guard = tch::no_grad_guard();
    vars.iter().map(|(k, t)| (k.clone(), t.detach().copy())).collect()
}

impl Generator {
    /// Starts playing from step `start` (0-based) with `weights`, the actor's trainable
    /// weights after `start` updates.
    pub(crate) fn start(
        cfg: &TrainConfig,
        plugin: Arc<dyn Plugin>,
        share: (usize, usize),
        start: usize,
        weights: Vec<(String, Tensor)>,
    ) -> Result<Self> {
        let k = cfg.asynchronous.max_staleness;
        let shared = Arc::new(Shared(Mutex::new(Versions::default()), Condvar::new()));
        shared.0.lock().expect("fresh").weights.insert(start, weights);
        // k batches may wait while the trainer works on another.
        let (tx, batches) = sync_channel(k);
        let (cfg, thread_shared) = (cfg.clone(), shared.clone());
        let handle = std::thread::Builder::new()
            .name("vagen-generator".into())
            .spawn(move || {
                let result = generate(&cfg, plugin.as_ref(), share, start, &thread_shared, &tx);
                if let Err(e) = result {
                    let _ = tx.send(Err(format!("{e:#}")));
                }
            })
            .context("starting the generator thread")?;
        Ok(Generator { batches: Some(batches), shared, handle: Some(handle) })
    }

    /// Step `step`'s batch, waiting for it.
    pub(crate) fn take(&self, step: usize) -> Result<Played> {
        let started = Instant::now();
        let mut played = match self.batches.as_ref().expect("taken only when dropped").recv() {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => bail!("the generator thread failed: {e}"),
            Err(_) => bail!("the generator thread stopped without a batch for step {}", step + 1),
        };
        // Past `step` after the trainer dropped stale batches.
        if played.step < step {
            bail!("the generator played step {} where the trainer is at step {}", played.step + 1, step + 1);
        }
        played.pace.trainer_wait_s = started.elapsed().as_secs_f64();
        Ok(played)
    }

    /// The weights after `version` updates.
    pub(crate) fn publish(&self, version: usize, weights: Vec<(String, Tensor)>) {
        let mut v = self.shared.0.lock().expect("the generator never panics holding it");
        v.weights.insert(version, weights);
        self.shared.1.notify_all();
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        if let Ok(mut v) = self.shared.0.lock() {
            v.closed = true;
        }
        self.shared.1.notify_all();
        // A generator waiting to hand over a batch sees the channel closed.
        drop(self.batches.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The generator thread: its own model (the actor's config, then the published weights),
/// batches from `start` on, each started with weights at most `k` versions behind.
fn generate(
    cfg: &TrainConfig,
    plugin: &dyn Plugin,
    share: (usize, usize),
    start: usize,
    shared: &Arc<Shared>,
    tx: &SyncSender<Result<Played, String>>,
) -> Result<()> {
    let k = cfg.asynchronous.max_staleness;
    let mut model = crate::train::load_model(cfg).context("the generator's copy of the model")?;
    crate::train::attach_lora(cfg, &mut model)?;
    let model = Rc::new(model);
    let loader = Arc::new(Mutex::new(Loader { shared: shared.clone(), vars: model.trainable(), loaded: None }));
    let mut blocked = 0.0;
    for step in start.. {
        let want = step.saturating_sub(k).max(start);
        let waited = Instant::now();
        let version = match cfg.asynchronous.refresh {
            // Exactly `want`: newer versions stay published for later batches.
            Refresh::Batch => loader.lock().expect("not poisoned").load(true, |w| w.contains_key(&want).then_some(want)),
            Refresh::DecodeStep => loader.lock().expect("not poisoned").load(true, |w| newest(w, want)),
        }?;
        let Some(version) = version else { return Ok(()) };
        let waited = waited.elapsed().as_secs_f64();
        let hook: vagen_model::Refresh = match cfg.asynchronous.refresh {
            Refresh::Batch => Box::new(move || Ok(version as u64)),
            Refresh::DecodeStep => {
                let loader = loader.clone();
                Box::new(move || {
                    let mut l = loader.lock().map_err(|_| "the generator's weights are poisoned".to_string())?;
                    let loaded = l.load(false, |w| newest(w, version)).map_err(|e| format!("{e:#}"))?;
                    Ok(loaded.or(l.loaded).unwrap_or(version) as u64)
                })
            }
        };
        let mut played = play(cfg, plugin, model.clone(), step, version, share, Some(hook))?;
        played.pace.generator_wait_s = waited + blocked;
        let sending = Instant::now();
        if tx.send(Ok(played)).is_err() {
            return Ok(());
        }
        blocked = sending.elapsed().as_secs_f64();
    }
    Ok(())
}

/// The newest published version, if it is at least `want`.
fn newest(weights: &BTreeMap<usize, Vec<(String, Tensor)>>, want: usize) -> Option<usize> {
    weights.keys().next_back().copied().filter(|&n| n >= want)
}
