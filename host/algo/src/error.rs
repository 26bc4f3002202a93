#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlgoError {
    #[error("trajectory {trajectory}: {field} has {got} entries, the rewards have {expected}")]
    LengthMismatch { trajectory: usize, field: &'static str, got: usize, expected: usize },

    #[error("trajectory {trajectory}: turn end {position} is {problem}")]
    BadTurnEnd { trajectory: usize, position: usize, problem: &'static str },

    #[error("trajectory {trajectory}: a reward of {reward} sits at token {position}, outside the advantage mask")]
    RewardOutsideMask { trajectory: usize, position: usize, reward: f64 },

    #[error("trajectory {trajectory}: token {position} is in the advantage mask but after the last turn end")]
    TokenAfterLastTurn { trajectory: usize, position: usize },

    #[error("trajectory {trajectory}: {field} at token {position} is {value}, not finite")]
    NotFinite { trajectory: usize, field: &'static str, position: usize, value: f64 },

    #[error("{name} = {value} is outside {range}")]
    BadParameter { name: &'static str, value: f64, range: &'static str },

    #[error("{what} has {got} entries for {expected} trajectories")]
    CountMismatch { what: &'static str, got: usize, expected: usize },
}
