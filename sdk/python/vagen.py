"""Write a vagen environment in Python.

Subclass `Env` (only `reset` and `step` are required), decorate it with `@export_env`,
and build it with `sdk/python/build.sh YOUR_ENV_DIR OUT.wasm`. The helpers mirror the Rust
SDK: answer splitting (`ActionSpec`), a seeded `Rng`, `grid_text`, `Canvas`,
`turn_feedback`, `relative_position`, `echo`.

Everything random in an episode must come from `Rng(seed)`: the seed alone decides an
episode, on every machine and in every instance.
"""

import json
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple


# -- what an environment produces ---------------------------------------------------------


@dataclass
class Image:
    """RGB8, row-major: `len(rgb) == width * height * 3`."""

    width: int
    height: int
    rgb: bytes


@dataclass
class Observation:
    """What the agent sees; `text` holds one `<image>` marker per image, in order."""

    text: str = ""
    images: List[Image] = field(default_factory=list)

    def push_image(self, image: Image) -> None:
        self.text += "<image>"
        self.images.append(image)


@dataclass
class Step:
    observation: Observation = field(default_factory=Observation)
    reward: float = 0.0
    done: bool = False
    success: bool = False
    valid_actions: int = 0
    effective_actions: int = 0
    metrics: List[Tuple[str, float]] = field(default_factory=list)


@dataclass
class Manifest:
    """Static facts; `name`, `version` and `description` left empty come from the class's
    NAME, VERSION and DESCRIPTION; the default config from DEFAULT_CONFIG."""

    name: str = ""
    version: str = ""
    description: str = ""
    modalities: Sequence[str] = ("text",)
    action_names: Sequence[str] = ()
    action_separator: str = ","
    max_actions_per_turn: int = 1
    default_max_turns: int = 10
    has_oracle: bool = False


class EnvError(Exception):
    kind = "failed"


class BadConfig(EnvError):
    kind = "bad-config"


class InvalidState(EnvError):
    kind = "invalid-state"


class Failed(EnvError):
    kind = "failed"


# -- the environment ----------------------------------------------------------------------


class Env:
    """An environment. One object lives for many episodes: `reset` starts each one."""

    NAME = ""
    VERSION = "0.1.0"
    DESCRIPTION = ""
    #: Every option with its default; a config may only set these keys, with values of the
    #: same type (an int default also accepts nothing but ints, a float default any number).
    DEFAULT_CONFIG: dict = {}
    #: Named partial configs: `{"preset": "NAME", ...}` starts from one.
    PRESETS: dict = {}

    @classmethod
    def manifest(cls) -> Manifest:
        return Manifest()

    def __init__(self, config: dict):
        """Check values here and raise `BadConfig` naming the field."""
        self.config = config

    def reset(self, seed: int) -> Observation:
        raise NotImplementedError

    def step(self, answer: str) -> Step:
        raise NotImplementedError

    def system_prompt(self) -> str:
        return ""

    def describe_state(self) -> str:
        return ""

    def oracle(self) -> Optional[str]:
        """An expert answer; set `has_oracle` in the manifest when provided."""
        return None


_exported = None


def export_env(cls):
    """Marks `cls` as the module's environment (use as a class decorator)."""
    global _exported
    if not (isinstance(cls, type) and issubclass(cls, Env)):
        raise TypeError("export_env takes a subclass of vagen.Env")
    _exported = cls
    return cls


def exported():
    if _exported is None:
        raise Failed("no environment exported: decorate your Env subclass with @vagen.export_env")
    return _exported


def full_manifest(cls) -> Manifest:
    m = cls.manifest()
    m.name = m.name or cls.NAME or cls.__name__.lower()
    m.version = m.version or cls.VERSION
    m.description = m.description or cls.DESCRIPTION
    return m


def resolve_config(cls, text: str) -> dict:
    """defaults ← preset ← the caller's fields, as the Rust SDK does."""
    try:
        given = json.loads(text) if text.strip() else {}
    except ValueError as e:
        raise BadConfig(f"not valid JSON: {e}")
    if not isinstance(given, dict):
        raise BadConfig(f"expected a JSON object, got {type(given).__name__}")
    config = json.loads(json.dumps(cls.DEFAULT_CONFIG))
    if "preset" in given:
        name = given.pop("preset")
        if name not in cls.PRESETS:
            raise BadConfig(f"unknown preset `{name}` (known: {', '.join(cls.PRESETS)})")
        given = {**cls.PRESETS[name], **given}
    for key, value in given.items():
        if key not in config:
            raise BadConfig(f"unknown field `{key}`, expected one of {', '.join(config)}")
        default = config[key]
        ok = (
            isinstance(value, bool) == isinstance(default, bool)
            and (
                isinstance(value, type(default))
                or (isinstance(default, float) and isinstance(value, int))
                or default is None
            )
        )
        if not ok:
            raise BadConfig(f"`{key}` must be {type(default).__name__}, got {json.dumps(value)}")
        config[key] = float(value) if isinstance(default, float) else value
    return config


class Session:
    """One instance and the episode protocol around it: no step before reset or after done."""

    def __init__(self, cls, config_text: str):
        self.env = cls(resolve_config(cls, config_text))
        self.phase = "before-reset"

    def reset(self, seed: int) -> Observation:
        obs = self.env.reset(seed)
        self.phase = "running"
        return obs

    def step(self, answer: str) -> Step:
        if self.phase == "before-reset":
            raise InvalidState("step called before reset")
        if self.phase == "done":
            raise InvalidState("step called after the episode ended; call reset")
        step = self.env.step(answer)
        if step.done:
            self.phase = "done"
        return step

    def oracle(self) -> Optional[str]:
        return self.env.oracle() if self.phase == "running" else None


# -- helpers ------------------------------------------------------------------------------

_MASK = (1 << 64) - 1


class Rng:
    """SplitMix64 seeded from a u64: the same stream in the Python, JavaScript and C SDKs."""

    def __init__(self, seed: int):
        self.state = seed & _MASK

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """Uniform in `0..n` without modulo bias."""
        if n <= 0:
            raise ValueError("Rng.below(0)")
        zone = _MASK - (_MASK % n)
        while True:
            x = self.next_u64()
            if x < zone:
                return x % n

    def unit(self) -> float:
        """Uniform in [0, 1) with 53 random bits."""
        return (self.next_u64() >> 11) * (1.0 / (1 << 53))

    def chance(self, p: float) -> bool:
        return self.unit() < p

    def choose(self, items):
        return items[self.below(len(items))] if items else None

    def shuffle(self, items: list) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]


@dataclass
class ParsedActions:
    actions: List[int] = field(default_factory=list)
    invalid: List[str] = field(default_factory=list)
    ignored: int = 0

    def all_valid(self) -> bool:
        return not self.invalid and bool(self.actions)


MAX_ANSWER_LEN = 1024
"""ActionSpec.max_answer_len's default (characters): far above any list of action names."""


def too_long(length: int, most: int) -> str:
    """What stands for an over-long answer among the invalid pieces (the feedback echoes it)."""
    return f"(an answer of {length} characters; at most {most} are read)"


class ActionSpec:
    """How an environment reads actions out of an answer (as the Rust SDK's ActionSpec)."""

    def __init__(self, names: Sequence[str], separator: str = ",", max_per_turn: int = 1,
                 ignore_case: bool = True, stop_at_invalid: bool = True,
                 max_answer_len: int = MAX_ANSWER_LEN):
        self.names = list(names)
        self.separator = separator
        self.max_per_turn = max_per_turn
        self.ignore_case = ignore_case
        self.stop_at_invalid = stop_at_invalid
        # Longer answers are refused before they are split: a rambling model or a fuzzer's
        # megabyte costs one length check, not a list of a million pieces.
        self.max_answer_len = max_answer_len

    def parse(self, answer: str) -> ParsedActions:
        out = ParsedActions()
        if len(answer) > self.max_answer_len:
            out.invalid.append(too_long(len(answer), self.max_answer_len))
            return out
        raw = answer.split(self.separator) if self.separator else [answer]
        pieces = [p.strip() for p in raw if p.strip()]
        taken = pieces[: self.max_per_turn]
        for i, piece in enumerate(taken):
            index = self._lookup(piece)
            if index is None:
                out.invalid.append(piece)
                if self.stop_at_invalid:
                    out.ignored = len(pieces) - i - 1
                    return out
            else:
                out.actions.append(index)
        out.ignored = len(pieces) - len(taken)
        return out

    def _lookup(self, piece: str) -> Optional[int]:
        for i, n in enumerate(self.names):
            if (n.lower() == piece.lower()) if self.ignore_case else (n == piece):
                return i
        return None

    def join(self, actions: Sequence[int]) -> str:
        sep = ", " if self.separator == "," else f" {self.separator} "
        return sep.join(self.names[i] for i in actions)


def grid_text(width: int, height: int, cell: Callable[[int, int], str]) -> str:
    """One character per cell, rows joined by newlines."""
    return "\n".join("".join(cell(x, y) for x in range(width)) for y in range(height))


class Canvas:
    """An RGB8 drawing surface; drawing outside it is clipped."""

    def __init__(self, width: int, height: int, background=(0, 0, 0)):
        self.width, self.height = width, height
        self.rgb = bytearray(bytes(background) * (width * height))

    def fill_rect(self, x: int, y: int, w: int, h: int, color) -> None:
        x0, y0 = max(x, 0), max(y, 0)
        x1, y1 = min(x + w, self.width), min(y + h, self.height)
        if x0 >= x1 or y0 >= y1:
            return
        row = bytes(color) * (x1 - x0)
        for yy in range(y0, y1):
            start = (yy * self.width + x0) * 3
            self.rgb[start:start + len(row)] = row

    def into_image(self) -> Image:
        return Image(self.width, self.height, bytes(self.rgb))


def echo(answer: str) -> str:
    """A piece of the agent's answer, safe to show back: at most 64 characters, `<image>`
    defused (the host counts those markers against the images)."""
    out = answer[:64] + ("…" if len(answer) > 64 else "")
    return out.replace("<image>", "[image]")


def turn_feedback(executed: Sequence[str], blocked: int, blocked_by: str, invalid: Optional[str],
                  valid: Sequence[str]) -> str:
    s = f"Executed actions: {', '.join(executed)}." if executed else "No valid action was executed."
    if blocked:
        s += f" {blocked} of them {blocked_by}."
    if invalid is not None:
        s += f' Invalid action "{echo(invalid)}": valid actions are {", ".join(valid)}.'
    return s


def relative_position(frm: Tuple[int, int], to: Tuple[int, int]) -> str:
    """Where `to` lies from `frm` on a grid with y growing downwards."""
    dx, dy = to[0] - frm[0], to[1] - frm[1]

    def count(n: int, word: str) -> str:
        return f"{abs(n)} {word}{'' if abs(n) == 1 else 's'}"

    v = None if dy == 0 else f"{count(dy, 'row')} {'above' if dy < 0 else 'below'}"
    h = None if dx == 0 else f"{count(dx, 'column')} to the {'left' if dx < 0 else 'right'}"
    if v is None and h is None:
        return "where you are"
    if h is None:
        return f"{v} you (same column)"
    if v is None:
        return f"{h} of you (same row)"
    return f"{v} and {h} of you"


# -- reward functions ------------------------------------------------------------------------
#
# Subclass `Reward` (only `score` is required), decorate it with `@export_reward`, and build
# it with the same `sdk/python/build.sh`: an `app.py` that exports a reward becomes a
# `vagen:env/reward` component.


@dataclass
class Turn:
    """One turn of one episode, after the environment stepped its answer."""

    env_name: str
    format: str
    response: str
    think: Optional[str]
    observation: Optional[str]
    prediction: Optional[str]
    answer: Optional[str]
    format_ok: bool
    env_reward: float
    done: bool
    success: bool
    state_before: str
    state_after: str
    images_before: List[Image]
    images_after: List[Image]


@dataclass
class TurnScore:
    """A turn's reward and named figures (logged as `reward/<name>/<metric>`)."""

    reward: float
    metrics: List[Tuple[str, float]] = field(default_factory=list)


@dataclass
class Message:
    """A judge chat message: `content` is text and `Image`s, in order."""

    role: str
    content: list


@dataclass
class JudgeRequest:
    messages: List[Message]
    max_tokens: int = 16
    temperature: float = 0.0


class JudgeFailed(Exception):
    """The judge gave no answer to one request (the reason is the message)."""


class Reward:
    """A reward function. `score` gets a batch of turns and the host's judge; it returns one
    entry per turn: a `TurnScore`, or a string saying why that turn could not be scored
    (the host counts it, never reads it as 0). `judge.complete(requests)` answers a list of
    `JudgeRequest`s with, per request, the text or a `JudgeFailed`."""

    NAME = ""
    VERSION = "0.1.0"
    DESCRIPTION = ""
    DEFAULT_CONFIG: dict = {}
    PRESETS: dict = {}

    def __init__(self, config: dict):
        self.config = config

    def score(self, turns: List[Turn], judge) -> list:
        raise NotImplementedError("a Reward must implement score(turns, judge)")


_exported_reward = None


def export_reward(cls):
    """Marks `cls` as the module's reward function (use as a class decorator)."""
    global _exported_reward
    if not (isinstance(cls, type) and issubclass(cls, Reward)):
        raise TypeError("export_reward takes a subclass of vagen.Reward")
    _exported_reward = cls
    return cls


def exported_reward():
    if _exported_reward is None:
        raise Failed("no reward exported: decorate your Reward subclass with @vagen.export_reward")
    return _exported_reward
