//! `[async] max_staleness = k` (k ≥ 1): the RL step's episodes are played on a thread of
//! their own, up to k steps ahead of the update, by a copy of the actor on the same device.
//!
//! Batch n (0-based) is always played with the weights after update n − k (clamped to the
//! first version this run has): the staleness is exactly k once the pipeline is full, so a
//! run's figures stay a function of its seed and config, not of timing. The trainer
//! publishes each update's trainable weights as a version; the generator copies the version
//! it needs into its model before a batch, waiting for it when it is not there yet. k = 0 is
//! the synchronous trainer itself (no thread).
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
    /// How many updates behind the trainer a batch's weights are (0: synchronous).
    pub max_staleness: usize,
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
        if played.step != step {
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
/// batches from `start` on, each with the weights `k` versions behind.
fn generate(
    cfg: &TrainConfig,
    plugin: &dyn Plugin,
    share: (usize, usize),
    start: usize,
    shared: &Shared,
    tx: &SyncSender<Result<Played, String>>,
) -> Result<()> {
    let k = cfg.asynchronous.max_staleness;
    let mut model = crate::train::load_model(cfg).context("the generator's copy of the model")?;
    crate::train::attach_lora(cfg, &mut model)?;
    let model = Rc::new(model);
    let vars = model.trainable();
    let mut loaded = None;
    for step in start.. {
        let want = step.saturating_sub(k).max(start);
        let waited = Instant::now();
        if loaded != Some(want) {
            let mut v = shared.0.lock().expect("the trainer never panics holding it");
            while !v.weights.contains_key(&want) && !v.closed {
                v = shared.1.wait(v).expect("the trainer never panics holding it");
            }
            if v.closed {
                return Ok(());
            }
            let _guard = tch::no_grad_guard();
            for (name, t) in &v.weights[&want] {
                let mut dst = vars.get(name).with_context(|| format!("the generator has no {name}"))?.shallow_clone();
                dst.copy_(t);
            }
            // Older versions are never needed again.
            v.weights = v.weights.split_off(&want);
            drop(v);
            loaded = Some(want);
        }
        let waited = waited.elapsed().as_secs_f64();
        let mut played = play(cfg, plugin, model.clone(), step, want, share)?;
        played.pace.generator_wait_s = waited;
        if tx.send(Ok(played)).is_err() {
            return Ok(());
        }
    }
    Ok(())
}
