"""One plugin instance as a `gymnasium.Env`."""

import dataclasses
import json
import os
from pathlib import Path

import gymnasium as gym

from . import _plugin
from ._native import InvalidState


class Env(gym.Env):
    """A vagen plugin instance behind Gymnasium's API.

    Observations are `{"text": str, "image": uint8 array (H, W, 3)}` (`image` only when the
    config shows one; `images`, a tuple, when it shows several). Actions are the text the env
    reads from the agent's `<answer>`. `terminated` is the env's `done`; `truncated` comes
    after the plugin's turn limit (`max_turns`). `reset(seed=s)` hands `s` to the plugin as
    is, so the episode is the one `vagen-host run --seed s` plays.

    `info` holds `success`, `valid_actions`, `effective_actions`, `metrics` and `turn` (at
    reset: False, 0, 0, {} and 0), and with `extras` (the default) `describe_state` and, for
    plugins with an oracle, `oracle` (one more plugin call each per step). Reset's info also
    has `system_prompt` and `seed`.
    """

    # Turn-based: render_fps is only the pace at which recorded frames are played back.
    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 4}

    def __init__(self, path, config=None, limits=None, *, allow_native=False, render_mode=None, max_turns=None, extras=True):
        # What pickling remakes the env from (the plugin's state cannot leave its sandbox).
        self._made_with = (
            os.fspath(path),
            config,
            limits,
            {"allow_native": allow_native, "render_mode": render_mode, "max_turns": max_turns, "extras": extras},
        )
        self.plugin = _plugin.load(path, limits, allow_native)
        self.manifest = json.loads(self.plugin.manifest())
        self._native = self.plugin.create(_plugin.config_json(config))
        self.max_turns = int(max_turns or self.plugin.max_turns())
        self.extras = extras
        text_limit = json.loads(self.plugin.limits())["max_text_bytes"]
        self._layout = _plugin.Layout(text_limit, self._native.reset(0)[1])
        self.observation_space = self._layout.space
        # Pictures to render only where the config shows them.
        modes = ["rgb_array", "ansi"] if self._layout.shapes else ["ansi"]
        self.metadata = {**self.metadata, "render_modes": modes}
        if render_mode is not None and render_mode not in modes:
            raise ValueError(f"render_mode must be one of {modes} for this config, not {render_mode!r}")
        self.render_mode = render_mode
        self.action_space = _plugin.AnyText(text_limit)
        self.system_prompt = self._native.system_prompt()
        self._turn = 0
        self._last = None

    def __reduce__(self):
        """Pickled by what made it: path, config, limits and keyword arguments. The copy is a
        fresh instance (reset it); so `AsyncVectorEnv` starts members under fork, spawn and
        forkserver alike."""
        path, config, limits, kwargs = self._made_with
        return (_remake, (path, config, limits, kwargs))

    @property
    def _native(self):
        if self.__dict__.get("_instance") is None:
            raise InvalidState("this env is closed: reset() starts a new instance")
        return self._instance

    @_native.setter
    def _native(self, instance):
        self._instance = instance

    def close(self):
        """Releases the plugin instance and its sandbox (its memory). A later `reset` starts
        a new instance (Gymnasium's `AsyncVectorEnv` closes the env it reads the spaces from,
        which forked members may still hold); any other call raises `InvalidState`. Closing
        twice is harmless."""
        self._instance = None
        super().close()

    def reset(self, *, seed=None, options=None):
        if self.__dict__.get("_instance") is None:
            self._instance = self.plugin.create(_plugin.config_json(self._made_with[1]))
        super().reset(seed=seed)
        plugin_seed = seed if seed is not None else int(self.np_random.integers(0, 2**63))
        self._last = self._layout.observation(self._native.reset(plugin_seed))
        self._turn = 0
        info = {"system_prompt": self.system_prompt, "seed": plugin_seed, **_plugin.reset_info()}
        self._add_extras(info)
        return self._last, info

    def step(self, action):
        raw, reward, done, success, valid, effective, metrics = self._native.step(str(action))
        self._turn += 1
        self._last = self._layout.observation(raw)
        info = _plugin.step_info(success, valid, effective, metrics, self._turn)
        terminated = bool(done)
        truncated = not terminated and self._turn >= self.max_turns
        if not terminated:
            self._add_extras(info)
        return self._last, float(reward), terminated, truncated, info

    def render(self):
        if self.render_mode is None or self._last is None:
            return None
        if self.render_mode == "ansi":
            return self._last["text"]
        if "image" in self._last:
            return self._last["image"]
        return self._last.get("images", (None,))[0]

    def describe_state(self):
        return self._native.describe_state()

    def oracle(self):
        return self._native.oracle()

    def _add_extras(self, info):
        if self.extras:
            info["describe_state"] = self._native.describe_state()
            if self.manifest["has_oracle"]:
                info["oracle"] = self._native.oracle()


def _remake(path, config, limits, kwargs):
    return make(path, config, limits, **kwargs)


# Any plugin file by keyword, without registering it first:
# `gym.make("vagen/Plugin-v0", path="x.wasm", config=...)`, and
# `gym.make_vec("vagen/Plugin-v0", n, path="x.wasm")` for the native vector env.
ENV_ID = "vagen/Plugin-v0"
_VECTOR = "vagen.vector:VectorEnv"
gym.register(id=ENV_ID, entry_point="vagen.env:Env", vector_entry_point=_VECTOR)

# The reference plugins' stable ids, by file name.
REFERENCE_IDS = {
    "bandit": "vagen/Bandit-v0",
    "countdown": "vagen/Countdown-v0",
    "frozenlake": "vagen/FrozenLake-v0",
    "navigation": "vagen/Navigation-v0",
    "sokoban": "vagen/Sokoban-v0",
    "svg": "vagen/SVG-v0",
}


def register(path, id, config=None, limits=None, **kwargs):
    """Registers the plugin file `path` under `id` (e.g. "vagen/Mastermind-v0") with its
    config, limits and `make` keyword arguments, so `gymnasium.make(id)` and
    `gymnasium.make_vec(id, n, vectorization_mode=...)` build it. The path is made absolute
    here; a missing file is an error now, not at `make`."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such plugin file")
    gym.registry.pop(id, None)
    kwargs = {"path": str(path), "config": config, "limits": limits, **kwargs}
    gym.register(id=id, entry_point="vagen.env:Env", vector_entry_point=_VECTOR, kwargs=kwargs)


def register_reference(folders):
    """Registers each reference plugin found in `folders` (the first one found wins) under
    its stable id (`REFERENCE_IDS`), in place of the search that `make` does otherwise;
    returns the ids registered."""
    done = []
    for name, env_id in REFERENCE_IDS.items():
        for folder in folders:
            candidate = Path(folder) / f"{name}.wasm"
            if candidate.is_file():
                register(candidate, env_id)
                done.append(env_id)
                break
    return done


def find_reference(name):
    """The reference plugin `name` (`frozenlake`, ...): the first `NAME.wasm` in the folders
    of `VAGEN_PLUGIN_PATH` (separated by `os.pathsep`), read now, not at import; else the
    error that says where it looked and what to set."""
    value = os.environ.get("VAGEN_PLUGIN_PATH", "")
    folders = [f for f in value.split(os.pathsep) if f]
    for folder in folders:
        candidate = Path(folder) / f"{name}.wasm"
        if candidate.is_file():
            return candidate
    where = f"in VAGEN_PLUGIN_PATH={value!r}" if folders else "because VAGEN_PLUGIN_PATH is not set"
    raise FileNotFoundError(
        f"{REFERENCE_IDS[name]}: {name}.wasm was not found {where}. Set VAGEN_PLUGIN_PATH to a folder "
        f"holding the reference plugins (`cargo xtask plugins` builds them into target/plugins), or "
        f"make the env from its file: vagen.make('path/to/{name}.wasm')"
    )


def _reference_env(reference, **kwargs):
    return make(find_reference(reference), **kwargs)


def _reference_vector_env(reference, num_envs, **kwargs):
    from .vector import VectorEnv

    return VectorEnv(find_reference(reference), num_envs, **kwargs)


# The reference ids exist from import on; each finds its file when it is made.
for _name, _id in REFERENCE_IDS.items():
    gym.register(
        id=_id,
        entry_point="vagen.env:_reference_env",
        vector_entry_point="vagen.env:_reference_vector_env",
        kwargs={"reference": _name},
    )


def make(path, config=None, limits=None, **kwargs):
    """A Gymnasium env from a plugin file (`.wasm`; `.so` with `allow_native=True`).

    `config`: the plugin's config (a dict or JSON). `limits`: sandbox limits by name, e.g.
    `{"call_timeout_ms": 500}`. Keyword arguments: `render_mode` ("rgb_array" or "ansi"),
    `max_turns`, `extras`, `allow_native`. The env is returned unwrapped, with a spec that
    remakes it (`gymnasium.make("vagen/Plugin-v0", path=...)` gives the same, wrapped).
    """
    env = Env(path, config, limits, **kwargs)
    args = {"path": os.fspath(path), "config": config, "limits": limits, **kwargs}
    env.spec = dataclasses.replace(gym.spec(ENV_ID), kwargs=args)
    return env
