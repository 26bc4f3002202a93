"""vagen in Python: any vagen plugin (one sandboxed `.wasm` file) as a Gymnasium env.

    import vagen
    env = vagen.make("frozenlake.wasm", config={"observation": "image"})
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("Right, Down")

`make_vec` steps many instances together on native threads; `register(path, id)` makes a
plugin a Gymnasium id, and `gym.make("vagen/Plugin-v0", path=...)` makes any plugin file
without one; the reference plugins are `vagen/FrozenLake-v0`, ... (found when made, in the
folders of `VAGEN_PLUGIN_PATH`); `gym.make_vec(id, n)` gives the native `VectorEnv`;
`Prompter` builds the prompts and reads the answers as training does; `check`, `fuzz` and `inspect`
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
from .env import REFERENCE_IDS, Env, find_reference, make, register, register_reference
from .prompter import Prompter
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
    "Prompter",
    "VagenError",
    "VectorEnv",
    "check",
    "find_reference",
    "fuzz",
    "inspect",
    "make",
    "make_vec",
    "register",
    "register_reference",
    "REFERENCE_IDS",
]
