"""vagen in Python: any vagen plugin (one sandboxed `.wasm` file) as a Gymnasium env.

    import vagen
    env = vagen.make("frozenlake.wasm", config={"observation": "image"})
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("Right, Down")

`make_vec` steps many instances together on native threads; `register(path, id)` makes a
plugin a Gymnasium id (the reference plugins are registered as `vagen/FrozenLake-v0`, ...
when `VAGEN_PLUGIN_PATH` names a folder holding them); `check`, `fuzz` and `inspect`
are `vagen-host`'s plugin toolbox. Every plugin error is a `VagenError` subclass naming
what happened (`PluginTimeout`, `PluginOutOfMemory`, `PluginTrap`, `BadConfig`, ...).
"""

import os as _os

from ._native import (
    BadConfig,
    EnvFailed,
    InvalidState,
    LoadError,
    NativeNotAllowed,
    PluginMalformed,
    PluginOutOfFuel,
    PluginOutOfMemory,
    PluginTimeout,
    PluginTrap,
    VagenError,
)
from ._plugin import AnyText
from .env import REFERENCE_IDS, Env, make, register, register_reference
from .tools import check, fuzz, inspect
from .vector import VectorEnv, make_vec

__all__ = [
    "AnyText",
    "BadConfig",
    "Env",
    "EnvFailed",
    "InvalidState",
    "LoadError",
    "NativeNotAllowed",
    "PluginMalformed",
    "PluginOutOfFuel",
    "PluginOutOfMemory",
    "PluginTimeout",
    "PluginTrap",
    "VagenError",
    "VectorEnv",
    "check",
    "fuzz",
    "inspect",
    "make",
    "make_vec",
    "register",
    "register_reference",
    "REFERENCE_IDS",
]

register_reference([p for p in _os.environ.get("VAGEN_PLUGIN_PATH", "").split(_os.pathsep) if p])
