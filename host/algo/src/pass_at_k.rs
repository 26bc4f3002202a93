//! Success over several samples per problem, as people who benchmark agents report it:
//! pass@k by the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models
//! Trained on Code", eq. 1) from n ≥ k samples of which c succeed, and the Wilson score
//! interval of a rate.

use crate::AlgoError;

/// The chance that at least one of k samples drawn without replacement from the n taken
/// (c of them successes) succeeds: 1 − C(n−c, k) / C(n, k), computed as
/// 1 − Π_{i=n−c+1}^{n} (1 − k/i), which neither overflows nor loses precision for large n.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Result<f64, AlgoError> {
    if c > n {
        return Err(AlgoError::BadParameter { name: "successes", value: c as f64, range: "[0, samples]" });
    }
    if k == 0 || k > n {
        return Err(AlgoError::BadParameter { name: "k", value: k as f64, range: "[1, samples]" });
    }
    if n - c < k {
        return Ok(1.0);
    }
    let none = (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product::<f64>();
    Ok(1.0 - none)
}

/// The ks reported for `n` samples: the powers of two below `n`, and `n` itself.
pub fn reported_ks(n: usize) -> Vec<usize> {
    let mut ks: Vec<usize> = std::iter::successors(Some(1usize), |k| k.checked_mul(2)).take_while(|&k| k < n).collect();
    ks.push(n);
    ks
}

/// pass@k averaged over problems, each given as (samples, successes).
pub fn mean_pass_at_k(problems: &[(usize, usize)], k: usize) -> Result<f64, AlgoError> {
    if problems.is_empty() {
        return Err(AlgoError::BadParameter { name: "problems", value: 0.0, range: "at least 1" });
    }
    let total = problems.iter().map(|&(n, c)| pass_at_k(n, c, k)).sum::<Result<f64, _>>()?;
    Ok(total / problems.len() as f64)
}

/// The Wilson score interval of `successes` in `trials` at normal quantile `z` (1.96 for
/// 95 %): unlike mean ± z·se it stays inside [0, 1] and is not empty at 0 or all successes.
pub fn wilson_interval(successes: usize, trials: usize, z: f64) -> Result<(f64, f64), AlgoError> {
    if trials == 0 || successes > trials {
        return Err(AlgoError::BadParameter {
            name: "successes",
            value: successes as f64,
            range: "[0, trials], trials ≥ 1",
        });
    }
    if !(z.is_finite() && z > 0.0) {
        return Err(AlgoError::BadParameter { name: "z", value: z, range: "(0, ∞)" });
    }
    let (n, p) = (trials as f64, successes as f64 / trials as f64);
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Ok(((centre - half).max(0.0), (centre + half).min(1.0)))
}
