"""The component's `vagen:env/env` interface, implemented over `vagen.Env`.

componentize-py looks for the exported interface `env` in a module named `env`; this glue
converts between the generated WIT types and the plain `vagen` ones, the way the Rust SDK's
`export_env!` does, so env authors never see the ABI. Do not edit; write `app.py`.
"""

import sys

sys.dont_write_bytecode = True  # the build's folders stay as they were (nothing is read twice)

import json
import traceback

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import env as wit_env
from wit_world.imports import types

import vagen
import app  # noqa: F401  (the author's module registers its Env with @vagen.export_env)

_MODALITY = {"text": types.Modality.TEXT, "image": types.Modality.IMAGE}


def _wit_error(e: Exception):
    if isinstance(e, vagen.BadConfig):
        return types.EnvError_BadConfig(str(e))
    if isinstance(e, vagen.InvalidState):
        return types.EnvError_InvalidState(str(e))
    if isinstance(e, vagen.EnvError):
        return types.EnvError_Failed(str(e))
    # An exception in the author's code: its type, message and where it was raised.
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" at {where.filename}:{where.lineno}" if where else ""
    return types.EnvError_Failed(f"{type(e).__name__}: {e}{at}")


def _guard(f, *args):
    try:
        return f(*args)
    except Exception as e:  # every failure leaves as a typed error, never a trap
        raise Err(_wit_error(e))


def _observation(o: vagen.Observation):
    return types.Observation(o.text, [types.Image(i.width, i.height, bytes(i.rgb)) for i in o.images])


class Env(exports.Env):
    def get_manifest(self):
        cls = vagen.exported()
        m = vagen.full_manifest(cls)
        return types.Manifest(
            m.name,
            m.version,
            m.description,
            [_MODALITY[x] for x in m.modalities],
            list(m.action_names),
            m.action_separator,
            m.max_actions_per_turn,
            m.default_max_turns,
            json.dumps(cls.DEFAULT_CONFIG),
            m.has_oracle,
        )


class Environment(wit_env.Environment):
    def __init__(self, session):
        self.session = session

    @classmethod
    def create(cls, config):
        return cls(_guard(lambda: vagen.Session(vagen.exported(), config)))

    def system_prompt(self):
        return self.session.env.system_prompt()

    def reset(self, seed):
        return _observation(_guard(self.session.reset, seed))

    def step(self, answer):
        s = _guard(self.session.step, answer)
        metrics = [types.Metric(name, float(value)) for name, value in s.metrics]
        return types.StepResult(
            _observation(s.observation),
            float(s.reward),
            bool(s.done),
            bool(s.success),
            int(s.valid_actions),
            int(s.effective_actions),
            metrics,
        )

    def describe_state(self):
        # Nothing to describe before the first episode; the author's code never sees that call.
        return "" if self.session.phase == "before-reset" else self.session.env.describe_state()

    def oracle(self):
        return self.session.oracle()
