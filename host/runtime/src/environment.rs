//! The one interface the rest of the host uses, whatever the plugin is made of.

use crate::{ActionSpace, Error, Limits, Manifest, Observation, PluginInfo, StepResult};

/// A live environment instance. Calls that fail with [`Error::is_fault`] leave the
/// instance re-created behind the scenes; the caller must `reset` before stepping again.
pub trait Environment: Send {
    fn manifest(&self) -> &Manifest;
    /// How this instance reads actions (its config's separator and per-turn limit), read
    /// when it was created; the manifest's fields for plugins too old to say.
    fn action_space(&self) -> &ActionSpace;
    fn system_prompt(&mut self) -> Result<String, Error>;
    fn reset(&mut self, seed: u64) -> Result<Observation, Error>;
    fn step(&mut self, answer: &str) -> Result<StepResult, Error>;
    fn describe_state(&mut self) -> Result<String, Error>;
    /// `Ok(None)` when the plugin has no oracle or no answer for this state.
    fn oracle(&mut self) -> Result<Option<String>, Error>;

    /// Linear memory the instance holds now, when the runtime can tell (sandboxed plugins).
    fn memory_bytes(&self) -> Option<u64> {
        None
    }
}

/// A loaded plugin file: creates instances from JSON configs.
pub trait Plugin: Send + Sync {
    fn manifest(&self) -> &Manifest;
    fn info(&self) -> &PluginInfo;
    /// What its instances are allowed.
    fn limits(&self) -> &Limits;

    /// Turns one episode may last: `asked` (a run's setting; 0 or `None` for the plugin's
    /// `default-max-turns`), never more than [`Limits::max_turns`], whatever the manifest
    /// says: the host's own loops stay bounded.
    fn max_turns(&self, asked: Option<u32>) -> u32 {
        asked.filter(|&t| t > 0).unwrap_or(self.manifest().default_max_turns).clamp(1, self.limits().max_turns)
    }
    /// A new instance. `config` is a JSON object; `""` means the defaults.
    fn create(&self, config: &str) -> Result<Box<dyn Environment>, Error>;
}
