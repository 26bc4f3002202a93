"""vagen in Python: any vagen plugin (one sandboxed `.wasm` file) as a Gymnasium env.

    import vagen
    env = vagen.make("frozenlake.wasm", config={"observation": "image"})
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("Right, Down")

`make_vec` steps many instances together on native threads; `check`, `fuzz` and `inspect`
are `vagen-host`'s plugin toolbox. Every plugin error is a `VagenError` subclass naming
what happened (`PluginTimeout`, `PluginOutOfMemory`, `PluginTrap`, `BadConfig`, ...).
"""

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
from .env import Env, make
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
]
