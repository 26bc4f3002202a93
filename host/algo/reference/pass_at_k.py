"""Reference pass@k and Wilson intervals, written from their definitions with exact integer
binomials (Chen et al. 2021, eq. 1: 1 - C(n-c, k) / C(n, k); Wilson 1927), independent of the
Rust code's product form. Writes random cases to tests/fixtures/pass_at_k.json, which
tests/reference.rs compares against (to 1e-12).

Run from the repository root:  .venv/bin/python host/algo/reference/pass_at_k.py
"""

import json
import math
import pathlib
from fractions import Fraction

import numpy as np


def pass_at_k(n, c, k):
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def wilson(successes, trials, z):
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


def main():
    rng = np.random.default_rng(20261128)
    cases = []
    for _ in range(200):
        n = int(rng.integers(1, 300))
        c = int(rng.binomial(n, rng.random()))
        k = int(rng.integers(1, n + 1))
        cases.append(dict(n=n, c=c, k=k, expected=pass_at_k(n, c, k)))
    intervals = []
    for _ in range(100):
        trials = int(rng.integers(1, 2000))
        successes = int(rng.integers(0, trials + 1))
        z = float(rng.choice([1.0, 1.96, 2.576]))
        intervals.append(dict(successes=successes, trials=trials, z=z, expected=list(wilson(successes, trials, z))))
    out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pass_at_k.json"
    out.write_text(json.dumps(dict(pass_at_k=cases, wilson=intervals)))
    print(f"wrote {len(cases)} pass@k cases and {len(intervals)} intervals to {out}")


if __name__ == "__main__":
    main()
