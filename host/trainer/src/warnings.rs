//! What a run says once when its RL steps cannot teach anything, naming the cause: answers
//! cut at `rollout.max_new_tokens`, or groups whose episodes all earned the same reward
//! (zero advantage: the gradient is zero however long the run goes); and the run stopped
//! when its loss has diverged.

use crate::metrics::StepMetrics;
use anyhow::{Result, bail};

/// Steps in a row with no applied update before the run stops: a diverged loss does not
/// come back by itself, and going on would only burn time on an unchanged model.
const MAX_SKIPPED_IN_A_ROW: usize = 3;

/// Updates in a row (SFT or RL steps) whose every optimiser step was skipped for a
/// non-finite gradient norm.
#[derive(Debug, Default)]
pub(crate) struct SkippedSteps {
    in_a_row: usize,
}

impl SkippedSteps {
    /// Counts a step whose actor updates were all skipped (not `applied`); stops the run at
    /// [`MAX_SKIPPED_IN_A_ROW`] of them, naming the `step` and the learning rate `lr` to
    /// look at.
    pub fn count(&mut self, applied: bool, step: &str, lr: &str) -> Result<()> {
        self.in_a_row = if applied { 0 } else { self.in_a_row + 1 };
        if self.in_a_row >= MAX_SKIPPED_IN_A_ROW {
            bail!(
                "{step}: the actor's gradient norm was not finite in every update of the last {} steps, so none was applied (actor/skipped_steps): the loss has diverged; resume from the last checkpoint with a lower {lr} or tighter optim.grad_clip",
                self.in_a_row
            );
        }
        Ok(())
    }
}

/// RL steps in a row with zero advantage everywhere before the run says so.
const ZERO_STEPS: usize = 3;

/// Answers cut at the cap, as a share of a step's sampled answers, that the run reports.
const CAPPED_SHARE: f64 = 0.5;

#[derive(Debug, Default)]
pub(crate) struct Warnings {
    zero_in_a_row: usize,
    said_zero: bool,
    said_capped: bool,
}

impl Warnings {
    /// What to say after RL step `m.step` (each warning once a run).
    pub fn after_step(&mut self, m: &StepMetrics, max_new_tokens: usize) -> Vec<String> {
        let mut said = Vec::new();
        let get = |k: &str| m.values.get(k).copied();
        let capped = get("rollout/capped_responses").unwrap_or(0.0);
        if !self.said_capped && capped >= CAPPED_SHARE {
            self.said_capped = true;
            said.push(format!(
                "warning: {:.0}% of RL step {}'s answers were cut at rollout.max_new_tokens = {max_new_tokens} \
                 tokens before they ended: a cut answer rarely parses; raise rollout.max_new_tokens",
                capped * 100.0,
                m.step
            ));
        }
        let zero = get("rollout/zero_advantage_share").is_some_and(|z| z >= 1.0);
        self.zero_in_a_row = if zero { self.zero_in_a_row + 1 } else { 0 };
        if !self.said_zero && self.zero_in_a_row >= ZERO_STEPS {
            self.said_zero = true;
            let cause = if capped >= CAPPED_SHARE {
                format!("answers cut at rollout.max_new_tokens = {max_new_tokens} all score alike")
            } else {
                "every episode of a group earned the same reward".to_string()
            };
            said.push(format!(
                "warning: RL steps {}-{} had zero advantage everywhere (train/reward {:.3}): {cause}, so the \
                 policy gradient is zero and nothing is learnt; SFT first (sft.steps), a denser env reward or \
                 larger groups (env.group_size) give the groups something to tell apart",
                m.step + 1 - ZERO_STEPS,
                m.step,
                get("train/reward").unwrap_or(f64::NAN)
            ));
        }
        said
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: usize, zero: f64, capped: f64) -> StepMetrics {
        let mut m = StepMetrics::new(step);
        m.values.insert("rollout/zero_advantage_share".into(), zero);
        m.values.insert("rollout/capped_responses".into(), capped);
        m.values.insert("train/reward".into(), -8.0);
        m
    }

    #[test]
    fn zero_advantage_three_steps_in_a_row_is_said_once_naming_the_cause() {
        let mut w = Warnings::default();
        assert!(w.after_step(&step(1, 1.0, 0.0), 16).is_empty());
        assert!(w.after_step(&step(2, 0.4, 0.0), 16).is_empty(), "a step that learnt resets the count");
        assert!(w.after_step(&step(3, 1.0, 0.0), 16).is_empty());
        assert!(w.after_step(&step(4, 1.0, 0.0), 16).is_empty());
        let said = w.after_step(&step(5, 1.0, 0.0), 16);
        assert_eq!(said.len(), 1);
        assert!(
            said[0].contains("RL steps 3-5") && said[0].contains("same reward") && said[0].contains("-8.000"),
            "{}",
            said[0]
        );
        assert!(w.after_step(&step(6, 1.0, 0.0), 16).is_empty(), "once a run");
    }

    #[test]
    fn answers_cut_at_the_cap_are_said_once_and_named_as_the_cause_of_zero_advantage() {
        let mut w = Warnings::default();
        let said = w.after_step(&step(1, 1.0, 0.9), 16);
        assert_eq!(said.len(), 1);
        assert!(
            said[0].contains("90% of RL step 1's answers") && said[0].contains("max_new_tokens = 16"),
            "{}",
            said[0]
        );
        assert!(w.after_step(&step(2, 1.0, 0.9), 16).is_empty());
        let said = w.after_step(&step(3, 1.0, 0.9), 16);
        assert!(said.len() == 1 && said[0].contains("answers cut at rollout.max_new_tokens = 16"), "{said:?}");
        assert!(Warnings::default().after_step(&step(1, 0.0, 0.2), 16).is_empty());
    }
}
