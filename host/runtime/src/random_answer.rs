//! The random policy's answer, shared by `vagen-host run --policy random` and `check`.

use crate::ActionSpace;
use rand_core::Rng;

/// 1..=max-actions-per-turn actions, each drawn uniformly from an instance's action names,
/// joined by its separator; `None` for free-form envs. Modulo bias is irrelevant for a
/// handful of actions.
pub fn random_answer(m: &ActionSpace, rng: &mut impl Rng) -> Option<String> {
    if m.action_names.is_empty() {
        return None;
    }
    let k = 1 + rng.next_u64() % u64::from(m.max_actions_per_turn.max(1));
    let n = m.action_names.len() as u64;
    let picks: Vec<&str> = (0..k).map(|_| m.action_names[(rng.next_u64() % n) as usize].as_str()).collect();
    Some(picks.join(&format!("{} ", m.action_separator.trim())))
}
