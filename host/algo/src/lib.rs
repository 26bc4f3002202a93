//! vagen-algo: credit assignment for multi-turn trajectories, on plain slices (no libtorch).
//!
//! One input contract for every estimator ([`Trajectory`]: token rewards, values, loss and
//! advantage masks, turn ends, group id) and one output ([`Advantages`]). Estimators are an
//! enum with stable kebab-case names ([`Estimator`]); formulas follow RAGEN / VAGEN as set
//! out in the design notes' REFERENCE.md. Evaluation's figures over several samples per
//! problem: [`pass_at_k`] (unbiased, Chen et al. 2021) and [`wilson_interval`].

mod error;
mod estimator;
mod filter;
mod gae;
mod gigpo;
mod group;
mod input;
mod normalize;
mod pass_at_k;
mod stats;

pub use error::AlgoError;
pub use estimator::{AdvantageConfig, Advantages, Estimator, WhiteningPopulation, compute_advantages};
pub use filter::{FilterConfig, FilterKeep, Filtered, GroupStats, filter_groups};
pub use input::Trajectory;
pub use normalize::{NormMethod, normalize_scores};
pub use pass_at_k::{mean_pass_at_k, pass_at_k, reported_ks, wilson_interval};
