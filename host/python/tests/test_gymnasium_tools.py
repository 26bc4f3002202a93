"""Gymnasium's own tools around `vagen.make` with their defaults: `AsyncVectorEnv` (shared
memory on) and `make_vec(..., "async")`, pickling under every start method, `close`,
vector rendering and registration. Run by `cargo xtask test` with the wheel installed."""

import os
import pickle
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import vagen
from test_vagen import PLUGINS, REFERENCE, plugin

CASES = [
    ("frozenlake", None),
    ("sokoban", {"observation": "image"}),
    ("svg", None),
]


def play_both(ours, ref, name, seed, steps):
    """Same seeds and actions into both vector envs; every result equal (Gymnasium's
    `data_equivalence`); returns how many episodes ended."""
    a, b = ours.reset(seed=seed), ref.reset(seed=seed)
    assert data_equivalence(a, b, exact=True), (a, b)
    names = vagen.make(plugin(name)).manifest["action_names"] or ["<svg></svg>", "nonsense"]
    rng = np.random.default_rng(seed)
    ended = 0
    for t in range(steps):
        actions = tuple(str(rng.choice(names)) for _ in range(ours.num_envs))
        a, b = ours.step(actions), ref.step(actions)
        assert data_equivalence(a, b, exact=True), f"step {t}: {a} != {b}"
        ended += int(np.sum(a[2] | a[3]))
    return ended


@pytest.mark.parametrize("name, config", CASES)
def test_async_vector_env_with_its_defaults_equals_the_sync_one_through_autoresets(name, config):
    make = lambda: vagen.make(plugin(name), config=config, max_turns=3)  # noqa: E731
    ours = gym.vector.AsyncVectorEnv([make, make])
    ref = gym.vector.SyncVectorEnv([make, make])
    assert ours.single_observation_space == ref.single_observation_space
    ended = play_both(ours, ref, name, 4, 8)
    assert ended >= 2, "the episodes ended and were reset within the run"
    ours.close()
    ref.close()


def test_make_vec_async_runs_a_registered_plugin():
    vagen.register(plugin("frozenlake"), id="vagen/TestLake-v0", config={"size": 4}, max_turns=3)
    ours = gym.make_vec("vagen/TestLake-v0", num_envs=2, vectorization_mode="async")
    ref = gym.make_vec("vagen/TestLake-v0", num_envs=2, vectorization_mode="sync")
    assert play_both(ours, ref, "frozenlake", 1, 6) >= 2
    ours.close()
    ref.close()


def test_an_env_pickles_as_a_fresh_copy_of_its_plugin_config_and_limits():
    env = vagen.make(plugin("frozenlake"), config={"size": 5}, limits={"call_timeout_ms": 900}, max_turns=7)
    env.reset(seed=3)
    env.step("Right")
    copy = pickle.loads(pickle.dumps(env))
    assert copy.max_turns == 7 and {k: copy.spec.kwargs[k] for k in env.spec.kwargs} == env.spec.kwargs
    assert data_equivalence(copy.reset(seed=3), env.reset(seed=3), exact=True)
    assert data_equivalence(copy.step("Down"), env.step("Down"), exact=True)


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_async_members_start_under_every_start_method(context):
    # The members' envs are built here: pickled into each subprocess (spawn, forkserver),
    # or inherited (fork) after Gymnasium closed the first to read its spaces.
    envs = [vagen.make(plugin("sokoban"), max_turns=2) for _ in range(2)]
    ours = gym.vector.AsyncVectorEnv([lambda e=e: e for e in envs], context=context)
    ref = gym.vector.SyncVectorEnv([lambda: vagen.make(plugin("sokoban"), max_turns=2) for _ in range(2)])
    assert play_both(ours, ref, "sokoban", 9, 4) >= 2
    ours.close()


def test_close_releases_the_instance_and_later_calls_say_so():
    env = vagen.make(plugin("frozenlake"))
    first = env.reset(seed=0)
    env.close()
    env.close()
    with pytest.raises(vagen.InvalidState, match="closed"):
        env.step("Up")
    with pytest.raises(vagen.InvalidState, match="closed"):
        env.describe_state()
    # A reset starts a new instance.
    assert data_equivalence(env.reset(seed=0), first, exact=True)
    env.step("Up")
    vec = vagen.make_vec(plugin("frozenlake"), 2)
    vec.reset(seed=0)
    vec.close()
    with pytest.raises(vagen.InvalidState, match="closed"):
        vec.step(("Up", "Up"))


def test_a_vector_env_renders_its_members_frames():
    config = {"observation": "text-and-image", "image_size": 64}
    vec = vagen.make_vec(plugin("frozenlake"), 2, config=config, render_mode="rgb_array")
    assert vec.render() is None
    obs, _ = vec.reset(seed=2)
    frames = vec.render()
    assert len(frames) == 2 and all(np.array_equal(f, o) for f, o in zip(frames, obs["image"]))
    text = vagen.make_vec(plugin("frozenlake"), 2, render_mode="ansi")
    obs, _ = text.reset(seed=2)
    assert text.render() == obs["text"]
    with pytest.raises(ValueError, match="render_mode"):
        vagen.make_vec(plugin("frozenlake"), 2, render_mode="rgb_array")


def test_registration_by_id_and_the_reference_plugins_stable_ids():
    with pytest.raises(FileNotFoundError, match="no such plugin"):
        vagen.register(PLUGINS / "missing.wasm", id="vagen/Missing-v0")
    assert sorted(vagen.register_reference([PLUGINS])) == sorted(vagen.REFERENCE_IDS.values())
    assert sorted(vagen.REFERENCE_IDS) == REFERENCE
    env = gym.make("vagen/FrozenLake-v0")
    obs, _ = env.reset(seed=0)
    assert data_equivalence(obs, vagen.make(plugin("frozenlake")).reset(seed=0)[0], exact=True)
    # In a fresh interpreter: found through VAGEN_PLUGIN_PATH when made (set after the
    # import too); without it, an error that names the variable.
    code = (
        "import os, gymnasium as gym, vagen\n"
        "try:\n    gym.make('vagen/Sokoban-v0')\nexcept FileNotFoundError as e:\n    print(e)\n"
        f"os.environ['VAGEN_PLUGIN_PATH'] = {str(PLUGINS)!r}\n"
        "print(gym.make('vagen/Sokoban-v0').unwrapped.manifest['name'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "VAGEN_PLUGIN_PATH"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    refused, made = out.stdout.strip().splitlines()
    assert "VAGEN_PLUGIN_PATH is not set" in refused and "sokoban.wasm" in refused
    assert made == "sokoban"


def test_make_vec_reaches_the_native_vector_env_and_reset_info_has_the_step_keys(monkeypatch):
    monkeypatch.setenv("VAGEN_PLUGIN_PATH", str(PLUGINS))
    vec = gym.make_vec("vagen/FrozenLake-v0", 4, vectorization_mode="vector_entry_point")
    assert isinstance(vec, vagen.VectorEnv) and vec.num_envs == 4
    assert isinstance(gym.make_vec("vagen/FrozenLake-v0", 2), vagen.VectorEnv), "the default mode"
    any_file = gym.make_vec("vagen/Plugin-v0", 2, path=str(plugin("bandit")))
    assert isinstance(any_file, vagen.VectorEnv) and any_file.manifest["name"] == "bandit"
    _, info = vec.reset(seed=0)
    step_info = vec.step(["Left"] * 4)[4]
    _, one = gym.make("vagen/FrozenLake-v0").reset(seed=0)
    for key in ("success", "valid_actions", "effective_actions", "metrics", "turn"):
        assert key in info and key in one, key
    assert not one["success"] and one["turn"] == 0 and one["metrics"] == {}
    assert set(step_info) >= {"success", "valid_actions", "turn"}
