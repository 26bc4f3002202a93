"""Steps per second through the Python API, next to Gymnasium's own FrozenLake-v1 with the
text rendering of the grid RAGEN wraps (`render_mode="ansi"`, rendered every step), in one
run. Prints figures; not a test.

    .venv/bin/python host/python/bench.py [--seconds S]

Rows: Gymnasium FrozenLake-v1 + ansi; vagen FrozenLake and Sokoban (.wasm), one env and a
16-env vector env, with and without the info extras (`describe_state`, `oracle`); then
Navigation, whose steps are heavy enough for the vector env's threads to pay.
"""

import argparse
import os
import time

import gymnasium as gym
import numpy as np

import vagen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(ROOT, "target", "plugins")


def timed(step, seconds):
    """Calls `step()` (which returns how many env steps it made) for about `seconds`."""
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        steps += step()
    return steps / elapsed


def gymnasium_frozenlake(seconds):
    env = gym.make("FrozenLake-v1", render_mode="ansi", is_slippery=False)
    env.reset(seed=0)
    rng = np.random.default_rng(0)

    def step():
        _, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
        env.render()
        if terminated or truncated:
            env.reset()
        return 1

    return timed(step, seconds)


def single(name, seconds, extras):
    env = vagen.make(os.path.join(PLUGINS, f"{name}.wasm"), extras=extras)
    names = env.manifest["action_names"]
    env.reset(seed=0)
    rng = np.random.default_rng(0)

    def step():
        _, _, terminated, truncated, _ = env.step(names[rng.integers(len(names))])
        if terminated or truncated:
            env.reset()
        return 1

    return timed(step, seconds)


def vector(name, seconds, extras, n=16):
    env = vagen.make_vec(os.path.join(PLUGINS, f"{name}.wasm"), n, extras=extras)
    names = env.manifest["action_names"]
    env.reset(seed=0)
    rng = np.random.default_rng(0)

    def step():
        env.step(tuple(names[i] for i in rng.integers(len(names), size=n)))
        return n

    return timed(step, seconds)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    s = parser.parse_args().seconds
    base = gymnasium_frozenlake(s)
    rows = [("Gymnasium FrozenLake-v1, ansi render each step", base)]
    for name in ["frozenlake", "sokoban"]:
        for extras in [False, True]:
            tag = "with extras" if extras else "no extras"
            rows.append((f"vagen {name}.wasm, 1 env, {tag}", single(name, s, extras)))
            rows.append((f"vagen {name}.wasm, 16-env vector, {tag}", vector(name, s, extras)))
    # A heavier env (a 3D room rendered per step): where stepping on native threads pays.
    rows.append(("vagen navigation.wasm, 1 env, no extras", single("navigation", s, False)))
    rows.append(("vagen navigation.wasm, 16-env vector, no extras", vector("navigation", s, False)))
    print(f"{'':58} {'steps/s':>10} {'x Gymnasium':>12}")
    for label, rate in rows:
        print(f"{label:58} {rate:10.0f} {rate / base:12.2f}")
    print(f"({os.cpu_count()} CPUs; each row {s:.0f} s)")


if __name__ == "__main__":
    main()
