"""The component's `vagen:env/reward` interface, implemented over `vagen.Reward`.

componentize-py looks for the exported interface `reward` in a module named `reward`; this
glue converts between the generated WIT types and the plain `vagen` ones, as the Rust SDK's
`export_reward!` does. Do not edit; write `app.py`.
"""

import sys

sys.dont_write_bytecode = True

import json
import traceback

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.exports import reward as wit_reward
from wit_world.imports import judge as wit_judge
from wit_world.imports import reward_types as rt
from wit_world.imports import types

import vagen
import app  # noqa: F401  (the author's module registers its Reward with @vagen.export_reward)


def _where(e: Exception) -> str:
    at = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    return f"{type(e).__name__}: {e}" + (f" at {at.filename}:{at.lineno}" if at else "")


def _image(i):
    return vagen.Image(i.width, i.height, bytes(i.rgb))


class Reward(exports.Reward):
    def get_manifest(self):
        cls = vagen.exported_reward()
        name = cls.NAME or cls.__name__.lower()
        return rt.RewardManifest(name, cls.VERSION, cls.DESCRIPTION, json.dumps(cls.DEFAULT_CONFIG))


class _Judge:
    def complete(self, requests):
        def part(p):
            if isinstance(p, str):
                return wit_judge.Part_Text(p)
            return wit_judge.Part_Image(types.Image(p.width, p.height, bytes(p.rgb)))

        asked = [
            wit_judge.Request(
                [wit_judge.Message(m.role, [part(p) for p in m.content]) for m in r.messages],
                int(r.max_tokens),
                float(r.temperature),
            )
            for r in requests
        ]
        return [a.value if isinstance(a, Ok) else vagen.JudgeFailed(a.value) for a in wit_judge.complete(asked)]


class Scorer(wit_reward.Scorer):
    def __init__(self, scorer):
        self.scorer = scorer

    @classmethod
    def create(cls, config):
        reward = vagen.exported_reward()
        try:
            return cls(reward(vagen.resolve_config(reward, config)))
        except vagen.BadConfig as e:
            raise Err(rt.RewardError_BadConfig(str(e)))
        except Exception as e:
            raise Err(rt.RewardError_Failed(_where(e)))

    def score(self, turns):
        mine = [
            vagen.Turn(
                t.env_name, t.format, t.response, t.think, t.observation, t.prediction, t.answer, t.format_ok,
                t.env_reward, t.done, t.success, t.state_before, t.state_after,
                [_image(i) for i in t.images_before], [_image(i) for i in t.images_after],
            )
            for t in turns
        ]
        try:
            scores = list(self.scorer.score(mine, _Judge()))
        except Exception as e:
            # The author's code raised: every turn of the batch fails with where.
            return [Err(_where(e)) for _ in turns]
        out = []
        for s in scores:
            if isinstance(s, vagen.TurnScore):
                metrics = [types.Metric(str(n), float(v)) for n, v in s.metrics]
                out.append(Ok(rt.TurnScore(float(s.reward), metrics)))
            else:
                out.append(Err(str(s)))
        return out
