"""Loading a plugin and reading its observations: what `Env` and `VectorEnv` share."""

import json
import os
import string

import numpy as np
from gymnasium import spaces

from . import _native

# Characters `AnyText.sample` draws from; `contains` accepts any character.
_SAMPLE_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"


class AnyText(spaces.Text):
    """A `Text` space holding any string up to `max_length` characters.

    Plugins write free text (grids with symbols such as √, prose, SVG), so membership cannot
    be a fixed character set; `sample()` draws from printable ASCII.
    """

    def __init__(self, max_length, *, min_length=0, seed=None):
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARS, seed=seed)

    def contains(self, x):
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self):
        return f"AnyText({self.min_length}, {self.max_length})"


def load(path, limits=None, allow_native=False):
    """The native plugin for `path` under `limits` (a dict of sandbox limits by name)."""
    pairs = [(str(k), json.dumps(v)) for k, v in (limits or {}).items()]
    return _native.load(os.fspath(path), pairs, allow_native)


def config_json(config):
    """A plugin config given as a dict, a JSON string or None."""
    if config is None:
        return ""
    if isinstance(config, str):
        return config
    return json.dumps(config)


class Layout:
    """How a plugin's observations map onto a Gymnasium `Dict` space: `text`, then `image`
    when each observation has one image, or `images` (a tuple) when it has several. Read
    from one observation of the configured instance, since the config decides it (FrozenLake
    shows text, an image, or both)."""

    def __init__(self, text_limit, images):
        self.shapes = [(h, w, 3) for (h, w, _) in images]
        self.text_limit = text_limit
        entries = {"text": AnyText(text_limit)}
        boxes = [spaces.Box(0, 255, shape, np.uint8) for shape in self.shapes]
        if len(boxes) == 1:
            entries["image"] = boxes[0]
        elif boxes:
            entries["images"] = spaces.Tuple(boxes)
        self.space = spaces.Dict(entries)

    def observation(self, raw):
        text, images = raw
        shapes = [(h, w, 3) for (h, w, _) in images]
        if shapes != self.shapes:
            raise _native.PluginMalformed(
                f"the observation holds images of shapes {shapes}, but this env's observation space "
                f"was read as {self.shapes}: a Gymnasium space cannot change between observations"
            )
        obs = {"text": text}
        arrays = [np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3) for (h, w, rgb) in images]
        if len(arrays) == 1:
            obs["image"] = arrays[0]
        elif arrays:
            obs["images"] = tuple(arrays)
        return obs


def step_info(success, valid, effective, metrics, turn):
    return {
        "success": bool(success),
        "valid_actions": int(valid),
        "effective_actions": int(effective),
        "metrics": {name: float(value) for name, value in metrics},
        "turn": int(turn),
    }
