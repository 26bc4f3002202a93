//! `[async] max_staleness = k` (k ≥ 1): the RL step's episodes are played on a thread of
//! their own, up to k steps ahead of the update, by a copy of the actor on the same device
//! (or `engine.device`), with its own libtorch threads (`generator_threads`).
//!
//! The trainer publishes each update's trainable weights as a version. Batch n (0-based)
//! starts only once the weights after update n − k are there (clamped to the first version
//! this run has), so no token it holds is more than k updates older than the update that
//! consumes it. With `refresh = "batch"` (the default) the whole batch is played with
//! exactly that version: the staleness is k once the pipeline is full and a run's figures
//! stay a function of its seed and config, not of timing. With `refresh = "decode-step"`
//! the generator loads the newest published version before every decode step (PipelineRL's
//! in-flight updates): a trajectory in flight continues with the new weights, its running
//! rows recomputed by the engine (a prefill of each running row per new version), each
//! token recording the version that sampled it. Fresher tokens, but which version samples
//! which token depends on timing, so seeds no longer reproduce a run. k = 0 is the synchronous trainer itself (no thread).
//!
//! A consumed batch whose oldest token is more than k versions behind the trainer is
//! dropped and counted; the start gate above means this does not happen in one process.
//!
//! A resumed run starts the generator at the checkpoint's weights: its first k batches are
//! fresher than an uninterrupted run's (the queue is not saved).

use crate::async_section::Refresh;
use crate::config::TrainConfig;
use crate::play::{Played, play};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use tch::Tensor;
use vagen_runtime::Plugin;

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

/// Makes the generator's own copy of the model, on its thread (see `setup`'s
/// `generator_model`).
pub(crate) type ModelFactory = Box<dyn FnOnce() -> Result<vagen_model::Model> + Send>;

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
    /// weights after `start` updates, on a copy of the model `model` makes.
    pub(crate) fn start(
        cfg: &TrainConfig,
        plugin: Option<Arc<dyn Plugin>>,
        share: (usize, usize),
        start: usize,
        weights: Vec<(String, Tensor)>,
        model: ModelFactory,
    ) -> Result<Self> {
        let k = cfg.asynchronous.max_staleness;
        if let (Some(d), true) = (cfg.engine.device, share.1 > 1) {
            bail!(
                "engine.device = \"{d}\" would put every rank's generator on one device: with several ranks each generator runs on its rank's device (leave engine.device unset)"
            );
        }
        let shared = Arc::new(Shared(Mutex::new(Versions::default()), Condvar::new()));
        shared.0.lock().expect("fresh").weights.insert(start, weights);
        // k batches may wait while the trainer works on another.
        let (tx, batches) = sync_channel(k);
        let (cfg, thread_shared) = (cfg.clone(), shared.clone());
        let handle = std::thread::Builder::new()
            .name("vagen-generator".into())
            .spawn(move || {
                let result = generate(&cfg, plugin.as_deref(), share, start, model, &thread_shared, &tx);
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
    plugin: Option<&dyn Plugin>,
    share: (usize, usize),
    start: usize,
    model: ModelFactory,
    shared: &Arc<Shared>,
    tx: &SyncSender<Result<Played, String>>,
) -> Result<()> {
    let k = cfg.asynchronous.max_staleness;
    // Made here, after the thread's own libtorch threads are set.
    own_threads(cfg.asynchronous.generator_threads);
    let model = Rc::new(model()?);
    let loader = Arc::new(Mutex::new(Loader { shared: shared.clone(), vars: model.trainable(), loaded: None }));
    let mut blocked = 0.0;
    for step in start.. {
        let want = step.saturating_sub(k).max(start);
        let waited = Instant::now();
        let version = match cfg.asynchronous.refresh {
            // Exactly `want`: newer versions stay published for later batches.
            Refresh::Batch => {
                loader.lock().expect("not poisoned").load(true, |w| w.contains_key(&want).then_some(want))
            }
            Refresh::DecodeStep => loader.lock().expect("not poisoned").load(true, |w| newest(w, want)),
        }?;
        let Some(version) = version else { return Ok(()) };
        let waited = waited.elapsed().as_secs_f64();
        let hook: vagen_model::Refresh = match cfg.asynchronous.refresh {
            Refresh::Batch => Box::new(move || Ok(version as u64)),
            Refresh::DecodeStep => newest_between_steps(loader.clone(), version),
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

/// The engine's hook for `refresh = "decode-step"`: the newest published version, loaded
/// when newer than the one held (a batch started with `started`).
fn newest_between_steps(loader: Arc<Mutex<Loader>>, started: usize) -> vagen_model::Refresh {
    Box::new(move || {
        let mut l = loader.lock().map_err(|_| "the generator's weights are poisoned".to_string())?;
        let loaded = l.load(false, |w| newest(w, started)).map_err(|e| format!("{e:#}"))?;
        Ok(loaded.or(l.loaded).unwrap_or(started) as u64)
    })
}

/// The newest published version, if it is at least `want`.
fn newest(weights: &BTreeMap<usize, Vec<(String, Tensor)>>, want: usize) -> Option<usize> {
    weights.keys().next_back().copied().filter(|&n| n >= want)
}

/// `n` libtorch intra-op threads for the calling thread alone (0: unchanged). OpenMP's
/// thread count is per calling thread; libtorch applies its last process-wide setting to a
/// thread on its first parallel operation, so that is triggered first (`get_num_threads`).
pub(crate) fn own_threads(n: usize) {
    if n > 0 {
        let _ = tch::get_num_threads();
        tch::set_num_threads(n as i32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn between_decode_steps_the_newest_published_version_is_loaded_and_older_ones_let_go() {
        let shared = Arc::new(Shared(Mutex::new(Versions::default()), Condvar::new()));
        let w = Tensor::zeros([2], (tch::Kind::Float, tch::Device::Cpu));
        let vars = [("w".to_string(), w.shallow_clone())].into_iter().collect();
        let loader = Arc::new(Mutex::new(Loader { shared: shared.clone(), vars, loaded: None }));
        let publish = |v: usize| {
            let t = Tensor::full([2], v as f64, (tch::Kind::Float, tch::Device::Cpu));
            shared.0.lock().unwrap().weights.insert(v, vec![("w".to_string(), t)]);
        };
        publish(0);
        let started = loader.lock().unwrap().load(true, |w| newest(w, 0)).unwrap();
        assert_eq!(started, Some(0));
        let mut hook = newest_between_steps(loader.clone(), 0);
        assert_eq!(hook(), Ok(0), "nothing newer: the weights stay");
        publish(1);
        publish(2);
        assert_eq!(hook(), Ok(2), "the newest, skipping 1");
        assert_eq!(w.double_value(&[0]), 2.0);
        assert_eq!(shared.0.lock().unwrap().weights.keys().copied().collect::<Vec<_>>(), [2]);
        shared.0.lock().unwrap().closed = true;
        assert_eq!(hook(), Ok(2), "a trainer gone leaves the weights held");
    }

    #[test]
    fn a_threads_budget_is_its_own() {
        let before = tch::get_num_threads();
        let on_thread = std::thread::spawn(|| {
            super::own_threads(1);
            tch::get_num_threads()
        });
        assert_eq!(on_thread.join().unwrap(), 1);
        assert_eq!(tch::get_num_threads(), before, "the calling thread keeps its own count");
    }
}
