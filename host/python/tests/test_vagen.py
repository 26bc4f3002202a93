"""The `vagen` package against Gymnasium's own checker and vector env, and against
`vagen-host run`. Run by `cargo xtask test` (host/cli/tests/python.rs) with the freshly
built wheel installed; VAGEN_HOST names the vagen-host binary."""

import json
import os
import subprocess
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from PIL import Image

import vagen

ROOT = Path(__file__).resolve().parents[3]
PLUGINS = ROOT / "target" / "plugins"
TEST_PLUGINS = ROOT / "target" / "test-plugins"
HOST = Path(os.environ.get("VAGEN_HOST", ROOT / "target" / "release" / "vagen-host"))

REFERENCE = ["bandit", "countdown", "frozenlake", "navigation", "sokoban", "svg"]


def plugin(name):
    path = PLUGINS / f"{name}.wasm"
    assert path.is_file(), f"{path} is not built: run `cargo xtask plugins`"
    return path


def checked(env):
    # Any warning from the checker is a failure.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)


def test_the_reference_plugins_are_listed_completely():
    assert sorted(p.stem for p in PLUGINS.glob("*.wasm")) == REFERENCE


@pytest.mark.parametrize("name", REFERENCE)
def test_check_env_passes_on_every_reference_plugin(name):
    checked(vagen.make(plugin(name)))


@pytest.mark.parametrize(
    "name, config",
    [("frozenlake", {"observation": "text-and-image", "image_size": 64}), ("sokoban", {"observation": "image"})],
)
def test_check_env_passes_with_image_observations(name, config):
    env = vagen.make(plugin(name), config=config, render_mode="rgb_array")
    checked(env)
    obs, _ = env.reset(seed=1)
    assert obs["image"].dtype == np.uint8 and obs["image"].shape[2] == 3
    assert np.array_equal(env.render(), obs["image"])


@pytest.fixture(scope="session")
def python_example(tmp_path_factory):
    """examples/maze-keys-py built by the Python SDK's build command."""
    out = tmp_path_factory.mktemp("py") / "maze-keys-py.wasm"
    build = subprocess.run(
        ["bash", str(ROOT / "sdk/python/build.sh"), str(ROOT / "examples/maze-keys-py"), str(out)],
        env={**os.environ, "VAGEN_HOST": str(HOST)},
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    return out


def test_check_env_passes_on_the_python_example_env(python_example):
    checked(vagen.make(python_example))


def host_run(path, seed, policy="oracle", config=None, tmp=None):
    """`vagen-host run` rows of one episode: (observation text, images as arrays)."""
    log = Path(tmp) / f"run-{seed}.jsonl"
    cmd = [str(HOST), "run", "--plugin", str(path), "--policy", policy, "--seed", str(seed), "--episodes", "1", "--out", str(log)]
    if config is not None:
        cmd += ["--env-config", json.dumps(config)]
    subprocess.run(cmd, check=True, capture_output=True)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    images = lambda r: [np.asarray(Image.open(log.parent / p).convert("RGB")) for p in r.get("images", [])]
    return [(r["observation"], images(r), r.get("answer")) for r in rows]


@pytest.mark.parametrize(
    "name, config",
    [("frozenlake", {"observation": "text-and-image", "image_size": 48}), ("sokoban", {"observation": "image"}), ("svg", None)],
)
def test_a_seed_gives_the_same_episode_as_vagen_host_run(name, config, tmp_path):
    for seed in [0, 7, 12345]:
        rows = host_run(plugin(name), seed, config=config, tmp=tmp_path)
        env = vagen.make(plugin(name), config=config)
        obs, _ = env.reset(seed=seed)
        for i, (text, images, answer) in enumerate(rows):
            if i > 0:
                obs, *_ = env.step(answer)
            assert obs["text"] == text, f"{name} seed {seed} turn {i}"
            ours = [obs["image"]] if "image" in obs else []
            assert len(ours) == len(images) and all(np.array_equal(a, b) for a, b in zip(ours, images))


def test_plugin_faults_are_python_exceptions_and_the_env_recovers():
    limits = {"call_timeout_ms": 200, "memory_mib": 64}
    for mode, error, kind, words in [
        ("loop", vagen.PluginTimeout, "timeout", "timed out"),
        ("panic", vagen.PluginTrap, "trap", "hostile plugin panics on purpose"),
        ("alloc", vagen.PluginOutOfMemory, "out-of-memory", "cap is 64 MiB"),
    ]:
        env = vagen.make(TEST_PLUGINS / "hostile.wasm", config={"mode": mode}, limits=limits)
        env.reset(seed=1)
        with pytest.raises(error, match=words) as caught:
            env.step("go")
        assert caught.value.kind == kind and caught.value.fault
        assert isinstance(caught.value, vagen.VagenError)
        # The instance was re-created: a reset starts a new episode.
        obs, _ = env.reset(seed=1)
        assert obs["text"] == "seed 1"


def test_bad_input_is_named():
    with pytest.raises(vagen.BadConfig, match="size"):
        vagen.make(plugin("frozenlake"), config={"size": 99})
    with pytest.raises(vagen.BadConfig, match="no_such_limit"):
        vagen.make(plugin("frozenlake"), limits={"no_such_limit": 1})
    with pytest.raises(vagen.LoadError):
        vagen.make(ROOT / "Cargo.toml")
    with pytest.raises(vagen.NativeNotAllowed):
        vagen.make(PLUGINS / "frozenlake.so")
    env = vagen.make(PLUGINS / "frozenlake.so", allow_native=True)
    env.reset(seed=0)
    with pytest.raises(vagen.InvalidState, match="reset"):
        env.plugin.create("").step("Right")


def test_truncation_after_the_turn_limit():
    env = vagen.make(plugin("frozenlake"), max_turns=2)
    obs, _ = env.reset(seed=3)
    assert obs["text"].endswith("OP__\n"), obs["text"]
    # Down at the bottom edge changes nothing.
    _, _, terminated, truncated, _ = env.step("Down")
    assert not terminated and not truncated
    _, _, terminated, truncated, _ = env.step("Down")
    assert truncated and not terminated


def run_both(name, config, n, steps, seed, extras=True, parallel=False):
    """Gymnasium's own test of a vector env (`test_vector_env_equal`, which holds
    AsyncVectorEnv to SyncVectorEnv), with ours in Async's place."""
    ours = vagen.make_vec(plugin(name), n, config=config, extras=extras)
    ref = gym.vector.SyncVectorEnv([lambda: vagen.make(plugin(name), config=config, extras=extras) for _ in range(n)])
    assert ours.num_envs == ref.num_envs
    assert ours.single_observation_space == ref.single_observation_space
    assert ours.observation_space == ref.observation_space
    assert ours.single_action_space == ref.single_action_space
    assert ours.action_space == ref.action_space
    a, b = ours.reset(seed=seed), ref.reset(seed=seed)
    assert data_equivalence(a, b, exact=True), (a, b)
    assert ours.observation_space.contains(a[0])
    names = ours.manifest["action_names"] or ["nonsense"]
    rng = np.random.default_rng(seed)
    ended = 0
    for t in range(steps):
        actions = tuple(", ".join(rng.choice(names, size=rng.integers(1, 3))) for _ in range(n))
        a, b = ours.step(actions), ref.step(actions)
        assert data_equivalence(a, b, exact=True), f"step {t}: {a} != {b}"
        assert ours.observation_space.contains(a[0])
        ended += int(np.sum(a[2] | a[3]))
    # Actions as Gymnasium samples them (random text: invalid answers, mostly).
    ours.action_space.seed(seed)
    for t in range(5):
        actions = ours.action_space.sample()
        assert actions in ref.action_space
        assert data_equivalence(ours.step(actions), ref.step(actions), exact=True), f"sampled step {t}"
    assert ours.np_random_seed == ref.np_random_seed == tuple(seed + i for i in range(n))
    # Heavy calls (Navigation's steps, Sokoban's level generation) run on threads, light
    # ones in sequence: the results are the same either way.
    if parallel:
        assert ours._pool.parallel_calls() > steps // 2
    ours.close()
    ref.close()
    return ended


@pytest.mark.parametrize(
    "name, config",
    [("frozenlake", None), ("frozenlake", {"observation": "image", "image_size": 32}), ("sokoban", None), ("bandit", None)],
)
def test_the_vector_env_behaves_as_gymnasiums_sync_vector_env(name, config):
    # Many episodes end (and autoreset) within the run, in every sub-env.
    assert run_both(name, config, n=4, steps=40, seed=11) > 8


def test_a_heavy_env_steps_in_parallel_and_still_matches():
    # Navigation's steps (~0.6 ms) are heavy enough for the pool to use its threads.
    run_both("navigation", None, n=4, steps=12, seed=3, parallel=True)


def test_vector_partial_resets_and_action_counts_as_gymnasiums_tests_ask():
    ours = vagen.make_vec(plugin("frozenlake"), 3)
    ref = gym.vector.SyncVectorEnv([lambda: vagen.make(plugin("frozenlake")) for _ in range(3)])
    for env in (ours, ref):
        env.reset(seed=[0, 1, 2])
        env.step(("Up", "Left", "Right"))
    mask = np.array([True, False, True])
    a = ours.reset(seed=[5, 6, 7], options={"reset_mask": mask})
    b = ref.reset(seed=[5, 6, 7], options={"reset_mask": mask})
    assert data_equivalence(a, b, exact=True), (a, b)
    assert data_equivalence(ours.step(("Down",) * 3), ref.step(("Down",) * 3), exact=True)
    with pytest.raises(ValueError):
        ours.step(("Down",) * 2)
    with pytest.raises(ValueError):
        ours.step(("Down",) * 4)
    with pytest.raises(TypeError):
        ours.step(0)
    with pytest.raises(ValueError, match="shape"):
        ours.reset(options={"reset_mask": np.array([True])})
    with pytest.raises(ValueError, match="bool"):
        ours.reset(options={"reset_mask": np.array([1, 1, 0])})


def test_vector_seeds_autoreset_and_errors():
    vec = vagen.make_vec(plugin("bandit"), 3, extras=False)
    _, info = vec.reset(seed=[5, 6, 7])
    assert list(info["seed"]) == [5, 6, 7]
    _, _, terminated, _, _ = vec.step(("Phoenix", "Dragon", "Phoenix"))
    assert terminated.all()
    # The next step resets every sub-env: actions are ignored, rewards are 0.
    _, rewards, terminated, truncated, info = vec.step(("x", "y", "z"))
    assert not rewards.any() and not terminated.any() and not truncated.any() and info["_seed"].all()
    # `flaky` traps when (31 seed + step) % 20 == 7: seed 6 on its first step, seed 0 later.
    hostile = vagen.make_vec(TEST_PLUGINS / "hostile.wasm", 2, config={"mode": "flaky"})
    hostile.reset(seed=[0, 6])
    with pytest.raises(vagen.PluginTrap) as caught:
        hostile.step(("go", "go"))
    assert caught.value.env_index == 1
    obs, _ = hostile.reset(seed=[0, 1])
    assert obs["text"] == ("seed 0", "seed 1")
    hostile.step(("go", "go"))


def test_toolbox():
    result = vagen.check(plugin("frozenlake"))
    assert result.passed and len(result.checks) >= 6
    report = vagen.fuzz(plugin("bandit"), 1.0)
    assert report.episodes > 20 and report.findings == []
    info = vagen.inspect(plugin("svg"))
    assert info["manifest"]["name"] == "svg" and info["kind"] == "wasm" and len(info["sha256"]) == 64
