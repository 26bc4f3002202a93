"""The trainer's conversation with its policy, for a loop of one's own: prompts built and
answers read as training and `vagen-host eval` do (the same Rust functions)."""

import json
import os
from pathlib import Path

from . import _native


class Prompter:
    """One episode's conversation with a policy over an `Env`.

        p = vagen.Prompter.from_config("runs/demo/config.toml")
        env = p.env
        obs, info = env.reset(seed=p.val_seeds()[0])
        messages = p.reset(obs, info)
        while True:
            answer = my_model(messages, **p.sampling())   # e.g. an OpenAI-compatible server
            obs, reward, terminated, truncated, info = env.step(p.act(answer))
            if terminated or truncated:
                break
            messages = p.observe(obs, info)

    `messages` are OpenAI-style dicts (`role`, `content`): the system prompt (the config's
    or the env's, with the format's instructions), the earlier turns the history window
    keeps, and the user turn (feedback on the last answer, the observation or its state
    description, the format reminder), as the config's `[rollout]` says. `act` reads the
    answer in the format and returns what the env's `step` takes: `<answer>Left</answer>`
    gives `Left`, and an answer without one gives the empty action the env counts invalid.
    Images stay in `obs`; their `<image>` markers are in the text where training puts them.
    """

    def __init__(self, env, rollout=None, *, max_actions_per_turn=0, _strict=True):
        """`env`: a `vagen.Env` made with `extras=True` (the default) when the prompts show
        state descriptions. `rollout`: `[rollout]`'s prompt keys as a dict (`format`,
        `system_prompt`, `instructions`, `describe_state`, `observation_text`, `feedback`,
        `reminder`, `history`, `per_turn`, ...); unknown keys are refused.
        `max_actions_per_turn`: `[env]`'s cap (0: the env's own)."""
        self.env = env
        self._native = _native.prompter(
            json.dumps(rollout or {}),
            json.dumps(env.manifest),
            env._native.action_space(),
            int(max_actions_per_turn),
            _strict,
        )
        self._settings = {}
        self._system = None
        self._turns = []
        self._current = None

    @classmethod
    def from_config(cls, path, env=None, **make_kwargs):
        """A prompter as a training config (a run folder's `config.toml` holds every key)
        prompts: its `[rollout]` and `[env]`. Without `env`, the env is made from `[env]`
        (`plugin`, relative to the config's folder, `config`, `max_turns`) and `[sandbox]`;
        `make_kwargs` go to `vagen.make`."""
        path = Path(path)
        settings = json.loads(_native.read_toml(os.fspath(path)))
        env_section = settings.get("env", {})
        if env is None:
            env = make_env(path, settings, **make_kwargs)
        p = cls(
            env,
            settings.get("rollout", {}),
            max_actions_per_turn=env_section.get("max_actions_per_turn", 0),
            _strict=False,
        )
        p._settings = settings
        return p

    def val_seeds(self):
        """The held-out seeds of the config (`[env] val_seed_start`, `val_episodes`), as
        `eval --config` plays them; the trainer's defaults where the config leaves them out)."""
        env = self._settings.get("env", {})
        start, n = env.get("val_seed_start", 1 << 40), env.get("val_episodes", 256)
        return list(range(start, start + n))

    def sampling(self, evaluation=True):
        """Keyword arguments for an OpenAI-style chat call as the config samples: `stop` (the
        format's end of answer), and `max_tokens` and `temperature` (`val_temperature` when
        `evaluation`) where the config sets them."""
        rollout = self._settings.get("rollout", {})
        out = {"stop": self._native.stop()}
        if "max_new_tokens" in rollout:
            out["max_tokens"] = rollout["max_new_tokens"]
        key = "val_temperature" if evaluation else "temperature"
        if key in rollout:
            out["temperature"] = rollout[key]
        return out

    def reset(self, obs, info):
        """The first prompt of an episode, from `env.reset`'s observation and info."""
        self._system = self._native.system(info["system_prompt"])
        self._turns = []
        self._current = self._native.user(self._shown(obs, info))
        return self.messages()

    def act(self, answer):
        """The action `env.step` takes for the policy's `answer` (its text). The answer and
        how it was read are kept for the next prompt."""
        if self._current is None:
            raise RuntimeError("act() before reset(): no prompt was shown")
        parsed, step = self._native.read(str(answer))
        self._turns.append({"user": self._current, "response": str(answer), "parsed": parsed})
        self._current = None
        return step

    def observe(self, obs, info):
        """The next prompt, after `env.step` returned `obs` and `info` for the last answer."""
        if not self._turns or self._current is not None:
            raise RuntimeError("observe() comes after act() and env.step()")
        last = self._turns[-1]
        feedback = self._native.feedback(last["parsed"], info["valid_actions"], info["effective_actions"])
        self._current = self._native.user(self._shown(obs, info), feedback)
        return self.messages()

    def parsed(self):
        """How the last answer was read: its parts, `format_ok`, `actions`, `extra_actions`."""
        return json.loads(self._turns[-1]["parsed"]) if self._turns else None

    def format_reward(self, info):
        """What the format adds to the last step's reward (`info` from that step), as
        training scores it."""
        return self._native.format_reward(self._turns[-1]["parsed"], info["valid_actions"])

    def messages(self):
        """The current prompt: system, the kept earlier turns, the user turn."""
        keep = self._native.history()
        turns = self._turns if keep is None else self._turns[len(self._turns) - keep :] if keep else []
        out = [{"role": "system", "content": self._system}]
        for t in turns:
            out += [{"role": "user", "content": t["user"]}, {"role": "assistant", "content": t["response"]}]
        out.append({"role": "user", "content": self._current})
        return out

    def _shown(self, obs, info):
        description = None
        if self._native.describe_state():
            if "describe_state" not in info:
                raise ValueError(
                    "info has no describe_state, which this prompt shows: the env was made with "
                    "extras=False, or the episode has ended (no prompt follows its last step)"
                )
            description = info["describe_state"]
        return self._native.observation(obs["text"], description)


def make_env(config_path, settings, **kwargs):
    """The env of a config's `[env]`: its plugin (relative to the config's folder), config
    and turn limit."""
    from .env import make

    env = settings.get("env", {})
    if "plugin" not in env:
        raise ValueError(f"{config_path}: [env] names no plugin")
    plugin = Path(config_path).parent / env["plugin"]
    if env.get("max_turns"):
        kwargs.setdefault("max_turns", env["max_turns"])
    return make(plugin, env.get("config") or None, settings.get("sandbox") or None, **kwargs)
