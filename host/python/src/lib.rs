//! `vagen._native`: the runtime's plugins, instances and pools for Python. The Gymnasium
//! classes are Python (`python/vagen`); this module moves observations across and lets go of
//! the GIL while plugins run, so vector envs step on native threads; and the rollout's
//! prompt pieces (`prompter.rs`) for `vagen.Prompter`.

mod prompter;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vagen_runtime::conformance::{CheckOptions, check};
use vagen_runtime::fuzz::{FuzzOptions, fuzz};
use vagen_runtime::{EnvPool, Environment, Error, Limits, Observation, Plugin, Runtime, StepResult, is_native_name};

create_exception!(vagen, VagenError, PyException, "Any error from a vagen plugin; `kind` names it.");
create_exception!(vagen, LoadError, VagenError, "The file is not a plugin this host can load.");
create_exception!(vagen, NativeNotAllowed, VagenError, "A native `.so` plugin without `allow_native=True`.");
create_exception!(vagen, BadConfig, VagenError, "The env or a limit refused its configuration.");
create_exception!(vagen, InvalidState, VagenError, "A call out of order, e.g. `step` before `reset`.");
create_exception!(vagen, EnvFailed, VagenError, "The env reported that it could not carry out a call.");
create_exception!(vagen, PluginTimeout, VagenError, "A call ran past the sandbox's deadline.");
create_exception!(vagen, PluginOutOfMemory, VagenError, "A call went past the sandbox's memory cap.");
create_exception!(vagen, PluginOutOfFuel, VagenError, "A call used up its fuel budget.");
create_exception!(vagen, PluginTrap, VagenError, "The plugin crashed (a trap); its message is kept.");
create_exception!(vagen, PluginMalformed, VagenError, "The plugin returned data that breaks the contract.");

/// The Python exception for a runtime error, with `kind` (the runtime's stable name) and
/// `fault` (the instance was re-created and needs a `reset`) set on it.
fn py_err(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    let err = match &e {
        Error::BadConfig(_) => BadConfig::new_err(message),
        Error::InvalidState(_) => InvalidState::new_err(message),
        Error::Failed { .. } | Error::Remote { .. } => EnvFailed::new_err(message),
        Error::Timeout { .. } => PluginTimeout::new_err(message),
        Error::OutOfMemory { .. } | Error::OutOfTotalMemory { .. } => PluginOutOfMemory::new_err(message),
        Error::OutOfFuel { .. } => PluginOutOfFuel::new_err(message),
        Error::Trap { .. } => PluginTrap::new_err(message),
        Error::Malformed { .. } => PluginMalformed::new_err(message),
        Error::NativeNotAllowed { .. } => NativeNotAllowed::new_err(message),
        _ => LoadError::new_err(message),
    };
    let value = err.value(py);
    // Setting attributes on a fresh exception object cannot fail.
    let _ = value.setattr("kind", e.kind());
    let _ = value.setattr("fault", e.is_fault());
    err
}

/// (text, [(height, width, RGB bytes)]): Python wraps the bytes as uint8 arrays without a copy.
fn observation<'py>(py: Python<'py>, obs: Observation) -> PyResult<Bound<'py, PyTuple>> {
    let images = obs.images.iter().map(|i| (i.height, i.width, PyByteArray::new(py, &i.rgb))).collect::<Vec<_>>();
    (obs.text, PyList::new(py, images)?).into_pyobject(py)
}

/// (observation, reward, done, success, valid actions, effective actions, [(metric, value)]).
fn step_result<'py>(py: Python<'py>, s: StepResult) -> PyResult<Bound<'py, PyTuple>> {
    let metrics: Vec<(String, f64)> = s.metrics.into_iter().map(|m| (m.name, m.value)).collect();
    (observation(py, s.observation)?, s.reward, s.done, s.success, s.valid_actions, s.effective_actions, metrics)
        .into_pyobject(py)
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("runtime types serialise")
}

/// A loaded plugin file.
#[pyclass(frozen, module = "vagen._native")]
struct NativePlugin {
    plugin: Arc<dyn Plugin>,
}

/// Loads `path` under `limits` (pairs of a limit's name and its JSON value). A native `.so`
/// runs unsandboxed, so it loads only with `allow_native`.
#[pyfunction]
#[pyo3(signature = (path, limits = Vec::new(), allow_native = false))]
fn load(py: Python<'_>, path: PathBuf, limits: Vec<(String, String)>, allow_native: bool) -> PyResult<NativePlugin> {
    if is_native_name(&path) && !allow_native {
        return Err(NativeNotAllowed::new_err(format!(
            "{} is a native plugin, which runs unsandboxed with your permissions: pass allow_native=True to trust it",
            path.display()
        )));
    }
    let mut values = Vec::new();
    for (key, value) in &limits {
        let v = serde_json::from_str(value).map_err(|e| BadConfig::new_err(format!("limit {key}: {e}")))?;
        values.push((key.as_str(), v));
    }
    let limits = Limits::with_values(values).map_err(|e| BadConfig::new_err(format!("limit {e}")))?;
    py.detach(|| Runtime::new(limits).and_then(|rt| rt.load(&path)))
        .map(|plugin| NativePlugin { plugin })
        .map_err(|e| py_err(py, e))
}

#[pymethods]
impl NativePlugin {
    /// The manifest as JSON.
    fn manifest(&self) -> String {
        json(self.plugin.manifest())
    }

    /// Path, digest, size, kind, WIT version, imports, load time, as JSON.
    fn info(&self) -> String {
        json(self.plugin.info())
    }

    /// The sandbox limits its instances run under, as JSON.
    fn limits(&self) -> String {
        json(self.plugin.limits())
    }

    /// Turns an episode lasts: the manifest's default, capped by the sandbox's `max_turns`.
    fn max_turns(&self) -> u32 {
        self.plugin.max_turns(None)
    }

    fn create(&self, py: Python<'_>, config: &str) -> PyResult<NativeEnv> {
        let env = py.detach(|| self.plugin.create(config)).map_err(|e| py_err(py, e))?;
        Ok(NativeEnv { env: Mutex::new(env) })
    }

    /// `n` instances of one config, stepped together on native threads.
    fn create_pool(&self, py: Python<'_>, config: &str, n: usize) -> PyResult<NativePool> {
        let envs = py
            .detach(|| (0..n).map(|_| self.plugin.create(config)).collect::<Result<Vec<_>, _>>())
            .map_err(|e| py_err(py, e))?;
        Ok(NativePool {
            pool: Mutex::new(EnvPool::new(envs)),
            member_ns: AtomicU64::new(0),
            parallel_calls: AtomicU64::new(0),
        })
    }

    /// `vagen-host check`: [(check, passed, detail)].
    #[pyo3(signature = (config = String::new()))]
    fn check(&self, py: Python<'_>, config: String) -> Vec<(String, bool, String)> {
        let opts = CheckOptions { config, ..CheckOptions::default() };
        let report = py.detach(|| check(self.plugin.as_ref(), &opts));
        report.findings.into_iter().map(|f| (f.check.to_string(), f.passed, f.detail)).collect()
    }

    /// `vagen-host fuzz` for `seconds`: (episodes, steps, {outcome: episodes}, [(finding kind,
    /// message, count)]). Reproducers are not written; `vagen-host fuzz` writes them.
    #[pyo3(signature = (seconds, config = String::new(), seed = 0))]
    #[allow(clippy::type_complexity)]
    fn fuzz(
        &self,
        py: Python<'_>,
        seconds: f64,
        config: String,
        seed: u64,
    ) -> PyResult<(u64, u64, Vec<(String, u64)>, Vec<(String, String, u64)>)> {
        let opts = FuzzOptions {
            config,
            seed,
            duration: Some(Duration::from_secs_f64(seconds.max(0.0))),
            ..FuzzOptions::default()
        };
        let report = py.detach(|| fuzz(self.plugin.as_ref(), &opts)).map_err(|e| py_err(py, e))?;
        let outcomes = report.outcomes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let findings = report
            .findings
            .iter()
            .map(|f| {
                (
                    serde_json::to_value(f.kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
                    f.message.clone(),
                    f.count,
                )
            })
            .collect();
        Ok((report.episodes, report.steps, outcomes, findings))
    }
}

/// One instance. Every call lets go of the GIL while the plugin runs.
#[pyclass(frozen, module = "vagen._native")]
struct NativeEnv {
    env: Mutex<Box<dyn Environment>>,
}

impl NativeEnv {
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut dyn Environment) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        py.detach(|| f(self.env.lock().unwrap_or_else(|p| p.into_inner()).as_mut())).map_err(|e| py_err(py, e))
    }
}

#[pymethods]
impl NativeEnv {
    fn reset<'py>(&self, py: Python<'py>, seed: u64) -> PyResult<Bound<'py, PyTuple>> {
        let obs = self.call(py, |e| e.reset(seed))?;
        observation(py, obs)
    }

    fn step<'py>(&self, py: Python<'py>, answer: &str) -> PyResult<Bound<'py, PyTuple>> {
        let s = self.call(py, |e| e.step(answer))?;
        step_result(py, s)
    }

    fn system_prompt(&self, py: Python<'_>) -> PyResult<String> {
        self.call(py, |e| e.system_prompt())
    }

    fn describe_state(&self, py: Python<'_>) -> PyResult<String> {
        self.call(py, |e| e.describe_state())
    }

    fn oracle(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.call(py, |e| e.oracle())
    }

    /// The instance's action names, separator and per-turn limit, as JSON.
    fn action_space(&self) -> String {
        json(self.env.lock().unwrap_or_else(|p| p.into_inner()).action_space())
    }
}

/// What one pool member does in a call, and what it returns.
enum Op {
    Reset(u64),
    Step(String),
    /// Left alone this call (a partial reset).
    Skip,
}

enum Done {
    Reset(Observation),
    Step(StepResult),
    Skipped,
}

/// Instances stepped together: each call runs every member's work on native threads with
/// the GIL released, in parallel when the work outweighs waking the threads.
#[pyclass(frozen, module = "vagen._native")]
struct NativePool {
    pool: Mutex<EnvPool>,
    /// A running estimate of one member's work per call, in nanoseconds.
    member_ns: AtomicU64,
    /// Calls that ran on rayon's threads.
    parallel_calls: AtomicU64,
}

/// Below this much work per call the members run one after another on the calling thread:
/// waking rayon's threads took 20–25 µs here, and on 2 cores parallel calls paid only for
/// steps as heavy as Navigation's (0.6 ms; 16 FrozenLake steps of 1.4 µs ran 1.7× faster
/// in sequence, Sokoban's no faster in parallel). Which thread runs a member never changes
/// what it returns.
const PARALLEL_ABOVE_NS: u64 = 1_000_000;

#[pymethods]
impl NativePool {
    fn __len__(&self) -> usize {
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// How many calls ran on rayon's threads (the rest ran in sequence).
    fn parallel_calls(&self) -> u64 {
        self.parallel_calls.load(Ordering::Relaxed)
    }

    /// The first member's system prompt (all members share one config).
    fn system_prompt(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| self.pool.lock().unwrap_or_else(|p| p.into_inner()).get_mut(0).system_prompt())
            .map_err(|e| py_err(py, e))
    }

    /// `ops[i]` is `("reset", seed)`, `("step", answer)` or `("skip", None)`. Returns per
    /// member `("reset", observation, extras)`, `("step", step result, extras)`, `("skip",
    /// None, None)` or `("error", exception, None)`: one member's fault is its own (its instance was re-created and
    /// needs a reset). With `extras`, `extras` is `(describe_state, oracle)` read right
    /// after the call (the oracle only when `oracle` is set), else None.
    #[pyo3(signature = (ops, extras = false, oracle = false))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<(String, Bound<'py, PyAny>)>,
        extras: bool,
        oracle: bool,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let mut work = Vec::with_capacity(ops.len());
        for (what, arg) in &ops {
            work.push(match what.as_str() {
                "reset" => Op::Reset(arg.extract()?),
                "step" => Op::Step(arg.extract()?),
                "skip" => Op::Skip,
                other => return Err(InvalidState::new_err(format!("no pool operation {other:?}"))),
            });
        }
        let results = py.detach(|| {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            if work.len() != pool.len() {
                return Err(format!("{} operations for a pool of {}", work.len(), pool.len()));
            }
            let n = pool.len() as u64;
            let parallel = n > 1 && n * self.member_ns.load(Ordering::Relaxed) > PARALLEL_ABOVE_NS;
            let started = Instant::now();
            let member = |i: usize, env: &mut dyn Environment| {
                let done = match &work[i] {
                    Op::Reset(seed) => env.reset(*seed).map(Done::Reset),
                    Op::Step(answer) => env.step(answer).map(Done::Step),
                    Op::Skip => Ok(Done::Skipped),
                }?;
                let ended = matches!(&done, Done::Step(s) if s.done);
                let extra = if extras && !ended && !matches!(done, Done::Skipped) {
                    let state = env.describe_state()?;
                    Some((state, if oracle { env.oracle()? } else { None }))
                } else {
                    None
                };
                Ok::<_, Error>((done, extra))
            };
            let results = if parallel {
                self.parallel_calls.fetch_add(1, Ordering::Relaxed);
                pool.for_each(member)
            } else {
                (0..pool.len()).map(|i| member(i, pool.get_mut(i))).collect()
            };
            // Parallel calls see about a thread count's share of the work in their wall time.
            let threads = if parallel { rayon::current_num_threads().min(pool.len()) as u64 } else { 1 };
            let per_member = started.elapsed().as_nanos() as u64 * threads / n.max(1);
            let old = self.member_ns.load(Ordering::Relaxed);
            self.member_ns.store(if old == 0 { per_member } else { (3 * old + per_member) / 4 }, Ordering::Relaxed);
            Ok(results)
        });
        let results = results.map_err(InvalidState::new_err)?;
        results
            .into_iter()
            .map(|r| match r {
                Ok((Done::Reset(obs), extra)) => ("reset", observation(py, obs)?, extra).into_pyobject(py),
                Ok((Done::Step(step), extra)) => ("step", step_result(py, step)?, extra).into_pyobject(py),
                Ok((Done::Skipped, _)) => ("skip", py.None(), None::<(String, Option<String>)>).into_pyobject(py),
                Err(e) => ("error", py_err(py, e).into_value(py), None::<(String, Option<String>)>).into_pyobject(py),
            })
            .collect()
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_class::<NativePlugin>()?;
    m.add_class::<NativeEnv>()?;
    m.add_class::<NativePool>()?;
    m.add_function(wrap_pyfunction!(prompter::prompter, m)?)?;
    m.add_function(wrap_pyfunction!(prompter::read_toml, m)?)?;
    m.add_class::<prompter::NativePrompter>()?;
    let py = m.py();
    for (name, ty) in [
        ("VagenError", py.get_type::<VagenError>()),
        ("LoadError", py.get_type::<LoadError>()),
        ("NativeNotAllowed", py.get_type::<NativeNotAllowed>()),
        ("BadConfig", py.get_type::<BadConfig>()),
        ("InvalidState", py.get_type::<InvalidState>()),
        ("EnvFailed", py.get_type::<EnvFailed>()),
        ("PluginTimeout", py.get_type::<PluginTimeout>()),
        ("PluginOutOfMemory", py.get_type::<PluginOutOfMemory>()),
        ("PluginOutOfFuel", py.get_type::<PluginOutOfFuel>()),
        ("PluginTrap", py.get_type::<PluginTrap>()),
        ("PluginMalformed", py.get_type::<PluginMalformed>()),
    ] {
        m.add(name, ty)?;
    }
    Ok(())
}
