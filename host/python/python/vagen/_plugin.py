"""Loading a plugin and reading its observations: what `Env` and `VectorEnv` share."""

import json
import os
import string
import sys

from collections.abc import Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.spaces.utils import flatten as gym_flatten
from gymnasium.spaces.utils import unflatten as gym_unflatten
from gymnasium.vector.utils import read_from_shared_memory, write_to_shared_memory

from . import _native

# Characters `AnyText.sample` draws from; `contains` accepts any character.
_SAMPLE_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"


class _EveryCharacter:
    """Every Unicode character, as the set, the list (indexed by code point) and the count
    Gymnasium's `Text` flattening and shared memory use: a character is stored as its code
    point, and the count (one past the last) marks padding."""

    def __len__(self):
        return sys.maxunicode + 1

    def __contains__(self, c):
        return isinstance(c, str) and len(c) == 1

    def __getitem__(self, i):
        return chr(i)

    def __eq__(self, other):
        return isinstance(other, _EveryCharacter)

    def __hash__(self):
        return hash(_EveryCharacter)


_EVERY = _EveryCharacter()


class AnyText(spaces.Text):
    """A `Text` space holding any string up to `max_length` characters.

    Plugins write free text (grids with symbols such as √, prose, SVG), so membership cannot
    be a fixed character set: every character is in it, flattened (and so held in an
    `AsyncVectorEnv`'s shared memory) as its code point. `sample()` draws from printable
    ASCII; a `mask` or `probability` for it is over those characters.
    """

    def __init__(self, max_length, *, min_length=0, seed=None):
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARS, seed=seed)

    @property
    def character_set(self):
        return _EVERY

    @property
    def character_list(self):
        return _EVERY

    def character_index(self, char):
        return np.int32(ord(char))

    def sample(self, mask=None, probability=None):
        sampler = spaces.Text(self.max_length, min_length=self.min_length, charset=_SAMPLE_CHARS)
        sampler._np_random = self.np_random
        return sampler.sample(mask=mask, probability=probability)

    def contains(self, x):
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __eq__(self, other):
        return isinstance(other, AnyText) and (self.min_length, self.max_length) == (other.min_length, other.max_length)

    def __repr__(self):
        return f"AnyText({self.min_length}, {self.max_length})"


# Gymnasium stores a `Text` as one int32 per character in flat arrays and shared memory; an
# `AnyText` character is its code point, padding one past the last code point. Done with
# numpy here: the generic path loops in Python over `max_length` (a plugin's whole text
# budget, 1 MiB by default) per member and step.
_PAD = sys.maxunicode + 1


def _codes(text, size):
    codes = np.full(size, _PAD, dtype=np.int32)
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.int32)
    if len(points) > size:
        raise ValueError(f"a text of {len(points)} characters does not fit in {size}")
    codes[: len(points)] = points
    return codes


def _text(codes):
    end = np.flatnonzero(codes >= _PAD)
    return codes[: end[0] if len(end) else len(codes)].astype("<i4").tobytes().decode("utf-32-le")


class _SharedTexts(Sequence):
    """The members' texts in an `AsyncVectorEnv`'s shared memory, decoded when read.
    Gymnasium reads shared memory once, when the vector env is built, expecting views that
    follow the workers' writes (as its arrays are); a tuple of strings would stay the empty
    texts of that moment. Copied (`copy=True`, Gymnasium's default) it is a tuple."""

    def __init__(self, codes):
        self._codes = codes

    def __len__(self):
        return len(self._codes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(_text(row) for row in self._codes[i])
        return _text(self._codes[i])

    def __deepcopy__(self, memo):
        return tuple(self)

    def __reduce__(self):
        return (tuple, (tuple(self),))

    def __eq__(self, other):
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self):
        return repr(tuple(self))


@gym_flatten.register(AnyText)
def _flatten_any_text(space, x):
    return _codes(x, space.max_length)


@gym_unflatten.register(AnyText)
def _unflatten_any_text(space, x):
    return _text(np.asarray(x, dtype=np.int32))


@write_to_shared_memory.register(AnyText)
def _write_any_text(space, index, value, shared_memory):
    size = space.max_length
    destination = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
    destination[index * size : (index + 1) * size] = _codes(value, size)


@read_from_shared_memory.register(AnyText)
def _read_any_text(space, shared_memory, n=1):
    return _SharedTexts(np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, space.max_length))


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


def reset_info():
    """The step keys as they stand before the first step, so reset's info has them too."""
    return {"success": False, "valid_actions": 0, "effective_actions": 0, "metrics": {}, "turn": 0}


def step_info(success, valid, effective, metrics, turn):
    return {
        "success": bool(success),
        "valid_actions": int(valid),
        "effective_actions": int(effective),
        "metrics": {name: float(value) for name, value in metrics},
        "turn": int(turn),
    }
